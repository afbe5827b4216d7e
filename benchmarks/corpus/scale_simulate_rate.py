"""How fast moto's S3 server behind the counting proxy answers here (``measure_rate``, whose
client processes run ``probe``), and the reduce tasks R a simulation can afford at that rate
(``choose_reduce_tasks``), for ``scale_simulate.py``.

Why R is chosen, not taken from the cluster. moto and the proxy serve about 200 requests a
second on the 2 shared cores (measured first, by ``measure_rate``, with two client processes, and
printed); the reduce side makes ``2 x M x R`` ranged GETs, so with the cluster's ``R``
(``default_ranges``: 8 on 2 CPUs) the 10 TB size's 1.28 million GETs would take nearly two hours.
``--sim-reduce-tasks auto`` keeps M and P true and lowers R (``shuffle.reduce_tasks``, the same
for every size) to the largest of 8, 4, 2, 1 whose projected GET time at the largest size fits
``--sim-budget-minutes`` (if none fits, the fastest: below 2 tasks on 2 CPUs the rate halves,
so R = 1 is no faster than 2). R is fixed by the cluster, not the data, so the growth from size
to size is the same at any R, and the GETs at the cluster's R are ``2 x M x R`` (the identity
``tests/benchmarks/corpus/test_corpus_scale_simulate.py`` checks; printed as computed). The task
memory grows as R is lowered (``scale_simulate_plan.py``).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.corpus.scale_simulate_plan import CLUSTER_CPUS, cluster_ranges, true_counts
from benchmarks.shared import REPO


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
        # a client process runs ``probe`` (above) through the entry point's CLI: scale_simulate.py --probe
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
