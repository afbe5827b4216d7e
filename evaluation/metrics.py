"""GLUE metrics and the GLUE average, computed in one place.

Plain numpy/scipy implementations (no scikit-learn at run time; the tests compare against it):
Matthews correlation (CoLA), accuracy, binary F1 of the positive class "1" (MRPC, QQP), Pearson
and Spearman correlation (STS-B). All scores are reported as fractions in [0, 1] (correlations in
[-1, 1]); the report multiplies by 100.

Correlations of a constant predictor (or constant labels) are undefined; they are defined here
as 0 — a predictor that carries no information — rather than NaN. "Constant" is tested by
equality with the first value, as scipy does, not by a zero standard deviation (which rounding
makes non-zero for a column of equal floats, where scipy would then return NaN).

Medians over seeds (``median``) rank a NaN score (a diverged run) below every number, so the
median never depends on the order in which seeds finished: ``statistics.median`` sorts with
``<``, which NaN breaks, so its answer with a NaN present depends on the input order.

The GLUE average follows the ELECTRA paper's dev-set convention: one primary score per task —
Matthews for CoLA, Spearman for STS-B, accuracy for the rest, MNLI-matched accuracy for MNLI —
averaged over the tasks that were run, with WNLI excluded (the paper leaves it out because its
dev set is adversarial and every model scores the majority-class baseline). An average over a
subset is not the paper's number, so ``glue_average_tasks`` names the tasks it covers and
``paper_glue_average`` is defined only when all eight of the paper's tasks are present.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from scipy import stats

# Primary metric per task (the key in that task's metric dict), used for medians and the average.
PRIMARY = {"CoLA": "mcc", "SST-2": "accuracy", "MRPC": "accuracy", "STS-B": "spearman",
           "QQP": "accuracy", "MNLI": "accuracy_m", "QNLI": "accuracy", "RTE": "accuracy",
           "WNLI": "accuracy", "SQuAD1.1": "f1", "SQuAD2.0": "f1"}
EXCLUDED_FROM_AVERAGE = ("WNLI",)  # and every SQuAD task (not GLUE)
# The ELECTRA paper's GLUE dev score averages exactly these eight tasks.
PAPER_GLUE_TASKS = ("CoLA", "SST-2", "MRPC", "STS-B", "QQP", "MNLI", "QNLI", "RTE")


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


def split_metrics(task: str, preds: Sequence, labels: Sequence) -> dict[str, float]:
    """The metric dict of one task on one evaluation split."""
    if task == "CoLA":
        return {"mcc": matthews_corrcoef(preds, labels)}
    if task == "STS-B":
        return {"pearson": pearson(preds, labels), "spearman": spearman(preds, labels)}
    if task in ("MRPC", "QQP"):
        return {"accuracy": accuracy(preds, labels), "f1": f1_binary(preds, labels)}
    return {"accuracy": accuracy(preds, labels)}


def task_metrics(task: str, per_split: dict[str, tuple[Sequence, Sequence]]) -> dict[str, float]:
    """Metrics of a task over its evaluation splits: ``{split: (preds, labels)}``.

    MNLI's two dev sets become ``accuracy_m`` and ``accuracy_mm``; other tasks have one split.
    """
    if task == "MNLI":
        suffix = {"dev_matched": "_m", "dev_mismatched": "_mm"}
        out = {}
        for split, (preds, labels) in per_split.items():
            for name, value in split_metrics(task, preds, labels).items():
                out[name + suffix.get(split, "_" + split)] = value
        return out
    if len(per_split) != 1:
        raise ValueError(f"{task}: expected one evaluation split, got {sorted(per_split)}")
    (preds, labels), = per_split.values()
    return split_metrics(task, preds, labels)


def primary_score(task: str, metrics: dict[str, float]) -> float:
    return metrics[PRIMARY[task]]


def glue_average_tasks(task_scores: dict[str, float]) -> list[str]:
    """The tasks ``glue_average`` covers, in the paper's order (WNLI and SQuAD left out)."""
    order = {t: i for i, t in enumerate(PAPER_GLUE_TASKS)}
    kept = [t for t in task_scores if t not in EXCLUDED_FROM_AVERAGE and not t.startswith("SQuAD")]
    return sorted(kept, key=lambda t: (order.get(t, len(order)), t))


def glue_average(task_scores: dict[str, float]) -> float | None:
    """Mean primary score over the GLUE tasks present (WNLI excluded); None if there are none."""
    kept = [task_scores[t] for t in glue_average_tasks(task_scores)]
    return float(np.mean(kept)) if kept else None


def paper_glue_average(task_scores: dict[str, float]) -> float | None:
    """The paper's GLUE score: the mean over its eight tasks, None unless all eight are present."""
    if not all(t in task_scores for t in PAPER_GLUE_TASKS):
        return None
    return float(np.mean([task_scores[t] for t in PAPER_GLUE_TASKS]))


def glue_average_label(tasks: Sequence[str]) -> str:
    """How to print an average over ``tasks``: the paper's name only for the paper's 8 tasks."""
    if set(tasks) == set(PAPER_GLUE_TASKS):
        return "GLUE score (paper's 8-task average)"
    return f"GLUE average over {len(tasks)} task{'s' * (len(tasks) != 1)}: {', '.join(tasks)}"
