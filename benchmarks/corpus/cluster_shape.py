"""One storage shuffle's requests, bytes, task memory, local disk and driver bytes at a cluster's
shape, this design and the previous one side by side (``scale.py --simulate SIZES
--cluster NODESxCPUS[,..]``).

    .venv/bin/python benchmarks/corpus/scale.py --simulate 1,100,1000,10000 --cluster 2x1,8x16,64x192 [--json OUT]

Every figure here is DERIVED: arithmetic from the shuffle's own functions and constants
(``shuffle.default_ranges`` at the shape's CPUs, ``map_task.map_file_bytes``,
``raydata.partitions_for``, ``node_space``'s bounds, the default ``ShuffleConfig``), not a run: a
64 x 192-CPU cluster and 10 TB are not on this machine. What the arithmetic rests on is measured
elsewhere, at small scale, through real requests: ``tests/pipelines/engine/test_map_task.py``
counts two reads per (map file, range) and the growth at 4x the data with 4x the reduce tasks,
``tests/flows/test_build_corpus_requests.py`` a whole s3:// build through a counting proxy, and
``scale.py --simulate`` without ``--cluster`` the 2-CPU shape through moto.

Per size and shape: reduce tasks ``R`` (one per CPU, or one per 256 MiB of data where fewer),
map files ``M`` (of ``max(map_file_mb, R x slice_mb)``), GETs ``2 M R`` (index record, slice) and
their mean size, PUTs (one per map file, plus its parts when a streamed map file is uploaded in
parts of s3fs's 50 MiB, plus the HEAD that checks it), the growth of the requests at 4x the data
(the goal: <= 4.6x), a map task's and a reduce task's memory and local disk, each node's spill,
the object store the map tasks in flight pin per node, and the driver's bytes for the list of map
files (54 bytes a file, ``MapFiles``). The previous design: map files of 128 MiB whatever R, two
reduce tasks per CPU.
"""
from __future__ import annotations

import math
from typing import Any

GB = 1 << 30
MIB = 1 << 20
PART_BYTES = 50 * MIB  # s3fs's multipart part size
MAP_FILE_ENTRY = 54  # bytes per map file in the driver's MapFiles (docs/build-corpus.md)
CPU_MEMORY = 4 * GB  # per CPU, for Ray's default object store (30% of memory)


def parse_cluster(text: str) -> list[tuple[int, int]]:
    """``"2x1,8x16"`` as ``[(2, 1), (8, 16)]``; ValueError naming the bad item."""
    out = []
    for item in text.split(","):
        nodes, _, cpus = item.strip().lower().partition("x")
        if not (nodes.isdigit() and cpus.isdigit() and int(nodes) > 0 and int(cpus) > 0):
            raise ValueError(f"--cluster {item!r}: want NODESxCPUS, e.g. 64x192")
        out.append((int(nodes), int(cpus)))
    return out


