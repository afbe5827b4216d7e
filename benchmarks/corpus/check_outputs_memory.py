"""The driver's memory while the runner checks a stage's outputs on S3, as the folder grows: one
listing of the whole folder (the previous check) against listings by key prefix of at most
``--group`` names (``checks.check_outputs``), side by side, with the LIST requests each made.

    .venv/bin/python benchmarks/corpus/check_outputs_memory.py [--objects 1000,2000,4000,8000] [--group 500]

A stage of a 10 TB build writes ~300,000 parts into one folder, and the check runs in the build's
driver. Here N empty-ish objects named as parts are (``part-<24 hex>.parquet``) go to a moto
server behind the counting proxy (``benchmarks/shared/counting_s3.py``), and each check runs in this
process with ``tracemalloc`` on: the figure is the peak of Python allocations during the check
(s3fs's listing is Python objects, a dict per entry), less what was allocated before it. "before"
forces one listing (``LIST_GROUP`` above N); "after" uses ``--group`` (the shipped default is
``checks.LIST_GROUP`` = 10,000: --group stands for it at these small sizes, as ``shuffle.*`` sizes
stand for big ones in ``scale.py --simulate``). The CPU is printed; memory does not
depend on the load.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def names(n: int) -> list[str]:
    return [f"part-{hashlib.blake2b(str(i).encode(), digest_size=12).hexdigest()}.parquet" for i in range(n)]


def measure(folder: str, expected: dict[str, int], group: int, proxy) -> dict:
    from pipelines.orchestration import checks

    checks.LIST_GROUP = group
    before = proxy.totals()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    checked = checks.check_outputs({folder: expected})
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    lists = proxy.totals()["requests"].get("LIST", 0) - before["requests"].get("LIST", 0)
    assert checked == len(expected)
    return {"peak_mb": peak / 1e6, "lists": lists}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--objects", default="1000,2000,4000,8000")
    p.add_argument("--group", type=int, default=500)
    args = p.parse_args()
    from benchmarks.shared.counting_s3 import CountingS3, pointed_at

    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((ln.split(":", 1)[1].strip() for ln in cpu.splitlines() if ln.startswith("Model name")), "?")
    print(f"CPU: {model}; load average {os.getloadavg()}", flush=True)
    sizes = sorted(int(x) for x in args.objects.split(","))
    with CountingS3() as s3, pointed_at(s3.env):
        import fsspec

        root = s3.bucket("check-outputs") + "/stage/data"
        fs = fsspec.filesystem("s3", use_listings_cache=False)
        all_names, have = names(max(sizes)), 0
        rows = []
        for n in sizes:
            fs.pipe({f"{root}/{name}"[5:]: b"x" * (i % 7 + 1) for i, name in enumerate(all_names[have:n], have)})
            have = n
            expected = {name: i % 7 + 1 for i, name in enumerate(all_names[:n])}
            b = measure(root, expected, n + 1, s3.proxy)
            a = measure(root, expected, args.group, s3.proxy)
            rows.append((n, b, a))
            print(f"{n:>7} objects: peak before {b['peak_mb']:6.2f} MB ({b['lists']} LIST)  after "
                  f"{a['peak_mb']:6.2f} MB ({a['lists']} LIST)  before / after {b['peak_mb'] / a['peak_mb']:.2f}x",
                  flush=True)
    (n0, b0, a0), (n1, b1, a1) = rows[0], rows[-1]
    print(f"{n0} -> {n1} objects ({n1 / n0:.0f}x): before {b1['peak_mb'] / b0['peak_mb']:.2f}x, "
          f"after {a1['peak_mb'] / a0['peak_mb']:.2f}x; per object before "
          f"{(b1['peak_mb'] - b0['peak_mb']) * 1e3 / (n1 - n0):.2f} KB, after "
          f"{(a1['peak_mb'] - a0['peak_mb']) * 1e3 / (n1 - n0):.2f} KB")
    print(f"load average {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
