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

How a small input gets the counts of a large one. Every size of the shuffle's config is the
default times one scale factor ``s = rows_per_file x 140 / 128 MiB`` (the same for all sizes:
``--sim-rows-per-file`` rows per map file, 240 by default, 33,600 bytes): ``shuffle.map_file_mb``
and ``shuffle.partition_mb`` (and ``task_memory_mb``, below). The input is generated as the rows of
``M = ceil(size / 128 MiB)`` map files, so the shuffle writes the M map files and gets the
``P = partitions_for(bytes, partition_bytes=cfg.partition_bytes)`` partitions of the simulated
size with the default config (checked: the run stops if they differ). Input blocks hold the rows
of 100 map files each (Ray Data's target block size is set to that, less one byte, so a generated
batch is one block, and a map task cuts it into its 100 map files): Ray Data costs ~40 ms per
block here whatever its size, and 80,000 one-file blocks would take an hour before the shuffle
made a request. So map tasks are M/100, not M; the map files, the requests and the bytes are
the same.

What else is scaled, and why. moto and the proxy serve about 200 requests a second on the 2
shared cores (measured first, by ``measure_rate``, with two client processes, and printed); the
reduce side makes ``2 x M x R`` ranged GETs, so with the cluster's ``R`` (``default_ranges``: 8 on
2 CPUs) the 10 TB size's 1.28 million GETs would take nearly two hours. ``--sim-reduce-tasks
auto`` keeps M and P true and lowers R (``shuffle.reduce_tasks``, the same for every size) to the
largest of 8, 4, 2, 1 whose projected GET time at the largest size fits
``--sim-budget-minutes`` (if none fits, the fastest: below 2 tasks on 2 CPUs the rate halves,
so R = 1 is no faster than 2). R is fixed by the cluster, not the data, so the growth from size
to size is the same at any R, and the GETs at the cluster's R are ``2 x M x R`` (the identity
``tests/benchmarks/corpus/test_corpus_scale_simulate.py`` checks; printed as computed).
``shuffle.task_memory_mb`` is scaled by ``s x R_cluster / R``: a reduce task then spills as many
runs (its range's bytes over its memory) as one of the cluster's R tasks at full size.

Memory. ``ru_maxrss`` as the shuffle reports it (``map_task_peak_rss``) and as the reduce function
reads it: the worker's peak over every task it ran (workers are reused: generation, map and
reduce tasks of that size's fresh Ray), and it counts shared pages: the Ray object store's (which
a worker touches more of as more blocks pass through it, up to the store's size) and the page
cache of the spill runs a reduce task memory-maps. ``MemorySampler`` (a thread of the driver)
samples every 0.1 s the private memory (``RssAnon``) of each of this Ray's workers, by the task
its process title names, and of the driver: the figure a task's own heap reaches. At these
scales the rows' own bytes (a map file, a task's buffer) are kilobytes, so what grows in the
memory figures grows with the counts (M, P, spill runs), not with the rows. The driver's peak RSS
is its ``VmHWM`` (what ``ru_maxrss`` reads) just before ``ray.shutdown()``, which itself raises
the driver's peak to about 330 MB at every size.

The previous design's counts (R following the data: ``R_old = max(8, min(P_old, ceil(bytes /
256 MiB)))``, ``P_old`` capped at 4,096; GET = 2 x M x R_old, PUT = M) are computed from that
formula, not measured, and printed beside the measured ones.

