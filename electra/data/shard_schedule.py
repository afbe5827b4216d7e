"""Which shards a set of stream segments reads in an epoch, and from which step to which step,
computed per shuffle block instead of per example (``StreamPlan.schedule``).

The sample order (``electra.data.sample_order``) shuffles examples only *within* a block of
``shuffle_block`` positions: the examples of block ``b`` come from source positions
``[b*k, (b+1)*k)`` of the epoch's shard order, whatever the permutation. So:

- a block whose source range lies inside one shard (slice, with a mixture) sends every covered
  position to that shard: the shard is read at exactly the steps at which the segment covers any
  position of the block, a contiguous range ``[s_min, s_max]`` that two integer divisions give
  (a segment at step ``s`` covers positions ``c*n + s*g + [lo, hi)`` of its stream ``c``);
- only a block that straddles a shard boundary needs the permutation: its covered positions
  (at most one block of them) are mapped exactly, as before.

Cost per segment: one vectorised pass over the blocks its steps span, plus one block of positions
per shard boundary inside them, instead of one pass over every position. The result is identical
to mapping every position (tests compare the two on random plans), so the node cache's counts,
``auto``'s bound and the loader's read-ahead and eviction are unchanged. Without shuffling the
mapping is the identity, and the same walk with ``shuffle_block``-sized pieces applies.

Trade-off: a corpus whose shards are smaller than a block (every block straddles) gains nothing
over the per-position walk, and pays a little more for the bookkeeping; real shards hold far more
examples than a block.
"""
from __future__ import annotations

import numpy as np


def segment_steps(plan, epoch: int, segment, start: int, stop: int, bounds: np.ndarray,
                  first: np.ndarray, last: np.ndarray) -> int:
    """Lower ``first`` and raise ``last`` (per position of the epoch's shard order, ``bounds``:
    ``plan.ordered_shards(epoch)[1]``) to the steps ``[start, stop)`` at which ``segment`` reads
    each. Returns how many positions went through the permutation (those of straddling blocks)."""
    if stop <= start or segment.hi <= segment.lo:
        return 0
    n, g, k, total = plan.stream_length, plan.rows_per_stream, plan.shuffle_block, plan.num_examples
    base, lo, hi = segment.stream * n, segment.lo, segment.hi
    blocks = np.arange((base + start * g + lo) // k, (base + (stop - 1) * g + hi - 1) // k + 1, dtype=np.int64)
    b0 = blocks * k
    b1 = np.minimum(b0 + k, total)
    # step s covers [base + s*g + lo, base + s*g + hi); it meets [b0, b1) for s in [s_min, s_max]
    s_min = np.maximum((b0 - base - hi) // g + 1, start)
    s_max = np.minimum((b1 - base - lo - 1) // g, stop - 1)
    met = s_min <= s_max
    b0, b1, s_min, s_max = b0[met], b1[met], s_min[met], s_max[met]
    j0 = np.searchsorted(bounds, b0, side="right") - 1
    j1 = np.searchsorted(bounds, b1 - 1, side="right") - 1
    one = j0 == j1
    if one.any():  # s_min, s_max and j0 rise with the block: a shard's first block has its first step
        j, lo_s, hi_s = j0[one], s_min[one], s_max[one]
        starts = np.flatnonzero(np.r_[True, j[1:] != j[:-1]])
        ends = np.r_[starts[1:], len(j)] - 1
        u = j[starts]
        first[u] = np.minimum(first[u], lo_s[starts])
        last[u] = np.maximum(last[u], hi_s[ends])
    if one.all():
        return 0
    return _straddling(plan, epoch, base, lo, hi, b0[~one], b1[~one], s_min[~one], s_max[~one], bounds, first, last)


def _straddling(plan, epoch, base, lo, hi, b0, b1, s_min, s_max, bounds, first, last) -> int:
    """The exact walk over the covered positions of blocks that span several shards."""
    g = plan.rows_per_stream
    counts = s_max - s_min + 1
    which = np.repeat(np.arange(len(counts)), counts)
    offsets = np.cumsum(counts) - counts
    steps = s_min[which] + (np.arange(len(which)) - offsets[which])
    pos = base + steps[:, None] * g + np.arange(lo, hi, dtype=np.int64)[None, :]
    inside = (pos >= b0[which][:, None]) & (pos < b1[which][:, None])
    pos, step_of = pos[inside], np.broadcast_to(steps[:, None], inside.shape)[inside]
    where = np.searchsorted(bounds, plan.source_positions(epoch, pos), side="right") - 1
    np.minimum.at(first, where, step_of)
    np.maximum.at(last, where, step_of)
    return int(pos.size)
