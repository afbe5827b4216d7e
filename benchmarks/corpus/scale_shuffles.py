"""The shuffles of build-corpus against block count: is a shuffle's cost linear in the blocks?

    .venv/bin/python benchmarks/corpus/scale.py --blocks 512,1024,2048 [--rows 200000] [--json OUT]

A cluster reads thousands of blocks, the dev box a few dozen; this forces cluster-sized block
counts on a small input so that any cost growing with blocks x partitions (or blocks x blocks)
shows on two cores. ``--rows`` int64 (key, uid) rows come from ``ray.data.range(rows,
override_num_blocks=M)``, materialised first, then shuffled into ``P = --partitions``
partitions and reduced (rows and uid sum per partition, checked equal across methods) by:

(a) ``sort``: Ray Data's pull-based sort shuffle (``groupby("_part").map_groups``): the previous
    engine's path. Its map tasks split every block for every reducer, and it makes one reducer
    per input block, so it creates about M x M partition objects, all owned by the driver.
(b) ``hash``: Ray Data's hash shuffle (``groupby(num_partitions=P)``): map tasks send their
    partitions to a pool of aggregator actors, started for every shuffle.
(c) ``v2``: Ray Data 2.60's default, ``SHUFFLE_V2`` (``groupby(num_partitions=P)``): map tasks
    (over bundles of blocks) hash-split their rows into P pieces in the object store, then one
    reduce task per partition (the object-store variant; the disk-based one is not measured).
(d) ``storage``: ``pipelines.engine.shuffle``: map files on local disk, one per ~128 MB of rows,
    then ``reduce(...).take_all()``, one task per contiguous range of partitions
    (``shuffle.reduce_tasks``: at least 8, so one partition each at the default 8).

Each (method, M) runs in a child process of its own (its own Ray session, ``num_cpus=2``, pinned
to two cores), so one method's leftovers cannot bias the next. Measured per run: the shuffle's
seconds (input already materialised); the driver's peak RSS (VmHWM, reset by writing ``5`` to
``/proc/self/clear_refs`` just before; the RSS at that moment is printed as "start"); the tasks
it ran, by name (``ray.timeline()``: the GCS's task events, counted after minus before, Ray
Data's statistics and autoscaling actors left out); the peak number of objects owned by the
driver and by all processes (the raylet's per-worker ``num_owned_objects``, sampled every 0.1 s:
a lower bound; the M input blocks are owned before the shuffle starts); plasma objects created
(``cumulative_created_objects``; objects under 100 KB live in their owner's memory instead, so
this misses small ones); and the storage shuffle's map files. Growth per doubling of M: time and
driver peak RSS (the goal: "at most linear", a ratio <= 2.5; quadratic is ~4), plus the RSS
above its start and the driver-owned objects, which show the M x M of (a) directly.
"""
from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.shared.memory import ObjectSampler, current_rss_mb, peak_rss_mb, reset_peak_rss, run_script

SCALE = Path(__file__).resolve().with_name("scale.py")  # the command; its --child-shuffle runs shuffle_child

METHODS = ("sort", "hash", "v2", "storage")
_STRATEGY = {"sort": "SORT_SHUFFLE_PULL_BASED", "hash": "HASH_SHUFFLE", "v2": "SHUFFLE_V2"}
LINEAR = 2.5  # a doubling ratio above this is worse than linear (quadratic: ~4)
# Ray Data's own actors (statistics, autoscaling): the same few calls whatever the shuffle.
_BOOKKEEPING = ("_StatsActor.", "_AutoscalingCoordinatorActor.")


def _keys(batch: dict, partitions: int) -> dict:
    import numpy as np

    from common.hashing import fmix64
    from pipelines.engine.shuffle import hash_partition

    ids = batch["id"].astype(np.int64)
    key = (fmix64(ids.astype(np.uint64)) >> np.uint64(1)).astype(np.int64)
    return {"key": key, "uid": ids, "_part": hash_partition(key, partitions)}


def _count(rows: dict) -> dict:
    import numpy as np

    return {"rows": np.array([len(rows["uid"])], np.int64), "uid_sum": np.array([int(rows["uid"].sum())], np.int64)}


def _task_counts() -> dict[str, int]:
    import warnings
    from collections import Counter

    import ray

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        events = ray.timeline()
    names = (e["cat"][6:] for e in events if str(e.get("cat", "")).startswith("task::"))
    return dict(Counter(n for n in names if not n.startswith(_BOOKKEEPING)))


