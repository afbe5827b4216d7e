"""Training start at the shape of a real cluster, simulated: per corpus size and rank count, what
each rank reads from the store at start-up and what the node cache's count pass costs it at every
epoch start (part 4 of ``benchmarks/train/start.py``). No I/O, nothing written.

A corpus of ``size`` bytes is ``size / SHARD_BYTES`` train shards of ``SHARD_BYTES`` (the
builder's shard size class) holding ``SHARD_BYTES / EXAMPLE_BYTES`` examples each (seq_len 512
at about 2 bytes per token); the trainer's geometry: global batch 2,048, 64 streams, shuffle block
2,000, 2 loader workers per rank, ``per_node`` ranks a node.

* **Start-up bytes per rank**: *before* (835e044), the manifest every rank read
  (``open_corpus``), serialised as ``Manifest.save`` writes it (JSON, indent 2) with one entry per
  shard, plus the tokenizer; one GET each. *After* (``electra.run.shared_plan``), rank 0 alone reads
  them (and lists the shard folder: one LIST, its answer not counted here) and broadcasts its
  plan; the other ranks read nothing of the corpus from the store. The broadcast's bytes per rank
  are the pickled plan: the manifest's shard entries and the shard check's refs, pickled for
  real, plus ``PLAN_HEAD_BYTES`` for the rest; they come over the ranks' network, not the store.
* **Count pass per rank** (``NodeCache.uses``: one schedule per (rank, worker) of rank 0's node
  over the whole epoch): *before*, the per-example walk the schedule used to make
  (``walk_schedule``, the previous code kept here); *after*, the per-block schedule
  (``electra.data.shard_schedule``). Both include ``ordered_shards`` (computed once per pass). Where
  the epoch is longer than ``walk_steps`` steps the walk is timed on its first ``walk_steps`` and
  ``walk_steps / 2`` steps and extended linearly to the epoch's steps (its cost is a fixed part
  plus one linear in the positions walked): such figures are marked *derived*.
"""
from __future__ import annotations

import dataclasses
import json
import time

import numpy as np

SHARD_BYTES = 200 * 10**6
EXAMPLE_BYTES = 1000
TOKENIZER_BYTES = 700_000  # a 30k WordPiece tokenizer.json
# The pickled plan less its per-shard part (config, geometry, the manifest's head): the test
# corpus's plans in start.py's part 1 (4 and 64 shards) less their per-shard slope, rounded up.
PLAN_HEAD_BYTES = 4500
SIZES = {"1 GB": 10**9, "100 GB": 10**11, "1 TB": 10**12, "10 TB": 10**13}


