"""The batch and the baseline loss that the step benchmarks share (``benchmarks/train/step.py``,
``benchmarks/gpu/gpu.py``): ``make_batch`` (random ids, [CLS] A [SEP] B [SEP] rows padded to
``fill`` of the positions) and ``hf_electra_loss`` (the ELECTRA loss through ``transformers``'
generator and discriminator)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from electra.config import ElectraConfig
from electra.model.objective import SpecialTokens, apply_masking, gumbel_sample

SP = SpecialTokens()


def row_lengths(batch: int, seq_len: int, fill: float, g: torch.Generator) -> torch.Tensor:
    """Lengths in [4, seq_len], uniform around fill x seq_len, summing to round(fill x batch x seq_len)."""
    if fill >= 1:
        return torch.full((batch,), seq_len)
    lo = max(4, round(2 * fill * seq_len - seq_len)) if fill >= 0.5 else 4
    hi = seq_len if fill >= 0.5 else max(lo, round(2 * fill * seq_len) - 4)
    lengths = torch.randint(lo, hi + 1, (batch,), generator=g)
    target = min(batch * seq_len, max(4 * batch, round(fill * batch * seq_len)))
    while int(lengths.sum()) != target:
        step = 1 if int(lengths.sum()) < target else -1
        row = int(torch.randint(batch, (1,), generator=g))
        if 4 <= int(lengths[row]) + step <= seq_len:
            lengths[row] += step
    return lengths


def make_batch(cfg: ElectraConfig, batch: int, *, fill: float = 0.59, seed: int = 0):
    """[CLS] A [SEP] B [SEP] + padding rows whose real tokens are ``fill`` of the positions."""
    g = torch.Generator().manual_seed(seed)
    t = cfg.data.seq_len
    ids = torch.randint(5, cfg.model.vocab_size, (batch, t), generator=g)
    seg = torch.zeros(batch, t, dtype=torch.long)
    for row, n in enumerate(row_lengths(batch, t, fill, g).tolist()):
        ids[row, n:] = SP.pad
        ids[row, 0], ids[row, n // 2 - 1], ids[row, n - 1] = SP.cls, SP.sep, SP.sep
        seg[row, n // 2:n] = 1
    return ids, seg


def hf_electra_loss(gen, disc, cfg, ids: torch.Tensor, seg: torch.Tensor) -> torch.Tensor:
    """The ELECTRA loss computed with ``transformers``' generator and discriminator: our masking
    and Gumbel sampling, the same loss weights (the baseline of step.py and gpu.py)."""
    o = cfg.objective
    mask = (ids != SP.pad).long()
    m = apply_masking(ids, SP, o, o.max_predictions_for(ids.shape[1]))
    logits = gen(input_ids=m.masked_ids, attention_mask=mask, token_type_ids=seg).logits
    logits = logits.reshape(-1, logits.shape[-1])[m.positions].float()
    gen_loss = F.cross_entropy(logits, m.targets)
    sampled = gumbel_sample(logits, temperature=o.temperature)
    disc_ids = ids.reshape(-1).index_copy(0, m.positions, sampled).view_as(ids)
    labels = (disc_ids != ids).long()
    disc_loss = disc(input_ids=disc_ids, attention_mask=mask, token_type_ids=seg, labels=labels).loss
    return o.generator_weight * gen_loss + o.discriminator_weight * disc_loss
