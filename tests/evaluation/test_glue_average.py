"""The GLUE average as the paper computes it: which tasks it covers, its label, the paper's score."""
from __future__ import annotations

import numpy as np
import pytest

from evaluation import paper_scores, report
from evaluation.glue_average import glue_average, glue_average_label, glue_average_tasks, paper_glue_average
from evaluation.results import SeedResult, TaskResult
from evaluation.tasks import get_task

PAPER = {"CoLA": 50.0, "SST-2": 90.0, "MRPC": 80.0, "STS-B": 85.0, "QQP": 88.0, "MNLI": 82.0,
         "QNLI": 89.0, "RTE": 60.0}


def test_glue_average_as_the_paper_computes_it():
    assert glue_average({**PAPER, "WNLI": 56.3}) == pytest.approx((50 + 90 + 80 + 85 + 88 + 82 + 89 + 60) / 8)
    assert glue_average({"WNLI": 56.3}) is None
    assert paper_scores.GLUE_TASKS == tuple(PAPER)  # the tables' order


def test_glue_average_is_labelled_with_its_tasks():
    assert paper_glue_average(PAPER) == pytest.approx(np.mean(list(PAPER.values())))
    assert paper_glue_average({**PAPER, "WNLI": 56.3, "SQuAD1.1": 80.0}) == \
        pytest.approx(np.mean(list(PAPER.values())))
    assert glue_average_label(glue_average_tasks({**PAPER, "WNLI": 1.0})) == \
        "GLUE score (paper's 8-task average)"
    subset = {"RTE": 60.0, "WNLI": 56.3, "CoLA": 50.0, "SQuAD2.0": 70.0, "NotATask": 1.0}
    assert paper_glue_average(subset) is None
    assert glue_average_tasks(subset) == ["CoLA", "RTE"]  # paper order; WNLI, SQuAD, unknown out
    assert glue_average(subset) == pytest.approx(55.0)
    assert glue_average_label(["CoLA", "RTE"]) == "GLUE average over 2 tasks: CoLA, RTE"
    assert glue_average_label(["RTE"]) == "GLUE average over 1 task: RTE"


def test_results_and_report_name_the_tasks_averaged():
    def results(scores):
        tasks = {t: TaskResult(task=t, primary=get_task(t).primary, seeds=[SeedResult(
            seed=0, metrics={get_task(t).primary: v}, predictions="")]) for t, v in scores.items()}
        return report.build_results(checkpoint="c", model_dir="m", step=1, meta={}, recipe={},
                                    tasks=tasks)

    some = results({"RTE": 60.0, "CoLA": 40.0, "WNLI": 56.3})
    assert (some["glue_average"], some["glue_average_tasks"], some["paper_glue_average"]) == (
        pytest.approx(50.0), ["CoLA", "RTE"], None)
    table = report.markdown_table(some)
    assert "| **GLUE average over 2 tasks: CoLA, RTE** | primary | 50.00 |" in table
    assert "paper's 8-task average" not in table  # only when all eight ran
    full = results(PAPER)
    assert full["paper_glue_average"] == pytest.approx(78.0) == full["glue_average"]
    assert "| **GLUE score (paper's 8-task average)** | primary | 78.00 |" in \
        report.markdown_table(full)
