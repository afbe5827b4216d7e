"""Streaming the corpus shards to the trainer: the elastic global order, read once per rank.

**The order** (``electra.data.sample_order``): each epoch's examples form a shuffled sequence (a
shard permutation, then a block shuffle) that depends on ``(shard list, seed, epoch)`` only. It
is cut into ``C = gcd(global_batch, data.streams)`` canonical streams, and the global batch of
step ``s`` takes ``G/C`` consecutive examples from each stream. Rank ``r`` of ``W`` takes the
``r``-th contiguous ``G/W`` of that canonical batch and cuts it into micro batches. So the
global batch of every step is a function of the corpus, seed, epoch, global batch, streams and
shuffle block, never of the number of ranks, the micro batch or the loader's workers: a run can
stop on ``W`` ranks and resume on ``W'`` and train on the same batches. Two reasons for streams:
*elasticity* (above) with *locality* (a rank owning ``C/W`` whole streams opens only about
``1/W`` of the shards, where a strided or random split would make every rank read everything),
and *mixing* (each global batch draws from ``C`` regions of the corpus, not from one shuffle
block). Examples left over at the end of an epoch (fewer than ``G + C``) are counted and
logged once.

**Workers.** A rank's ``torch`` DataLoader workers split the rank's stream segments into
contiguous groups (a rank with fewer segments than workers, a piece of one stream, gives each
worker a contiguous share of its rows instead, so none idles); a worker computes its exact
schedule for the epoch (which shards its streams need, from which step to which step), reads
them in that order through one ``ShardCache`` shared by its streams (a shard two of its streams
touch is decoded once), reads ``data.prefetch_shards`` ahead along that schedule and never past
it, and evicts a shard after the last step that uses it. Every worker yields exactly one part
per step (empty when it serves no stream), so the DataLoader's round robin keeps the steps
aligned; the main process concatenates a step's parts in worker order, which is canonical order,
and cuts the micro batches, so their contents do not depend on the number of workers. Each byte
is read about once per rank; a shard on the border between two workers' (or two ranks') regions
is read by both, and workers sharing a piece of one stream, or ranks sharing a stream, all read
its shards. ``data.node_cache`` (``electra.data.node_cache``) makes that one store read per node: the
node's workers read through local copies, each downloaded once and deleted after its last
consumer on the node. Parts carry the bytes and shards their worker read and how many of those
bytes came from the store (workers are processes), summed in ``TrainStream.bytes_read`` and
``store_bytes``.

**Memory bound**, per worker, in decoded shards (compact shards: about 2 bytes per token):
``(2 * S_w - 1) * B + prefetch``. ``S_w`` is the number of stream segments the worker serves (its
rank's ``C/W`` streams, or the pieces of cut streams, divided among the workers); ``B`` is the
number of shards the source range of one step's rows of one stream can span: that of two
consecutive shuffle blocks when ``G/C <= data.shuffle_buffer`` (a block's examples come from the
block's own range; without shuffle, a block is one example). A shard is decoded at its first use
and evicted after its last, so at any step a stream holds the ``B`` shards around its current
blocks, and each pair of neighbouring streams at most ``B`` more: the shards of the block on
their border, which the second stream needs at its start and the first only at its end, kept
rather than read twice. The DataLoader also queues a few steps of collated rows per worker. The
price of more streams (or fewer workers sharing them) is therefore memory, linear in ``S_w``.

**Position** = ``(epoch, optimizer steps completed in the epoch)``: global, so it means the same
on any number of ranks. It is saved in checkpoints; a restarted run rebuilds the stream there and
sees exactly the global batches the uninterrupted run would have seen. The old per-rank format
``{"epoch", "batch"}`` cannot be mapped onto this order and is refused by ``from_dict``.

Integrity (``electra.data.corpus``): before training, rank 0 compares one listing per shard folder
(shared by both splits) with the manifest's names and sizes and every rank takes its answer
(``electra.run.plan``); a missing or truncated shard raises :class:`CorruptShardError`
naming it on every rank, or with ``data.skip_corrupt`` it is left out of the plan on every rank,
counted and logged. Content is verified while it streams (sha256, byte and example
counts against the manifest, in the same pass as parsing); a shard altered after the manifest
was written therefore surfaces mid-epoch, and there it is always an error, never a skip, because
a skip on one rank would desynchronise the ranks.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch

from electra.data.corpus import (CorpusInfo, CorpusMismatchError, CorruptShardError, ShardCache, ShardRef,
                            check_shards, open_corpus, read_shard)
from electra.data.node_cache import NodeCache
from electra.data.node_cache_space import LOADER_QUEUE
from electra.data.sample_order import Segment, ShardSchedule, StreamPlan
from pipelines import schema

# electra.data.stream is the trainer's one data API; the corpus and order names are re-exported from here.
__all__ = ["Batch", "CorpusInfo", "CorpusMismatchError", "CorruptShardError", "DataPosition", "EpochStream",
           "Row", "Segment", "ShardRef", "ShardSchedule", "StreamPlan", "TrainStream", "check_shards", "collate",
           "eval_batches", "open_corpus", "read_shard"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DataPosition:
    """Optimizer steps completed in ``epoch``: ``step * global_batch`` examples consumed globally."""
    epoch: int = 0
    step: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "step": self.step}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DataPosition:
        if "batch" in d and "step" not in d:
            raise ValueError(f"data position {d} is in the old per-rank format (micro batches one rank had "
                             "consumed); it cannot be mapped onto the elastic global order: resume from a "
                             "checkpoint written since, or start a new run directory")
        if set(d) != {"epoch", "step"} or not all(isinstance(d[k], int) and d[k] >= 0 for k in d):
            raise ValueError(f"data position {d}: expected {{'epoch': int >= 0, 'step': int >= 0}}")
        return cls(d["epoch"], d["step"])


@dataclass
class Batch:
    input_ids: torch.Tensor  # [m, T] int64, padded with 0
    segment_ids: torch.Tensor  # [m, T] int64
    # (document uid, ordinal in the document) per row; with several corpora (corpus, uid, ordinal)
    keys: list[tuple[int, ...]]
    position: DataPosition  # the start of the optimizer step this micro batch belongs to
    micro: int  # index of this micro batch within the step, 0 .. accum-1
    sources: torch.Tensor | None = None  # [m] int64: each row's corpus (its position in --data)
    generations: list[str] | None = None  # each row's corpus generation (electra.data.corpus_growth)

    @property
    def num_tokens(self) -> int:
        return int((self.input_ids != 0).sum())


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


class _Part(NamedTuple):
    """One worker's rows of one step (canonical order within the worker's group)."""
    step: int
    worker: int
    input_ids: torch.Tensor
    segment_ids: torch.Tensor
    keys: list[tuple[int, ...]]
    sources: torch.Tensor  # [rows] int64: each row's corpus (its position in --data)
    generations: list[str]  # each row's corpus generation
    bytes_read: int  # shard bytes the worker read since its previous part
    shards_read: tuple[str, ...]  # locations of those shards
    store_bytes: int  # of those bytes, the ones read from the store (the rest: the node cache's copies)


class EpochStream(torch.utils.data.IterableDataset):
    """One rank's steps ``[start, stop)`` of one epoch as per-worker parts (module docstring)."""

    def __init__(self, plan: StreamPlan, epoch: int, start: int = 0, stop: int | None = None, *,
                 prefetch: int = 2, node: tuple[NodeCache, np.ndarray] | None = None):
        self.plan, self.epoch, self.start, self.prefetch = plan, epoch, start, prefetch
        self.stop = plan.steps_per_epoch if stop is None else min(stop, plan.steps_per_epoch)
        self.node = node  # the node cache and its consumer counts for these steps (electra.data.node_cache)

    def __iter__(self) -> Iterator[_Part]:
        info = torch.utils.data.get_worker_info()
        return self.parts(*((info.id, info.num_workers) if info else (0, 1)))

    def parts(self, worker: int, num_workers: int) -> Iterator[_Part]:
        plan, epoch = self.plan, self.epoch
        segments = plan.segments(worker, num_workers)
        ordered, bounds = plan.ordered_shards(epoch)  # slices (electra.data.mixture)
        sched = plan.schedule(epoch, segments, self.start, self.stop, ordered=(ordered, bounds))
        evict_at: dict[int, list[int]] = {}
        for index, last in zip(sched.order.tolist(), sched.last.tolist()):
            evict_at.setdefault(last, []).append(index)
        reported_bytes = reported_reads = reported_store = 0
        mixed = plan.mixture is not None and plan.mixture.num_sources > 1
        shards = [s.shard for s in ordered]
        source = None if self.node is None else self.node[0].consumer(shards, self.node[1], epoch)
        with ShardCache(shards, prefetch=self.prefetch, schedule=sched.order, source=source) as cache:
            for step in range(self.start, self.stop):
                cache.read_ahead(int(np.searchsorted(sched.first, step, side="right")) + self.prefetch)
                where, index = plan.step_sources(epoch, step, segments, bounds)
                where = where.tolist()
                rows = [Row(ordered[w].uri, cache.get(w), ordered[w].start + i) for w, i in zip(where, index.tolist())]
                ids, seg = collate(rows, seq_len=plan.seq_len)
                sources = [ordered[w].source for w in where]
                generations = [ordered[w].shard.generation for w in where]
                keys = [(int(r.examples.uid[r.index]), int(r.examples.ordinal[r.index])) for r in rows]
                if mixed:  # the sample log's keys name the corpus first (its position in --data)
                    keys = [(src, *key) for src, key in zip(sources, keys)]
                cache.evict(evict_at.pop(step, ()))
                done, reads = cache.read_so_far()
                stored = done if source is None else source.downloaded_so_far()
                new = tuple(ordered[i].uri for i in reads[reported_reads:])
                yield _Part(step, worker, ids, seg, keys, torch.tensor(sources, dtype=torch.int64), generations,
                            done - reported_bytes, new, stored - reported_store)
                reported_bytes, reported_reads, reported_store = done, len(reads), stored


