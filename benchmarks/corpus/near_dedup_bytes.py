"""Bytes near dedup shuffles per document, on real text, at four corpus sizes.

    .venv/bin/python benchmarks/corpus/near_dedup_bytes.py [--sizes 1750,3500,7000,14000] [--copies 0.1] [--json OUT]

Documents: the public-domain books of ``../shared/data/corpus`` cut at paragraph ends into
pieces of about 3,000 characters (a web page's size), the first N of them; a fraction
``--copies`` of them is then replaced by an edited copy of another (3% of its words replaced:
a near duplicate, Jaccard ~0.85 on 5-grams), so buckets are shared as in a crawl. Each size runs
the REAL ``near_dedup`` on local Ray (2 CPUs) over parts written by ``parts.write_documents``
and reads the statistics of its shuffles (``stats["shuffles"]``: the bytes of every shuffle's map
files). Printed per size: text bytes per document, the LSH shuffles' bytes per document (the
candidates: ``lsh_*``), all near-dedup shuffles' bytes per document (with connected components and
the marks), and the near duplicates found.

The previous design (a sketch in every band row, one ``lsh_buckets`` shuffle) is measured by
running this same script on the commit before the change (``git worktree add``), which keeps
the same ``near_dedup`` interface; both figures are in docs/build-corpus.md. Skips with a message
when ``../shared/data/corpus`` is absent.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO.parent / "shared" / "data" / "corpus" / "gutenberg"
PIECE_CHARS = 3000


def documents(n: int, copies: float, seed: int = 0) -> list[str]:
    """The first ``n`` pieces of the books, a fraction ``copies`` of them replaced by near copies."""
    pieces: list[str] = []
    for path in sorted(CORPUS.glob("*.txt")):
        held: list[str] = []
        for para in path.read_text(encoding="utf-8", errors="replace").split("\n\n"):
            held.append(para.strip())
            if sum(len(p) for p in held) >= PIECE_CHARS:
                pieces.append("\n\n".join(held))
                held = []
                if len(pieces) >= n:
                    break
        if len(pieces) >= n:
            break
    if len(pieces) < n:
        raise SystemExit(f"{CORPUS}: only {len(pieces)} pieces of {PIECE_CHARS} characters, asked for {n}")
    rng = random.Random(seed)
    for i in rng.sample(range(n), int(n * copies)):
        words = pieces[rng.randrange(n)].split()
        for j in rng.sample(range(len(words)), max(1, len(words) * 3 // 100)):
            words[j] = rng.choice(words)
        pieces[i] = " ".join(words)
    return pieces


def run(n: int, copies: float, work: Path) -> dict:
    import ray

    from pipelines.config import DedupConfig
    from pipelines.dedup import NEAR, near_dedup
    from pipelines.engine import parts

    texts = documents(n, copies)
    rows = [{"id": f"b:{i}", "uid": (i * 0x9E3779B97F4A7C15) % (1 << 62), "text": t, "reason": "", "detail": ""}
            for i, t in enumerate(texts)]
    out = parts.write_documents(ray.data.from_items(rows).repartition(8), data=str(work / "data"),
                                rejected=str(work / "rejected"), prefix_chars=10, full_text=False)
    ds, stats = near_dedup(parts.Parts(str(work / "data"), tuple(out["files"])), DedupConfig(), work=str(work / "w"))
    found = sum(r["reason"] == NEAR for r in ds.select_columns(["reason"]).take_all())
    shuffles = {s["name"]: s["bytes"] for s in stats["shuffles"]}
    lsh = sum(b for name, b in shuffles.items() if name.startswith("lsh_"))
    return {"documents": n, "text_bytes_per_doc": round(sum(len(t.encode()) for t in texts) / n),
            "lsh_bytes_per_doc": round(lsh / n), "all_bytes_per_doc": round(sum(shuffles.values()) / n),
            "shuffles": shuffles, "near_duplicates": found}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1750,3500,7000,14000")
    p.add_argument("--copies", type=float, default=0.1)
    p.add_argument("--json")
    args = p.parse_args()
    if not CORPUS.is_dir():
        print(f"skipped: {CORPUS} is absent (the shared books)")
        return
    import ray

    sys.path.insert(0, str(REPO))
    from pipelines.engine import raydata

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    raydata.configure_data_context()
    results = []
    for n in (int(x) for x in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            res = run(n, args.copies, Path(tmp))
        results.append(res)
        print(f"{n:>7,} documents: text {res['text_bytes_per_doc']:,} B/doc; LSH shuffles "
              f"{res['lsh_bytes_per_doc']:,} B/doc; all near-dedup shuffles {res['all_bytes_per_doc']:,} B/doc; "
              f"{res['near_duplicates']} near duplicates  {res['shuffles']}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"copies": args.copies, "runs": results}, indent=1))


if __name__ == "__main__":
    main()
