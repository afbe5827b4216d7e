"""Store requests and bytes of one storage shuffle at simulated sizes (``corpus_scale.py --simulate``).

    .venv/bin/python benchmarks/corpus_scale.py --simulate 1,10,100,1000 [--sample-tasks 64] [--json OUT]

A shuffle's requests depend on its counts, not on its bytes: map files M (one per
``shuffle.FILE_BYTES`` of rows), partitions P (``raydata.partitions_for``) and reduce tasks R
(``shuffle.reduce_tasks``: one per ``shuffle.TASK_BYTES``). For each simulated size (GB of rows
shuffled) this computes the M, P and R that size gets with the build's constants, then writes M
small map files of P partitions (the same ``encode_map_file`` and ``storage.write_bytes`` a map
task runs; rows spread over every partition) and runs the reduce side's reads (the same
``read_partitions`` a reduce task runs, over the same contiguous ranges, ``task_bytes`` scaled by
the simulated size so R comes out as at full size). Ray is left out: it schedules these calls but
issues no store request of its own.

Counting: every call into ``common.storage`` is counted as the S3 requests it makes: a range of
``read_ranges`` is one ranged GET (s3fs's ``cat_ranges`` sends one per range), a ``write_bytes``
one PUT (objects here are far below the multipart threshold), a ``listdir`` one LIST; bytes read
are the ranges' lengths, bytes written the objects'. Sizes whose reduce side would make more
than ``--max-requests`` reads run ``--sample-tasks`` reduce tasks spread evenly over the R and
scale their counts by R / sampled (every task reads the same number of map files; its share of
bytes varies by a few per cent), marked "sampled".

Goals (issue 37): bytes read <= 1.1x bytes written; per 10x of size <= 11x requests and bytes
read. The map files live on local disk under ``--work`` (deleted after each size).
"""
from __future__ import annotations

import math
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

GB = 1 << 30


class Counter:
    """Wraps ``common.storage``'s request-making calls, counting S3 requests and bytes."""

    def __init__(self) -> None:
        from common import storage

        self.storage = storage
        self.real = {n: getattr(storage, n) for n in ("read_ranges", "write_bytes", "listdir")}
        self.reset()

    def reset(self) -> None:
        self.get = self.put = self.list = self.bytes_read = self.bytes_written = 0
        self.calls: list[tuple[int, int]] = []  # (ranges, bytes) per read_ranges call

    def __enter__(self) -> "Counter":
        real = self.real

        def read_ranges(requests):
            self.get += len(requests)
            self.bytes_read += sum(int(e) - int(s) for _, s, e in requests)
            self.calls.append((len(requests), sum(int(e) - int(s) for _, s, e in requests)))
            return real["read_ranges"](requests)

        def write_bytes(uri, data):
            self.put += 1
            self.bytes_written += len(data)
            return real["write_bytes"](uri, data)

        def listdir(uri):
            self.list += 1
            return real["listdir"](uri)

        for name, fn in (("read_ranges", read_ranges), ("write_bytes", write_bytes), ("listdir", listdir)):
            setattr(self.storage, name, fn)
        return self

    def __exit__(self, *exc: Any) -> None:
        for name, fn in self.real.items():
            setattr(self.storage, name, fn)


def counts_for(size_gb: float) -> dict[str, int]:
    """M, P and R of a shuffle of ``size_gb`` GB of rows with the build's constants."""
    from pipelines.engine import shuffle as sh
    from pipelines.engine.raydata import partitions_for

    total = int(size_gb * GB)
    m = max(1, math.ceil(total / sh.FILE_BYTES))
    p = partitions_for(total)
    r = max(1, min(p, max(sh.MIN_REDUCE_TASKS, math.ceil(total / sh.TASK_BYTES))))
    return {"bytes": total, "map_files": m, "partitions": p, "reduce_tasks": r}


