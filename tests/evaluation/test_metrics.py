"""The metric functions against scikit-learn/scipy and hand-worked cases; the median over seeds.

Which task uses which metric, and the GLUE average, are tested in test_tasks.py and
test_glue_average.py."""
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
    ys, ps = y.astype(str), p.astype(str)  # label strings, as the tasks score them
    assert metrics.f1_binary(ps, ys, positive="1") == pytest.approx(skm.f1_score(ys, ps, pos_label="1"))
    assert metrics.f1_binary(ps, ys, positive="0") == pytest.approx(skm.f1_score(ys, ps, pos_label="0"))
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


@pytest.mark.filterwarnings("ignore::scipy.stats.ConstantInputWarning")
@pytest.mark.parametrize("value", [0.1, 0.3, 2.7])
def test_constant_predictions_correlate_zero_not_nan(value):
    labels = [0.5, 1.0, 3.0, 4.5, 2.0, 5.0, 0.0]
    constant = [value] * len(labels)
    assert np.isnan(stats.pearsonr(constant, labels)[0])  # scipy leaves it undefined
    assert metrics.pearson(constant, labels) == 0.0 and metrics.spearman(constant, labels) == 0.0
    assert metrics.pearson(labels, constant) == 0.0 and metrics.spearman(labels, constant) == 0.0


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
