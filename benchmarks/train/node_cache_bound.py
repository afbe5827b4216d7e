"""What ``data.node_cache=auto``'s size check costs at start, next to the count pass every epoch pays.

    .venv/bin/python benchmarks/train/node_cache_bound.py [--ranks-per-node 1,2,4,8] [--workers 2,8]
        [--world 64] [--shards 10000] [--json OUT] [--smoke]

No I/O: a synthetic plan (``--shards`` shard references of ``--examples`` examples, global batch
``--global-batch`` on ``--world`` ranks, micro batch 8, streams 64, shuffle block 2000). For each
node shape (ranks per node x loader workers), rank 0's node, in fresh memo state:

- **baseline**: ``NodeCache.uses`` for the whole first epoch, the count pass each rank already
  makes at every epoch start (a schedule per (rank, worker) of its node);
- **bound**: ``node_cache_space.loaders_need``, what ``auto`` adds at start to decide between
  ``/dev/shm`` and a disk folder (the same schedules, then the peak of the copies alive).

Each is the best of ``--repeats`` seconds; the ratio bound / baseline is printed beside them (a
start at the beginning of the first epoch pays the bound alone: its schedules are then reused for
the counts). Growth: each figure at the largest node over the smallest, over the ratio of their
(ranks x workers). The CPU (model, amx_bf16 / avx512_bf16) and load average are printed too.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

from benchmarks.shared.machine import finish, machine, machine_line, smoke_sizes
from electra.data import node_cache_space as space
from electra.data.corpus import ShardRef
from electra.data.node_cache import NodeCache, NodeRanks
from electra.data.sample_order import StreamPlan

SMOKE = {"ranks_per_node": "1,2", "workers": "2", "world": 4, "shards": 200, "repeats": 1, "global_batch": 64}


def plan_for(args) -> StreamPlan:
    sizes = np.random.default_rng(0).integers(args.examples // 2, 2 * args.examples, args.shards)
    shards = tuple(ShardRef(f"mem://s{i}", int(n), 2000 * int(n), f"s{i}") for i, n in enumerate(sizes))
    return StreamPlan(shards, 128, args.global_batch, 8, rank=0, world_size=args.world, seed=1)


def best(fn, repeats: int) -> float:
    out = float("inf")
    for _ in range(max(1, repeats)):
        space._MEMO[:] = [None, None]  # fresh: no schedule reused from the other measurement
        t0 = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t0)
    return out


def measure(plan: StreamPlan, per_node: int, workers: int, repeats: int) -> dict[str, Any]:
    cache = NodeCache("unused", NodeRanks(0, per_node))  # uses() reads no folder
    ranks = cache.node.ranks
    ordered = plan.ordered_shards(0)
    baseline = best(lambda: cache.uses(plan, 0, workers, 0, plan.steps_per_epoch, ordered), repeats)
    bound = best(lambda: space.loaders_need(plan, ranks, workers), repeats)
    need = space.loaders_need(plan, ranks, workers)
    return {"ranks_per_node": per_node, "workers": workers, "baseline_s": baseline, "bound_s": bound,
            "ratio": bound / baseline, "copies_mb": need.copies / 2**20, "queued_mb": need.queued / 2**20}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks-per-node", default="1,2,4,8")
    ap.add_argument("--workers", default="2,8")
    ap.add_argument("--world", type=int, default=64)
    ap.add_argument("--shards", type=int, default=10000)
    ap.add_argument("--examples", type=int, default=200)
    ap.add_argument("--global-batch", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes (seconds)")
    args = ap.parse_args(argv)
    smoke_sizes(args, SMOKE)
    args.ranks_per_node = [int(x) for x in str(args.ranks_per_node).split(",")]
    args.workers = [int(x) for x in str(args.workers).split(",")]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    before = machine()
    print(machine_line(before), flush=True)
    plan = plan_for(args)
    print(f"{args.shards} shards, {plan.num_examples} examples, {plan.steps_per_epoch} steps an epoch, "
          f"world {args.world}")
    print(f"{'ranks/node':>10} {'workers':>7} {'count pass s':>12} {'bound s':>8} {'ratio':>6} "
          f"{'copies MB':>9} {'queued MB':>9}")
    rows = []
    for workers in args.workers:
        for per_node in args.ranks_per_node:
            r = measure(plan, per_node, workers, args.repeats)
            rows.append(r)
            print(f"{per_node:>10} {workers:>7} {r['baseline_s']:>12.3f} {r['bound_s']:>8.3f} {r['ratio']:>6.2f} "
                  f"{r['copies_mb']:>9.1f} {r['queued_mb']:>9.1f}", flush=True)
    for workers in args.workers:
        mine = [r for r in rows if r["workers"] == workers]
        scale = mine[-1]["ranks_per_node"] / mine[0]["ranks_per_node"]
        print(f"growth with {workers} workers, {mine[0]['ranks_per_node']} -> {mine[-1]['ranks_per_node']} ranks "
              f"a node (1 = linear): count pass {mine[-1]['baseline_s'] / mine[0]['baseline_s'] / scale:.2f}, "
              f"bound {mine[-1]['bound_s'] / mine[0]['bound_s'] / scale:.2f}")
    finish({"machine": before, "args": vars(args), "rows": rows}, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
