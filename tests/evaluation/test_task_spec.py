"""TaskSpec: every task's scores against scikit-learn/scipy (``glue_files.independent_glue_scores``,
which spells each task's metrics out by hand), the primaries the paper's numbers are read against,
and the checks a spec makes of itself."""
from __future__ import annotations

import random

import pytest

from evaluation import paper_scores
from evaluation.predictions import glue_metrics_from_rows
from evaluation.task_spec import ACCURACY, MCC, ExtraTest, Layout, TaskSpec, f1
from evaluation.tasks import get_task

from .glue_files import independent_glue_scores

GLUE = ("CoLA", "SST-2", "MRPC", "STS-B", "QQP", "MNLI", "QNLI", "RTE", "WNLI")


def _rows(spec: TaskSpec, rng: random.Random, n: int) -> list[dict]:
    rows = []
    for split in spec.eval_splits:
        for i in range(n):
            if spec.kind == "regression":
                y = round(rng.uniform(*spec.score_range), 3)
                p = round(y + rng.gauss(0, 1), 4)
            else:
                y = rng.choice(spec.labels)
                p = y if rng.random() < 0.6 else rng.choice(spec.labels)
            rows.append({"split": split, "id": f"{split}-{i}", "prediction": p, "label": y})
    return rows


@pytest.mark.parametrize("task", GLUE)
def test_every_task_scores_as_an_independent_implementation(task):
    spec, rng = get_task(task), random.Random(task)
    for n in (3, 40):
        rows = _rows(spec, rng, n)
        got = glue_metrics_from_rows(task, rows)
        want = independent_glue_scores(task, rows)
        assert sorted(got) == sorted(want) == sorted(spec.metric_names)
        assert got == pytest.approx(want, abs=1e-9)


def test_primary_metrics_and_the_paper_reads_them_from_the_tasks():
    assert {t: get_task(t).primary for t in GLUE} == {
        "CoLA": "mcc", "SST-2": "accuracy", "MRPC": "accuracy", "STS-B": "spearman", "QQP": "accuracy",
        "MNLI": "accuracy_m", "QNLI": "accuracy", "RTE": "accuracy", "WNLI": "accuracy"}
    assert paper_scores.GLUE_METRIC == {t: get_task(t).primary for t in paper_scores.GLUE_TASKS}
    assert get_task("MNLI").metric_names == ("accuracy_m", "accuracy_mm")
    assert get_task("MRPC").metric_names == ("accuracy", "f1")
    assert [t for t in GLUE if not get_task(t).in_glue_average] == ["WNLI"]


def test_submission_names_and_formats():
    assert {t: get_task(t).submission_files for t in GLUE if t != "MNLI"} == {t: {"test": f"{t}.tsv"}
                                                                                for t in GLUE if t != "MNLI"}
    assert get_task("MNLI").submission_files == {"test_matched": "MNLI-m.tsv", "test_mismatched": "MNLI-mm.tsv",
                                                 "ax": "AX.tsv", "wnli_test": "WNLI.tsv"}
    stsb = get_task("STS-B")
    assert [stsb.format_prediction(v) for v in (-0.4, 2.34567, 7)] == ["0.000", "2.346", "5.000"]
    assert get_task("RTE").format_prediction("entailment") == "entailment"


def test_a_spec_checks_itself_in_one_line():
    base = dict(name="T", kind="classification", labels=("a", "b"), train=Layout(text_a=0, label=1),
                dev=Layout(text_a=0, label=1), test=Layout(text_a=0), metrics=(ACCURACY, f1("b")),
                primary="f1")
    assert TaskSpec(**base).metric_names == ("accuracy", "f1")
    bad = {
        "primary 'mcc' is not one of its metrics ['accuracy', 'f1']": dict(primary="mcc"),
        "kind 'ranking' must be": dict(kind="ranking"),
        "a classification task needs labels": dict(labels=()),
        "no metrics": dict(metrics=()),
        "dev splits ['dev_a', 'dev_b'] need a metric_suffix each": dict(eval_splits=("dev_a", "dev_b")),
        "also_predicts 'x' relabels ['a'], not the task's labels ['a', 'b']": dict(
            also_predicts=(ExtraTest("x", ("X/test.tsv",), Layout(text_a=0), "X.tsv", relabel={"a": "1"}),)),
    }
    for message, change in bad.items():
        with pytest.raises(ValueError, match=r"^task 'T': " + message.replace("[", r"\[").replace("]", r"\]")):
            TaskSpec(**{**base, **change})
    two = TaskSpec(**{**base, "metrics": (MCC,), "primary": "mcc_b", "eval_splits": ("dev_a", "dev_b"),
                      "metric_suffix": {"dev_a": "_a", "dev_b": "_b"}})
    assert two.score({"dev_a": (["a", "b"], ["a", "b"]), "dev_b": (["a", "a", "b"], ["a", "b", "b"])}) == \
        pytest.approx({"mcc_a": 1.0, "mcc_b": 0.5})
    with pytest.raises(ValueError, match="expected one evaluation split"):
        TaskSpec(**base).score({"dev": ([], []), "other": ([], [])})