def loader_workers(setting: int | str, *, cuda: bool | None = None) -> int:
    """DataLoader worker processes for ``data.num_workers``: a number as given; ``"auto"``: 2 on
    CUDA, where the loader overlaps the GPU's work, and 0 on a CPU. There the step's threads use
    every core, and worker processes only take cycles from them (more than their own work: the
    step's OpenMP threads wait at each barrier for the one a worker displaced), while the loader's
    work is a fraction of a percent of a step; in the training process the shards are still read
    ahead by ``data.prefetch_shards`` threads, which hide a store's latency."""
    if setting != "auto":
        return int(setting)
    return 2 if (torch.cuda.is_available() if cuda is None else cuda) else 0


def _identity(x):
    return x


class TrainStream:
    """Endless iterator of a rank's micro batches across epochs, from ``start`` on (module
    docstring). ``position``: after the last micro batch of a step, the next step (the end of an
    epoch is ``(epoch + 1, 0)``). ``bytes_read``: shard bytes this rank's loader has read, over all
    its workers; ``store_bytes``: how many of them came from the store (the rest from the node
    cache's copies); ``shards_read``: worker -> locations it read, for the current epoch.
    ``node_cache``: ``data.node_cache`` (``electra.data.node_cache``; None: every read from the store).
    ``plan_for``: called at each epoch's start with the epoch, returns its plan (a corpus that
    grows: ``electra.data.corpus_growth``; on every rank alike, as it may be collective); None: ``plan``
    for every epoch."""

    def __init__(self, plan: StreamPlan, *, num_workers: int = 2, prefetch: int = 2,
                 start: DataPosition = DataPosition(), node_cache: str | None = None,
                 plan_for: Callable[[int], StreamPlan] | None = None):
        if plan.steps_per_epoch < 1:
            raise ValueError(f"{plan.num_examples} examples cannot fill one global batch of {plan.global_batch}: "
                             f"{plan.streams_effective} streams of {plan.stream_length} examples, "
                             f"{plan.rows_per_stream} per stream per step")
        self.plan, self.num_workers, self.prefetch = plan, num_workers, prefetch
        self.plan_for = plan_for
        self.position = start
        self.bytes_read = self.store_bytes = 0
        self.node = NodeCache.open(node_cache, plan, num_workers=num_workers, prefetch=prefetch)
        self.shards_read: dict[int, list[str]] = {}
        if plan.dropped_per_epoch and plan.rank == 0:
            log.info("%d of %d examples per epoch left over: %d steps of global batch %d from %d streams",
                     plan.dropped_per_epoch, plan.num_examples, plan.steps_per_epoch, plan.global_batch,
                     plan.streams_effective)

    def loader(self, epoch: int, start_step: int = 0) -> Iterator[Batch]:
        """This rank's micro batches of steps ``[start_step, steps_per_epoch)`` of ``epoch``."""
        node = None
        if self.node is not None:
            uses = self.node.uses(self.plan, epoch, self.num_workers, start_step, self.plan.steps_per_epoch,
                                  self.plan.ordered_shards(epoch))
            node = (self.node, uses)
        dataset = EpochStream(self.plan, epoch, start_step, prefetch=self.prefetch, node=node)
        if not self.num_workers:
            parts = dataset.parts(0, 1)
        else:
            # An explicit generator: otherwise creating the iterator draws from the global torch RNG,
            # and a resumed run (which creates it at another step) would diverge from the original.
            parts = iter(torch.utils.data.DataLoader(
                dataset, batch_size=None, num_workers=self.num_workers, collate_fn=_identity,
                generator=torch.Generator().manual_seed(self.plan.seed), prefetch_factor=LOADER_QUEUE,
                persistent_workers=False))
        self.shards_read = {}
        yield from _micro_batches(self.plan, epoch, parts, max(1, self.num_workers), start_step, dataset.stop,
                                  self._account)

    def _account(self, part: _Part) -> None:
        self.bytes_read += part.bytes_read
        self.store_bytes += part.store_bytes
        self.shards_read.setdefault(part.worker, []).extend(part.shards_read)

    def __iter__(self) -> Iterator[Batch]:
        while True:
            epoch, step = self.position.epoch, self.position.step
            if self.plan_for is not None:  # the epoch's shards, decided as it starts (or resumes)
                self.plan = self.plan_for(epoch)
            steps, accum = self.plan.steps_per_epoch, self.plan.accum
            if step >= steps:  # a position past this corpus's epoch: the next epoch
                self.position = DataPosition(epoch + 1, 0)
                continue
            for batch in self.loader(epoch, step):
                if batch.micro == accum - 1:
                    nxt = batch.position.step + 1
                    self.position = DataPosition(epoch, nxt) if nxt < steps else DataPosition(epoch + 1, 0)
                yield batch


