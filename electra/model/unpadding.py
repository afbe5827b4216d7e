"""Unpadded compute for a padded batch: where the real tokens are, and attention over them.

Used by ``electra.model.networks`` (``ElectraEncoder.unpad``, on by default). When a batch has padding, each
encoder forward unpads once: ``unpad_layout`` lists the real tokens' flat indices (ascending, so
each row's tokens stay contiguous), the embeddings gather ids, positions and segments at them, and
every token-wise op (embedding LayerNorm, projections, QKV, attention output, FFN, LayerNorms,
dropout, the discriminator head) runs on [N, H] with N the real tokens instead of B x T. Only
attention needs the sequence structure:

- CUDA, bf16/fp16: FlashAttention's variable-length kernel called directly
  (``aten._flash_attention_forward`` on the [N, heads, head_dim] q/k/v with int32 row offsets;
  attention dropout included, differentiable through its own backward). No host sync and no
  Python dispatch per layer. The jagged (nested-tensor) SDPA reaches the same kernel, but every
  call goes through the nested tensor's Python ``__torch_dispatch__`` and reads its minimum row
  length back to the host to choose a kernel (several syncs per layer, forward and backward):
  on an H100 that left the GPU idle most of a Large step (docs/gpu.md).
  ``torch.nn.attention.varlen`` has no dropout, so it is not used.
- CUDA, fp32 (TF32 runs), or a batch with an empty row: the jagged SDPA (memory-efficient kernel),
  given both row-length bounds so that it needs no sync of its own.
- CPU: the rows are sorted by length and split into ``ATTENTION_BUCKETS`` groups; per group q/k/v
  are scattered back into [rows, W, ...] (W = the group's last real position + 1), SDPA runs with
  the key-padding mask, and the real rows are gathered out again. Buckets cut the score entries
  spent on padding (at the 59 % fill of a books corpus one group of B rows would waste ~60 % of
  them, and the math kernel's attention dropout costs as much as its matmuls); more buckets mean
  more, smaller SDPA calls, and 2-4 measured best on the Small shapes. The jagged SDPA also runs on
  the CPU (the tests check it against this path there) but falls back to a per-sequence loop that
  is many times slower.

A batch without padding keeps the padded path and its mask-free SDPA (no gather, no scatter).
Outputs keep their padded shapes: ``ElectraEncoder.forward`` returns [B, T, H] with zeros at pad
positions and ``discriminator_logits`` [B, T] with 0 there (the padded path leaves meaningless
values at pads; the objective masks them either way). Real-token outputs, losses and gradients
equal the padded model's up to float summation order (tests/electra/model/test_unpadding.py). The
dropout masks differ in training (fewer random numbers are drawn), so the two paths are compared
in eval mode. Trade-off: unpadding costs a few host syncs per encoder forward (the token count
and the widths) and index gathers/scatters of [N, H], paid back at any real padding.
"""
from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

# Re-padded (CPU) attention groups the rows by length into this many buckets, each padded only to
# its own longest row: fewer wasted score entries at the price of more, smaller SDPA calls.
ATTENTION_BUCKETS = 4


class Bucket(NamedTuple):
    """Rows of similar length, re-padded together for the CPU attention."""
    tokens: torch.Tensor    # [n] indices into the [N] real tokens of the rows of this bucket
    dense: torch.Tensor     # [n] flat indices into rows x width
    rows: int
    width: int              # last real position + 1 over the bucket's rows
    key_mask: torch.Tensor  # [rows, 1, 1, width] bool, True at real keys (all True for an empty row)


class Unpadded(NamedTuple):
    """Where the N real tokens of a padded [B, T] batch are (see ``unpad_layout``)."""
    indices: torch.Tensor    # [N] flat indices into B*T, ascending (a row's tokens are contiguous)
    positions: torch.Tensor  # [N] position of each token in its row
    shape: tuple[int, int]   # (B, T)
    offsets: torch.Tensor    # [B + 1] cumulative real-token counts (the jagged layout)
    max_len: int             # the longest row's real-token count
    min_len: int             # the shortest row's
    buckets: tuple[Bucket, ...]  # CPU attention (empty on CUDA)
    restore: torch.Tensor | None  # [N]: the buckets' concatenated tokens back in [N] order

    def to_padded(self, x: torch.Tensor) -> torch.Tensor:
        """[N, ...] -> [B, T, ...] with zeros at pad positions (differentiable)."""
        b, t = self.shape
        out = x.new_zeros(b * t, *x.shape[1:]).index_copy(0, self.indices, x)
        return out.view(b, t, *x.shape[1:])


