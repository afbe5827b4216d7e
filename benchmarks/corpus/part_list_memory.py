"""What a stage's part list costs the build's driver, as the parts grow: the previous marker
(every part a JSON object in ``_SUCCESS``, loaded as a dict per part and kept by the runner for
every stage) against the shipped one (``pipelines.engine.part_list``: the marker names a list
file beside it; the list is loaded as columns only by the stage that reads the parts), side by
side in one process.

    .venv/bin/python benchmarks/corpus/part_list_memory.py [--parts 10000,40000,160000,320000]

Per size N, one stage's N data parts and N quarantine parts (names as the writers make them,
``part-<24 hex>``; rows, bytes and row groups drawn at random), written to a local folder:

* marker: the bytes of ``_SUCCESS`` (and, after, of the two list files beside it);
* held per loaded marker: what the runner keeps for a finished stage (before: both lists as
  dicts; after: the marker's ``StoredParts`` only);
* held while a stage reads its input: the data list loaded (before: dicts; after: a
  ``PartList``);
* load time: reading and parsing the marker (after: and loading the data list), best of 3;
* publish: the peak of Python allocations while the quarantine's list is published (before:
  format 3, every part as an object, then one JSON file of them all; after: format 4, the
  stage's list file copied as it is; Arrow's zero-copy read of it is not in the figure).

Memory is Python's (``tracemalloc``) plus Arrow's (``pyarrow.total_allocated_bytes``), both held
after the load, less what was held before. A 10 TB build writes ~300,000 parts a stage. The CPU
is printed; the memory figures do not depend on it or on the load, the times are a ratio.
"""
from __future__ import annotations

import argparse
import dataclasses
import gc
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def records(n: int, seed: int, suffix: str) -> list[dict]:
    import numpy as np

    rng = np.random.default_rng(seed)
    rows, groups = rng.integers(100, 20_000, n), rng.integers(1, 16, n)
    size = rows * rng.integers(500, 4_000, n)
    return [{"name": f"part-{hashlib.blake2b(f'{seed}:{i}'.encode(), digest_size=12).hexdigest()}.{suffix}",
             "rows": int(rows[i]), "bytes": int(size[i]), "row_groups": int(groups[i])} for i in range(n)]


def held(load):
    """(what ``load()`` returns, bytes it keeps allocated: Python's and Arrow's)."""
    import pyarrow as pa

    gc.collect()
    tracemalloc.start()
    base_py, base_arrow = tracemalloc.get_traced_memory()[0], pa.total_allocated_bytes()
    value = load()
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - base_py + pa.total_allocated_bytes() - base_arrow
    tracemalloc.stop()
    return value, used


