"""Replaced token detection (ELECTRA) and the MLM baseline, as one ``nn.Module`` the trainer wraps.

One step, exactly as docs/electra-reference.md §2 (and google-research/electra pretrain_helpers):

1. Positions: candidates are non-pad tokens other than [CLS], [SEP], [MASK]. Per sequence
   ``n = max(1, min(max_predictions, round(num_non_pad * mask_prob)))`` (the count includes CLS/SEP;
   ``round`` is half-to-even like ``tf.round``), never more than the candidates. Choosing is
   vectorised: every candidate gets a uniform score, the ``n`` largest win (uniform without
   replacement), via one ``topk`` over the batch. The result keeps a fixed shape, ``k =
   max_predictions`` slots per row with a validity flag (``Masking``), so masking, the generator
   head, sampling and the losses run without a data-dependent shape: no host sync on a GPU.
2. A chosen position becomes [MASK] with probability ``mask_token_prob`` (0.85), else keeps its
   token. No random-token replacement.
3. The generator runs on the masked sequence; its vocabulary logits are computed only at the
   ``B * k`` gathered slots, flattened to [B*k, V]; rows with fewer chosen positions than ``k``
   (short rows, and full rows where ``max_predictions`` rounds above ``n``: 79 slots for 77 at
   length 512) add weight-0 rows; loss = mean cross-entropy over the chosen slots.
4. Sampling: Gumbel-max on ``logits / temperature`` in float32 under ``no_grad``, noise
   ``-log(-log(U + 1e-9) + 1e-9)`` drawn only for the gathered slots.
5. The discriminator sees the ORIGINAL sequence with the samples written into all chosen
   positions; label = sample != original (a correct sample is "real").
6. Discriminator loss: sigmoid cross-entropy summed over every non-pad token (CLS/SEP included)
   and divided by their count (token-level, not per sequence).
7. loss = generator_weight * gen_loss + discriminator_weight * disc_loss (1 and 50). Samples are
   integers, so no gradient flows from the discriminator loss into the generator network; the
   shared embedding block receives gradients from both losses, as in the paper.

Discriminator bias at the prior (``discriminator_bias_init="prior"``, set in the CPU presets):
at step 0 about ``mask_prob`` of the tokens are replaced (an untrained generator almost never
samples the original), so a constant logit of ``log(p / (1 - p))`` is the best guess without
looking at the input. With the paper's zero bias the first gradients all say "shift every logit
down by 1.7", and Adam, which moves every weight by about ``lr`` whatever its gradient's size, does
it through rank-one growth of the weights: a token-independent vector ten or more times larger
than the token-dependent part enters each residual stream, and after LayerNorm every token's hidden
state is the same vector (measured on the ``mini`` preset at lr 1e-3 after 40 steps: cosine 1.0
between tokens). A collapsed discriminator gets no gradient that tells tokens apart and stays at
the base rate (AUC 0.5) for thousands of steps, while the generator trains normally. The paper
avoids this with a 10,000-step warm-up; a CPU-sized run cannot, so its presets start the bias
where the network would otherwise drive it (the prior-probability initialisation of RetinaNet's
classifier, Lin et al. 2017). The HF export carries the bias like any other weight. The prior
fixes the start only: later, as the generator improves, the replaced share and with it the best
constant logit drift, and at a high lr the discriminator can collapse again more slowly, so the
CPU presets also keep the lr low (docs/electra-vs-mlm.md has the measurements).

``kind="mlm"`` is the BERT baseline (dynamic masking as above, no NSP): the discriminator-sized
encoder is trained as a masked LM through ``mlm_head``, a generator-style head of discriminator
width tied to the shared word embeddings, owned by this module. The generator network and the
discriminator head are frozen (``requires_grad=False``) so optimisers and DeepSpeed skip them;
the exported ``discriminator`` folder is then the BERT encoder to fine-tune.

Masking draw vs the original: ``pretrain_helpers.mask`` samples its positions WITH replacement
(``tf.random.categorical`` over the candidates) and does not remove repeats, so fewer distinct
positions are masked than drawn (on average about 17.7 distinct of 19 draws at length 128 for
full sequences, i.e. ~13.8 % instead of 15 % of the tokens). Here ``n`` distinct positions
are drawn WITHOUT replacement (the top-``n`` of uniform scores), so exactly ``n`` (15 %) are
predicted: the paper's stated rate, slightly more generator targets per sequence than the
released code. A deliberate, documented difference; ``mask_prob`` can be lowered to match.

Randomness comes from torch's global generator of the inputs' device, so a trainer that saves and
restores RNG state resumes the exact same masks and samples.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from electra.config import ObjectiveConfig
from electra.model.auc import AUC_BINS, auc_histogram
from electra.model.networks import ElectraForPretraining, GeneratorHead, init_weights


@dataclass(frozen=True)
class SpecialTokens:
    pad: int = 0
    unk: int = 1
    cls: int = 2
    sep: int = 3
    mask: int = 4

    @classmethod
    def from_manifest(cls, special_tokens: dict[str, int]) -> SpecialTokens:
        """From the manifest's ``{"[PAD]": 0, "[UNK]": 1, ...}`` mapping."""
        names = {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
        missing = [tok for tok in names.values() if tok not in special_tokens]
        if missing:
            raise ValueError(f"special tokens {missing} missing from {sorted(special_tokens)}")
        return cls(**{field: int(special_tokens[tok]) for field, tok in names.items()})


class ObjectiveOutput(NamedTuple):
    loss: torch.Tensor            # weighted total, the one to backpropagate
    gen_loss: torch.Tensor        # mean cross-entropy at the chosen positions
    disc_loss: torch.Tensor       # token-mean sigmoid cross-entropy (0 for "mlm")
    gen_acc: torch.Tensor         # argmax accuracy at the chosen positions
    disc_acc: torch.Tensor        # over all non-pad tokens
    disc_precision: torch.Tensor  # on the "replaced" class
    disc_recall: torch.Tensor
    replaced_frac: torch.Tensor   # share of chosen positions whose sample differs from the original
    num_tokens: torch.Tensor      # non-pad tokens in the batch
    num_masked: torch.Tensor      # chosen positions in the batch
    disc_hist: torch.Tensor       # discriminator AUC histogram (auc.auc_histogram; 0 for "mlm")
    row_disc_loss: torch.Tensor   # [B] each row's summed token losses (detached; per-corpus metrics)
    row_tokens: torch.Tensor      # [B] the tokens row_disc_loss covers: the row's non-pad ones (0 for "mlm")


class Masking(NamedTuple):
    """The masking of a batch in a FIXED-size form, so nothing in the step waits for the host:
    ``k = min(max_predictions, T)`` slots per row, ``B * k`` in all, whatever ``n`` each row drew.
    A slot is a flat index into B*T; ``valid`` marks the slots that are chosen positions (a row
    with fewer than ``k`` chosen positions fills its other slots with unchosen positions of the same
    row, whose losses are weighted 0 and whose tokens are written back unchanged). Slots are
    sorted within each row, so ``positions`` lists the chosen positions in row-major order."""

    masked_ids: torch.Tensor    # [B, T] generator input
    slots: torch.Tensor         # [B*k] flat indices into B*T, sorted within each row
    valid: torch.Tensor         # [B*k] bool: the slot is a chosen position
    slot_targets: torch.Tensor  # [B*k] original tokens at the slots

    @property
    def positions(self) -> torch.Tensor:
        """[M] flat indices of the chosen positions (data-dependent size: a host sync; for tests,
        baselines and analysis, not the training step)."""
        return self.slots[self.valid]

    @property
    def targets(self) -> torch.Tensor:
        """[M] original tokens at ``positions``."""
        return self.slot_targets[self.valid]


def _ranked_slots(input_ids: torch.Tensor, special: SpecialTokens, *, mask_prob: float,
                  max_predictions: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, k] candidate indices ranked by a uniform score, and [B, k] bool: rank < n (chosen)."""
    non_pad = input_ids != special.pad
    candidates = non_pad & (input_ids != special.cls) & (input_ids != special.sep) & (input_ids != special.mask)
    n = torch.round(non_pad.sum(1).float() * mask_prob).long().clamp(1, max_predictions)
    n = torch.minimum(n, candidates.sum(1))
    scores = torch.rand(input_ids.shape, device=input_ids.device).masked_fill_(~candidates, -1.0)
    k = min(max_predictions, input_ids.shape[1])
    top = scores.topk(k, dim=1).indices  # sorted by score: rank r < n[b] means chosen
    keep = torch.arange(k, device=input_ids.device)[None, :] < n[:, None]
    return top, keep


def choose_positions(input_ids: torch.Tensor, special: SpecialTokens, *, mask_prob: float,
                     max_predictions: int) -> torch.Tensor:
    """Boolean [B, T]: the positions to predict in each sequence (step 1 above)."""
    top, keep = _ranked_slots(input_ids, special, mask_prob=mask_prob, max_predictions=max_predictions)
    return torch.zeros_like(input_ids, dtype=torch.bool).scatter_(1, top, keep)


def apply_masking(input_ids: torch.Tensor, special: SpecialTokens, cfg: ObjectiveConfig,
                  max_predictions: int) -> Masking:
    top, keep = _ranked_slots(input_ids, special, mask_prob=cfg.mask_prob, max_predictions=max_predictions)
    chosen = torch.zeros_like(input_ids, dtype=torch.bool).scatter_(1, top, keep)
    to_mask = chosen & (torch.rand(input_ids.shape, device=input_ids.device) < cfg.mask_token_prob)
    masked_ids = input_ids.masked_fill(to_mask, special.mask)
    cols = top.sort(dim=1).values  # row-major order; which slots are chosen is read back from the mask
    valid = chosen.gather(1, cols).reshape(-1)
    rows = torch.arange(input_ids.shape[0], device=input_ids.device)[:, None] * input_ids.shape[1]
    slots = (cols + rows).reshape(-1)
    return Masking(masked_ids, slots, valid, input_ids.reshape(-1).index_select(0, slots))


@torch.no_grad()
def gumbel_sample(logits: torch.Tensor, *, temperature: float = 1.0,
                  disallow: torch.Tensor | None = None) -> torch.Tensor:
    """Gumbel-max sample per row of [M, V] logits, in float32 (step 4 above)."""
    logits = logits.detach().float() / temperature
    if disallow is not None:  # the original subtracts 1000 from the true token's logit
        logits = logits.scatter_add(1, disallow[:, None], torch.full_like(logits[:, :1], -1000.0))
    u = torch.rand_like(logits)
    return (logits - torch.log(-torch.log(u + 1e-9) + 1e-9)).argmax(-1)


def masked_lm_loss(logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Mean cross-entropy over the chosen positions (rows with ``weights`` True when given); 0, not
    NaN, for a batch without any."""
    if weights is None:
        return F.cross_entropy(logits, targets, reduction="sum") / max(1, targets.numel())
    ce = F.cross_entropy(logits, targets, reduction="none")
    return (ce * weights).sum() / weights.sum().clamp(min=1)


def _weighted_mean(x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    return (x.float() * weights).sum() / weights.sum().clamp(min=1)


def binary_stats(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Accuracy, precision and recall of ``logits > 0`` for the positive class, over ``weights``."""
    pred = (logits > 0) & weights
    pos = labels & weights
    tp = (pred & pos).sum().float()
    acc = ((pred == pos) & weights).sum().float() / weights.sum().clamp(min=1)
    precision = tp / pred.sum().clamp(min=1)
    recall = tp / pos.sum().clamp(min=1)
    return acc, precision, recall


class ElectraObjective(nn.Module):
    """Wraps ``ElectraForPretraining``; ``forward(input_ids, segment_ids) -> ObjectiveOutput``."""

    def __init__(self, model: ElectraForPretraining, cfg: ObjectiveConfig, special: SpecialTokens, seq_len: int):
        super().__init__()
        cfg.validate()
        self.model = model
        self.cfg = cfg
        self.special = special
        self.seq_len = seq_len
        self.max_predictions = cfg.max_predictions_for(seq_len)
        self.mlm_head: GeneratorHead | None = None
        if cfg.kind == "electra" and cfg.discriminator_bias_init == "prior":
            with torch.no_grad():
                model.discriminator_head.dense_prediction.bias.fill_(math.log(cfg.mask_prob / (1 - cfg.mask_prob)))
        if cfg.kind == "mlm":
            mc = model.config
            self.mlm_head = GeneratorHead(hidden_size=mc.hidden_size, embedding_size=mc.embedding_size,
                                          vocab_size=mc.vocab_size, layer_norm_eps=mc.layer_norm_eps)
            init_weights(self.mlm_head, mc.initializer_range)
            for p in [*model.generator.layers.parameters(), *model.generator_head.parameters(),
                      *model.discriminator_head.parameters()]:
                p.requires_grad_(False)
            if model.generator.embeddings_project is not None:
                model.generator.embeddings_project.requires_grad_(False)

    def forward(self, input_ids: torch.Tensor, segment_ids: torch.Tensor | None = None) -> ObjectiveOutput:
        input_ids = input_ids.long()
        non_pad = input_ids != self.special.pad
        m = apply_masking(input_ids, self.special, self.cfg, self.max_predictions)
        if self.mlm_head is not None:
            return self._mlm(m, segment_ids, non_pad)
        logits = self.model.generator_logits(m.masked_ids, segment_ids, non_pad, m.slots).float()
        gen_loss = masked_lm_loss(logits, m.slot_targets, m.valid)
        disallow = m.slot_targets if self.cfg.disallow_correct else None
        sampled = gumbel_sample(logits, temperature=self.cfg.temperature, disallow=disallow)
        sampled = torch.where(m.valid, sampled, m.slot_targets)  # an unchosen slot keeps its token
        disc_ids = input_ids.view(-1).index_copy(0, m.slots, sampled).view_as(input_ids)
        labels = disc_ids != input_ids
        disc_logits = self.model.discriminator_logits(disc_ids, segment_ids, non_pad).float()
        num_tokens = non_pad.sum()
        per_token = F.binary_cross_entropy_with_logits(disc_logits, labels.float(), reduction="none")
        disc_loss = per_token.masked_fill(~non_pad, 0.0).sum() / num_tokens.clamp(min=1)
        loss = self.cfg.generator_weight * gen_loss + self.cfg.discriminator_weight * disc_loss
        with torch.no_grad():
            gen_acc = _weighted_mean(logits.argmax(-1) == m.slot_targets, m.valid)
            acc, precision, recall = binary_stats(disc_logits, labels, non_pad)
            replaced = _weighted_mean(sampled != m.slot_targets, m.valid)
            hist = auc_histogram(disc_logits, labels, non_pad)
            row_loss = per_token.detach().masked_fill(~non_pad, 0.0).sum(1)
        return ObjectiveOutput(loss, gen_loss, disc_loss, gen_acc, acc, precision, recall, replaced,
                               num_tokens, m.valid.sum(), hist, row_loss, non_pad.sum(1))

    def _mlm(self, m: Masking, segment_ids: torch.Tensor | None, non_pad: torch.Tensor) -> ObjectiveOutput:
        hidden = self.model.discriminator(m.masked_ids, segment_ids, non_pad)
        hidden = hidden.reshape(-1, hidden.shape[-1]).index_select(0, m.slots)
        logits = self.mlm_head(hidden, self.model.embeddings.word_embeddings.weight).float()
        gen_loss = masked_lm_loss(logits, m.slot_targets, m.valid)
        zero = gen_loss.new_zeros(())
        with torch.no_grad():
            gen_acc = _weighted_mean(logits.argmax(-1) == m.slot_targets, m.valid)
        return ObjectiveOutput(self.cfg.generator_weight * gen_loss, gen_loss, zero, gen_acc, zero, zero,
                               zero, zero, non_pad.sum(), m.valid.sum(),
                               torch.zeros(2 * AUC_BINS, dtype=torch.float64, device=logits.device),
                               non_pad.new_zeros(non_pad.shape[0], dtype=torch.float32),
                               non_pad.new_zeros(non_pad.shape[0], dtype=torch.int64))