def walk_schedule(plan, epoch: int, segments, start: int, stop: int, ordered):
    """The previous ``StreamPlan.schedule``: every position mapped, 65,536 at a time."""
    from electra.data.sample_order import ShardSchedule

    stop = min(stop, plan.steps_per_epoch)
    ordered, bounds = ordered
    first = np.full(len(ordered), np.iinfo(np.int64).max, np.int64)
    last = np.full(len(ordered), -1, np.int64)
    for seg in segments:
        chunk = max(1, (1 << 16) // seg.rows)
        for s0 in range(start, stop, chunk):
            steps = np.arange(s0, min(stop, s0 + chunk))
            where, _ = plan._locate(bounds, plan.source_positions(epoch, plan._positions([seg], steps)))
            step_of = np.repeat(steps, seg.rows)
            np.minimum.at(first, where, step_of)
            np.maximum.at(last, where, step_of)
    used = np.flatnonzero(last >= 0)
    order = used[np.lexsort((used, first[used]))]
    return ShardSchedule(order, first[order], last[order])


def consumers(plan, ranks, workers: int):
    for rank in ranks:
        peer = dataclasses.replace(plan, rank=rank)
        for worker in range(workers):
            segments = peer.segments(worker, workers)
            if segments:
                yield peer, segments


def count_pass(plan, ranks, workers: int, stop: int, *, walk: bool) -> tuple[float, np.ndarray]:
    """Seconds of one count pass over steps ``[0, stop)`` (the node's consumers), and its counts."""
    t0 = time.perf_counter()
    ordered = plan.ordered_shards(0)
    counts = np.zeros(len(ordered[0]), np.int64)
    for peer, segments in consumers(plan, ranks, workers):
        sched = (walk_schedule(peer, 0, segments, 0, stop, ordered) if walk
                 else peer.schedule(0, segments, 0, stop, ordered=ordered))
        counts[sched.order] += 1
    return time.perf_counter() - t0, counts


def manifest_bytes(shards: int) -> int:
    """``manifest.json``'s size with ``shards`` entries (the per-shard part serialised for real)."""
    entry = {"bytes": SHARD_BYTES, "num_examples": SHARD_BYTES // EXAMPLE_BYTES, "num_tokens": 10**8,
             "path": "shards/0123456789abcdef/train-000000.tar", "sha256": "f" * 64, "split": "train"}
    body = json.dumps({"shards": [dict(entry, path=f"shards/0123456789abcdef/train-{i:06d}.tar")
                                  for i in range(shards)]}, indent=2, sort_keys=True)
    return len(body) + 4000  # the head: seq_len, tokenizer, splits, stats, config


def broadcast_bytes(shards: int) -> int:
    """The pickled plan rank 0 broadcasts: its manifest's ``shards`` entries and the shard check's
    refs (the per-shard part, pickled for real), plus ``PLAN_HEAD_BYTES``."""
    import pickle

    from electra.data.corpus import ShardRef
    from pipelines import schema

    paths = [f"shards/0123456789abcdef/train-{i:06d}.tar" for i in range(shards)]
    infos = [schema.ShardInfo(p, "train", SHARD_BYTES // EXAMPLE_BYTES, 10**8, SHARD_BYTES, f"{i:064x}")
             for i, p in enumerate(paths)]
    refs = tuple(ShardRef(f"s3://corpus/{p}", SHARD_BYTES // EXAMPLE_BYTES, SHARD_BYTES, f"{i:064x}")
                 for i, p in enumerate(paths))
    return len(pickle.dumps((infos, refs))) + PLAN_HEAD_BYTES


def plan_for(size: int, world: int):
    from electra.data.corpus import ShardRef
    from electra.data.sample_order import StreamPlan

    shards = max(1, size // SHARD_BYTES)
    per_shard = min(size, SHARD_BYTES) // EXAMPLE_BYTES
    refs = tuple(ShardRef(f"s3://corpus/shards/g/train-{i:06d}.tar", per_shard, per_shard * EXAMPLE_BYTES,
                          f"{i:064x}") for i in range(shards))
    return StreamPlan(refs, 512, 2048, 2048 // world, rank=0, world_size=world, seed=0, shuffle_block=2000,
                      streams=64)


def time_passes(plan, ranks, workers: int, walk_steps: int) -> tuple[float, float, int]:
    """The count pass before and after (seconds; before derived past ``walk_steps``) and the steps walked."""
    steps = plan.steps_per_epoch
    after_s, counts = count_pass(plan, ranks, workers, steps, walk=False)
    capped = min(steps, walk_steps)
    walk_s, walk_counts = count_pass(plan, ranks, workers, capped, walk=True)
    before_s = walk_s
    if capped == steps:  # the whole epoch walked: the counts must agree
        assert np.array_equal(walk_counts, counts)
    else:  # the same counts over the steps both made; the cost per step from a second, shorter walk
        assert np.array_equal(walk_counts, count_pass(plan, ranks, workers, capped, walk=False)[1])
        half_s, _ = count_pass(plan, ranks, workers, capped // 2, walk=True)
        per_step = max(walk_s - half_s, 0.0) / (capped - capped // 2)
        before_s = walk_s + per_step * (steps - capped)
    return before_s, after_s, capped


def measure(sizes: dict[str, int], worlds: list[int], *, per_node: int = 8, workers: int = 2,
            walk_steps: int = 4000, passes: bool = True) -> list[dict]:
    """Per size and world size, the start-up bytes and (``passes``) the count pass timed."""
    rows = []
    for label, size in sizes.items():
        for world in worlds:
            plan = plan_for(size, world)
            ranks = range(min(per_node, world))
            steps = plan.steps_per_epoch
            before_s, after_s, capped = (time_passes(plan, ranks, workers, walk_steps) if passes
                                         else (float("nan"), float("nan"), 0))
            man = manifest_bytes(len(plan.shards))
            rows.append({"corpus": label, "bytes": size, "shards": len(plan.shards), "examples": plan.num_examples,
                         "world": world, "nodes": -(-world // per_node), "steps": steps,
                         "startup_get_per_rank": 2, "startup_bytes_per_rank": man + TOKENIZER_BYTES,
                         "manifest_bytes": man, "startup_bytes_all_ranks": (man + TOKENIZER_BYTES) * world,
                         "after_get_other_rank": 0, "after_bytes_other_rank": 0,
                         "after_bytes_all_ranks": man + TOKENIZER_BYTES,
                         "broadcast_bytes_per_rank": broadcast_bytes(len(plan.shards)),
                         "pass_before_s": before_s, "pass_before_derived": passes and capped < steps,
                         "pass_walked_steps": capped, "pass_after_s": after_s,
                         "pass_ratio": before_s / after_s if after_s else float("nan")})
    return rows


def report(rows: list[dict], *, per_node: int = 8, workers: int = 2) -> list[str]:
    lines = [f"simulated clusters ({per_node} ranks a node, {workers} loader workers a rank; shards of "
             f"{SHARD_BYTES / 1e6:.0f} MB, {EXAMPLE_BYTES} B an example): start-up store reads, before "
             "(835e044: manifest + tokenizer, 2 GETs on every rank) and after (rank 0 alone; the others "
             "0 requests, 0 B, and the broadcast plan over the network), and the epoch-start count pass per "
             "rank, before (per-example walk) / after (per-block schedule); * derived: walk timed on its "
             "first and half as many steps, extended linearly to the epoch",
             "corpus | shards  | ranks | store B/rank before | other rank after | all ranks before -> after "
             "| ratio | broadcast B/rank | pass before s | pass after s | ratio",
             "-------+---------+-------+---------------------+------------------+--------------------------"
             "+-------+------------------+---------------+--------------+------"]
    for r in rows:
        star = "*" if r["pass_before_derived"] else " "
        passes = (f"{r['pass_before_s']:>12.3f}{star} | {r['pass_after_s']:>12.3f} | {r['pass_ratio']:>5.0f}x"
                  if r["pass_walked_steps"] else f"{'-':>13} | {'-':>12} | {'-':>6}")  # not run
        lines.append(f"{r['corpus']:>6} | {r['shards']:>7,} | {r['world']:>5} | {r['startup_bytes_per_rank']:>19,} | "
                     f"{r['after_get_other_rank']:>6} GET, {r['after_bytes_other_rank']} B | "
                     f"{r['startup_bytes_all_ranks'] / 1e9:>8.3f} -> {r['after_bytes_all_ranks'] / 1e9:.3f} GB | "
                     f"{r['startup_bytes_all_ranks'] / r['after_bytes_all_ranks']:>4.0f}x | "
                     f"{r['broadcast_bytes_per_rank']:>16,} | {passes}")
    return lines