def simulate(size_gb: float, work: Path, *, rows_per_file: int, max_requests: int,
             sample_tasks: int) -> dict[str, Any]:
    from pipelines.engine import shuffle as sh

    want = counts_for(size_gb)
    m, p = want["map_files"], want["partitions"]
    folder = work / f"simulate-{size_gb:g}gb"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    files = []
    t0 = time.perf_counter()
    with Counter() as count:
        for i in range(m):  # what a map task writes: rows over every partition, one object
            part = (np.arange(rows_per_file) + i) % p if rows_per_file >= p else rng.integers(0, p, rows_per_file)
            table = pa.table({"key": rng.integers(0, 2**62, rows_per_file), sh.PART: part.astype(np.int64)})
            data = sh.encode_map_file(table, p)
            name = f"map-{i:06d}.arrows"
            sh.storage.write_bytes(str(folder / name), data)
            files.append(sh.MapFile(name, len(data), rows_per_file))
        shuffled = sh.Shuffled(str(folder), p, tuple(files))
        map_side = {"get": count.get, "put": count.put, "list": count.list, "bytes_written": count.bytes_written}
        written = count.bytes_written
        # R as at full size: task bytes scaled by (bytes written here) / (bytes at full size)
        task_bytes = max(1, math.ceil(sh.TASK_BYTES * written / want["bytes"]))
        tasks = sh.reduce_tasks(shuffled, task_bytes)
        sampled = 2 * m * len(tasks) > max_requests
        chosen = ([tasks[int(j)] for j in np.unique(np.linspace(0, len(tasks) - 1, sample_tasks).round())]
                  if sampled else tasks)
        count.reset()
        rows = 0
        for lo, hi in chosen:
            rows += sum(t.num_rows for t in sh.read_partitions(shuffled, lo, hi) if t is not None)
        scale = len(tasks) / len(chosen)
        # read_partitions makes two read_ranges calls per task: the index reads, then the slices
        index_gets, index_bytes = (sum(c[i] for c in count.calls[0::2]) for i in (0, 1))
        reduce_side = {"get": round(count.get * scale), "put": count.put, "list": count.list,
                       "bytes_read": round(count.bytes_read * scale), "index_get": round(index_gets * scale),
                       "index_bytes": round(index_bytes * scale)}
    # At full size: the slices are the real bytes (each read once, as here), the index reads are
    # the same as here (they depend on M, P and R only), and every task finds data in every file.
    trailers = m * sh.trailer_bytes(p)
    full = {"bytes_written": want["bytes"] + trailers, "bytes_read": want["bytes"] + reduce_side["index_bytes"],
            "get": 2 * reduce_side["index_get"], "put": m}
    full["read_over_written"] = round(full["bytes_read"] / full["bytes_written"], 4)
    # The previous reduce side (one task per partition, each reading its record to the trailer's
    # end, then its slice): 2 x M x P GETs, M x sum over p of (12 (P - p) + 24) trailer bytes.
    full["before"] = {"get": 2 * m * p, "bytes_read": want["bytes"] + m * (6 * p * (p + 1) + 24 * p)}
    full["before"]["read_over_written"] = round(full["before"]["bytes_read"] / full["bytes_written"], 4)
    if not sampled:
        assert rows == m * rows_per_file, (rows, m * rows_per_file)  # every row read once
    shutil.rmtree(folder, ignore_errors=True)
    return {"size_gb": size_gb, **want, "reduce_tasks": len(tasks), "sampled_tasks": len(chosen) if sampled else None,
            "map": map_side, "reduce": reduce_side, "bytes_written": written,
            "read_over_written": round(reduce_side["bytes_read"] / written, 4), "full_size": full,
            "seconds": round(time.perf_counter() - t0, 1)}


def run_simulate(sizes: list[float], work: Path, *, rows_per_file: int = 256, max_requests: int = 1_000_000,
                 sample_tasks: int = 64) -> list[dict[str, Any]]:
    out = []
    for size in sizes:
        print(f"simulating {size:g} GB ...", flush=True)
        out.append(simulate(size, work, rows_per_file=rows_per_file, max_requests=max_requests,
                            sample_tasks=sample_tasks))
    return out


def simulate_report(runs: list[dict[str, Any]]) -> tuple[list[str], dict[str, bool]]:
    lines = ["measured on the small map files:",
             f"{'size':>8}{'M':>7}{'P':>6}{'R':>6}{'PUT':>7}{'GET':>12}{'index GET':>12}{'LIST':>5}"
             f"{'written MB':>11}{'read MB':>9}{'read/wr':>8}  note"]
    for r in runs:
        note = f"sampled {r['sampled_tasks']} of {r['reduce_tasks']} reduce tasks" if r["sampled_tasks"] else ""
        lines.append(f"{r['size_gb']:>6g}GB{r['map_files']:>7}{r['partitions']:>6}{r['reduce_tasks']:>6}"
                     f"{r['map']['put']:>7}{r['reduce']['get']:>12,}{r['reduce']['index_get']:>12,}"
                     f"{r['map']['list'] + r['reduce']['list']:>5}{r['bytes_written'] / 1e6:>11.1f}"
                     f"{r['reduce']['bytes_read'] / 1e6:>9.1f}{r['read_over_written']:>8.3f}  {note}")
    lines.append("at full size (slices at their real bytes; every task finds data in every map file):")
    lines.append(f"{'size':>8}{'PUT':>9}{'GET':>14}{'written GB':>12}{'read GB':>10}{'index MB':>10}{'read/wr':>9}"
                 f"{'before: GET':>14}{'read/wr':>9}")
    for r in runs:
        f = r["full_size"]
        lines.append(f"{r['size_gb']:>6g}GB{f['put']:>9,}{f['get']:>14,}{f['bytes_written'] / 2**30:>12.2f}"
                     f"{f['bytes_read'] / 2**30:>10.2f}{r['reduce']['index_bytes'] / 1e6:>10.1f}"
                     f"{f['read_over_written']:>9.4f}{f['before']['get']:>14,}{f['before']['read_over_written']:>9.3f}")
    goals = {"read_le_1.1x_written": all(r["full_size"]["read_over_written"] <= 1.1 for r in runs)}
    lines.append(f"{'✓' if goals['read_le_1.1x_written'] else '✗'} bytes read <= 1.1x bytes written at every "
                 "size (full size)")
    for a, b in zip(runs, runs[1:]):
        step = b["size_gb"] / a["size_gb"]
        g = b["full_size"]["get"] / max(1, a["full_size"]["get"])
        rd = b["full_size"]["bytes_read"] / max(1, a["full_size"]["bytes_read"])
        lines.append(f"{a['size_gb']:g} -> {b['size_gb']:g} GB ({step:g}x): GET {g:.1f}x, bytes read {rd:.1f}x, "
                     f"PUT {b['map_files'] / a['map_files']:.1f}x, reduce tasks {b['reduce_tasks'] / a['reduce_tasks']:.1f}x"
                     f"{'' if g <= 1.1 * step else '  (over 1.1x per step: GETs = 2 x M x R, both grow with the data)'}")
    goals["requests_linear"] = all(b["full_size"]["get"] <= 1.1 * b["size_gb"] / a["size_gb"] * a["full_size"]["get"]
                                   for a, b in zip(runs, runs[1:]))
    return lines, goals