def shuffle_child(method: str, blocks: int, rows: int, partitions: int, folder: str) -> dict[str, Any]:
    """One shuffle of ``rows`` rows in ``blocks`` blocks by ``method`` in this (fresh) process."""
    import ray
    from ray.data.context import ShuffleStrategy

    from pipelines.engine import raydata, shuffle

    raydata.init_ray(num_cpus=2)  # the project's data context
    if method in _STRATEGY:
        ray.data.DataContext.get_current().shuffle_strategy = ShuffleStrategy[_STRATEGY[method]]
    ds = ray.data.range(rows, override_num_blocks=blocks).map_batches(
        _keys, batch_format="numpy", fn_kwargs={"partitions": partitions}).materialize()
    tasks_before = _task_counts()
    sampler = ObjectSampler(0.1)
    _, _, created_before = sampler.sample()
    extra: dict[str, Any] = {}
    rss_before = current_rss_mb()
    reset_peak_rss()
    with sampler:
        start = time.perf_counter()
        if method == "storage":
            shuffled = shuffle.shuffle(ds, partitions=partitions, folder=folder, name="bench")
            out = shuffle.reduce(shuffled, _count).take_all()
            extra = {"map_files": len(shuffled.files), "shuffle_stats": shuffled.stats}
        else:
            out = ds.groupby("_part", num_partitions=partitions).map_groups(_count, batch_format="numpy").take_all()
        seconds = time.perf_counter() - start
    rss = peak_rss_mb()
    _, _, created = sampler.sample()
    time.sleep(2.5)  # workers report task events to the GCS about once a second
    after = _task_counts()
    ray.shutdown()
    shutil.rmtree(folder, ignore_errors=True)
    tasks = {k: v - tasks_before.get(k, 0) for k, v in after.items() if v - tasks_before.get(k, 0) > 0}
    return {"method": method, "blocks": ds.num_blocks(), "rows": rows, "partitions": partitions,
            "seconds": round(seconds, 3), "peak_rss_mb": rss, "rss_before_mb": rss_before, "tasks": tasks,
            "peak_driver_objects": sampler.driver, "peak_objects": sampler.total,
            "plasma_objects_created": created - created_before,
            "check": sorted((int(r["rows"]), int(r["uid_sum"])) for r in out), **extra}


def growth(values: list[float]) -> list[float]:
    return [round(b / max(a, 1e-9), 2) for a, b in zip(values, values[1:])]


def blocks_report(runs: list[dict[str, Any]]) -> tuple[list[str], dict[str, bool]]:
    lines = [f"{'method':<9}{'M':>6}{'s':>9}{'RSS MB':>8}{'(start)':>8}{'drv obj':>9}{'all obj':>9}{'plasma':>8}  tasks"]
    for r in runs:
        extra = f"  map_files={r['map_files']}" if "map_files" in r else ""
        lines.append(f"{r['method']:<9}{r['blocks']:>6}{r['seconds']:>9.2f}{r['peak_rss_mb']:>8.0f}{r['rss_before_mb']:>8.0f}"
                     f"{r['peak_driver_objects']:>9}{r['peak_objects']:>9}{r['plasma_objects_created']:>8}  "
                     f"{r['tasks']}{extra}")
    goals = {}
    checks = {json.dumps(r["check"]) for r in runs if r["rows"] == runs[0]["rows"]}
    lines.append(f"{'✓' if len(checks) == 1 else '✗'} every method reduced the same rows per partition")
    for method in METHODS:
        mine = sorted((r for r in runs if r["method"] == method), key=lambda r: r["blocks"])
        if len(mine) < 2:
            continue
        t, m = growth([r["seconds"] for r in mine]), growth([r["peak_rss_mb"] for r in mine])
        d = growth([max(r["peak_rss_mb"] - r["rss_before_mb"], 1.0) for r in mine])
        o = growth([r["peak_driver_objects"] for r in mine])
        ok = max(t + m) <= LINEAR
        goals[method] = ok
        lines.append(f"{'✓' if ok else '✗'} {method:<8} per doubling of M: time x{t}, driver peak RSS x{m} "
                     f"(at most linear: <= {LINEAR}; quadratic ~4); RSS above its start x{d}, driver objects x{o}")
    return lines, goals


def run_blocks(blocks: list[int], rows: int, partitions: int, work: Path,
               methods: tuple[str, ...] = METHODS) -> list[dict[str, Any]]:
    runs = []
    for m in blocks:
        for method in methods:
            folder = str(work / f"shuffle-{method}-{m}")
            runs.append(run_script(SCALE, ["--child-shuffle", method, str(m), str(rows), str(partitions), folder]))
            print(f"  {method} M={m}: {runs[-1]['seconds']:.2f} s", file=sys.stderr, flush=True)
    return runs
