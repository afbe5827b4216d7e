"""The driver's memory per read pass as the number of read tasks grows: blocks with an uncapped
floor from the data (one per 32 tasks: the previous plan) against the shipped plan, whose floor
stops at ``raydata.MAX_DATA_BLOCKS``, side by side.

    .venv/bin/python benchmarks/corpus/driver_scale.py [--tasks 4000,16000,64000,128000] [--before-max N]
        [--json OUT]

A stage's input is read by the project's read tasks (``parts.Parts.read``: one per ~32 MB run
of row groups), so at 10 TB a pass has about 300,000 of them. Here N tiny Parquet parts (one row
group, 64 rows each) stand in for N read tasks, so the driver's cost per task shows without the
data's. Each (N, plan) runs in a FRESH child process (local Ray, 2 CPUs): it reads every part
through ``Parts.read`` and a writer-like ``map_batches`` that returns one summary row per block
(as ``parts.run_writers`` does), gathers the rows, and reports the driver's peak RSS (VmHWM)
and the wall time. "before" sets ``raydata.MAX_DATA_BLOCKS`` above N/32 (the floor uncapped, as
it was); "after" is the shipped plan; both plan the tasks as one Arrow table. ``--before-max``
skips "before" above that N. The CPU and load average are printed.
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


def _vm_hwm_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _summary(batch):
    import numpy as np

    return {"rows": np.array([len(batch["uid"])])}


def child(folder: str, n: int, plan: str) -> dict:
    import numpy as np
    import ray

    from pipelines.engine import raydata
    from pipelines.engine.parts import Parts

    if plan == "before":
        raydata.MAX_DATA_BLOCKS = n + 1
    raydata.init_ray(num_cpus=2)
    files = tuple({"name": f"part-{i:06d}.parquet", "rows": 64, "bytes": os.path.getsize(f"{folder}/part-{i:06d}.parquet"),
                   "row_groups": 1} for i in range(n))
    before = _vm_hwm_mb()
    start = time.perf_counter()
    ds = Parts(folder, files).read().map_batches(_summary, batch_format="numpy", batch_size=None)
    summaries = ds.take_all()
    rows = sum(int(r["rows"]) for r in summaries)
    seconds = time.perf_counter() - start
    blocks = len(summaries)  # one summary row per block the writer saw
    ray.shutdown()
    assert rows == 64 * n, (rows, n)
    return {"tasks": n, "plan": plan, "driver_peak_rss_mb": round(_vm_hwm_mb(), 1),
            "rss_before_read_mb": round(before, 1), "seconds": round(seconds, 2), "blocks": blocks,
            "rows": int(np.int64(rows))}


def write_parts(folder: Path, n: int) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    have = len(list(folder.glob("part-*.parquet")))
    for i in range(have, n):
        uid = np.arange(64, dtype=np.int64) + 64 * i
        pq.write_table(pa.table({"uid": uid, "text": [f"doc {u}" for u in uid]}), folder / f"part-{i:06d}.parquet")


def summary(results: list[dict]) -> list[str]:
    """Side by side where both plans ran (before / after), and how each plan's driver peak grows
    per read task between consecutive sizes (KB per task)."""
    lines = []
    by = {(r["tasks"], r["plan"]): r for r in results}
    for n in sorted({r["tasks"] for r in results}):
        if (n, "before") in by and (n, "after") in by:
            b, a = by[n, "before"]["driver_peak_rss_mb"], by[n, "after"]["driver_peak_rss_mb"]
            lines.append(f"{n:>7} tasks: driver peak RSS before / after = {b:.1f} / {a:.1f} MB = {b / a:.2f}x")
    for plan in ("before", "after"):
        runs = sorted((r for r in results if r["plan"] == plan), key=lambda r: r["tasks"])
        for lo, hi in zip(runs, runs[1:]):
            per_task = (hi["driver_peak_rss_mb"] - lo["driver_peak_rss_mb"]) * 1024 / (hi["tasks"] - lo["tasks"])
            lines.append(f"{plan:<6} {lo['tasks']:>6} -> {hi['tasks']:>6} tasks: "
                         f"{hi['driver_peak_rss_mb'] / lo['driver_peak_rss_mb']:.2f}x peak, {per_task:.1f} KB per added task")
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", default="4000,16000,64000,128000")
    p.add_argument("--before-max", type=int, default=10**9)
    p.add_argument("--work", default=None)
    p.add_argument("--json")
    p.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]), args.child[2])))
        return 0
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((ln.split(":", 1)[1].strip() for ln in cpu.splitlines() if ln.startswith("Model name")), "?")
    print(f"CPU: {model}; load average {os.getloadavg()}", flush=True)
    sizes = [int(x) for x in args.tasks.split(",")]
    work = Path(args.work or tempfile.mkdtemp(prefix="driver-scale-"))
    write_parts(work / "parts", max(sizes))
    results = []
    for n in sizes:
        for plan in ("before", "after"):
            if plan == "before" and n > args.before_max:
                continue
            out = subprocess.run([sys.executable, __file__, "--child", str(work / "parts"), str(n), plan],
                                 capture_output=True, text=True, cwd=REPO)
            if out.returncode:
                print(out.stderr[-3000:], file=sys.stderr)
                return 1
            r = json.loads(out.stdout.strip().splitlines()[-1])
            results.append(r)
            print(f"{n:>7} tasks  {plan:<6}  blocks {r['blocks']!s:>6}  driver peak RSS {r['driver_peak_rss_mb']:>8.1f} MB"
                  f"  ({r['seconds']:.1f} s)", flush=True)
    for line in summary(results):
        print(line)
    print(f"load average {os.getloadavg()}")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"cpu": model, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
