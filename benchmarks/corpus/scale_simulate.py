"""One storage shuffle's store requests, bytes and memory at simulated sizes (``scale.py --simulate``).

    .venv/bin/python benchmarks/corpus/scale.py --simulate 10,100,1000,10000 [--json OUT]
        [--sim-reduce-tasks auto|N] [--sim-rows-per-file 240] [--sim-budget-minutes 25]

What runs. For each simulated size (GB of shuffled rows, 1 GB = 2**30 bytes), in a FRESH child
process (``python -m benchmarks.corpus.scale_simulate --child PLAN OUT``: its ``ru_maxrss`` and its
Ray workers are that size's own): local Ray with 2 CPUs (workers get the S3 variables, as
``raydata.init_ray`` gives a cluster's), an input Dataset generated inside Ray tasks
(``ray.data.range(M, override_num_blocks=8).map_batches``: near-dedup LSH-bucket rows, an int64
bucket key shared by a few rows, int64 uid, int32 file and a 112-byte sketch, plus the int64
``_part`` of the key's hash: 140 bytes a row), then the REAL ``shuffle.shuffle`` and the REAL
``shuffle.reduce`` with a reduce function that counts the rows of each key in its partition and
records its worker's ``ru_maxrss``, ``RssAnon`` and ``pyarrow.total_allocated_bytes()``. The map
files live in a bucket of moto's S3 server behind ``benchmarks.shared.counting_s3.CountingProxy`` (a
fresh moto per size), which counts every HTTP request by kind (GET, ranged GET, PUT, LIST, HEAD,
multipart, delete) and the bytes of request and answer bodies; the child marks the end of each
phase at the proxy (map side, reduce side, clean-up), so each is counted apart. The rows read
back are checked (every row once, M map files).

The rest lives beside this file: how a small input gets the counts of a large one
(``scale_simulate_plan.py``), the store's request rate and the reduce tasks it affords
(``scale_simulate_rate.py``), the sampled memory of the workers and the driver
(``scale_simulate_memory.py``), and the report and its goals (``scale_simulate_report.py``). This
file is the entry point of the child processes (``--child``: one size; ``--probe``: one client of
the rate probe).
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.corpus.scale_simulate_memory import MemorySampler, process_memory  # noqa: E402
from benchmarks.corpus.scale_simulate_plan import (MIB, SKETCH, cluster_ranges, plan_for,  # noqa: E402
                                                   previous_counts, true_counts)
from benchmarks.corpus.scale_simulate_rate import (choose_reduce_tasks, measure_rate, probe,  # noqa: E402
                                                   projected_minutes)
from benchmarks.corpus.scale_simulate_report import simulate_report  # noqa: E402,F401 - scale.py imports it from here

INPUT_TASKS = 8  # read tasks generating the input (each yields its share of the M blocks)
REQUEST_KINDS = ("PUT", "GET", "GET_RANGE", "LIST", "HEAD", "PUT_PART", "MPU_CREATE", "MPU_COMPLETE",
                 "DELETE", "DELETE_MULTI")


# ------------------------------------------------------------------------------ the child (one size)
def _generate(batch: dict[str, np.ndarray], *, rows: int, partitions: int, key_space: int, seed: int):
    """One input block: ``rows`` LSH-bucket rows for each map file number in ``batch["id"]``
    (deterministic: seeded by the first number)."""
    import pyarrow as pa

    from pipelines.engine.shuffle import PART, hash_partition

    ids = np.asarray(batch["id"], dtype=np.int64)
    n = len(ids) * rows
    rng = np.random.default_rng((seed, int(ids[0])))
    keys = rng.integers(0, key_space, n, dtype=np.int64)  # a key shared by a few rows, as LSH buckets are
    sketch = rng.integers(0, 256, n * SKETCH, dtype=np.uint8)
    uid = (ids[:, None] * rows + np.arange(rows, dtype=np.int64)).ravel()
    return pa.table({"bucket": keys, "uid": uid, "file": np.repeat((ids // 64).astype(np.int32), rows),
                     "sketch": pa.FixedSizeBinaryArray.from_buffers(pa.binary(SKETCH), n, [None, pa.py_buffer(sketch)]),
                     PART: hash_partition(keys, partitions)})


def _count_keys(rows: Any, *, partition: int):
    """The reduce function: rows per key of one partition, and this worker's memory now."""
    import pyarrow as pa

    keys = rows.column("bucket").to_numpy()
    _, counts = np.unique(keys, return_counts=True)
    return pa.table({"partition": [partition], "rows": [len(keys)], "keys": [len(counts)],
                     "shared_rows": [int(counts[counts > 1].sum())], "pid": [os.getpid()],
                     "rss": [resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10],
                     "anon": [process_memory()["anon"]], "arrow": [pa.total_allocated_bytes()]})