Goals (issue 37): each 10x of simulated size gives <= 11x requests and bytes read; bytes read <=
1.1x bytes written per shuffle; the largest task's peak memory and the driver's peak RSS flat
(<= 1.2x from the smallest size to the largest).
"""
from __future__ import annotations

import json
import math
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

GB = 1 << 30
MIB = 1 << 20
SKETCH = 112
ROW_BYTES = 8 + 8 + 4 + SKETCH + 8  # bucket, uid, file, sketch, _part: Arrow bytes per row
CLUSTER_CPUS = 2  # the measured shape (this machine); other shapes: --cluster (benchmarks/corpus/cluster_shape.py)
INPUT_TASKS = 8  # read tasks generating the input (each yields its share of the M blocks)
REQUEST_KINDS = ("PUT", "GET", "GET_RANGE", "LIST", "HEAD", "PUT_PART", "MPU_CREATE", "MPU_COMPLETE",
                 "DELETE", "DELETE_MULTI")


# ------------------------------------------------------------------------------ counts and plans
def cluster_ranges(partitions: int, cpus: int = CLUSTER_CPUS) -> int:
    """R of ``shuffle.default_ranges`` on a cluster of ``cpus`` CPUs."""
    from pipelines.engine import shuffle as sh

    return max(1, min(partitions, max(sh.MIN_REDUCE_TASKS, sh.RANGES_PER_CPU * cpus)))


def true_counts(size_gb: float, cpus: int = CLUSTER_CPUS) -> dict[str, int]:
    """M, P and R of one shuffle of ``size_gb`` GB with the default ``ShuffleConfig``."""
    from pipelines.config import ShuffleConfig
    from pipelines.engine.raydata import partitions_for

    cfg = ShuffleConfig()
    total = int(size_gb * GB)
    p = partitions_for(total, partition_bytes=cfg.partition_bytes)
    return {"bytes": total, "map_files": max(1, math.ceil(total / cfg.file_bytes)), "partitions": p,
            "reduce_tasks": cluster_ranges(p, cpus)}


def previous_counts(size_gb: float) -> dict[str, int]:
    """The previous design's counts, from its formula (not measured): R followed the data."""
    total = int(size_gb * GB)
    m = max(1, math.ceil(total / (128 * MIB)))
    p_old = min(4096, max(8, math.ceil(total / (64 * MIB))))
    r_old = max(8, min(p_old, math.ceil(total / (256 * MIB))))
    return {"map_files": m, "partitions": p_old, "reduce_tasks": r_old, "PUT": m, "GET": 2 * m * r_old}


def plan_for(size_gb: float, *, rows_per_file: int, reduce_tasks: int, folder: str,
             files_per_block: int = 100, cpus: int = CLUSTER_CPUS, seed: int = 0) -> dict[str, Any]:
    """What the child runs for one size: the scaled config and the counts it must reproduce."""
    from pipelines.config import ShuffleConfig
    from pipelines.engine.raydata import partitions_for

    want = true_counts(size_gb, cpus)
    default = ShuffleConfig()
    file_bytes = rows_per_file * ROW_BYTES
    s = file_bytes / default.file_bytes
    r_cluster = want["reduce_tasks"]
    r_run = max(1, min(want["partitions"], reduce_tasks or r_cluster))
    cfg = ShuffleConfig(map_file_mb=default.map_file_mb * s, partition_mb=default.partition_mb * s,
                        reduce_tasks=r_run, task_memory_mb=default.task_memory_mb * s * r_cluster / r_run,
                        slice_mb=default.slice_mb * s)
    cfg.validate()
    m = want["map_files"]
    actual = m * rows_per_file * ROW_BYTES
    p = partitions_for(actual, partition_bytes=cfg.partition_bytes)
    if cfg.file_bytes != file_bytes or p != want["partitions"]:
        raise ValueError(f"{size_gb:g} GB: scaled config gives file bytes {cfg.file_bytes} (want {file_bytes}) "
                         f"and P {p} (want {want['partitions']})")
    return {"size_gb": size_gb, "true": want, "scale": s, "rows_per_file": rows_per_file, "rows": m * rows_per_file,
            "bytes": actual, "map_files": m, "partitions": p, "reduce_tasks": r_run, "cluster_reduce_tasks": r_cluster,
            "config": {"map_file_mb": cfg.map_file_mb, "partition_mb": cfg.partition_mb,
                       "reduce_tasks": cfg.reduce_tasks, "task_memory_mb": cfg.task_memory_mb,
                       "slice_mb": cfg.slice_mb},
            "file_bytes": cfg.file_bytes, "partition_bytes": cfg.partition_bytes, "memory_bytes": cfg.memory_bytes,
            "files_per_block": files_per_block, "block_bytes": files_per_block * cfg.file_bytes - 1, "folder": folder, "cpus": cpus, "seed": seed,
            "runs_per_task": math.ceil(actual / r_run / cfg.memory_bytes)}


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


_STATUS = {"VmRSS:": "rss", "RssAnon:": "anon", "RssFile:": "file", "RssShmem:": "shmem", "VmHWM:": "hwm"}


