"""GLUE metrics against scikit-learn/scipy and hand-worked cases; the GLUE average."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from sklearn import metrics as skm

from evaluation import metrics


@pytest.mark.parametrize("seed", range(5))
def test_against_sklearn_and_scipy(seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, 200)
    p = np.where(rng.random(200) < 0.7, y, 1 - y)
    assert metrics.accuracy(p, y) == pytest.approx(skm.accuracy_score(y, p))
    assert metrics.f1_binary(p, y) == pytest.approx(skm.f1_score(y, p))
    assert metrics.matthews_corrcoef(p, y) == pytest.approx(skm.matthews_corrcoef(y, p))
    y3, p3 = rng.integers(0, 3, 100), rng.integers(0, 3, 100)
    assert metrics.matthews_corrcoef(p3, y3) == pytest.approx(skm.matthews_corrcoef(y3, p3))
    a, b = rng.normal(size=50), rng.normal(size=50)
    assert metrics.pearson(a, a + b) == pytest.approx(stats.pearsonr(a, a + b)[0])
    assert metrics.spearman(a, a + b) == pytest.approx(stats.spearmanr(a, a + b)[0])


def test_hand_worked_cases():
    # TP=2 FP=1 FN=1 TN=1 → acc 3/5, F1 = 2·2/(2·2+1+1) = 2/3,
    # MCC = (2·1 − 1·1)/sqrt(3·3·2·2) = 1/6
    y, p = [1, 1, 1, 0, 0], [1, 1, 0, 1, 0]
    assert metrics.accuracy(p, y) == pytest.approx(0.6)
    assert metrics.f1_binary(p, y) == pytest.approx(2 / 3)
    assert metrics.matthews_corrcoef(p, y) == pytest.approx(1 / 6)
    assert metrics.matthews_corrcoef([1, 1, 1], [0, 1, 0]) == 0.0  # constant predictor
    assert metrics.f1_binary([0, 0], [0, 0]) == 0.0  # no positives anywhere
    # dx = (-1, 0, 1), dy = (-13, -1, 14)/6: r = (27/6) / sqrt(2 * 366/36)
    assert metrics.pearson([1, 2, 3], [2, 4, 6.5]) == pytest.approx(4.5 / np.sqrt(2 * 366 / 36))
    assert metrics.spearman([1, 2, 3, 4], [10, 30, 20, 40]) == pytest.approx(0.8)
    assert metrics.matthews_corrcoef(["1", "0", "1"], ["1", "0", "1"]) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="differ in shape"):
        metrics.accuracy([1, 0], [1])


def test_task_metric_names():
    assert set(metrics.split_metrics("CoLA", [1, 0], [1, 0])) == {"mcc"}
    assert set(metrics.split_metrics("MRPC", [1, 0], [1, 0])) == {"accuracy", "f1"}
    assert set(metrics.split_metrics("STS-B", [1, 0, 2], [1, 0, 3])) == {"pearson", "spearman"}
    mnli = metrics.task_metrics("MNLI", {"dev_matched": (["a", "b"], ["a", "a"]),
                                         "dev_mismatched": (["a"], ["a"])})
    assert mnli == {"accuracy_m": 0.5, "accuracy_mm": 1.0}


def test_glue_average_as_the_paper_computes_it():
    scores = {"CoLA": 50.0, "SST-2": 90.0, "MRPC": 80.0, "STS-B": 85.0, "QQP": 88.0,
              "MNLI": 82.0, "QNLI": 89.0, "RTE": 60.0, "WNLI": 56.3}
    assert metrics.glue_average(scores) == pytest.approx((50 + 90 + 80 + 85 + 88 + 82 + 89 + 60) / 8)
    assert metrics.glue_average({"WNLI": 56.3}) is None
    primaries = {t: metrics.PRIMARY[t] for t in ("CoLA", "STS-B", "MNLI", "MRPC")}
    assert primaries == {"CoLA": "mcc", "STS-B": "spearman", "MNLI": "accuracy_m",
                         "MRPC": "accuracy"}


@pytest.mark.filterwarnings("ignore::scipy.stats.ConstantInputWarning")
@pytest.mark.parametrize("value", [0.1, 0.3, 2.7])
def test_constant_predictions_correlate_zero_not_nan(value):
    labels = [0.5, 1.0, 3.0, 4.5, 2.0, 5.0, 0.0]
    constant = [value] * len(labels)
    assert np.isnan(stats.pearsonr(constant, labels)[0])  # scipy leaves it undefined
    assert metrics.pearson(constant, labels) == 0.0 and metrics.spearman(constant, labels) == 0.0
    assert metrics.pearson(labels, constant) == 0.0 and metrics.spearman(labels, constant) == 0.0
    assert metrics.split_metrics("STS-B", constant, labels) == {"pearson": 0.0, "spearman": 0.0}


def test_median_over_seeds_ignores_order_and_ranks_nan_last():
    import itertools

    for values in ([70.0, float("nan"), 80.0, 60.0, 90.0], [70.0, 60.0, float("nan"), 90.0],
                   [55.0, 65.0, 75.0, 85.0, 95.0, 45.0]):
        # reference: numpy's median with NaN replaced by -inf (a diverged run scores lowest)
        ref = np.median([-np.inf if np.isnan(v) else v for v in values])
        got = {metrics.median(list(p)) for p in itertools.permutations(values)}
        assert got == {ref}
    assert np.isnan(metrics.median([float("nan"), float("nan"), 1.0, 2.0]))
    with pytest.raises(ValueError, match="no values"):
        metrics.median([])


def test_glue_average_is_labelled_with_its_tasks():
    paper = {"CoLA": 50.0, "SST-2": 90.0, "MRPC": 80.0, "STS-B": 85.0, "QQP": 88.0,
             "MNLI": 82.0, "QNLI": 89.0, "RTE": 60.0}
    assert metrics.paper_glue_average(paper) == pytest.approx(np.mean(list(paper.values())))
    assert metrics.paper_glue_average({**paper, "WNLI": 56.3, "SQuAD1.1": 80.0}) == \
        pytest.approx(np.mean(list(paper.values())))
    assert metrics.glue_average_label(metrics.glue_average_tasks({**paper, "WNLI": 1.0})) == \
        "GLUE score (paper's 8-task average)"
    subset = {"RTE": 60.0, "WNLI": 56.3, "CoLA": 50.0, "SQuAD2.0": 70.0}
    assert metrics.paper_glue_average(subset) is None
    assert metrics.glue_average_tasks(subset) == ["CoLA", "RTE"]  # paper order, WNLI/SQuAD out
    assert metrics.glue_average(subset) == pytest.approx(55.0)
    assert metrics.glue_average_label(["CoLA", "RTE"]) == "GLUE average over 2 tasks: CoLA, RTE"
    assert metrics.glue_average_label(["RTE"]) == "GLUE average over 1 task: RTE"


def test_results_and_report_name_the_tasks_averaged():
    from evaluation import report
    from evaluation.results import SeedResult, TaskResult

    def results(scores):
        tasks = {t: TaskResult(task=t, primary=metrics.PRIMARY[t], seeds=[SeedResult(
            seed=0, metrics={metrics.PRIMARY[t]: v}, predictions="")]) for t, v in scores.items()}
        return report.build_results(checkpoint="c", model_dir="m", step=1, meta={}, recipe={},
                                    tasks=tasks)

    some = results({"RTE": 60.0, "CoLA": 40.0, "WNLI": 56.3})
    assert (some["glue_average"], some["glue_average_tasks"], some["paper_glue_average"]) == (
        pytest.approx(50.0), ["CoLA", "RTE"], None)
    table = report.markdown_table(some)
    assert "| **GLUE average over 2 tasks: CoLA, RTE** | primary | 50.00 |" in table
    assert "paper's 8-task average" not in table  # only when all eight ran
    paper = dict(zip(metrics.PAPER_GLUE_TASKS, (50.0, 90.0, 80.0, 85.0, 88.0, 82.0, 89.0, 60.0)))
    full = results(paper)
    assert full["paper_glue_average"] == pytest.approx(78.0) == full["glue_average"]
    assert "| **GLUE score (paper's 8-task average)** | primary | 78.00 |" in \
        report.markdown_table(full)
