"""The counts one simulated size must reproduce (M map files, P partitions, the cluster's R) and
the scaled ``ShuffleConfig`` that makes a small input reproduce them (``scale_simulate.py``).

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

The reduce tasks R a run uses may be fewer than the cluster's (the store is too slow for the
cluster's at the largest sizes: ``scale_simulate_rate.py``), so ``shuffle.task_memory_mb`` is
scaled by ``s x R_cluster / R``: a reduce task then spills as many runs (its range's bytes over
its memory) as one of the cluster's R tasks at full size.

The previous design's counts (R following the data: ``R_old = max(8, min(P_old, ceil(bytes /
256 MiB)))``, ``P_old`` capped at 4,096; GET = 2 x M x R_old, PUT = M) are computed from that
formula, not measured, and printed beside the measured ones.
"""
from __future__ import annotations

import math
from typing import Any

GB = 1 << 30
MIB = 1 << 20
SKETCH = 112
ROW_BYTES = 8 + 8 + 4 + SKETCH + 8  # bucket, uid, file, sketch, _part: Arrow bytes per row
CLUSTER_CPUS = 2  # the measured shape (this machine); other shapes: --cluster (benchmarks/corpus/cluster_shape.py)


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
