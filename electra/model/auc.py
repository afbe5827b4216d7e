"""The discriminator's AUC from a histogram of its logits (the original's ``tf.metrics.auc`` over
non-pad tokens bins probabilities at 200 thresholds).

Each micro batch adds a histogram of its non-pad discriminator
logits, per label, to the window (:func:`auc_histogram`: ``AUC_BINS`` equal bins over
``[-AUC_RANGE, AUC_RANGE]``, outliers in the end bins; built with ``index_add_`` on the device, no
host sync). Histograms add across micro batches and ranks, so the window's AUC is that of all its
tokens, and :func:`auc_from_histogram` is the rank statistic (Mann-Whitney) on the binned logits:
pairs in the same bin count one half, exactly as ``roc_auc_score`` counts tied scores. The only
error is from binning: at most half the share of positive-negative pairs that fall in one bin.

A histogram, not the logits themselves, so that the metric window (``electra.run.metrics_log``)
adds micro batches and ranks with one all-reduce of a fixed size.
"""
from __future__ import annotations

import torch

AUC_BINS, AUC_RANGE = 4096, 16.0  # logit bins of width 1/128 (bf16 logits are no finer near |x| = 1)


def auc_histogram(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """float64 [2 * AUC_BINS]: counts of the logits where ``weights``, negatives' bins then positives'."""
    scale = AUC_BINS / (2 * AUC_RANGE)
    idx = ((logits.detach().float().clamp(-AUC_RANGE, AUC_RANGE) + AUC_RANGE) * scale).long()
    idx = idx.clamp_(0, AUC_BINS - 1) + AUC_BINS * labels.long()
    idx = idx.masked_fill(~weights.bool(), 2 * AUC_BINS).flatten()  # excluded tokens: a dropped bin
    counts = torch.zeros(2 * AUC_BINS + 1, dtype=torch.float64, device=logits.device)
    counts.index_add_(0, idx, torch.ones_like(idx, dtype=torch.float64))
    return counts[:-1]


def auc_from_histogram(hist) -> float | None:
    """ROC AUC from :func:`auc_histogram` counts (summed over any batches); None without both classes."""
    h = torch.as_tensor(hist, dtype=torch.float64).cpu()
    neg, pos = h[:AUC_BINS], h[AUC_BINS:]
    n, p = float(neg.sum()), float(pos.sum())
    if n == 0 or p == 0:
        return None
    below = torch.cumsum(neg, 0) - neg  # negatives in lower bins: ranked below each positive
    return float((pos * (below + 0.5 * neg)).sum()) / (n * p)
