"""Task heads on top of the pre-trained discriminator encoder, as in the ELECTRA paper.

* Classification / regression: ONE linear layer on dropout(hidden state of [CLS]); no pooler
  (BERT's tanh pooler was trained by NSP, which ELECTRA does not have). Regression (STS-B) is the
  same layer with one output, trained with MSE on ``score / 5``.
* Span (SQuAD), the paper's head by default (``PaperSpanHead``, ELECTRA's
  ``finetune/qa/qa_tasks.py`` with ``joint_prediction``): start logits from one linear layer;
  end logits CONDITIONED ON THE START: ``dense(gelu(dense_512([h_start; h_t])))`` for every token
  t, with the gold start while training and, at evaluation, a beam: the ``beam`` (20) most
  likely starts, each with its ``beam`` most likely ends, scored by summed log-probabilities.
  Only context tokens and [CLS] may start or end an answer (question tokens and padding are
  masked). SQuAD 2.0 answerability: ``dense(gelu(dense_512([h_CLS; sum_t p_start(t) h_t])))``, a
  logit trained with a sigmoid loss (1 = no answer in this window) weighted 0.5.
  Departures from the original: masked logits are set to -10000 rather than shifted by -1000
  (same softmax); the beam is cut to the window's length when shorter than 20.
  ``SpanHead`` (``recipe.squad_head = "plain"``): one linear layer giving independent start and
  end logits, the answerability logit from dropout([CLS]); same masks and loss weights.

``FinetuneModel`` owns ``encoder`` and ``head``; the layer-wise learning-rate decay in
``recipe.py`` addresses parameters through exactly these two attribute names.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import torch
from torch import nn
from torch.nn import functional as F


class HeadOutput(NamedTuple):
    logits: torch.Tensor  # [B, num_labels] (sequence tasks) or [B, T, 2] (span)
    na_logits: torch.Tensor | None = None  # [B] answerability ("no answer") logit, SQuAD 2.0
    # paper span head, training: gold starts [B] -> start-conditioned end logits [B, T]
    end_given_start: Callable[[torch.Tensor], torch.Tensor] | None = None
    # paper span head, evaluation: (start log-probs [B, k], start positions [B, k],
    # end log-probs [B, k, k], end positions [B, k, k]), best first
    beam: tuple[torch.Tensor, ...] | None = None


class SequenceHead(nn.Module):
    def __init__(self, hidden_size: int, num_labels: int, *, dropout: float = 0.1,
                 init_range: float = 0.02):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(hidden_size, num_labels)
        nn.init.normal_(self.classifier.weight, std=init_range)
        nn.init.zeros_(self.classifier.bias)

    def forward(self, hidden: torch.Tensor, attention_mask=None, segment_ids=None) -> HeadOutput:
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

    def forward(self, hidden: torch.Tensor, attention_mask=None, segment_ids=None) -> HeadOutput:
        logits = self.span(hidden)
        if attention_mask is not None:
            # Padding (and with segments, the question) can never be an answer boundary.
            keep = answer_mask(attention_mask, segment_ids).unsqueeze(-1)
            logits = logits.masked_fill(~keep, MASKED)
        na = None
        if self.answerable is not None:
            na = self.answerable(self.dropout(hidden[:, 0])).squeeze(-1)
        return HeadOutput(logits, na)


MASKED = -10000.0  # logit of a position that may not start or end an answer
_CHUNK_ELEMENTS = 1 << 25  # bound on the paper head's transient [B, starts, T, inner] tensor


def answer_mask(attention_mask: torch.Tensor, segment_ids: torch.Tensor | None) -> torch.Tensor:
    """[B, T] bool: positions that may bound an answer: [CLS] and the (unpadded) context."""
    keep = attention_mask.bool()
    if segment_ids is not None:
        keep = keep & (segment_ids == 1)
        keep[:, 0] = True
    return keep


class PaperSpanHead(nn.Module):
    """The paper's SQuAD head (see the module docstring); ``beam`` = start_n_top = end_n_top."""

    def __init__(self, hidden_size: int, *, answerability: bool, beam: int = 20,
                 inner: int = 512, init_range: float = 0.02):
        super().__init__()
        self.beam = beam
        self.start = nn.Linear(hidden_size, 1)
        self.end_inner = nn.Linear(2 * hidden_size, inner)  # on [h_start; h_t]
        self.end = nn.Linear(inner, 1)
        self.answerable = nn.Sequential(nn.Linear(2 * hidden_size, inner), nn.GELU(),
                                        nn.Linear(inner, 1)) if answerability else None
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=init_range)
                nn.init.zeros_(m.bias)

    def forward(self, hidden: torch.Tensor, attention_mask, segment_ids=None) -> HeadOutput:
        keep = answer_mask(attention_mask, segment_ids)
        start_logits = self.start(hidden).squeeze(-1).masked_fill(~keep, MASKED)
        na = None
        if self.answerable is not None:
            p_start = torch.softmax(start_logits.float(), -1).to(hidden.dtype)
            start_feature = (p_start.unsqueeze(-1) * hidden).sum(1)
            na = self.answerable(torch.cat([hidden[:, 0], start_feature], -1)).squeeze(-1)
        if self.training:
            return HeadOutput(start_logits.unsqueeze(-1), na, end_given_start=lambda starts: (
                self.end_logits(hidden, keep, starts.unsqueeze(1)).squeeze(1)))
        k = min(self.beam, hidden.shape[1])
        start_lp = torch.log_softmax(start_logits.float(), -1)
        top_lp, top_idx = start_lp.topk(k, dim=-1)  # [B, k]
        end_lp = torch.log_softmax(self.end_logits(hidden, keep, top_idx).float(), -1)
        end_top_lp, end_top_idx = end_lp.topk(k, dim=-1)  # [B, k, k]
        return HeadOutput(start_logits.unsqueeze(-1), na,
                          beam=(top_lp, top_idx, end_top_lp, end_top_idx))

    def end_logits(self, hidden: torch.Tensor, keep: torch.Tensor, starts: torch.Tensor
                   ) -> torch.Tensor:
        """[B, k, T] end logits given k start positions per row ([B, k])."""
        b, t, h = hidden.shape
        start_h = torch.gather(hidden, 1, starts.unsqueeze(-1).expand(-1, -1, h))  # [B, k, H]
        # dense([h_s; h_t]) = W_s h_s + W_t h_t + b: the [B, k, T, 2H] concatenation is never built
        w = self.end_inner.weight
        from_start = F.linear(start_h, w[:, :h])  # [B, k, inner]
        from_token = F.linear(hidden, w[:, h:], self.end_inner.bias).unsqueeze(1)  # [B,1,T,inner]
        # The [B, k, T, inner] activations of a full beam are large (eval batches of 512-token
        # windows): build them a few starts at a time.
        step = max(1, _CHUNK_ELEMENTS // (b * t * w.shape[0]))
        logits = torch.cat([self.end(F.gelu(from_start[:, i:i + step].unsqueeze(2) + from_token))
                            .squeeze(-1) for i in range(0, starts.shape[1], step)], dim=1)
        return logits.masked_fill(~keep.unsqueeze(1), MASKED)


class FinetuneModel(nn.Module):
    """Encoder + head. ``forward`` takes padded ``[B, T]`` ids, segments and a 0/1 mask."""

    def __init__(self, encoder: nn.Module, head: nn.Module):
        super().__init__()
        self.encoder = encoder
        self.head = head

    def forward(self, input_ids, segment_ids, attention_mask) -> HeadOutput:
        return self.head(self.encoder(input_ids, segment_ids, attention_mask), attention_mask,
                         segment_ids=segment_ids)


def sequence_loss(logits: torch.Tensor, labels: torch.Tensor, *, regression: bool,
                  score_scale: float = 5.0) -> torch.Tensor:
    if regression:
        return F.mse_loss(logits.squeeze(-1).float(), labels.float() / score_scale)
    return F.cross_entropy(logits.float(), labels.long())


def span_loss(out: HeadOutput, starts: torch.Tensor, ends: torch.Tensor,
              impossible: torch.Tensor | None, *, answerable_weight: float = 0.5) -> torch.Tensor:
    """Mean of start and end cross-entropies (+ weighted answerability BCE when there is one).

    The paper head's end logits are conditioned on the gold start (teacher forcing).
    """
    logits = out.logits.float()
    end_logits = (out.end_given_start(starts) if out.end_given_start is not None
                  else logits[..., 1]).float()
    loss = 0.5 * (F.cross_entropy(logits[..., 0], starts) + F.cross_entropy(end_logits, ends))
    if out.na_logits is not None and impossible is not None:
        loss = loss + answerable_weight * F.binary_cross_entropy_with_logits(
            out.na_logits.float(), impossible.float())
    return loss