def _block_summary(block: Any) -> dict[str, Any]:
    """Sums and maxima of one block of ``_count_keys`` rows (run as a Ray task)."""
    import pyarrow.compute as pc
    from ray.data.block import BlockAccessor

    t = BlockAccessor.for_block(block).to_arrow()

    def total(col: str, fn: Any = pc.sum) -> int:
        return int(fn(t[col]).as_py() or 0) if t.num_rows else 0

    return {"partitions_out": t.num_rows, "rows": total("rows"), "keys": total("keys"),
            "shared_rows": total("shared_rows"), "reduce_rss": total("rss", pc.max),
            "reduce_anon": total("anon", pc.max), "reduce_arrow": total("arrow", pc.max),
            "pids": sorted({int(x) for x in t["pid"].to_pylist()})}


def _object_store_stats() -> dict[str, int]:
    """This Ray's object store: bytes spilled to local disk and restored since its start."""
    import ray
    from ray._private.internal_api import node_stats

    out = {"spilled_bytes": 0, "restored_bytes": 0}
    for node in ray.nodes():
        if node.get("Alive"):
            st = node_stats(node["NodeManagerAddress"], node["NodeManagerPort"], include_memory_info=False).store_stats
            out["spilled_bytes"] += int(st.spilled_bytes_total)
            out["restored_bytes"] += int(st.restored_bytes_total)
    return out


def child(plan: dict[str, Any]) -> dict[str, Any]:
    """Run one size's shuffle (map side, reduce side, clean-up) against the S3 endpoint in the
    environment; returns its figures (the requests are counted by the parent's proxy)."""
    import ray

    from benchmarks.shared.counting_s3 import mark
    from common import storage
    from pipelines.engine import raydata
    from pipelines.engine import shuffle as sh

    t0 = time.perf_counter()
    ray.init(address="local", num_cpus=plan["cpus"], include_dashboard=False, log_to_driver=False,
             object_store_memory=1_500_000_000,
             runtime_env={"env_vars": {**raydata.WORKER_THREAD_ENV, **storage.worker_env()}})
    raydata.drop_stale_no_cpu_warning()
    raydata.configure_data_context()
    ray.data.DataContext.get_current().target_max_block_size = plan["block_bytes"]
    driver_after_start = process_memory()
    m, p, rows = plan["map_files"], plan["partitions"], plan["rows_per_file"]
    ds = ray.data.range(m, override_num_blocks=min(m, INPUT_TASKS)).map_batches(
        _generate, batch_size=plan["files_per_block"], batch_format="numpy",
        fn_kwargs={"rows": rows, "partitions": p, "key_space": max(1, m * rows), "seed": plan["seed"]})
    mark("start")
    t1 = time.perf_counter()
    with MemorySampler() as sampler:
        shuffled = sh.shuffle(ds, partitions=p, folder=plan["folder"], file_bytes=plan["file_bytes"],
                              ranges=plan["reduce_tasks"], name=f"simulate-{plan['size_gb']:g}gb",
                              slice_bytes=max(1, int(plan["config"]["slice_mb"] * MIB)))
        mark("map")
        t2 = time.perf_counter()
        driver_after_map = process_memory()
        out = sh.reduce(shuffled, _count_keys, with_partition=True, batch_format="pyarrow",
                        memory_bytes=plan["memory_bytes"])
        # The driver takes the reduce side's output blocks as references and sums each in a task:
        # turned into numpy here, blocks of thousands of one-row tables (one per partition) cost the
        # driver ~15 KB per partition (measured), which is this script's doing, not the shuffle's.
        summarize = ray.remote(_block_summary)
        summaries = [summarize.remote(entry.ref) for bundle in out.iter_internal_ref_bundles()
                     for entry in bundle.blocks]
        agg = {"partitions_out": 0, "rows": 0, "keys": 0, "shared_rows": 0, "reduce_rss": 0, "reduce_anon": 0,
               "reduce_arrow": 0}
        pids: set[int] = set()
        for got in ray.get(summaries):
            for k in ("partitions_out", "rows", "keys", "shared_rows"):
                agg[k] += got[k]
            for k in ("reduce_rss", "reduce_anon", "reduce_arrow"):
                agg[k] = max(agg[k], got[k])
            pids.update(got["pids"])
        del summaries
        mark("reduce")
        t3 = time.perf_counter()
        driver_after_reduce = process_memory()
    del out, summarize
    shuffled.remove()
    mark("cleanup")
    t4 = time.perf_counter()
    stats = dict(shuffled.stats)
    if agg["rows"] != plan["rows"] or stats["map_files"] != m:
        raise AssertionError(f"{plan['size_gb']:g} GB: read {agg['rows']} rows of {plan['rows']}, "
                             f"wrote {stats['map_files']} map files of {m}")
    driver_end = process_memory()  # VmHWM: the driver's peak from its start to here (ray.shutdown adds its own)
    store = _object_store_stats()
    ray.shutdown()
    return {**agg, "reduce_workers": len(pids), "shuffle_stats": stats,
            "map_task_peak_rss": stats["map_task_peak_rss"], "sampled": sampler.peaks, "object_store": store,
            "samples": sampler.samples, "driver_after_start": driver_after_start,
            "driver_after_map": driver_after_map, "driver_after_reduce": driver_after_reduce, "driver_end": driver_end,
            "driver_peak_rss": driver_end["hwm"],
            "driver_peak_rss_after_shutdown": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10,
            "seconds": {"start": round(t1 - t0, 1), "map": round(t2 - t1, 1), "reduce": round(t3 - t2, 1),
                        "cleanup": round(t4 - t3, 1)}}


