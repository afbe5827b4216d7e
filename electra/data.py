"""Streaming the corpus shards to the trainer: rank/worker split, deterministic shuffle, resume.

The algorithm, for one split and one epoch:

1. **The epoch stream** is a function of ``(seed, epoch)`` only. Shards (manifest order) are
   permuted with ``rng(seed, epoch)`` and concatenated; the resulting sequence of ``N`` examples
   is cut into blocks of ``data.shuffle_buffer`` positions and each block is permuted with
   ``rng(seed, epoch, block)``. This is a block shuffle rather than WebDataset's reservoir
   buffer because a reservoir's output depends on who reads which shard; a block shuffle gives
   the same global order whatever the number of ranks or workers, and any position in it can be
   computed directly, which is what exact resume needs. Trade-off: mixing is limited to the
   shard permutation plus one block; a block should span several shards' worth of examples for
   a small corpus, and holds a block's shards in memory per worker (compact shards: about
   2 bytes per token decoded).
2. **Ranks** take equal contiguous spans of the stream: rank ``r`` reads positions
   ``[r*n, r*n + b*m)`` with ``n = N // world``, ``m`` the micro batch and ``b = n // m`` the
   micro batches per rank per epoch. Every rank therefore runs the same number of steps however
   the shards divide, no example is read twice in an epoch, and the ``N - world*b*m`` examples
   left over (fewer than ``world*(m+1)``) are counted and logged, not silently lost. Contiguous
   spans mean a rank opens only about ``1/world`` of the shards.
3. **Workers** of a rank's DataLoader produce whole micro batches round robin: worker ``w`` of
   ``W`` builds batches ``k0+w, k0+w+W, ...`` and the DataLoader interleaves them back in order,
   so the batch sequence is identical for any ``W`` (each worker reads the rank's shards and
   collates only its own batches; reading is cheap next to a training step). Each worker reads
   the next ``data.prefetch_shards`` shards of the epoch's order ahead in background threads,
   so a remote store's latency hides behind the current block; read-ahead changes when bytes
   arrive, never which examples a batch holds.
4. **Position** = ``(epoch, micro batches consumed in the epoch)``. It is saved in checkpoints;
   a restarted run rebuilds the loader at that position and sees exactly the batches the
   uninterrupted run would have seen.

Integrity (``electra.corpus``): before training, one listing per shard folder is compared with
the manifest's names and sizes on every rank alike; a missing or truncated shard raises
:class:`CorruptShardError` naming it, or with ``data.skip_corrupt`` it is left out of the plan on
every rank, counted and logged. Content is verified while it streams (sha256, byte and example
counts against the manifest, in the same pass as parsing); a shard altered after the manifest
was written therefore surfaces mid-epoch, and there it is always an error, never a skip, because
a skip on one rank would desynchronise the ranks.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import torch

from electra.corpus import (CorpusInfo, CorpusMismatchError, CorruptShardError, ShardCache, ShardRef,
                            check_shards, open_corpus, read_shard)
from pipelines import schema

# electra.data is the trainer's one data API; the corpus names are re-exported from here.
__all__ = ["Batch", "CorpusInfo", "CorpusMismatchError", "CorruptShardError", "DataPosition", "EpochStream",
           "Row", "ShardRef", "StreamPlan", "TrainStream", "check_shards", "collate", "eval_batches",
           "open_corpus", "read_shard"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DataPosition:
    epoch: int = 0
    batch: int = 0  # micro batches this rank has consumed in the epoch

    def to_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "batch": self.batch}


@dataclass
class Batch:
    input_ids: torch.Tensor  # [B, T] int64, padded with 0
    segment_ids: torch.Tensor  # [B, T] int64
    keys: list[str]  # example keys, {uid:016x}-{ordinal:05d}
    position: DataPosition  # of this batch (its index in the epoch)

    @property
    def num_tokens(self) -> int:
        return int((self.input_ids != 0).sum())


@dataclass(frozen=True)
class StreamPlan:
    """Which examples this rank reads in which order: see the module docstring."""
    shards: tuple[ShardRef, ...]
    seq_len: int
    micro_batch: int
    rank: int = 0
    world_size: int = 1
    seed: int = 0
    shuffle_block: int = 2000
    shuffle: bool = True
    num_examples: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "num_examples", sum(s.num_examples for s in self.shards))
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} outside world of {self.world_size}")

    @property
    def batches_per_epoch(self) -> int:
        return (self.num_examples // self.world_size) // self.micro_batch

    @property
    def dropped_per_epoch(self) -> int:
        return self.num_examples - self.world_size * self.batches_per_epoch * self.micro_batch

    def shard_order(self, epoch: int) -> np.ndarray:
        n = len(self.shards)
        if not self.shuffle:
            return np.arange(n)
        return np.random.default_rng([self.seed, epoch]).permutation(n)

    def source_positions(self, epoch: int, positions: np.ndarray) -> np.ndarray:
        """Map shuffled stream positions to positions in the concatenated shard stream."""
        if not self.shuffle:
            return positions
        k = self.shuffle_block
        out = np.empty_like(positions)
        for block in np.unique(positions // k):
            start = block * k
            size = min(k, self.num_examples - start)
            perm = np.random.default_rng([self.seed, epoch, int(block)]).permutation(size)
            sel = positions // k == block
            out[sel] = start + perm[positions[sel] - start]
        return out

    def source_span(self, start: int, stop: int) -> tuple[int, int]:
        """``[lo, hi)`` of the concatenated-stream positions this rank's batches ``[start, stop)``
        can touch in any epoch: their stream span widened to whole shuffle blocks."""
        span = self.num_examples // self.world_size
        lo = self.rank * span + start * self.micro_batch
        hi = self.rank * span + max(start, stop) * self.micro_batch
        if self.shuffle and hi > lo:
            k = self.shuffle_block
            lo, hi = lo // k * k, min(self.num_examples, -(-hi // k) * k)
        return lo, hi

    def batch_positions(self, epoch: int, batch: int) -> np.ndarray:
        """Source positions (concatenated-stream order) of one of this rank's micro batches."""
        span = self.num_examples // self.world_size
        first = self.rank * span + batch * self.micro_batch
        return self.source_positions(epoch, np.arange(first, first + self.micro_batch))


