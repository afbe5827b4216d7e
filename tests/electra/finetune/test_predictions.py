"""Prediction files: round trip, recomputed scores, submission TSVs from them."""
from __future__ import annotations

import pytest

from electra.finetune.glue_submission import write_submission
from electra.finetune.predictions import (glue_rows, prediction_path, read_predictions,
                                          recompute_metrics, write_predictions)
from electra.finetune.results import SeedResult, TaskResult, median_metrics


def test_round_trip_and_recompute_binary_task(tmp_path):
    # A constant predictor on MRPC: labels 1,0,0,1 → acc 50 %, F1 = 2·2/(4+2) = 66.7 %.
    path = write_predictions(prediction_path(tmp_path, "MRPC", 3),
                             glue_rows("dev", ["a", "b", "c", "d"], ["1"] * 4, ["1", "0", "0", "1"]))
    assert path == tmp_path / "predictions" / "MRPC" / "seed3.jsonl"
    assert [r["id"] for r in read_predictions(path)] == ["a", "b", "c", "d"]
    assert recompute_metrics("MRPC", path) == pytest.approx({"accuracy": 50.0, "f1": 200 / 3})


def test_recompute_mnli_and_stsb(tmp_path):
    rows = glue_rows("dev_matched", ["1", "2"], ["entailment", "neutral"], ["entailment"] * 2)
    rows += glue_rows("dev_mismatched", ["3"], ["neutral"], ["neutral"])
    path = write_predictions(tmp_path / "m.jsonl", rows)
    assert recompute_metrics("MNLI", path) == {"accuracy_m": 50.0, "accuracy_mm": 100.0}
    path = write_predictions(tmp_path / "s.jsonl",
                             glue_rows("dev", ["1", "2", "3"], [1.0, 2.0, 3.5], [0.5, 2.5, 4.0]))
    assert recompute_metrics("STS-B", path)["spearman"] == pytest.approx(100.0)


def test_bad_prediction_line_names_file_and_line(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"id": "1"}\nnot json\n')
    with pytest.raises(ValueError, match=r"p\.jsonl:2: not a JSON line"):
        read_predictions(path)


def test_median_and_median_seed():
    runs = [SeedResult(seed=s, metrics={"accuracy": a}, predictions="") for s, a in
            ((0, 70.0), (1, 90.0), (2, 80.0), (3, 60.0))]
    result = TaskResult(task="RTE", primary="accuracy", seeds=runs)
    assert result.median == {"accuracy": 75.0}
    assert result.median_seed().seed == 0  # lower middle of 60, 70, 80, 90
    assert median_metrics([{"a": 1.0, "b": 2.0}, {"a": 3.0}]) == {"a": 2.0}
    assert TaskResult.from_dict(result.to_dict()).median == result.median


def test_submission_uses_the_median_seed(tmp_path):
    seeds = []
    for seed, acc, pred in ((0, 60.0, "0"), (1, 80.0, "1"), (2, 70.0, "1")):
        test = write_predictions(tmp_path / f"t{seed}.jsonl",
                                 [{"split": "test", "id": str(i), "prediction": pred}
                                  for i in range(3)])
        seeds.append(SeedResult(seed=seed, metrics={"accuracy": acc}, predictions="",
                                test_predictions=test.name))
    stsb = write_predictions(tmp_path / "st.jsonl", [{"split": "test", "id": "0", "prediction": 5.7}])
    files = write_submission(tmp_path, {
        "SST-2": TaskResult(task="SST-2", primary="accuracy", seeds=seeds),
        "STS-B": TaskResult(task="STS-B", primary="spearman", seeds=[SeedResult(
            seed=0, metrics={"spearman": 1.0}, predictions="", test_predictions=stsb.name)])})
    assert sorted(files) == ["SST-2.tsv", "STS-B.tsv"]
    assert files["SST-2.tsv"].read_text() == "index\tprediction\n0\t1\n1\t1\n2\t1\n"  # seed 2
    assert files["STS-B.tsv"].read_text() == "index\tprediction\n0\t5.000\n"  # clipped
