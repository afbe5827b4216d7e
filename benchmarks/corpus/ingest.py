"""Ingest throughput of one large input file: read as several tasks (split) vs as one task.

One JSONL corpus of ``--mb`` MB (generated: random words, one record per line) is written four
ways: plain ``.jsonl`` (split by byte ranges), ``.jsonl.zst`` as one zstd frame (cannot be split:
its split run shows what the planner's extra tasks cost, each reading the file's tail to find no
seek table), seekable ``.jsonl.zst`` (frames of ``--frame-mb``, split by frames through the seek
table) and Parquet (row groups of ``--row-group-mb``, split by row group). Each file is ingested
by ``pipelines.ingest.ingest_dataset`` on a local Ray with ``--cpus`` CPUs, twice side by side
in the same run: with ``split_bytes`` set so the file makes ``--tasks`` tasks, and with
splitting off (one task). Both runs must give the same rows (count and an order-free digest of
the uids); the time is the whole Ray Data execution, rows consumed on the driver, after a
warm-up run that starts Ray's workers.

Printed: per file, MB/s of uncompressed text for each run and the ratio split/one task (best of
``--repeats``), then the CPU model (lscpu), whether the avx512_bf16 and AMX flags are present, and
``os.getloadavg()`` before and after (the machine is shared: a high load means noisy figures).

    python benchmarks/corpus/ingest.py [--mb 200] [--cpus 2] [--tasks 4] [--repeats 1] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from pipelines.config import IngestConfig
from pipelines.ingest import ingest_dataset, resolve_sources

WORDS = ("river city garden teacher engine market village window mountain library history water "
         "light music paper summer winter station family morning evening question answer story").split()
FORMATS = ("jsonl", "jsonl.zst", "seekable.jsonl.zst", "parquet")


def write_jsonl(path: Path, mb: float, seed: int = 0) -> int:
    """Records ``{"text": ...}`` of 40-400 random words until ``mb`` MB; the bytes written."""
    rng = np.random.default_rng(seed)
    words = np.array(WORDS)
    target, written = int(mb * (1 << 20)), 0
    with open(path, "wb") as f:
        while written < target:
            lengths = rng.integers(40, 400, size=2000)
            ids = rng.integers(0, len(WORDS), size=int(lengths.sum()))
            lines, at = [], 0
            for n in lengths:
                lines.append('{"text": "' + " ".join(words[ids[at:at + n]]) + '."}\n')
                at += n
            block = "".join(lines).encode()
            f.write(block)
            written += len(block)
    return written


def write_zstd(src: Path, dst: Path, *, frame_bytes: int | None) -> None:
    """``src`` as one zstd frame, or as frames of ``frame_bytes`` plus a seek table (the seekable
    format of facebook/zstd contrib/seekable_format: a final skippable frame, magic 0x184D2A5E,
    one (compressed, decompressed) size pair per frame, footer count/descriptor/magic 0x8F92EAB1)."""
    import zstandard

    cctx = zstandard.ZstdCompressor(level=3, write_checksum=True)
    if frame_bytes is None:
        with open(src, "rb") as fin, open(dst, "wb") as fout:
            cctx.copy_stream(fin, fout, size=src.stat().st_size)
        return
    entries = []
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        while piece := fin.read(frame_bytes):
            frame = cctx.compress(piece)
            fout.write(frame)
            entries.append(struct.pack("<II", len(frame), len(piece)))
        body = b"".join(entries) + struct.pack("<IBI", len(entries), 0, 0x8F92EAB1)
        fout.write(struct.pack("<II", 0x184D2A5E, len(body)) + body)


def write_parquet(src: Path, dst: Path, *, row_group_bytes: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = [json.loads(line)["text"] for line in src.read_bytes().splitlines()]
    per_group = max(1, int(row_group_bytes / (sum(map(len, texts)) / len(texts))))
    pq.write_table(pa.table({"text": texts}), dst, row_group_size=per_group)


def generate(out: Path, mb: float, *, frame_mb: float, row_group_mb: float) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {fmt: out / fmt / f"corpus.{fmt.replace('seekable.', '')}" for fmt in FORMATS}
    for p in paths.values():
        p.parent.mkdir(exist_ok=True)
    write_jsonl(paths["jsonl"], mb)
    write_zstd(paths["jsonl"], paths["jsonl.zst"], frame_bytes=None)
    write_zstd(paths["jsonl"], paths["seekable.jsonl.zst"], frame_bytes=int(frame_mb * (1 << 20)))
    write_parquet(paths["jsonl"], paths["parquet"], row_group_bytes=int(row_group_mb * (1 << 20)))
    return paths


def ingest_once(path: Path, split_bytes: int | None) -> tuple[float, int, int]:
    """(seconds, rows, sum of uids mod 2**64) of one ingest of ``path``."""
    sources = resolve_sources([str(path.parent)])
    start = time.perf_counter()
    rows, digest = 0, 0
    for batch in ingest_dataset(sources, IngestConfig(), split_bytes=split_bytes).iter_batches(
            batch_size=None, batch_format="numpy"):
        assert not any(batch["reason"]), set(batch["reason"]) - {""}
        rows += len(batch["uid"])
        digest = (digest + int(batch["uid"].astype(np.uint64).sum(dtype=np.uint64))) % (1 << 64)
    return time.perf_counter() - start, rows, digest


def run(mb: float, *, cpus: int = 2, tasks: int = 4, repeats: int = 1, out: Path | None = None,
        frame_mb: float = 1.0, row_group_mb: float = 2.0) -> list[dict]:
    """The side-by-side runs; one result per format."""
    from pipelines.engine import raydata

    raydata.init_ray(num_cpus=cpus)
    folder = Path(out) if out else Path(tempfile.mkdtemp(prefix="corpus_ingest-"))
    try:
        paths = generate(folder, mb, frame_mb=frame_mb, row_group_mb=row_group_mb)
        text_mb = paths["jsonl"].stat().st_size / (1 << 20)
        # Warm-up: start Ray's workers (seconds each) before anything is timed.
        warm = folder / "warm" / "w.jsonl"
        warm.parent.mkdir(exist_ok=True)
        write_jsonl(warm, 0.2, seed=1)
        ingest_once(warm, warm.stat().st_size // (2 * cpus) + 1)
        results = []
        for fmt, path in paths.items():
            size = path.stat().st_size
            split_bytes = max(1, -(-size // tasks))
            best: dict[str, tuple[float, int, int]] = {}
            for _ in range(repeats):  # interleaved, so both runs see the same machine
                for label, sb in (("split", split_bytes), ("one_task", None)):
                    got = ingest_once(path, sb)
                    if label not in best or got[0] < best[label][0]:
                        best[label] = got
            if best["split"][1:] != best["one_task"][1:]:
                raise AssertionError(f"{fmt}: split and one-task reads differ: {best}")
            results.append({"format": fmt, "file_mb": round(size / (1 << 20), 1), "text_mb": round(text_mb, 1),
                            "rows": best["split"][1], "split_tasks": -(-size // split_bytes),
                            "split_mb_s": round(text_mb / best["split"][0], 1),
                            "one_task_mb_s": round(text_mb / best["one_task"][0], 1),
                            "ratio": round(best["one_task"][0] / best["split"][0], 2)})
        return results
    finally:
        if out is None:
            shutil.rmtree(folder, ignore_errors=True)


def cpu_kind() -> dict:
    model = ""
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    return {"model": model, "cores": os.cpu_count(), "avx512_bf16": "avx512_bf16" in flags,
            "amx": sorted(f for f in flags if f.startswith("amx"))}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=200, help="MB of JSONL text to generate")
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--tasks", type=int, default=4, help="tasks per file in the split run")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--frame-mb", type=float, default=1.0, help="decompressed MB per seekable zstd frame")
    ap.add_argument("--row-group-mb", type=float, default=2.0, help="text MB per Parquet row group")
    ap.add_argument("--out", help="keep the generated files here (default: a temporary folder)")
    args = ap.parse_args(argv)
    load_before = os.getloadavg()
    results = run(args.mb, cpus=args.cpus, tasks=args.tasks, repeats=args.repeats,
                  out=Path(args.out) if args.out else None, frame_mb=args.frame_mb, row_group_mb=args.row_group_mb)
    print(f"{'format':<20}{'file MB':>9}{'tasks':>7}{'split MB/s':>12}{'1 task MB/s':>13}{'ratio':>7}")
    for r in results:
        print(f"{r['format']:<20}{r['file_mb']:>9}{r['split_tasks']:>7}{r['split_mb_s']:>12}"
              f"{r['one_task_mb_s']:>13}{r['ratio']:>7}")
    print(json.dumps({"results": results, "cpu": cpu_kind(), "ray_cpus": args.cpus,
                      "loadavg_before": [round(x, 2) for x in load_before],
                      "loadavg_after": [round(x, 2) for x in os.getloadavg()]}, indent=1))


if __name__ == "__main__":
    main()
