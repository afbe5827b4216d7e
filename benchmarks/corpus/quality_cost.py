"""What the corpus-quality additions cost the whole pipeline, each beside its baseline in one run.

On the books (``../shared/data/corpus``, 58 Project Gutenberg books; ``--corpus DIR`` for your
own), 2 CPUs, the same tokenizer (trained beforehand), each run confined to its cores
(``pipeline.measure``), in alternating order so a change in the machine's load hits both:

1. the ``web`` profile with the filter blocks it had before the code and language-model blocks
   (``filters.PREVIOUS_BLOCKS``) vs its defaults today (goal: today >= 0.7x);
2. the ``books`` profile without and with ``--decontaminate`` against the GLUE dev sets of
   ``../shared/data/glue`` (when present; ``--glue DIR``).

Printed: MB of text per second for each run, the ratios, and the documents each filter block and
each protected task dropped.

    python benchmarks/corpus/quality_cost.py [--corpus DIR] [--glue DIR] [--rounds 1]
"""
from __future__ import annotations

import argparse
import json
import tempfile
from collections import Counter
from pathlib import Path

from benchmarks.corpus import pipeline as corpus_pipeline
from benchmarks.corpus.filters import PREVIOUS_BLOCKS

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", default=str(DATA / "corpus"), help="folder of raw text (default: the books)")
    p.add_argument("--glue", default=str(DATA / "glue"), help="GLUE folder to decontaminate against")
    p.add_argument("--rounds", type=int, default=1, help="alternating rounds (the best time of each run counts)")
    args = p.parse_args()
    raw = Path(args.corpus)
    if not raw.is_dir():
        raise SystemExit(f"corpus_quality_cost: no corpus at {raw} (--corpus DIR)")
    from pipelines.config import TokenizerConfig
    from pipelines.tokenizer import train_tokenizer

    runs = {"web, previous blocks": ("web", {"filter": {"blocks": PREVIOUS_BLOCKS}}),
            "web, defaults": ("web", {})}
    if Path(args.glue).is_dir():
        runs["books"] = ("books", {})
        runs["books + decontaminate"] = ("books", {"decontaminate": {"paths": [args.glue]}})
    best: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        sample = [f.read_text(errors="replace") for f in sorted(raw.rglob("*.txt"))[:12]]
        train_tokenizer(sample, TokenizerConfig(vocab_size=30522), Path(tmp) / "tok")
        tok = str(Path(tmp) / "tok" / "tokenizer.json")
        for _ in range(args.rounds):
            for name, (profile, config) in runs.items():
                r = corpus_pipeline.measure(str(raw), tok, 2, str(Path(tmp) / "out"), profile, config)
                if name not in best or r["seconds"] < best[name]["seconds"]:
                    best[name] = r
                print(f"{name}: {r['text_bytes'] / 1e6 / r['seconds']:.3f} MB/s ({r['seconds']:.1f} s), "
                      f"{r['documents_kept']} documents kept", flush=True)
    mb = {k: v["text_bytes"] / 1e6 / v["seconds"] for k, v in best.items()}
    print(f"web profile on the books, 2 CPUs: defaults {mb['web, defaults']:.3f} MB/s vs previous blocks "
          f"{mb['web, previous blocks']:.3f} MB/s -> {mb['web, defaults'] / mb['web, previous blocks']:.2f}x "
          f"(goal >= 0.7x)")
    if "books" in mb:
        print(f"books profile: with decontamination {mb['books + decontaminate']:.3f} MB/s vs without "
              f"{mb['books']:.3f} MB/s -> {mb['books + decontaminate'] / mb['books']:.2f}x")
    dropped = {k: dict(Counter(v["filter_dropped"]).most_common(8)) for k, v in best.items()}
    print(json.dumps({"mb_s": {k: round(v, 3) for k, v in mb.items()}, "dropped": dropped}, indent=1))


if __name__ == "__main__":
    main()
