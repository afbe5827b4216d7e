"""GLUE metrics against scikit-learn/scipy and hand-worked cases; the GLUE average."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from sklearn import metrics as skm

from electra.finetune import metrics


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