def _status(pid: int | str = "self") -> dict[str, int]:
    """Resident memory of a process in bytes: ``rss`` (VmRSS), its parts ``anon`` (private heap),
    ``file`` (mapped files: the spill's runs) and ``shmem`` (shared memory: Ray's object store),
    and ``hwm`` (VmHWM, the peak of rss)."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key = line.split(None, 1)[0] if line.strip() else ""
            if key in _STATUS:
                out[_STATUS[key]] = int(line.split()[1]) << 10
    return out


def _task_kind(title: str) -> str | None:
    for needle, kind in (("write_map_files", "map"), ("stream_map_file", "map"), ("_reduce_batch", "reduce"),
                         ("_generate", "generate"),
                         ("IDLE", "idle")):
        if needle in title:
            return kind
    return "other" if title.startswith("ray::") else None


class MemorySampler:
    """Samples the memory of this process's Ray workers (its descendants titled ``ray::...``) and
    of itself every ``interval`` seconds, and keeps the peak of each part per kind of task the
    worker was running (its process title: ``ray::write_map_files``, ``ray::...(_reduce_batch)``,
    ...). A sampled peak is a lower bound; ``anon`` is what a task holds privately, without the
    object store's shared pages or the page cache of files it maps, which ``ru_maxrss`` counts."""

    def __init__(self, interval: float = 0.1):
        import threading

        self.interval = interval
        self.peaks: dict[str, dict[str, int]] = {}
        self.samples = 0
        self._workers: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="memory-sampler", daemon=True)

    def __enter__(self) -> "MemorySampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _refresh(self) -> None:
        parents: dict[int, int] = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat") as f:
                        parents[int(name)] = int(f.read().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    pass
        me, mine = os.getpid(), []
        for pid in parents:
            p, seen = parents.get(pid), 0
            while p and p != me and seen < 16:
                p, seen = parents.get(p), seen + 1
            if p == me:
                mine.append(pid)
        self._workers = mine

    def _note(self, kind: str, mem: dict[str, int]) -> None:
        peak = self.peaks.setdefault(kind, {})
        for k, v in mem.items():
            if k != "hwm":
                peak[k] = max(peak.get(k, 0), v)

    def _loop(self) -> None:
        last_refresh = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            if now - last_refresh > 1.0:
                self._refresh()
                last_refresh = now
            self._note("driver", _status())
            for pid in self._workers:
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        kind = _task_kind(f.read().split(b"\0", 1)[0].decode(errors="replace"))
                    if kind:
                        self._note(kind, _status(pid))
                except (OSError, ValueError):
                    pass
            self.samples += 1
            self._stop.wait(self.interval)


def _count_keys(rows: Any, *, partition: int):
    """The reduce function: rows per key of one partition, and this worker's memory now."""
    import pyarrow as pa

    keys = rows.column("bucket").to_numpy()
    _, counts = np.unique(keys, return_counts=True)
    return pa.table({"partition": [partition], "rows": [len(keys)], "keys": [len(counts)],
                     "shared_rows": [int(counts[counts > 1].sum())], "pid": [os.getpid()],
                     "rss": [resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10],
                     "anon": [_status()["anon"]], "arrow": [pa.total_allocated_bytes()]})


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
    driver_after_start = _status()
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
        driver_after_map = _status()
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
        driver_after_reduce = _status()
    del out, summarize
    shuffled.remove()
    mark("cleanup")
    t4 = time.perf_counter()
    stats = dict(shuffled.stats)
    if agg["rows"] != plan["rows"] or stats["map_files"] != m:
        raise AssertionError(f"{plan['size_gb']:g} GB: read {agg['rows']} rows of {plan['rows']}, "
                             f"wrote {stats['map_files']} map files of {m}")
    driver_end = _status()  # VmHWM: the driver's peak from its start to here (ray.shutdown adds its own)
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


def probe(bucket: str, client: int, objects: int, object_bytes: int) -> dict[str, float]:
    """One rate-probe client (a child process): ``objects`` ``storage.write_bytes`` (a PUT and a
    HEAD each), then eight ranged GETs per object through ``storage.read_ranges``, eight at a time
    (a reduce task's data reads come in groups of about four to eight)."""
    from common import storage

    data = os.urandom(object_bytes)
    names = [f"{bucket}/{i:02x}/probe-{client}-{i}" for i in range(objects)]
    t = time.perf_counter()
    for name in names:
        storage.write_bytes(name, data)
    put_seconds = time.perf_counter() - t
    step = object_bytes // 8
    ranges = [(name, a, a + step) for name in names for a in range(0, object_bytes, step)]
    t = time.perf_counter()
    for k in range(0, len(ranges), 8):
        storage.read_ranges(ranges[k:k + 8])
    return {"put_seconds": put_seconds, "get_seconds": time.perf_counter() - t}


def measure_rate(work: Path, *, clients: int = CLUSTER_CPUS, objects: int = 150,
                 object_bytes: int = 32 << 10) -> dict[str, float]:
    """Requests per second through moto + the counting proxy, from ``clients`` concurrent client
    processes (as many as the cluster's CPUs, like the map and reduce tasks): PUT+HEAD pairs
    (``storage.write_bytes``), then ranged GETs (``probe``)."""
    from benchmarks.shared.counting_s3 import CountingS3

    with CountingS3(log=work / "moto-rate.log") as s3:
        bucket = s3.bucket("simulate-rate")
        env = {**os.environ, **s3.env, "PYTHONPATH": str(REPO)}
        procs = [subprocess.Popen([sys.executable, "-m", "benchmarks.corpus.scale_simulate", "--probe", bucket,
                                   str(c), str(objects), str(object_bytes)], cwd=REPO, env=env,
                                  stdout=subprocess.PIPE, text=True) for c in range(clients)]
        outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
        if any(p.returncode for p in procs):
            raise RuntimeError("simulate: the rate probe failed")
        counted = s3.proxy.totals()["requests"]
    return {"put_head_per_s": round((counted.get("PUT", 0) + counted.get("HEAD", 0))
                                    / max(o["put_seconds"] for o in outs), 1),
            "ranged_get_per_s": round(counted.get("GET_RANGE", 0) / max(o["get_seconds"] for o in outs), 1),
            "clients": clients, "object_bytes": object_bytes}


def projected_minutes(size_gb: float, r: int, rate: dict[str, float]) -> dict[str, float]:
    """Minutes the map side (M PUT+HEAD pairs) and the reduce side (2·M·R ranged GETs) of
    ``size_gb`` would take at the probe's rates; fewer reduce tasks than clients get that share
    of the rate (one task reads one batch of ranges at a time)."""
    m = true_counts(size_gb)["map_files"]
    get_rate = rate["ranged_get_per_s"] * min(r, rate["clients"]) / rate["clients"]
    return {"map": 2 * m / rate["put_head_per_s"] / 60, "reduce": 2 * m * r / get_rate / 60}


def choose_reduce_tasks(sizes: list[float], rate: dict[str, float], budget_minutes: float) -> int:
    """The largest of the cluster's R, R/2, ..., 1 whose reduce side at the largest size fits
    ``budget_minutes``; if none does, the one projected fastest (ties: the larger R)."""
    r = cluster_ranges(true_counts(max(sizes))["partitions"])
    options = []
    while r >= 1:
        options.append((projected_minutes(max(sizes), r, rate)["reduce"], r))
        r //= 2
    fits = [r for minutes, r in options if minutes <= budget_minutes]
    return max(fits) if fits else min(options, key=lambda o: (round(o[0], 1), -o[1]))[1]


def run_simulate(sizes: list[float], work: Path, *, rows_per_file: int = 240, reduce_tasks: str | int = "auto",
                 budget_minutes: float = 25.0) -> dict[str, Any]:
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


# ------------------------------------------------------------------------------ report
def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f}"