def best_time(fn, rounds: int = 3) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(n: int, root: Path) -> dict:
    from pipelines.engine.part_list import PartListBuilder, StoredParts
    from pipelines.orchestration.stages import FILES_LIST, REJECTED_LIST, StageResult

    data, quarantine = records(n, 1, "parquet"), [
        {k: v for k, v in r.items() if k != "row_groups"} for r in records(n, 2, "jsonl.zst")]
    stats = {"documents_in": 10 * n, "documents_out": 9 * n}
    before_dir, after_dir = root / f"before-{n}", root / f"after-{n}"
    before_dir.mkdir(), after_dir.mkdir()
    # before: the previous marker, every part in it (``dataclasses.asdict`` of the old StageResult)
    old = {"name": "filter", "key": "k", "stats": stats, "files": data, "rejected": quarantine, "product": {},
           "pruned": False}
    (before_dir / "_SUCCESS").write_text(json.dumps(old, indent=2))
    # after: the shipped runner's writes (lists built as the writers' summaries arrive)
    built = []
    for recs in (data, quarantine):
        b = PartListBuilder()
        for i in range(0, len(recs), 3):  # a summary names a few parts
            b.add(recs[i:i + 3])
        built.append(b.build())
    result = StageResult(name="filter", key="k", stats=stats,
                         files=StoredParts.save(str(after_dir), FILES_LIST, built[0]),
                         rejected=StoredParts.save(str(after_dir), REJECTED_LIST, built[1]), folder=str(after_dir))
    (after_dir / "_SUCCESS").write_text(json.dumps(result.marker(), indent=2))
    assert list(result.data_parts()) == sorted(data, key=lambda r: r["name"])  # the same parts, listed
    assert result.rejected_parts().names.to_pylist() == sorted(r["name"] for r in quarantine)
    del built

    def old_marker():
        return json.loads((before_dir / "_SUCCESS").read_text())

    def new_marker():
        return StageResult.from_marker(json.loads((after_dir / "_SUCCESS").read_text()), str(after_dir))

    # the least of three: what a load keeps is the same each time, while tracemalloc and Arrow's
    # pool also count what another thread of the process allocates meanwhile (a few KB under a
    # loaded test worker, the whole of what the new marker keeps)
    marker_before = min(held(old_marker)[1] for _ in range(3))
    marker_after = min(held(new_marker)[1] for _ in range(3))
    _, input_before = held(lambda: old_marker()["files"])
    _, input_after = held(lambda: new_marker().data_parts())
    def peak(fn) -> int:
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.get_traced_memory()[0]
        fn()
        used = tracemalloc.get_traced_memory()[1] - base
        tracemalloc.stop()
        return used

    def publish_before():  # format 3: every stage's parts as objects, then one JSON list of them all
        from pipelines import schema

        infos = [schema.RejectedInfo(stage="filter", path=f"rejected/filter-k/{f['name']}", records=f["rows"],
                                     bytes=f["bytes"]) for f in old_marker()["rejected"]]
        rows = ",\n".join(json.dumps(dataclasses.asdict(r), sort_keys=True) for r in infos)
        data = f'{{"format_version": 3, "rejected": [\n{rows}\n]}}\n'.encode()
        hashlib.sha256(data).hexdigest()

    def publish_after():  # format 4: the stage's list file copied as it is (publish.quarantine_list)
        from pipelines import schema

        data = new_marker().rejected.read_checked(str(after_dir))
        (after_dir / "copy.arrow").write_bytes(data)
        schema.rejected_list("filter", "rejected/filter-k", data)

    return {
        "parts": n, "publish_mb_before": peak(publish_before) / 1e6, "publish_mb_after": peak(publish_after) / 1e6,
        "marker_kb_before": (before_dir / "_SUCCESS").stat().st_size / 1e3,
        "marker_kb_after": (after_dir / "_SUCCESS").stat().st_size / 1e3,
        "lists_kb_after": sum((after_dir / f).stat().st_size for f in (FILES_LIST, REJECTED_LIST)) / 1e3,
        "held_marker_mb_before": marker_before / 1e6, "held_marker_mb_after": marker_after / 1e6,
        "held_input_mb_before": input_before / 1e6, "held_input_mb_after": input_after / 1e6,
        "load_s_before": best_time(lambda: old_marker()["files"]),
        "load_s_after": best_time(lambda: new_marker().data_parts()),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--parts", default="10000,40000,160000,320000")
    args = p.parse_args()
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((ln.split(":", 1)[1].strip() for ln in cpu.splitlines() if ln.startswith("Model name")), "?")
    print(f"CPU: {model}; load average {os.getloadavg()}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in args.parts.split(",")):
            r = measure(n, Path(tmp))
            rows.append(r)
            print(f"{n:>8,} parts | marker {r['marker_kb_before']:>9,.0f} KB -> {r['marker_kb_after']:.1f} KB "
                  f"(+ lists {r['lists_kb_after']:,.0f} KB) | held per loaded marker {r['held_marker_mb_before']:7.2f} "
                  f"-> {r['held_marker_mb_after']:.4f} MB | held while read {r['held_input_mb_before']:7.2f} -> "
                  f"{r['held_input_mb_after']:6.2f} MB ({r['held_input_mb_before'] / r['held_input_mb_after']:.1f}x) "
                  f"| load {r['load_s_before']:.3f} -> {r['load_s_after']:.3f} s "
                  f"({r['load_s_before'] / max(r['load_s_after'], 1e-9):.1f}x) | publish's quarantine list: peak "
                  f"{r['publish_mb_before']:.1f} -> {r['publish_mb_after']:.1f} MB", flush=True)
    if len(rows) > 1:
        a, b = rows[0], rows[-1]
        per = lambda k: (b[k] - a[k]) * 1e6 / (b["parts"] - a["parts"])  # noqa: E731
        print(f"per added part: loaded marker {per('held_marker_mb_before'):.0f} -> {per('held_marker_mb_after'):.2f} B; "
              f"input list {per('held_input_mb_before'):.0f} -> {per('held_input_mb_after'):.0f} B; "
              f"publish {per('publish_mb_before'):.0f} -> {per('publish_mb_after'):.0f} B a quarantine part")
    return 0


if __name__ == "__main__":
    sys.exit(main())
