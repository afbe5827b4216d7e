"""Prediction files: round trip, scores recomputed by sklearn/scipy, ensembles, submissions."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import special

from evaluation.glue_submission import write_submission
from evaluation.predictions import (class_probabilities, ensemble_rows,
                                          glue_metrics_from_rows, glue_rows, prediction_path,
                                          read_predictions, recompute_metrics, write_predictions)
from evaluation.results import SeedResult, TaskResult, median_metrics

from .glue_files import independent_glue_scores


def test_round_trip_and_recompute_binary_task(tmp_path):
    # A constant predictor on MRPC: labels 1,0,0,1 → acc 50 %, F1 = 2·2/(4+2) = 66.7 %.
    path = write_predictions(prediction_path(tmp_path, "MRPC", 3),
                             glue_rows("dev", ["a", "b", "c", "d"], ["1"] * 4,
                                       ["1", "0", "0", "1"]))
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
    stsb = write_predictions(tmp_path / "st.jsonl",
                             [{"split": "test", "id": "0", "prediction": 5.7}])
    files = write_submission(tmp_path, {
        "SST-2": TaskResult(task="SST-2", primary="accuracy", seeds=seeds),
        "STS-B": TaskResult(task="STS-B", primary="spearman", seeds=[SeedResult(
            seed=0, metrics={"spearman": 1.0}, predictions="", test_predictions=stsb.name)])})
    assert sorted(files) == ["SST-2.tsv", "STS-B.tsv"]
    assert files["SST-2.tsv"].read_text() == "index\tprediction\n0\t1\n1\t1\n2\t1\n"  # seed 2
    assert files["STS-B.tsv"].read_text() == "index\tprediction\n0\t5.000\n"  # clipped


def _logits_file(tmp_path, task, seed, *, n=60, split="dev", classes=("0", "1")):
    """A prediction file as fine-tuning writes it, from random logits (labels shared)."""
    rng = np.random.default_rng(100 + seed)
    labels = [classes[i] for i in np.random.default_rng(0).integers(0, len(classes), n)]
    logits = rng.normal(size=(n, len(classes)))
    logits[np.arange(n), [classes.index(y) for y in labels]] += 0.8  # better than chance
    preds = [classes[i] for i in logits.argmax(axis=1)]
    probs = class_probabilities(classes, logits)
    rows = glue_rows(split, [str(i) for i in range(n)], preds, labels, probs)
    return write_predictions(prediction_path(tmp_path, task, seed), rows), logits


@pytest.mark.parametrize("task", ["MRPC", "QQP", "CoLA", "SST-2", "RTE"])
def test_file_scores_match_sklearn_and_probabilities_match_scipy(tmp_path, task):
    classes = ("entailment", "not_entailment") if task == "RTE" else ("0", "1")
    path, logits = _logits_file(tmp_path, task, 0, classes=classes)
    rows = read_predictions(path)
    probs = np.array([[r["probabilities"][c] for c in classes] for r in rows])
    np.testing.assert_allclose(probs, special.softmax(logits, axis=1), rtol=1e-12)
    assert [r["prediction"] for r in rows] == [classes[i] for i in probs.argmax(axis=1)]
    assert recompute_metrics(task, path) == pytest.approx(independent_glue_scores(task, rows))


def test_mnli_and_stsb_file_scores_match_sklearn_and_scipy(tmp_path):
    classes = ("contradiction", "entailment", "neutral")
    rows = []
    for split in ("dev_matched", "dev_mismatched"):
        path, _ = _logits_file(tmp_path / split, "MNLI", 1, n=40, split=split, classes=classes)
        rows += read_predictions(path)
    path = write_predictions(tmp_path / "mnli.jsonl", rows)
    assert recompute_metrics("MNLI", path) == pytest.approx(independent_glue_scores("MNLI", rows))
    rng = np.random.default_rng(5)
    gold = np.round(rng.uniform(0, 5, 50), 2)
    pred = np.round(gold + rng.normal(0, 1.2, 50), 6)
    path = write_predictions(tmp_path / "s.jsonl",
                             glue_rows("dev", [str(i) for i in range(50)], list(pred), list(gold)))
    expected = independent_glue_scores("STS-B", read_predictions(path))
    assert 20 < expected["spearman"] < 99
    assert recompute_metrics("STS-B", path) == pytest.approx(expected)
    constant = write_predictions(tmp_path / "c.jsonl",
                                 glue_rows("dev", [str(i) for i in range(50)], [0.1] * 50,
                                           list(gold)))
    assert recompute_metrics("STS-B", constant) == {"pearson": 0.0, "spearman": 0.0}


def test_seeds_ensemble_by_mean_probability(tmp_path):
    paths, logits = zip(*(_logits_file(tmp_path, "MRPC", s) for s in range(3)))
    rows = ensemble_rows(list(paths))
    mean = np.mean([special.softmax(lg, axis=1) for lg in logits], axis=0)
    assert [r["prediction"] for r in rows] == [("0", "1")[i] for i in mean.argmax(axis=1)]
    np.testing.assert_allclose([[r["probabilities"][c] for c in "01"] for r in rows], mean)
    assert glue_metrics_from_rows("MRPC", rows) == pytest.approx(
        independent_glue_scores("MRPC", rows))
    stsb = [write_predictions(tmp_path / f"st{s}.jsonl",
                              glue_rows("dev", ["a", "b"], [float(s), 2.0 * s], [1.0, 2.0]))
            for s in range(3)]
    assert [r["prediction"] for r in ensemble_rows(stsb)] == [1.0, 2.0]
    short = write_predictions(tmp_path / "short.jsonl", read_predictions(paths[0])[:-1])
    with pytest.raises(ValueError, match=r"short\.jsonl: its \(split, id\) set differs"):
        ensemble_rows([paths[0], short])
