"""How decontamination grows with the protected evaluation sets: build time, memory, check speed.

Protected sets of several sizes are written as GLUE-format task folders (``dev.tsv`` rows of
generated sentences, ``synthetic.prose``: like GLUE's, 10 to 40 words each) and built with
``pipelines.decontaminate.protected.build``; each is then checked against the same documents
(book prose when ``../shared/data/corpus`` is present, else generated prose). Printed per size:
n-grams, build seconds and n-grams/s, the set's bytes (hashes + file index), and the check's
MB/s of documents. Build time and bytes should grow linearly; the check's cost per document
grows with log(n-grams) (a binary search per window).

    python benchmarks/corpus/decontaminate_scale.py [--sizes 10000,100000,1000000,4000000]
"""
from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

from pipelines.decontaminate.check import contamination
from pipelines.decontaminate.protected import build

BOOKS = Path(__file__).resolve().parents[3] / "shared" / "data" / "corpus" / "gutenberg"


def write_task(folder: Path, tokens: int, seed: int) -> None:
    from synthetic import prose

    rng = random.Random(seed)
    folder.mkdir(parents=True)
    rows, count = ["index\tsentence\tlabel"], 0
    while count < tokens:
        doc = prose.documents(1, seed=rng.randrange(1 << 30))[0]
        for sentence in doc.replace("\n", " ").split(". "):
            rows.append(f"{len(rows)}\t{sentence}.\t{rng.randrange(2)}")
            count += len(sentence.split())
    (folder / "dev.tsv").write_text("\n".join(rows) + "\n")


def main() -> None:
    from synthetic import prose, web_junk

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="10000,100000,1000000,4000000", help="protected tokens per set")
    p.add_argument("--docs", type=int, default=400, help="documents checked")
    args = p.parse_args()
    docs = (web_junk.clean_documents(args.docs, 0, BOOKS) if BOOKS.is_dir() else prose.documents(args.docs, 3))
    mb = sum(len(d.encode()) for d in docs) / 1e6
    print(f"checking {len(docs)} documents ({mb:.2f} MB) against each set")
    with tempfile.TemporaryDirectory() as tmp:
        for i, size in enumerate(int(s) for s in args.sizes.split(",")):
            folder = Path(tmp) / f"T{i}"
            write_task(folder, size, seed=i)
            start = time.perf_counter()
            protected = build([str(folder)], 13)
            seconds = time.perf_counter() - start
            n = len(protected.hashes)
            nbytes = protected.hashes.nbytes + protected.source.nbytes
            start = time.perf_counter()
            hits = sum(contamination(d, protected) is not None for d in docs)
            check = time.perf_counter() - start
            print(f"{size:>9,} protected tokens: {n:>9,} 13-grams, built in {seconds:6.2f} s "
                  f"({n / seconds / 1e6:.2f} M n-grams/s), {nbytes / 1e6:7.1f} MB; check {mb / check:6.2f} MB/s "
                  f"({hits} documents matched)", flush=True)


if __name__ == "__main__":
    main()