class Row(NamedTuple):
    """One example of a batch: row ``index`` of a decoded shard."""
    shard: str  # the shard's location, for error messages
    examples: schema.Examples
    index: int


def collate(rows: list[Row], *, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad to ``seq_len`` with 0 (fixed shapes: no recompiles, bitwise-stable steps)."""
    ids = np.zeros((len(rows), seq_len), np.int64)
    seg = np.zeros((len(rows), seq_len), np.int64)
    for r, (shard, ex, i) in enumerate(rows):
        n = int(ex.lengths[i])
        if n > seq_len:
            raise CorruptShardError(f"{shard}: example {ex.key(i)} has {n} tokens, more than seq_len {seq_len}")
        ids[r, :n] = ex.ids(i)
        seg[r, :n] = ex.segments(i)
    return torch.from_numpy(ids), torch.from_numpy(seg)


class EpochStream(torch.utils.data.IterableDataset):
    """One rank's micro batches of one epoch from ``start`` on; worker-split as in the docstring."""

    def __init__(self, plan: StreamPlan, epoch: int, start: int = 0, stop: int | None = None, *,
                 prefetch: int = 2):
        self.plan, self.epoch, self.start, self.prefetch = plan, epoch, start, prefetch
        self.stop = plan.batches_per_epoch if stop is None else min(stop, plan.batches_per_epoch)

    def __iter__(self) -> Iterator[Batch]:
        info = torch.utils.data.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info else (0, 1)
        ordered = [self.plan.shards[i] for i in self.plan.shard_order(self.epoch)]
        bounds = np.cumsum([0] + [s.num_examples for s in ordered])
        lo, hi = self.plan.source_span(self.start, self.stop)
        last = int(np.searchsorted(bounds, hi - 1, side="right") - 1) if hi > lo else -1
        block = self.plan.shuffle_block if self.plan.shuffle else self.plan.micro_batch
        with ShardCache(ordered, prefetch=self.prefetch, last=last) as cache:
            for batch in range(self.start + wid, self.stop, nw):
                src = self.plan.batch_positions(self.epoch, batch)
                where = np.searchsorted(bounds, src, side="right") - 1
                block_start = (src.min() // block) * block
                cache.evict_before(int(np.searchsorted(bounds, block_start, side="right") - 1))
                shards = {int(si): cache.get(int(si)) for si in np.unique(where)}  # in epoch order
                rows = [Row(ordered[si].uri, shards[si], int(pos - bounds[si])) for pos, si in zip(src, where)]
                ids, seg = collate(rows, seq_len=self.plan.seq_len)
                yield Batch(ids, seg, [r.examples.key(r.index) for r in rows], DataPosition(self.epoch, batch))


def _identity(x):
    return x


class TrainStream:
    """Endless iterator of a rank's micro batches across epochs, resumable at ``position``."""

    def __init__(self, plan: StreamPlan, *, num_workers: int = 2, prefetch: int = 2,
                 start: DataPosition = DataPosition()):
        if plan.batches_per_epoch < 1:
            raise ValueError(f"{plan.num_examples} examples cannot fill one micro batch of {plan.micro_batch} "
                             f"on each of {plan.world_size} ranks")
        self.plan, self.num_workers, self.prefetch, self.position = plan, num_workers, prefetch, start
        if plan.dropped_per_epoch:
            log.info("rank %d: %d examples per epoch left over (equal steps on %d ranks)",
                     plan.rank, plan.dropped_per_epoch, plan.world_size)

    def loader(self, epoch: int, start: int) -> torch.utils.data.DataLoader:
        # An explicit generator: otherwise creating the iterator draws from the global torch RNG,
        # and a resumed run (which creates it at another step) would diverge from the original.
        return torch.utils.data.DataLoader(
            EpochStream(self.plan, epoch, start, prefetch=self.prefetch), batch_size=None, num_workers=self.num_workers,
            collate_fn=_identity, generator=torch.Generator().manual_seed(self.plan.seed),
            prefetch_factor=4 if self.num_workers else None, persistent_workers=False)

    def __iter__(self) -> Iterator[Batch]:
        while True:
            epoch = self.position.epoch
            for batch in self.loader(epoch, self.position.batch):
                nxt = batch.position.batch + 1
                # canonical: the end of an epoch is the start of the next one
                self.position = (DataPosition(epoch, nxt) if nxt < self.plan.batches_per_epoch
                                 else DataPosition(epoch + 1, 0))
                yield batch
            self.position = DataPosition(max(self.position.epoch, epoch + 1), 0)


def eval_batches(plan: StreamPlan, num_batches: int, *, prefetch: int = 2) -> Iterator[Batch]:
    """The first ``num_batches`` of this rank's validation span: the same examples at every eval."""
    yield from EpochStream(plan, epoch=0, start=0, stop=num_batches, prefetch=prefetch)
