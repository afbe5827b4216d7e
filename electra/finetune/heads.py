"""Task heads on top of the pre-trained discriminator encoder, as in the ELECTRA paper.

* Classification / regression: ONE linear layer on dropout(hidden state of [CLS]); no pooler
  (BERT's tanh pooler was trained by NSP, which ELECTRA does not have). Regression (STS-B) is the
  same layer with one output, trained with MSE on ``score / 5``.
* Span (SQuAD): a linear layer giving start and end logits per token (the simple HF-style head
  rather than the paper's XLNet-style beam head: one pass, no beam, a small loss in accuracy
  for a much simpler post-processing), plus for SQuAD 2.0 an answerability logit from
  dropout([CLS]) trained with a sigmoid loss (1 = no answer in this window).

``FinetuneModel`` owns ``encoder`` and ``head``; the layer-wise learning-rate decay in
``recipe.py`` addresses parameters through exactly these two attribute names.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn
from torch.nn import functional as F


class HeadOutput(NamedTuple):
    logits: torch.Tensor  # [B, num_labels] (sequence tasks) or [B, T, 2] (span)
    na_logits: torch.Tensor | None = None  # [B] answerability ("no answer") logit, SQuAD 2.0


class SequenceHead(nn.Module):
    def __init__(self, hidden_size: int, num_labels: int, *, dropout: float = 0.1,
                 init_range: float = 0.02):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(hidden_size, num_labels)
        nn.init.normal_(self.classifier.weight, std=init_range)
        nn.init.zeros_(self.classifier.bias)

    def forward(self, hidden: torch.Tensor, attention_mask=None) -> HeadOutput:
        return HeadOutput(self.classifier(self.dropout(hidden[:, 0])))


class SpanHead(nn.Module):
    def __init__(self, hidden_size: int, *, answerability: bool, dropout: float = 0.1,
                 init_range: float = 0.02):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.span = nn.Linear(hidden_size, 2)
        self.answerable = nn.Linear(hidden_size, 1) if answerability else None
        for layer in (self.span, self.answerable):
            if layer is not None:
                nn.init.normal_(layer.weight, std=init_range)
                nn.init.zeros_(layer.bias)

    def forward(self, hidden: torch.Tensor, attention_mask=None) -> HeadOutput:
        logits = self.span(hidden)
        if attention_mask is not None:
            # Padding can never be an answer boundary.
            pad = (attention_mask == 0).unsqueeze(-1)
            logits = logits.masked_fill(pad, torch.finfo(logits.dtype).min / 2)
        na = None
        if self.answerable is not None:
            na = self.answerable(self.dropout(hidden[:, 0])).squeeze(-1)
        return HeadOutput(logits, na)


class FinetuneModel(nn.Module):
    """Encoder + head. ``forward`` takes padded ``[B, T]`` ids, segments and a 0/1 mask."""

    def __init__(self, encoder: nn.Module, head: nn.Module):
        super().__init__()
        self.encoder = encoder
        self.head = head

    def forward(self, input_ids, segment_ids, attention_mask) -> HeadOutput:
        return self.head(self.encoder(input_ids, segment_ids, attention_mask), attention_mask)


def sequence_loss(logits: torch.Tensor, labels: torch.Tensor, *, regression: bool,
                  score_scale: float = 5.0) -> torch.Tensor:
    if regression:
        return F.mse_loss(logits.squeeze(-1).float(), labels.float() / score_scale)
    return F.cross_entropy(logits.float(), labels.long())


def span_loss(out: HeadOutput, starts: torch.Tensor, ends: torch.Tensor,
              impossible: torch.Tensor | None) -> torch.Tensor:
    """Mean of start and end cross-entropies (+ answerability BCE when the head has one)."""
    logits = out.logits.float()
    loss = 0.5 * (F.cross_entropy(logits[..., 0], starts) + F.cross_entropy(logits[..., 1], ends))
    if out.na_logits is not None and impossible is not None:
        loss = loss + F.binary_cross_entropy_with_logits(out.na_logits.float(), impossible.float())
    return loss