# ------------------------------------------------------------------------------ the parent
def _phase(phases: dict[str, Any], name: str) -> dict[str, Any]:
    got = phases.get(name, {})
    req, bin_, bout = got.get("requests", {}), got.get("bytes_in", {}), got.get("bytes_out", {})
    return {"requests": {k: req.get(k, 0) for k in REQUEST_KINDS if req.get(k, 0)},
            "bytes_written": bin_.get("PUT", 0) + bin_.get("PUT_PART", 0),
            "bytes_read": bout.get("GET", 0) + bout.get("GET_RANGE", 0),
            "bytes_in": sum(bin_.values()), "bytes_out": sum(bout.values())}


def run_size(plan: dict[str, Any], work: Path, *, timeout: float | None = None) -> dict[str, Any]:
    """One size in a fresh child process against a fresh moto behind a counting proxy."""
    from benchmarks.shared.counting_s3 import CountingS3

    work.mkdir(parents=True, exist_ok=True)
    tag = f"{plan['size_gb']:g}gb"
    plan_path, out_path = work / f"plan-{tag}.json", work / f"result-{tag}.json"
    out_path.unlink(missing_ok=True)
    with CountingS3(log=work / f"moto-{tag}.log") as s3:
        bucket = plan["folder"].split("://", 1)[1].split("/", 1)[0]
        s3.bucket(bucket)
        plan_path.write_text(json.dumps(plan))
        env = {**os.environ, **s3.env, "PYTHONPATH": str(REPO)}
        env.pop("ELECTRA_PROGRESS", None)
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "benchmarks.corpus.scale_simulate", "--child",
                               str(plan_path), str(out_path)], cwd=REPO, env=env, timeout=timeout,
                              capture_output=True, text=True)
        if proc.returncode != 0 or not out_path.exists():
            raise RuntimeError(f"simulate {tag}: child failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
        phases = s3.proxy.phases()
        seconds = time.perf_counter() - started
    res = json.loads(out_path.read_text())
    shuffle_phases = {name: _phase(phases, name) for name in ("start", "map", "reduce", "cleanup")}
    per_shuffle: dict[str, int] = {}
    for name in ("map", "reduce"):
        for k, v in shuffle_phases[name]["requests"].items():
            per_shuffle[k] = per_shuffle.get(k, 0) + v
    written = shuffle_phases["map"]["bytes_written"] + shuffle_phases["reduce"]["bytes_written"]
    read = shuffle_phases["map"]["bytes_read"] + shuffle_phases["reduce"]["bytes_read"]
    rate = {name: round(sum(shuffle_phases[name]["requests"].values()) / max(res["seconds"][name], 1e-9))
            for name in ("map", "reduce")}
    return {**plan, "result": res, "phases": shuffle_phases, "requests": per_shuffle,
            "requests_total": sum(per_shuffle.values()), "bytes_written": written, "bytes_read": read,
            "read_over_written": round(read / max(1, written), 5), "requests_per_second": rate,
            "seconds": round(seconds, 1), "previous": previous_counts(plan["size_gb"])}


def run_simulate(sizes: list[float], work: Path, *, rows_per_file: int = 240, reduce_tasks: str | int = "auto",
                 budget_minutes: float = 25.0) -> dict[str, Any]:
    """Measure the store's rate, choose R, then run each size in a child of its own; returns what
    ``simulate_report`` reads (also written to ``WORK/simulate/simulate.json`` after each size)."""
    work = Path(work) / "simulate"
    work.mkdir(parents=True, exist_ok=True)
    rate = measure_rate(work)
    r_cluster = cluster_ranges(true_counts(max(sizes))["partitions"])
    at_cluster = projected_minutes(max(sizes), r_cluster, rate)
    print(f"moto + counting proxy, {rate['clients']} clients: {rate['put_head_per_s']:.0f} PUT+HEAD/s, "
          f"{rate['ranged_get_per_s']:.0f} ranged GET/s; {max(sizes):g} GB at the cluster's R = {r_cluster} would take "
          f"~{at_cluster['map']:.0f} min of PUTs and ~{at_cluster['reduce']:.0f} min of GETs", flush=True)
    r = choose_reduce_tasks(sizes, rate, budget_minutes) if reduce_tasks == "auto" else int(reduce_tasks)
    projected = projected_minutes(max(sizes), r, rate)
    over = projected["reduce"] > budget_minutes
    how = ("given" if reduce_tasks != "auto" else "no R fits the budget; the fastest (fewer tasks than CPUs read no faster)"
           if over else "the largest that fits the budget")
    print(f"R = {r} ({how}; budget {budget_minutes:g} min of GETs at {max(sizes):g} GB): ~{projected['map']:.0f} min "
          f"of PUTs + ~{projected['reduce']:.0f} min of GETs projected", flush=True)
    runs = []
    for size in sizes:
        plan = plan_for(size, rows_per_file=rows_per_file, reduce_tasks=r,
                        folder=f"s3://simulate/shuffle-{size:g}gb")
        print(f"simulating {size:g} GB: M {plan['map_files']:,}, P {plan['partitions']:,}, R {plan['reduce_tasks']} "
              f"(cluster's R {plan['cluster_reduce_tasks']}), "
              f"~{sum(projected_minutes(size, plan['reduce_tasks'], rate).values()):.1f} min projected ...", flush=True)
        runs.append(run_size(plan, work))
        print(f"  done in {runs[-1]['seconds']:.0f} s: {runs[-1]['requests']}", flush=True)
        out = {"rate": rate, "reduce_tasks": r, "cluster_reduce_tasks": r_cluster, "budget_minutes": budget_minutes,
               "projected_minutes": projected, "rows_per_file": rows_per_file, "runs": runs}
        (work / "simulate.json").write_text(json.dumps(out, indent=1))  # what has run so far
    return out


# ------------------------------------------------------------------------------ entry (the child)
def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(description="children of corpus/scale.py --simulate: one size, or a rate probe")
    p.add_argument("--child", nargs=2, metavar=("PLAN", "OUT"))
    p.add_argument("--probe", nargs=4, metavar=("BUCKET", "CLIENT", "OBJECTS", "BYTES"))
    args = p.parse_args(argv)
    if args.probe:
        bucket, client, objects, size = args.probe
        print(json.dumps(probe(bucket, int(client), int(objects), int(size))))
        return 0
    if not args.child:
        p.error("give --child or --probe")
    plan = json.loads(Path(args.child[0]).read_text())
    Path(args.child[1]).write_text(json.dumps(child(plan)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
