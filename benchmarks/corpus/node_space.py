"""What a shuffle asks of each node, derived (arithmetic, nothing run) from pipelines.engine.node_space.

    .venv/bin/python benchmarks/corpus/node_space.py [--ram-per-cpu-gib 4] [--ranges-per-cpu 1]

For cluster shapes (nodes x CPUs per node) and data sizes: R reduce tasks (``--ranges-per-cpu``
per CPU of the cluster, or one per 256 MiB of data where that is fewer: the shuffle's rule,
``pipelines.engine.shuffle.default_ranges``, with two per CPU), the peak spill of one reduce task
and of one node (``node_space.task_spill_bytes`` / ``node_spill_bytes``: min(R, CPUs) tasks at
once), and the object store the map tasks in flight pin on one node, before (two per CPU of the
cluster, at least 16, however small the node's store) and after (``node_space.map_tasks_in_flight``:
within half of every node's store), both capped by the map files there are. A node's object store
is Ray's default: 30% of its memory (``--ram-per-cpu-gib`` per CPU), at most 200 GB.
"""
from __future__ import annotations

import argparse
import math

from pipelines.engine import node_space as ns
from pipelines.engine.shuffle import FILE_BYTES, IN_FLIGHT_PER_CPU, MIN_IN_FLIGHT, TASK_MEMORY_BYTES
from pipelines.engine.spill import MAX_RUNS

SHAPES = [(2, 1), (8, 16), (64, 192)]
DATA = [("1 GB", 10**9), ("100 GB", 10**11), ("10 TB", 10**13), ("100 TB", 10**14)]
RAY_STORE_SHARE, RAY_STORE_CAP = 0.3, 200 * 10**9  # Ray's default object store: share of memory, cap


def row(nodes: int, cpus: int, data: int, *, ram_per_cpu: int, ranges_per_cpu: float) -> dict:
    store = min(RAY_STORE_CAP, int(RAY_STORE_SHARE * ram_per_cpu * cpus))
    cluster = [ns.Node(f"n{i}", cpus, store) for i in range(nodes)]
    total_cpus = nodes * cpus
    ranges = max(1, min(math.ceil(ranges_per_cpu * total_cpus), math.ceil(data / (256 << 20))))
    map_files = math.ceil(data / FILE_BYTES)
    before = min(map_files, max(MIN_IN_FLIGHT, IN_FLIGHT_PER_CPU * total_cpus))
    after = min(map_files, ns.map_tasks_in_flight(cluster, FILE_BYTES, per_cpu=IN_FLIGHT_PER_CPU,
                                                  at_least=MIN_IN_FLIGHT))
    return {"ranges": ranges,
            "task": ns.task_spill_bytes(-(-data // ranges), TASK_MEMORY_BYTES, MAX_RUNS),
            "node": ns.node_spill_bytes(data, ranges, cpus, TASK_MEMORY_BYTES, MAX_RUNS),
            "store": store, "before": before, "after": after,
            "pinned_before": ns.store_pinned_per_node(before, cluster, FILE_BYTES),
            "pinned_after": ns.store_pinned_per_node(after, cluster, FILE_BYTES)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ram-per-cpu-gib", type=float, default=4, help="memory per CPU of a node (GiB)")
    parser.add_argument("--ranges-per-cpu", type=float, default=1, help="reduce tasks per CPU of the cluster")
    args = parser.parse_args()
    h = ns.human_bytes
    print(f"derived, not measured: map files {h(FILE_BYTES)}, reduce budget {h(TASK_MEMORY_BYTES)}, merges of "
          f"{MAX_RUNS}, {args.ranges_per_cpu:g} reduce task(s) per CPU, {args.ram_per_cpu_gib:g} GiB of memory per "
          f"CPU (object store 30%, at most 200 GB)")
    print("| nodes x CPUs | data | R | spill / task | spill / node | store / node | pinned before (tasks) "
          "| pinned after (tasks) |")
    print("|---|---|---|---|---|---|---|---|")
    for nodes, cpus in SHAPES:
        for label, data in DATA:
            r = row(nodes, cpus, data, ram_per_cpu=int(args.ram_per_cpu_gib * (1 << 30)),
                    ranges_per_cpu=args.ranges_per_cpu)
            print(f"| {nodes} x {cpus} | {label} | {r['ranges']} | {h(r['task'])} | {h(r['node'])} | {h(r['store'])} "
                  f"| {h(r['pinned_before'])} ({r['before']}) | {h(r['pinned_after'])} ({r['after']}) |")


if __name__ == "__main__":
    main()