def memory_figures(res: dict[str, Any]) -> dict[str, int]:
    """The memory figures of one size (bytes): ``ru_maxrss`` (map tasks: the shuffle's own
    ``map_task_peak_rss``; reduce tasks: the reduce function's; the driver's) and the sampled
    peaks of private memory (``RssAnon``) per kind of task and of the driver."""
    sampled = res.get("sampled", {})
    driver = res["driver_end"]["hwm"] if "driver_end" in res else res["driver_after_reduce"]["hwm"]
    return {"map_rss": res["map_task_peak_rss"], "reduce_rss": res["reduce_rss"],
            "driver_rss": driver, "reduce_arrow": res["reduce_arrow"],
            "map_anon": sampled.get("map", {}).get("anon", 0),
            "reduce_anon": max(sampled.get("reduce", {}).get("anon", 0), res.get("reduce_anon", 0)),
            "generate_anon": sampled.get("generate", {}).get("anon", 0),
            "reduce_file": sampled.get("reduce", {}).get("file", 0),
            "task_shmem": max(sampled.get(k, {}).get("shmem", 0) for k in ("map", "reduce", "generate", "idle")),
            "driver_anon": sampled.get("driver", {}).get("anon", 0)}


def simulate_report(sim: dict[str, Any]) -> tuple[list[str], dict[str, bool]]:
    runs = sim["runs"]
    first = runs[0]
    r, rc = sim["reduce_tasks"], sim["cluster_reduce_tasks"]
    lines = [f"moto + counting proxy: {sim['rate']['put_head_per_s']:.0f} PUT+HEAD/s, "
             f"{sim['rate']['ranged_get_per_s']:.0f} ranged GET/s ({sim['rate']['clients']} client processes, "
             f"{sim['rate']['object_bytes'] >> 10} KiB objects)",
             f"scaled: every ShuffleConfig size x s = {first['scale']:.4e} ({first['rows_per_file']} rows of "
             f"{ROW_BYTES} B = {first['file_bytes']:,} B per map file, {first['partition_bytes']:,} B per partition); "
             f"input blocks of {first['files_per_block']} map files' rows; M and P true"
             + ("" if r == rc else f"; R = {r} (shuffle.reduce_tasks) instead of the cluster's {rc}, task memory "
                f"x s x {rc / r:g} = {first['memory_bytes']:,} B (a task spills as many runs as one of {rc} at "
                "full size)"),
             "per shuffle (map side + reduce side), counted at the proxy:",
             f"{'size':>9}{'M':>8}{'P':>9}{'R':>3}{'runs':>6}{'PUT':>8}{'HEAD':>8}{'GET':>5}{'ranged GET':>12}"
             f"{'LIST':>5}{'written MB':>12}{'read MB':>10}{'read/written':>14}{'secs':>7}"]
    for x in runs:
        q = x["requests"]
        lines.append(f"{x['size_gb']:>7g}GB{x['map_files']:>8,}{x['partitions']:>9,}{x['reduce_tasks']:>3}"
                     f"{x['runs_per_task']:>6,}{q.get('PUT', 0):>8,}{q.get('HEAD', 0):>8,}{q.get('GET', 0):>5,}"
                     f"{q.get('GET_RANGE', 0):>12,}{q.get('LIST', 0):>5}{_mb(x['bytes_written']):>12}"
                     f"{_mb(x['bytes_read']):>10}{x['read_over_written']:>14.5f}{x['seconds']:>7.0f}")
    others = sorted({k for x in runs for k in x["requests"]} - {"PUT", "HEAD", "GET", "GET_RANGE", "LIST"})
    lines.append(f"  other requests: {', '.join(others) if others else 'none'}; runs: spill runs per reduce task")
    lines.append("memory, MB (task rss: ru_maxrss, which counts the object store's shared pages and mapped "
                 "spill files; anon: sampled peak of private memory; files, shm: the reduce tasks' mapped files and "
                 "the tasks' shared memory, sampled peaks; driver rss: VmHWM before Ray's shutdown):")
    lines.append(f"{'size':>9}{'map rss':>9}{'anon':>7}{'reduce rss':>11}{'anon':>7}{'files':>7}{'arrow':>7}"
                 f"{'shm':>6}{'driver rss':>11}{'anon':>7}{'store spilled':>15}")
    for x in runs:
        f = memory_figures(x["result"])
        spilled = x["result"].get("object_store", {}).get("spilled_bytes")
        lines.append(f"{x['size_gb']:>7g}GB{f['map_rss'] / 1e6:>9.0f}{f['map_anon'] / 1e6:>7.0f}"
                     f"{f['reduce_rss'] / 1e6:>11.0f}{f['reduce_anon'] / 1e6:>7.0f}{f['reduce_file'] / 1e6:>7.0f}"
                     f"{f['reduce_arrow'] / 1e6:>7.1f}{f['task_shmem'] / 1e6:>6.0f}{f['driver_rss'] / 1e6:>11.0f}"
                     f"{f['driver_anon'] / 1e6:>7.0f}{'?' if spilled is None else f'{spilled / 1e6:,.0f}':>15}")
    lines.append("  (store spilled: bytes Ray's object store spilled to local disk, MB: the input blocks Ray Data "
                 "produced ahead of the map tasks)")
    extra = [f"{x['size_gb']:g} GB: " + ", ".join(f"{k} {v}" for k, v in x["phases"]["cleanup"]["requests"].items())
             for x in runs]
    lines.append("clean-up (Shuffled.remove, not in the shuffle's counts): " + "; ".join(extra))
    lines.append(f"computed, not measured: GETs at the cluster's R = {rc} (2·M·R) and the previous design "
                 "(R_old = max(8, min(P_old, ceil(bytes / 256 MiB))), P_old <= 4,096; GET = 2·M·R_old, PUT = M):")
    lines.append(f"{'size':>9}{'GET at R=' + str(rc):>14}{'P_old':>8}{'R_old':>7}{'GET_old':>14}{'PUT_old':>9}")
    for x in runs:
        pv = x["previous"]
        lines.append(f"{x['size_gb']:>7g}GB{2 * x['map_files'] * rc:>14,}{pv['partitions']:>8,}"
                     f"{pv['reduce_tasks']:>7,}{pv['GET']:>14,}{pv['PUT']:>9,}")

    def ok(flag: bool) -> str:
        return "✓" if flag else "✗"

    goals: dict[str, bool] = {}
    steps = []
    pairs = list(zip(runs, runs[1:])) + ([(runs[0], runs[-1])] if len(runs) > 2 else [])
    for a, b in pairs:
        size = b["size_gb"] / a["size_gb"]
        req = b["requests_total"] / max(1, a["requests_total"])
        get = b["requests"].get("GET_RANGE", 0) / max(1, a["requests"].get("GET_RANGE", 0))
        rd = b["bytes_read"] / max(1, a["bytes_read"])
        prev = b["previous"]["GET"] / max(1, a["previous"]["GET"])
        within = req <= 1.1 * size and rd <= 1.1 * size
        steps.append(within)
        lines.append(f"{ok(within)} {a['size_gb']:g} -> {b['size_gb']:g} GB ({size:g}x): requests {req:.2f}x, ranged "
                     f"GETs {get:.2f}x, bytes read {rd:.2f}x (goal <= {1.1 * size:g}x); the previous design's GETs "
                     f"{prev:.1f}x (computed)")
    goals["requests_and_bytes_read_le_1.1x_per_10x"] = all(steps)
    worst = max(x["read_over_written"] for x in runs)
    goals["read_le_1.1x_written"] = worst <= 1.1
    lines.append(f"{ok(goals['read_le_1.1x_written'])} bytes read / written <= 1.1 per shuffle at every size "
                 f"(largest {worst:.5f})")
    lo, hi = memory_figures(runs[0]["result"]), memory_figures(runs[-1]["result"])
    a_gb, b_gb = runs[0]["size_gb"], runs[-1]["size_gb"]
    checks = (("task_rss_flat", "largest task's ru_maxrss", max(lo["map_rss"], lo["reduce_rss"]),
               max(hi["map_rss"], hi["reduce_rss"])),
              ("task_anon_flat", "largest task's private memory (sampled RssAnon)",
               max(lo["map_anon"], lo["reduce_anon"]), max(hi["map_anon"], hi["reduce_anon"])),
              ("driver_rss_flat", "driver's peak RSS (VmHWM)", lo["driver_rss"], hi["driver_rss"]),
              ("driver_anon_flat", "driver's private memory (sampled RssAnon)", lo["driver_anon"], hi["driver_anon"]))
    for key, name, a, b in checks:
        goals[key] = b <= 1.2 * a
        lines.append(f"{ok(goals[key])} {name}: {b / 1e6:.0f} MB at {b_gb:g} GB / {a / 1e6:.0f} MB at {a_gb:g} GB = "
                     f"{b / max(1, a):.2f}x (goal <= 1.2x)")
    return lines, goals


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