def unpad_layout(attention_mask: torch.Tensor | None, buckets: int = ATTENTION_BUCKETS) -> Unpadded | None:
    """The layout of the real tokens of ``attention_mask`` [B, T], or None when nothing is padded.

    Any mask works (real tokens need not be a prefix of the row): positions come from the flat
    indices, and attention only needs each row's set of keys."""
    if attention_mask is None:
        return None
    keep = attention_mask.bool()
    if bool(keep.all()):
        return None
    b, t = keep.shape
    indices = keep.reshape(-1).nonzero().squeeze(1)
    rows, positions = indices // t, indices % t
    counts = keep.sum(1)
    offsets = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
    shortest, longest = torch.stack([counts.min(), counts.max()]).tolist()  # one sync for both
    groups: tuple[Bucket, ...] = ()
    restore = None
    if not keep.is_cuda:
        groups = _buckets(keep, counts, rows, positions, buckets)
        restore = torch.cat([g.tokens for g in groups]).argsort() if len(groups) > 1 else None
    return Unpadded(indices, positions, (b, t), offsets, longest, shortest, groups, restore)


def _buckets(keep: torch.Tensor, counts: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor,
             n: int) -> tuple[Bucket, ...]:
    """Rows sorted by their last real position + 1, split into ``n`` near-equal groups."""
    b, t = keep.shape
    ends = (keep * torch.arange(1, t + 1, device=keep.device)).amax(1)
    out = []
    for group in ends.argsort(descending=True).split(-(-b // n)):
        local = torch.full((b,), -1, dtype=torch.long, device=keep.device)
        local[group] = torch.arange(len(group), device=keep.device)
        tokens = (local[rows] >= 0).nonzero().squeeze(1)
        width = max(1, int(ends[group].max()))
        dense = local[rows[tokens]] * width + positions[tokens]
        # an empty row attends to zeros instead of to nothing (NaN)
        mask = keep[group, :width] | (counts[group] == 0)[:, None]
        out.append(Bucket(tokens, dense, len(group), width, mask[:, None, None, :]))
    return tuple(out)


def unpadded_attention(qkv: torch.Tensor, layout: Unpadded, num_heads: int, dropout_p: float) -> torch.Tensor:
    """Multi-head attention of [N, 3H] fused projections within each row of ``layout`` -> [N, H]."""
    if qkv.is_cuda:
        if qkv.dtype in (torch.bfloat16, torch.float16) and layout.min_len > 0:
            return varlen_flash_attention(qkv, layout, num_heads, dropout_p)
        return jagged_attention(qkv, layout, num_heads, dropout_p)
    return repadded_attention(qkv, layout, num_heads, dropout_p)


def varlen_flash_attention(qkv: torch.Tensor, layout: Unpadded, num_heads: int, dropout_p: float) -> torch.Tensor:
    """FlashAttention over the rows of ``layout``, straight on the [N, heads, head_dim] values: the
    kernel the jagged SDPA ends in, without its per-call dispatch and syncs (bf16/fp16 only)."""
    n, h3 = qkv.shape
    h = h3 // 3
    q, k, v = (x.contiguous() for x in qkv.view(n, 3, num_heads, h // num_heads).unbind(1))
    cu = layout.offsets.to(torch.int32)
    out = torch.ops.aten._flash_attention_forward(q, k, v, cu, cu, layout.max_len, layout.max_len, dropout_p,
                                                  False, False)[0]
    return out.reshape(n, h)


def repadded_attention(qkv: torch.Tensor, layout: Unpadded, num_heads: int, dropout_p: float) -> torch.Tensor:
    """Per bucket: scatter q/k/v into [rows, width], SDPA with the key-padding mask, gather the real
    rows back; then the buckets' outputs are put back in token order."""
    h3 = qkv.shape[1]
    h = h3 // 3
    outs = []
    for g in layout.buckets:
        part = qkv if layout.restore is None else qkv.index_select(0, g.tokens)
        dense = part.new_zeros(g.rows * g.width, h3).index_copy(0, g.dense, part)
        q, k, v = dense.view(g.rows, g.width, 3, num_heads, h // num_heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=g.key_mask, dropout_p=dropout_p)
        outs.append(a.transpose(1, 2).reshape(g.rows * g.width, h).index_select(0, g.dense))
    return outs[0] if layout.restore is None else torch.cat(outs).index_select(0, layout.restore)


def jagged_attention(qkv: torch.Tensor, layout: Unpadded, num_heads: int, dropout_p: float) -> torch.Tensor:
    """SDPA on nested jagged tensors (one ragged row per sequence): flash/efficient kernels on CUDA."""
    n, h3 = qkv.shape
    h = h3 // 3
    parts = qkv.view(n, 3, num_heads, h // num_heads).unbind(1)
    # The jagged SDPA wants each of q/k/v contiguous after the head transpose: copy out of the fused tensor.
    # Both bounds given: the kernel choice needs no host sync of its own.
    q, k, v = (torch.nested.nested_tensor_from_jagged(x.contiguous(), layout.offsets, max_seqlen=layout.max_len,
                                                      min_seqlen=layout.min_len).transpose(1, 2) for x in parts)
    a = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)
    return a.transpose(1, 2).values().reshape(n, h)
