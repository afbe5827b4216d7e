"""The driver's memory per read pass as the cluster and the data grow: the previous plan (blocks
from the cluster's CPUs, every task submitted at once) against the shipped one (one block per read
task up to ``raydata.MAX_TASK_BLOCKS``, at most ``in_flight.MAX_TASKS_IN_FLIGHT`` tasks in
flight), side by side in one run.

    .venv/bin/python benchmarks/corpus/driver_cluster.py [--cpus 2,128,1536,12288] [--tasks 49152]
        [--data-gb 1,10,100] [--data-cpus 1536] [--smoke] [--json OUT]

A cluster's CPU count is simulated where the plan read it (``ray.cluster_resources()``): the
previous plan's ``task_blocks`` is given it; the shipped plan reads none, so its rows differ only
by noise. Data is simulated as read tasks, one per ``parts.READ_TASK_BYTES`` (32 MB) of Parquet:
N tiny parts (one row group of 64 rows each) stand in for N tasks, so the driver's cost per task
shows without the data's. Each (C, N, plan) runs in a FRESH child process on local Ray (2 CPUs):
``Parts.read`` and a writer-like ``map_batches`` (one summary row per block, as
``parts.run_writers``), then the driver's peak RSS (VmHWM). The per-C rows read ``--tasks`` tasks
(enough that the previous plan's 4 blocks per CPU are all used at the largest C); the per-size
rows run at ``--data-cpus``. Ratios: each plan's largest over smallest row, per table.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.corpus.driver_scale import _summary, _vm_hwm_mb, write_parts  # noqa: E402


def previous_blocks(tasks: int, cpus: int) -> int:
    """The previous plan: 4 blocks per CPU, at least 16, and one per 32 tasks up to 1,024."""
    by_data = min(-(-tasks // 32), 1024)
    return max(1, min(tasks, max(16, 4 * cpus, by_data)))


def child(folder: str, n: int, cpus: int, plan: str) -> dict:
    import ray
    from ray.data._internal.execution.backpressure_policy import ENABLED_BACKPRESSURE_POLICIES

    from pipelines.engine import in_flight, raydata
    from pipelines.engine.parts import Parts

    raydata.init_ray(num_cpus=2)
    if plan == "before":
        raydata.task_blocks = lambda tasks: previous_blocks(tasks, cpus)
        ray.data.DataContext.get_current().set_config(in_flight.CONFIG_KEY, list(ENABLED_BACKPRESSURE_POLICIES))
    files = tuple({"name": f"part-{i:06d}.parquet", "rows": 64,
                   "bytes": os.path.getsize(f"{folder}/part-{i:06d}.parquet"), "row_groups": 1} for i in range(n))
    start = time.perf_counter()
    ds = Parts(folder, files).read().map_batches(_summary, batch_format="numpy", batch_size=None)
    rows = blocks = 0
    for batch in ds.iter_batches(batch_size=1024, batch_format="numpy"):  # as run_writers takes them
        rows += int(batch["rows"].sum())
        blocks += len(batch["rows"])
    seconds = time.perf_counter() - start
    ray.shutdown()
    assert rows == 64 * n, (rows, n)
    return {"tasks": n, "cpus": cpus, "plan": plan, "blocks": blocks, "seconds": round(seconds, 1),
            "driver_peak_rss_mb": round(_vm_hwm_mb(), 1)}


def run_child(folder: Path, n: int, cpus: int, plan: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", str(folder), str(n), str(cpus), plan],
                         capture_output=True, text=True, cwd=REPO)
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def ratios(rows: list[dict], key: str) -> dict[str, float]:
    """Per plan: peak RSS at the largest ``key`` over the smallest."""
    out = {}
    for plan in ("before", "after"):
        mine = sorted((r for r in rows if r["plan"] == plan), key=lambda r: r[key])
        if len(mine) > 1:
            out[plan] = round(mine[-1]["driver_peak_rss_mb"] / mine[0]["driver_peak_rss_mb"], 2)
    return out


def main() -> int:
    from pipelines.engine.parts import READ_TASK_BYTES

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpus", default="2,128,1536,12288", help="simulated cluster CPU counts")
    p.add_argument("--tasks", type=int, default=49_152, help="read tasks of the per-C rows")
    p.add_argument("--data-gb", default="1,10,100", help="simulated data sizes (GB of Parquet)")
    p.add_argument("--data-cpus", type=int, default=1536, help="simulated CPUs of the per-size rows")
    p.add_argument("--smoke", action="store_true", help="tiny sizes: checks that it runs")
    p.add_argument("--work", default=None)
    p.add_argument("--json")
    p.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]), int(args.child[2]), args.child[3])))
        return 0
    cpus = [int(x) for x in args.cpus.split(",") if x]
    sizes = [float(x) for x in args.data_gb.split(",") if x]
    if args.smoke:
        cpus, args.tasks, sizes, args.data_cpus = [2, 64], 256, [0.1, 1], 64
    data_tasks = [max(1, round(gb * 1e9 / READ_TASK_BYTES)) for gb in sizes]
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((ln.split(":", 1)[1].strip() for ln in cpu.splitlines() if ln.startswith("Model name")), "?")
    print(f"CPU: {model}; load average {os.getloadavg()}", flush=True)
    work = Path(args.work or tempfile.mkdtemp(prefix="driver-cluster-"))
    write_parts(work / "parts", max([args.tasks if cpus else 0, *data_tasks]))
    by_cpus, by_data = [], []
    for c in cpus:
        for plan in ("before", "after"):
            r = run_child(work / "parts", args.tasks, c, plan)
            by_cpus.append(r)
            print(f"C {c:>6}  tasks {args.tasks:>6}  {plan:<6}  blocks {r['blocks']:>6}  driver peak RSS "
                  f"{r['driver_peak_rss_mb']:>7.1f} MB  ({r['seconds']} s)", flush=True)
    for gb, n in zip(sizes, data_tasks):
        for plan in ("before", "after"):
            r = run_child(work / "parts", n, args.data_cpus, plan)
            r["gb"] = gb
            by_data.append(r)
            print(f"{gb:>5g} GB  tasks {n:>6}  C {args.data_cpus}  {plan:<6}  blocks {r['blocks']:>6}  driver peak RSS "
                  f"{r['driver_peak_rss_mb']:>7.1f} MB  ({r['seconds']} s)", flush=True)
    flat_c, flat_data = ratios(by_cpus, "cpus"), ratios(by_data, "tasks")
    print(f"largest / smallest C:    {flat_c}")
    print(f"largest / smallest data: {flat_data}")
    print(f"load average {os.getloadavg()}")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"cpu": model, "by_cpus": by_cpus, "by_data": by_data,
                                               "ratio_cpus": flat_c, "ratio_data": flat_data}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
