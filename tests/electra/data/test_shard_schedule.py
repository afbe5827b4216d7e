"""electra.data.shard_schedule: the per-block schedule equals the per-example walk it replaces, and
maps positions through the permutation only in blocks that straddle two shards."""
from __future__ import annotations

import numpy as np
import pytest

from electra.data import shard_schedule
from electra.data.corpus import ShardRef
from electra.data.mixture import Mixture
from electra.data.sample_order import StreamPlan


def walk(plan: StreamPlan, epoch: int, segments, start: int, stop: int):
    """The schedule from every position, one at a time (independent of the module under test)."""
    ordered, bounds = plan.ordered_shards(epoch)
    first, last = {}, {}
    n, g = plan.stream_length, plan.rows_per_stream
    for seg in segments:
        for step in range(start, min(stop, plan.steps_per_epoch)):
            pos = np.arange(seg.stream * n + step * g + seg.lo, seg.stream * n + step * g + seg.hi)
            for j in (np.searchsorted(bounds, plan.source_positions(epoch, pos), side="right") - 1).tolist():
                first[j] = min(first.get(j, step), step)
                last[j] = max(last.get(j, step), step)
    order = sorted(first, key=lambda j: (first[j], j))
    return order, [first[j] for j in order], [last[j] for j in order]


def refs(sizes):
    return tuple(ShardRef(f"mem://s{i}", int(n), 100 * int(n), f"{i:064x}") for i, n in enumerate(sizes))


CASES = [  # (shard sizes, global batch, world, streams, shuffle block, workers, shuffle, mixture)
    ((40,) * 30, 16, 2, 4, 8, 1, True, None),
    ((37, 5, 90, 1, 64, 12, 33) * 4, 16, 4, 2, 16, 2, True, None),   # rows split across workers
    ((300, 7, 7, 200, 13) * 3, 32, 8, 8, 50, 2, True, None),           # strided segments (4 rows of 4)
    ((25,) * 20, 8, 1, 8, 3, 3, True, None),                           # blocks smaller than a step's rows
    ((19, 61, 44) * 5, 16, 2, 4, 10, 2, False, None),                  # no shuffle: the identity
    ((30,) * 6 + (50,) * 4, 16, 2, 4, 12, 2, True, Mixture((6, 4), (150, 260))),  # slices of two corpora
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("epoch", [0, 1])
def test_block_schedule_equals_the_per_example_walk(case, epoch):
    sizes, G, W, streams, block, workers, shuffle, mixture = case
    for rank in range(W):
        plan = StreamPlan(refs(sizes), 16, G, G // W, rank=rank, world_size=W, seed=3, shuffle_block=block,
                          streams=streams, shuffle=shuffle, mixture=mixture)
        steps = plan.steps_per_epoch
        for worker in range(workers):
            segments = plan.segments(worker, workers)
            for start, stop in ((0, steps), (1, steps - 1), (steps // 2, steps // 2 + 1), (3, 3)):
                sched = plan.schedule(epoch, segments, start, stop)
                assert (sched.order.tolist(), sched.first.tolist(), sched.last.tolist()) == \
                    walk(plan, epoch, segments, start, stop), (rank, worker, start, stop)


def test_only_blocks_that_straddle_a_shard_boundary_are_permuted(monkeypatch):
    """A corpus of 64 shards of 10,007 examples, blocks of 100: a whole epoch's schedule maps at
    most one block of positions per shard boundary, not the epoch's 640,448."""
    plan = StreamPlan(refs((10_007,) * 64), 16, 64, 64, seed=1, shuffle_block=100, streams=8)
    mapped = []
    original = StreamPlan.source_positions
    monkeypatch.setattr(StreamPlan, "source_positions",
                        lambda self, epoch, pos: mapped.append(len(pos)) or original(self, epoch, pos))
    sched = plan.schedule(0, plan.segments())
    assert sched.order.size == 64 and sched.first.min() == 0 and sched.last.max() == plan.steps_per_epoch - 1
    # 63 boundaries, each inside one block of 100 positions at most (one step's rows may cross a block's edge)
    assert 0 < sum(mapped) <= 63 * (100 + plan.rows_per_stream)


def test_segment_steps_counts_the_positions_it_permutes():
    plan = StreamPlan(refs((50,) * 8), 16, 8, 8, seed=0, shuffle_block=10, streams=2)
    ordered, bounds = plan.ordered_shards(0)
    first = np.full(len(ordered), np.iinfo(np.int64).max, np.int64)
    last = np.full(len(ordered), -1, np.int64)
    seg = plan.segments()[0]
    permuted = shard_schedule.segment_steps(plan, 0, seg, 0, plan.steps_per_epoch, bounds, first, last)
    # stream 0 holds positions [0, 200): shards end at 50, 100, 150 (blocks 4, 9, 14 straddle none:
    # a boundary on a block's edge leaves every block inside one shard)
    assert permuted == 0
    assert sorted(np.flatnonzero(last >= 0).tolist()) == sorted(
        np.searchsorted(bounds, [0, 50, 100, 150], side="right").__sub__(1).tolist())