def counts(size_gb: float, nodes: int, cpus_per_node: int, *, previous: bool = False) -> dict[str, Any]:
    """One shuffle of ``size_gb`` GB on ``nodes`` x ``cpus_per_node`` CPUs (derived)."""
    from pipelines.config import ShuffleConfig
    from pipelines.engine import node_space, shuffle
    from pipelines.engine.map_task import map_file_bytes
    from pipelines.engine.raydata import partitions_for
    from pipelines.engine.spill import MAX_RUNS

    cfg = ShuffleConfig()
    total = int(size_gb * GB)
    cpus = nodes * cpus_per_node
    p = partitions_for(total, partition_bytes=cfg.partition_bytes)
    if previous:
        r = max(1, min(p, min(max(shuffle.MIN_REDUCE_TASKS, 2 * cpus),
                              max(shuffle.MIN_REDUCE_TASKS, math.ceil(p / shuffle.PARTITIONS_PER_RANGE)))))
        target = cfg.file_bytes
    else:
        r = shuffle.default_ranges(p, cpus=cpus)
        target = map_file_bytes(cfg.file_bytes, r, cfg.slice_bytes)
    m = max(1, math.ceil(total / target))
    streamed = target > cfg.file_bytes
    gets = 2 * m * r
    puts = m * (1 + (math.ceil(target / PART_BYTES) + 1 if streamed else 0))  # + create/complete of a multipart
    heads = m
    node = node_space.Node(node_id="n", cpus=cpus_per_node, object_store_bytes=int(0.3 * CPU_MEMORY * cpus_per_node))
    in_flight = node_space.map_tasks_in_flight([node] * nodes, target, per_cpu=shuffle.IN_FLIGHT_PER_CPU,
                                               at_least=shuffle.MIN_IN_FLIGHT)
    if previous:
        in_flight = max(shuffle.MIN_IN_FLIGHT, shuffle.IN_FLIGHT_PER_CPU * cpus)
    map_tasks_per_node = math.ceil(min(in_flight, m) / nodes)
    return {
        "size_gb": size_gb, "cluster": f"{nodes}x{cpus_per_node}", "cpus": cpus, "partitions": p, "reduce_tasks": r,
        "map_file_bytes": min(target, total), "map_files": m, "streamed": streamed,
        "GET": gets, "PUT": puts, "HEAD": heads, "requests": gets + puts + heads,
        "mean_get_bytes": (total + 20 * m * r) / gets,
        "map_task_memory": (cfg.file_bytes + 2 * MIB * 4 if streamed else 3 * min(target, total)),
        "map_task_disk": 2 * target if streamed else 0,
        "reduce_task_memory": cfg.memory_bytes + cfg.partition_bytes,
        "reduce_task_disk": node_space.task_spill_bytes(-(-total // r), cfg.memory_bytes, MAX_RUNS),
        "node_spill": node_space.node_spill_bytes(total, r, cpus_per_node, cfg.memory_bytes, MAX_RUNS),
        "map_disk_per_node": map_tasks_per_node * (2 * target if streamed else 0),
        "store_pinned_per_node": node_space.store_pinned_per_node(min(in_flight, m), [node] * nodes, min(target, total)),
        "driver_map_list": MAP_FILE_ENTRY * m,
        "derived": True,
    }


def table(sizes: list[float], shapes: list[tuple[int, int]]) -> dict[str, Any]:
    rows = []
    for nodes, cpus in shapes:
        for size in sizes:
            now, before = counts(size, nodes, cpus), counts(size, nodes, cpus, previous=True)
            now4, before4 = counts(4 * size, nodes, cpus), counts(4 * size, nodes, cpus, previous=True)
            rows.append({**now, "growth_4x": now4["requests"] / now["requests"],
                         "previous": {**before, "growth_4x": before4["requests"] / before["requests"]}})
    return {"rows": rows, "goals": goals(rows)}


def goals(rows: list[dict[str, Any]]) -> dict[str, bool]:
    big = [r for r in rows if r["cluster"] == "64x192" and r["size_gb"] >= 10_000]
    out = {"requests at 4x data <= 4.6x (every shape and size)": all(r["growth_4x"] <= 4.6 for r in rows)}
    if big:  # only where the table has that shape and size
        out["mean GET >= 1 MiB at 10 TB on 64x192"] = all(r["mean_get_bytes"] >= MIB for r in big)
    return {**out, "reduce tasks >= min(CPUs, data / 256 MiB)": all(
                r["reduce_tasks"] >= min(r["cpus"], math.ceil(r["size_gb"] * GB / (256 * MIB)), r["partitions"])
                for r in rows)}


def _b(n: float) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", GB), ("MiB", MIB), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def report(res: dict[str, Any]) -> list[str]:
    lines = ["DERIVED figures (arithmetic from the shuffle's functions; measured at small scale by the tests named "
             "in benchmarks/corpus/cluster_shape.py), default ShuffleConfig, 4 GiB of memory per CPU",
             f"{'cluster':>8} {'size':>8} {'R':>6} {'M':>7} {'GET':>12} {'mean GET':>9} {'4x data':>8} "
             f"{'prev GET':>14} {'prev mean':>9} {'prev 4x':>8} {'map task mem/disk':>19} {'reduce disk':>11} "
             f"{'node spill':>10} {'store/node':>10} {'driver list':>11}"]
    for r in res["rows"]:
        p = r["previous"]
        lines.append(f"{r['cluster']:>8} {r['size_gb']:>6g}GB {r['reduce_tasks']:>6} {r['map_files']:>7} "
                     f"{r['GET']:>12,} {_b(r['mean_get_bytes']):>9} {r['growth_4x']:>7.2f}x {p['GET']:>14,} "
                     f"{_b(p['mean_get_bytes']):>9} {p['growth_4x']:>7.2f}x "
                     f"{_b(r['map_task_memory']) + ' / ' + _b(r['map_task_disk']):>19} {_b(r['reduce_task_disk']):>11} "
                     f"{_b(r['node_spill']):>10} {_b(r['store_pinned_per_node']):>10} {_b(r['driver_map_list']):>11}")
    for goal, ok in res["goals"].items():
        lines.append(f"goal: {goal}: {'met' if ok else 'NOT met'}")
    return lines