def _micro_batches(plan: StreamPlan, epoch: int, parts: Iterator[_Part], num_parts: int, start: int, stop: int,
                   account) -> Iterator[Batch]:
    """Reassemble each step's parts (one per worker, in worker = canonical order) into micro batches."""
    m = plan.micro_batch
    for step in range(start, stop):
        got = [next(parts) for _ in range(num_parts)]
        if [(p.step, p.worker) for p in got] != [(step, w) for w in range(num_parts)]:
            raise RuntimeError(f"loader parts out of order at step {step}: {[(p.step, p.worker) for p in got]}")
        for p in got:
            account(p)
        ids = torch.cat([p.input_ids for p in got])
        seg = torch.cat([p.segment_ids for p in got])
        sources = torch.cat([p.sources for p in got])
        keys = [k for p in got for k in p.keys]
        generations = [g for p in got for g in p.generations]
        for k in range(plan.accum):
            part = slice(k * m, (k + 1) * m)
            yield Batch(ids[part], seg[part], keys[part], DataPosition(epoch, step), k, sources[part],
                        generations[part])


def eval_batches(plan: StreamPlan, num_steps: int, *, prefetch: int = 2) -> Iterator[Batch]:
    """This rank's micro batches of the first ``num_steps`` global batches (at most an epoch) of
    ``plan``, which must be unshuffled: the same examples at every evaluation, and the same set
    for any number of ranks. Read in the calling process."""
    if plan.shuffle:
        raise ValueError("eval_batches needs an unshuffled plan (shuffle=False)")
    dataset = EpochStream(plan, 0, 0, num_steps, prefetch=prefetch)
    yield from _micro_batches(plan, 0, dataset.parts(0, 1), 1, 0, dataset.stop, lambda part: None)
