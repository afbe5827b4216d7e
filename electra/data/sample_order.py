"""The elastic sample order: which examples form each global batch, and which rank reads which.

Pure arithmetic (numpy only, no torch, no I/O); ``electra.data.stream`` streams what it describes. One
split, one epoch, ``N`` examples, global batch ``G``:

1. **The shuffled sequence** is a function of ``(seed, epoch)``. Shards (manifest order; with
   several weighted corpora, the epoch's slices of them: ``electra.data.mixture``) are permuted with
   ``rng(seed, epoch)`` and concatenated; the resulting ``N`` positions are cut into
   blocks of ``shuffle_block`` and each block is permuted with ``rng(seed, epoch, block)``. A
   block shuffle rather than a reservoir buffer: any position's example can be computed directly
   (exact resume), and a block's examples come from the block's own source range, so a reader of
   one region of the sequence opens only that region's shards.
2. **Canonical streams.** ``C = gcd(G, streams)``; the sequence is cut into ``C`` contiguous
   streams of ``n = N // C`` positions. Step ``s`` of the epoch takes, for ``c = 0 .. C-1`` in
   that (canonical) order, positions ``[s*G/C, (s+1)*G/C)`` of stream ``c``. There are
   ``n // (G/C)`` steps per epoch; the ``N - steps*G`` examples left over are counted
   (``dropped_per_epoch``). Each global batch therefore mixes ``C`` distant regions of the
   corpus (with ``C = 1`` a batch would come from one block: a few neighbouring shards).
3. **Ranks** split each step's canonical global batch into ``W`` contiguous slices; micro
   batches cut a rank's slice in canonical order. Nothing above depends on ``W``, the micro batch
   or the loader's workers: that is what makes the order *elastic* (stop on ``W`` ranks, resume on
   ``W'``: the same global batches from the next step on). When ``W`` divides ``C`` a rank owns
   whole streams, ``C/W`` regions of the sequence, and opens only about ``1/W`` of the shards;
   otherwise a slice cuts a stream and the ranks sharing it each read its shards (more reading,
   the same batches).
4. **Loader workers** take contiguous groups of their rank's stream segments (``segments``), so a
   worker reads only its streams' regions: each byte is read about once per rank, the shards on
   the border between two workers' (or ranks') regions by both. A rank with fewer segments than
   workers (a piece of one stream) gives each worker a contiguous share of its rows instead, so
   none idles; its workers then read the same shards (once per node with ``electra.data.node_cache``).

Trade-offs. The cost of streams is memory: every stream a worker serves keeps the shards its
current block spans decoded at once, so ``streams`` trades the batch's diversity for memory per
rank (the bound is in ``electra.data.stream``). Locality needs a worker's region (about
``N / (W * workers)`` positions) to be large next to a shuffle block: a block straddling the
border of two regions is read by both sides, so on a corpus only a few blocks long every worker
reads most shards. The shuffle mixes within a block only (plus the shard permutation and the
streams): a block should span several shards. Mapping positions costs a few numpy operations per
position and one cached permutation per block; a worker's whole epoch schedule (``schedule``),
computed when its epoch starts, is one pass over the shuffle blocks its positions span
(``electra.data.shard_schedule``), mapping positions only in blocks that straddle two shards.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from electra.data.corpus import ShardRef
from electra.data.mixture import Mixture, ShardSlice, epoch_slices



class Segment(NamedTuple):
    """Rows ``[lo, hi)`` of stream ``stream``'s share of every global batch (one rank's part)."""
    stream: int
    lo: int
    hi: int

    @property
    def rows(self) -> int:
        return self.hi - self.lo


class ShardSchedule(NamedTuple):
    """When a set of segments needs which shards in an epoch: ``order`` holds positions in the
    epoch's shard order sorted by first use, ``first``/``last`` the first and last step using
    each (inclusive)."""
    order: np.ndarray
    first: np.ndarray
    last: np.ndarray


@lru_cache(maxsize=256)
def _block_perm(seed: int, epoch: int, block: int, size: int) -> np.ndarray:
    perm = np.random.default_rng([seed, epoch, block]).permutation(size)
    perm.flags.writeable = False
    return perm


@dataclass(frozen=True)
class StreamPlan:
    """The sample order of one split for one rank (module docstring)."""
    shards: tuple[ShardRef, ...]
    seq_len: int
    global_batch: int
    micro_batch: int
    rank: int = 0
    world_size: int = 1
    seed: int = 0
    shuffle_block: int = 2000
    streams: int = 64
    shuffle: bool = True
    # Several weighted sources (``electra.data.mixture``): ``shards`` holds theirs, source after source.
    mixture: Mixture | None = None
    num_examples: int = field(init=False)

    def __post_init__(self) -> None:
        n = sum(self.mixture.takes) if self.mixture else sum(s.num_examples for s in self.shards)
        object.__setattr__(self, "num_examples", n)
        G, W, m = self.global_batch, self.world_size, self.micro_batch
        if min(G, W, m, self.streams, self.shuffle_block) < 1:
            raise ValueError(f"global batch {G}, world size {W}, micro batch {m}, streams {self.streams} and "
                             f"shuffle block {self.shuffle_block} must all be >= 1")
        if not 0 <= self.rank < W:
            raise ValueError(f"rank {self.rank} outside world of {W}")
        if G % W:
            raise ValueError(f"global batch {G} cannot be split over {W} ranks")
        if (G // W) % m:
            raise ValueError(f"micro batch {m} does not divide the {G // W} examples per rank "
                             f"(global batch {G} on {W} ranks)")

    # ---------------------------------------------------------------- sizes
    @property
    def streams_effective(self) -> int:
        """``C = gcd(global_batch, streams)``: the streams each global batch draws from."""
        return math.gcd(self.global_batch, self.streams)

    @property
    def stream_length(self) -> int:
        return self.num_examples // self.streams_effective

    @property
    def rows_per_stream(self) -> int:
        """``G / C``: the examples one stream gives each global batch."""
        return self.global_batch // self.streams_effective

    @property
    def steps_per_epoch(self) -> int:
        return self.stream_length // self.rows_per_stream

    @property
    def per_rank(self) -> int:
        return self.global_batch // self.world_size

    @property
    def accum(self) -> int:
        """Micro batches per rank per optimizer step."""
        return self.per_rank // self.micro_batch

    @property
    def dropped_per_epoch(self) -> int:
        return self.num_examples - self.steps_per_epoch * self.global_batch

    # ---------------------------------------------------------------- order
    def epoch_slices(self, epoch: int) -> list[ShardSlice]:
        """The epoch's slices before the permutation: one whole slice per shard for one corpus."""
        return epoch_slices(self.shards, self.mixture, seed=self.seed, epoch=epoch)

    def shard_order(self, epoch: int, n: int | None = None) -> np.ndarray:
        """Indices of the epoch's ``n`` slices (default: one per shard) in the epoch's order."""
        n = len(self.shards) if n is None else n
        if not self.shuffle:
            return np.arange(n)
        return np.random.default_rng([self.seed, epoch]).permutation(n)

    def ordered_shards(self, epoch: int) -> tuple[list[ShardSlice], np.ndarray]:
        """The epoch's slices in order and ``bounds`` (``bounds[i]``: the first source position of
        slice ``i``; ``bounds[-1] == N``)."""
        slices = self.epoch_slices(epoch)
        ordered = [slices[i] for i in self.shard_order(epoch, len(slices))]
        return ordered, np.cumsum([0] + [s.num_examples for s in ordered]).astype(np.int64)

    def source_positions(self, epoch: int, positions: np.ndarray) -> np.ndarray:
        """Map shuffled-sequence positions to positions in the concatenated (ordered) shards."""
        positions = np.asarray(positions, np.int64)
        if not self.shuffle or positions.size == 0:
            return positions.copy()
        k = self.shuffle_block
        blocks = positions // k
        steps = np.diff(blocks)
        order = np.argsort(blocks, kind="stable") if (steps < 0).any() else None  # walks come sorted
        if order is not None:
            blocks, positions = blocks[order], positions[order]
            steps = np.diff(blocks)
        edges = [0, *(np.flatnonzero(steps) + 1).tolist(), len(blocks)]
        out = np.empty_like(positions)
        for a, b in zip(edges[:-1], edges[1:]):
            start = int(blocks[a]) * k
            perm = _block_perm(self.seed, epoch, int(blocks[a]), min(k, self.num_examples - start))
            out[a:b] = start + perm[positions[a:b] - start]
        if order is None:
            return out
        unsorted = np.empty_like(out)
        unsorted[order] = out
        return unsorted

    def global_positions(self, step: int) -> np.ndarray:
        """Shuffled-sequence positions of step ``step``'s global batch, in canonical order."""
        return self._positions([Segment(c, 0, self.rows_per_stream) for c in range(self.streams_effective)],
                               np.array([step]))

    # ---------------------------------------------------------------- ranks and workers
    def segments(self, worker: int = 0, num_workers: int = 1) -> tuple[Segment, ...]:
        """This rank's slice of every global batch as stream segments, in canonical order; with
        ``num_workers`` > 1, the part of it that loader worker ``worker`` serves: a contiguous
        group of whole segments, or, when the rank has fewer segments than workers (a piece of
        one stream), a contiguous share of its rows, so that no worker idles (empty only for a
        worker beyond the rank's rows)."""
        g = self.rows_per_stream
        a, b = self.rank * self.per_rank, (self.rank + 1) * self.per_rank
        segs = [Segment(c, max(a, c * g) - c * g, min(b, (c + 1) * g) - c * g)
                for c in range(a // g, (b - 1) // g + 1)]
        num_workers = max(1, num_workers)
        if len(segs) >= num_workers:
            return tuple(segs[worker * len(segs) // num_workers:(worker + 1) * len(segs) // num_workers])
        lo, hi = worker * self.per_rank // num_workers, (worker + 1) * self.per_rank // num_workers
        out, offset = [], 0  # offset: the rank's rows before segment s
        for s in segs:
            x, y = max(lo, offset), min(hi, offset + s.rows)
            if x < y:
                out.append(Segment(s.stream, s.lo + x - offset, s.lo + y - offset))
            offset += s.rows
        return tuple(out)

    def _positions(self, segments, steps: np.ndarray) -> np.ndarray:
        """Positions of ``segments`` at each of ``steps``: step-major, then segment, then row."""
        n, g = self.stream_length, self.rows_per_stream
        per_step = np.concatenate([c * n + np.arange(lo, hi) for c, lo, hi in segments] or [np.zeros(0, np.int64)])
        return (np.asarray(steps, np.int64)[:, None] * g + per_step[None, :]).ravel()

    def step_sources(self, epoch: int, step: int, segments,
                     bounds: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """For the rows of ``segments`` at ``step`` (canonical order): the position in the epoch's
        shard order of each row's shard, and the row's index within that shard (``bounds``: the
        epoch's, from ``ordered_shards``, when the caller has them)."""
        if bounds is None:
            _, bounds = self.ordered_shards(epoch)
        return self._locate(bounds, self.source_positions(epoch, self._positions(segments, np.array([step]))))

    @staticmethod
    def _locate(bounds: np.ndarray, src: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        where = np.searchsorted(bounds, src, side="right") - 1
        return where, src - bounds[where]

    def schedule(self, epoch: int, segments, start: int = 0, stop: int | None = None, *,
                 ordered: tuple[list[ShardSlice], np.ndarray] | None = None) -> ShardSchedule:
        """The shards ``segments`` read at steps ``[start, stop)`` of ``epoch`` and when (exact,
        computed per shuffle block: ``electra.data.shard_schedule``). ``ordered``: the epoch's
        ``ordered_shards``, when the caller has them (computing them is linear in the shards)."""
        from electra.data.shard_schedule import segment_steps

        stop = self.steps_per_epoch if stop is None else min(stop, self.steps_per_epoch)
        ordered, bounds = ordered if ordered is not None else self.ordered_shards(epoch)
        first = np.full(len(ordered), np.iinfo(np.int64).max, np.int64)
        last = np.full(len(ordered), -1, np.int64)
        for seg in segments:
            segment_steps(self, epoch, seg, start, stop, bounds, first, last)
        used = np.flatnonzero(last >= 0)
        order = used[np.lexsort((used, first[used]))]
        return ShardSchedule(order, first[order], last[order])

    def rank_share(self, epoch: int = 0, worker: int = 0, num_workers: int = 1) -> tuple[tuple[ShardRef, ...], int]:
        """The shards (epoch order) this rank's streams, or one of its loader worker's, touch in
        ``epoch``, and their total bytes: what a loader reading each byte once would read."""
        ordered, _ = self.ordered_shards(epoch)
        sched = self.schedule(epoch, self.segments(worker, num_workers))
        shards = tuple(dict.fromkeys(ordered[i].shard for i in sorted(sched.order.tolist())))
        return shards, sum(s.bytes for s in shards)
