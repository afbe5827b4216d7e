"""Part 2 of ``benchmarks/train/start.py``: shard reads per node in one epoch, ``W`` ranks packed
``--ranks-per-node`` to a node.

* **before** (``node_reads``: ``electra.data.sample_order.StreamPlan.rank_share``; no I/O):
  ``--epoch-shards`` synthetic shards, a global batch of 2,048, the trainer's default 64 streams.
  For each node, the bytes its ranks' loaders would read with no node cache (each rank the shards
  its streams touch, once) over the bytes of the distinct shards they touch: 1.0 means once per
  node.
* **measured** (``measured_reads``): the real loader (``electra.data.stream.TrainStream``) on a
  real corpus in moto behind the counting proxy (``start_proxy.CountingProxy``),
  ``--node-shards`` shards of ``--shard-examples`` examples, the same geometry. A node's ranks run
  at once as processes (forked from a preloaded server, each forking ``--loader-workers``
  DataLoader workers) and read one epoch, with ``data.node_cache=null`` and then through the node
  cache (a folder per simulated node); the shard bytes the proxy sent meanwhile over those of the
  distinct shards the node touches are its store reads per shard. Nodes run in turn, so each
  count is one node's; of a world with more than ``--run-nodes`` (2) nodes the first and last run
  (smoke: the first), as printed: a node's reads depend only on its own ranks' plans.

A rank process runs ``_bench_rank``, found by the forkserver under this module's name.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from benchmarks.train.start_proxy import CountingProxy

EPOCH_BATCH, EPOCH_STREAMS = 2048, 64  # the trainer's default geometry (a Base/Large global batch)


def node_reads(worlds: list[int], *, shards: int, per_node: int, examples: int = 4096) -> list[dict]:
    from electra.data.corpus import ShardRef
    from electra.data.sample_order import StreamPlan

    refs = tuple(ShardRef(f"s3://b/c/shards/g/train-{i:06d}.tar", examples, examples * 300, f"{i:064x}")
                 for i in range(shards))
    rows = []
    for world in worlds:
        shares = [StreamPlan(refs, 128, 2048, 2048 // world, rank=r, world_size=world).rank_share(0)
                  for r in range(world)]
        ratios, rank_bytes = [], [b for _, b in shares]
        for node in range(0, world, per_node):
            group = shares[node:node + per_node]
            read = sum(b for _, b in group)
            distinct = sum(s.bytes for s in {s for refs_, _ in group for s in refs_})
            ratios.append(read / distinct if distinct else 0.0)
        rows.append({"world": world, "nodes": (world + per_node - 1) // per_node,
                     "bytes_per_rank": sum(rank_bytes) / world,
                     "node_read_over_distinct_max": round(max(ratios), 3),
                     "node_read_over_distinct_mean": round(sum(ratios) / len(ratios), 3),
                     "corpus_bytes": sum(s.bytes for s in refs)})
    return rows


def _bench_rank(p, env: dict, cache: str | None, workers: int, results) -> None:
    """One simulated rank (a process): one epoch through the real loader."""
    import multiprocessing as mp

    from electra.data.stream import TrainStream

    mp.set_start_method("fork", force=True)  # a launched rank's DataLoader forks its workers
    os.environ.update(env)
    stream = TrainStream(p, num_workers=workers, prefetch=2, node_cache=cache)
    rows = sum(len(b.keys) for b in stream.loader(0))
    results.put((p.rank, rows, stream.bytes_read, stream.store_bytes))


def measured_reads(proxy: CountingProxy, loc: str, worlds: list[int], work: Path, *, per_node: int, workers: int,
                   batch: int, streams: int, block: int, run_nodes: int) -> list[dict]:
    """Per world, per node run: store bytes over distinct shard bytes without and with the node cache."""
    import multiprocessing as mp

    from electra.data.corpus import check_shards, open_corpus
    from electra.data.sample_order import StreamPlan

    refs = tuple(check_shards(open_corpus(loc), "train")[0])
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["electra.data.stream", "benchmarks.train.epoch_reads"])
    from benchmarks.train.epoch_reads import _bench_rank as target  # by module name, as the forkserver finds it

    rows = []
    for world in worlds:
        plans = [StreamPlan(refs, 32, batch, batch // world, rank=r, world_size=world, seed=0, shuffle_block=block,
                            streams=streams) for r in range(world)]
        firsts = list(range(0, world, per_node))
        for first in firsts if len(firsts) <= run_nodes else [firsts[0], firsts[-1]][:run_nodes]:
            ranks = range(first, min(world, first + per_node))
            touched = {s.uri: s.bytes for r in ranks for w in range(max(1, workers))
                       for s in plans[r].rank_share(0, w, max(1, workers))[0]}
            row = {"world": world, "nodes": len(firsts), "nodes_run": min(run_nodes, len(firsts)),
                   "node": first // per_node, "ranks": len(ranks),
                   "distinct_bytes": sum(touched.values()),
                   "before_rank_share": sum(plans[r].rank_share(0)[1] for r in ranks) / sum(touched.values())}
            for mode in ("null", "cache"):
                cache = None if mode == "null" else str(work / f"node-cache-{world}-{first}")
                results, mark, started = ctx.Queue(), proxy.snapshot(), time.perf_counter()
                # the forkserver keeps the environment it started with (an earlier call's store)
                store_env = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
                procs = [ctx.Process(target=target, args=(plans[r], {
                    **store_env, "RANK": str(r), "WORLD_SIZE": str(world), "LOCAL_RANK": str(r - first),
                    "LOCAL_WORLD_SIZE": str(len(ranks)), "MASTER_ADDR": f"node{first // per_node}",
                    "MASTER_PORT": str(world)}, cache, workers, results)) for r in ranks]
                for proc in procs:
                    proc.start()
                got = sorted(results.get(timeout=600) for _ in procs)
                for proc in procs:
                    proc.join()
                if any(proc.exitcode for proc in procs):
                    raise RuntimeError(f"a simulated rank failed: exit codes {[proc.exitcode for proc in procs]}")
                store = proxy.since(mark)
                assert all(n == plans[0].steps_per_epoch * plans[0].per_rank for _, n, _, _ in got)
                row[mode] = {"store_bytes": store["data_bytes"], "body_bytes": store["bytes"], "GET": store["GET"],
                             "over_distinct": round(store["data_bytes"] / row["distinct_bytes"], 4),
                             "loader_store_bytes": sum(g[3] for g in got), "decoded_bytes": sum(g[2] for g in got),
                             "seconds": round(time.perf_counter() - started, 2)}
                if cache is not None:
                    row["cache_left"] = sorted(str(p.relative_to(work)) for p in Path(cache).rglob("*"))
            rows.append(row)
    return rows
