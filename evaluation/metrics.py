"""The metric functions of fine-tuning, and the median over seeds, computed in one place.

Plain numpy/scipy implementations (no scikit-learn at run time; the tests compare against it):
Matthews correlation, accuracy, binary F1 of a positive class, Pearson and Spearman correlation.
Which task uses which is the task's declaration (``evaluation/tasks/``, ``task_spec.Metric``);
the GLUE average is ``glue_average``. All scores are fractions in [0, 1] (correlations in
[-1, 1]); results and the report give them in percent.

Correlations of a constant predictor (or constant labels) are undefined; they are defined here
as 0 — a predictor that carries no information — rather than NaN. "Constant" is tested by
equality with the first value, as scipy does, not by a zero standard deviation (which rounding
makes non-zero for a column of equal floats, where scipy would then return NaN).

Medians over seeds (``median``) rank a NaN score (a diverged run) below every number, so the
median never depends on the order in which seeds finished: ``statistics.median`` sorts with
``<``, which NaN breaks, so its answer with a NaN present depends on the input order.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from scipy import stats


def accuracy(preds: Sequence, labels: Sequence) -> float:
    p, y = np.asarray(preds), np.asarray(labels)
    _check_same_length(p, y)
    return float((p == y).mean()) if len(y) else 0.0


def f1_binary(preds: Sequence, labels: Sequence, *, positive=1) -> float:
    """F1 of the positive class; 0 when there is no true positive (sklearn's zero_division=0)."""
    p, y = np.asarray(preds) == positive, np.asarray(labels) == positive
    _check_same_length(p, y)
    tp = float(np.sum(p & y))
    denom = float(np.sum(p) + np.sum(y))
    return 2.0 * tp / denom if denom else 0.0


def matthews_corrcoef(preds: Sequence, labels: Sequence) -> float:
    """Multi-class MCC (Gorodkin's R_K); 0 when either side is constant, as scikit-learn does."""
    p, y = np.asarray(preds), np.asarray(labels)
    _check_same_length(p, y)
    classes, inverse = np.unique(np.concatenate([y, p]), return_inverse=True)
    k = len(classes)
    yi, pi = inverse[: len(y)], inverse[len(y):]
    confusion = np.zeros((k, k), dtype=np.float64)
    np.add.at(confusion, (yi, pi), 1.0)
    t_sum, p_sum = confusion.sum(axis=1), confusion.sum(axis=0)
    n, correct = confusion.sum(), np.trace(confusion)
    cov_ytyp = correct * n - np.dot(t_sum, p_sum)
    cov_ypyp = n * n - np.dot(p_sum, p_sum)
    cov_ytyt = n * n - np.dot(t_sum, t_sum)
    if cov_ypyp * cov_ytyt == 0:
        return 0.0
    return float(cov_ytyp / math.sqrt(cov_ytyt * cov_ypyp))


def pearson(preds: Sequence[float], labels: Sequence[float]) -> float:
    p, y = np.asarray(preds, dtype=np.float64), np.asarray(labels, dtype=np.float64)
    _check_same_length(p, y)
    if _constant(p) or _constant(y):
        return 0.0  # undefined; a constant predictor carries no correlation
    return float(stats.pearsonr(p, y)[0])


def spearman(preds: Sequence[float], labels: Sequence[float]) -> float:
    p, y = np.asarray(preds, dtype=np.float64), np.asarray(labels, dtype=np.float64)
    _check_same_length(p, y)
    if _constant(p) or _constant(y):
        return 0.0
    return float(stats.spearmanr(p, y)[0])


def _constant(x: np.ndarray) -> bool:
    # Fewer than two values, or all equal (NaN compares unequal, so a NaN column is not
    # "constant": its correlation stays NaN, and the median ranks it last).
    return len(x) < 2 or bool(np.all(x == x[0]))


def median(values: Sequence[float]) -> float:
    """Median with NaN ranked below every number: the same answer in any input order.

    Odd count: the middle value; even count: the mean of the two middle values (NaN if one of
    them is NaN, i.e. when half the runs or more diverged).
    """
    if not len(values):
        raise ValueError("median of no values")
    ranked = sorted((float(v) for v in values), key=lambda v: (not math.isnan(v), v))
    mid = len(ranked) // 2
    if len(ranked) % 2:
        return ranked[mid]
    return (ranked[mid - 1] + ranked[mid]) / 2.0


def _check_same_length(p: np.ndarray, y: np.ndarray) -> None:
    if p.shape != y.shape:
        raise ValueError(f"predictions {p.shape} and labels {y.shape} differ in shape")
