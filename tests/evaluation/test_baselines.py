"""Trivial baselines against scikit-learn / hand computation on hand-built dev sets."""
from __future__ import annotations

import json
import random
import statistics

import pytest
from sklearn import metrics as skm

from evaluation import baselines
from evaluation.glue_tasks import TASKS, GlueExample
from evaluation.squad_data import SquadExample, read_squad

from .glue_files import squad_json


def _examples(labels, prefix="x") -> list[GlueExample]:
    return [GlueExample(guid=f"{prefix}{i}", text_a="a", text_b="b", label=lab)
            for i, lab in enumerate(labels)]


def test_mrpc_majority_class_scored_like_sklearn():
    train = _examples(["1", "0", "1", "1", "0"])  # majority "1"
    dev_labels = ["1", "0", "0", "1", "1", "1", "0"]
    out = baselines.glue_baseline(TASKS["MRPC"], train, {"dev": _examples(dev_labels)})
    constant = ["1"] * len(dev_labels)
    assert out["name"] == "majority class '1'" and out["prediction"] == "1"
    assert out["metrics"] == pytest.approx({
        "accuracy": 100 * skm.accuracy_score(dev_labels, constant),  # 4/7
        "f1": 100 * skm.f1_score(dev_labels, constant, pos_label="1")})  # 2·4/(2·4+3)


def test_mrpc_minority_positive_class_gives_f1_zero():
    train = _examples(["0", "0", "1"])
    dev_labels = ["1", "0", "1"]
    out = baselines.glue_baseline(TASKS["MRPC"], train, {"dev": _examples(dev_labels)})
    assert out["prediction"] == "0"
    assert out["metrics"]["accuracy"] == pytest.approx(100 / 3)
    assert out["metrics"]["f1"] == 100 * skm.f1_score(dev_labels, ["0"] * 3, pos_label="1",
                                                      zero_division=0) == 0.0


def test_cola_constant_has_zero_matthews():
    out = baselines.glue_baseline(TASKS["CoLA"], _examples(["1", "1", "0"]),
                                  {"dev": _examples(["0", "1", "1", "0"])})
    assert out["metrics"] == {"mcc": pytest.approx(100 * skm.matthews_corrcoef(
        ["0", "1", "1", "0"], ["1"] * 4))}
    assert out["metrics"]["mcc"] == 0.0


def test_mnli_both_dev_sets_and_tie_to_first_label():
    # entailment and neutral tie in training: the first in the task's label order wins, and
    # shuffling the training rows does not change it
    labels = ["neutral", "entailment", "contradiction", "entailment", "neutral"]
    matched = ["entailment", "neutral", "entailment", "contradiction"]
    mismatched = ["neutral", "neutral", "entailment"]
    task = TASKS["MNLI"]
    assert task.labels == ("contradiction", "entailment", "neutral")
    expected = "entailment"
    for seed in range(4):
        shuffled = random.Random(seed).sample(labels, len(labels))
        out = baselines.glue_baseline(task, _examples(shuffled), {
            "dev_matched": _examples(matched, "m"), "dev_mismatched": _examples(mismatched, "mm")})
        assert out["prediction"] == expected
        assert out["metrics"] == pytest.approx({
            "accuracy_m": 100 * skm.accuracy_score(matched, [expected] * len(matched)),
            "accuracy_mm": 100 * skm.accuracy_score(mismatched, [expected] * len(mismatched))})


def test_binary_tie_goes_to_label_zero():
    assert baselines.majority_label(TASKS["SST-2"], ["1", "0", "0", "1"]) == "0"
    assert baselines.majority_label(TASKS["RTE"], ["not_entailment", "entailment"]) == \
        "entailment"  # RTE's label order: entailment first
    with pytest.raises(ValueError, match="no training labels"):
        baselines.majority_label(TASKS["SST-2"], [])


def test_stsb_constant_training_mean_scores_zero_correlation():
    train = [0.0, 1.5, 4.0, 5.0, 2.25]
    dev = [3.0, 1.0, 4.5, 0.5]
    out = baselines.glue_baseline(TASKS["STS-B"], _examples(train), {"dev": _examples(dev)})
    assert out["prediction"] == pytest.approx(statistics.mean(train))
    assert "constant" in out["name"] and f"{statistics.mean(train):.2f}" in out["name"]
    assert out["metrics"] == {"pearson": 0.0, "spearman": 0.0}


def test_squad_no_answer_is_the_unanswerable_share():
    def ex(qid, answers):
        return SquadExample(qid=qid, question="q", context="c", answers=tuple(answers),
                            answer_start=0 if answers else None, is_impossible=not answers)

    dev = [ex("a", ["Paris"]), ex("b", []), ex("c", ["blue sky", "sky"]), ex("d", []),
           ex("e", [])]
    out = baselines.squad_no_answer_baseline(dev, version="2.0")
    assert out == {"name": "always no answer", "prediction": "",
                   "metrics": {"exact": pytest.approx(100 * 3 / 5),
                               "f1": pytest.approx(100 * 3 / 5)}}
    v1 = baselines.squad_no_answer_baseline([d for d in dev if d.answers], version="1.1")
    assert v1["metrics"] == {"exact": 0.0, "f1": 0.0}


def test_squad_no_answer_on_an_official_layout_file(tmp_path):
    path = squad_json(tmp_path / "dev-v2.0.json", version="2.0", n_paragraphs=4,
                      impossible_every=2)
    qas = [qa for d in json.loads(path.read_text())["data"] for p in d["paragraphs"]
           for qa in p["qas"]]
    share = 100 * sum(qa.get("is_impossible", False) for qa in qas) / len(qas)
    out = baselines.squad_no_answer_baseline(read_squad(path, version="2.0"), version="2.0")
    assert 0 < share < 100 and out["metrics"] == pytest.approx({"exact": share, "f1": share})


def test_average_primary_needs_every_task():
    tasks = {"RTE": {"primary": "accuracy", "baseline": {"metrics": {"accuracy": 52.0}}},
             "CoLA": {"primary": "mcc", "baseline": {"metrics": {"mcc": 0.0}}},
             "SST-2": {"primary": "accuracy"}}  # an older result: no baseline
    assert baselines.average_primary(tasks, ["RTE", "CoLA"]) == pytest.approx(26.0)
    assert baselines.average_primary(tasks, ["RTE", "SST-2"]) is None
    assert baselines.average_primary(tasks, []) is None
