"""Corpus-pipeline figures, each beside its baseline in one run.

1. tokenize+pack (``pipelines.pack.ExamplePacker``) vs raw ``tokenizers`` ``encode_batch`` on the
   same text (goal >= 0.8x);
2. filter blocks (``filters``) vs datatrove's Gopher/C4/FineWeb filters on the same mix
   of prose and web junk, one core (goal >= 1x), with the mix's keep/drop rates;
3. MinHash signatures (``pipelines.dedup.minhash``) vs a ``datasketch`` ``update_batch`` loop, one core
   (goals >= 5x and >= 0.8 MB/s per core);
4. the whole pipeline (ingest → filter → exact + near dedup → tokenizer → pack → shard; the
   tokenizer is trained once beforehand so both runs pack with the same one) on Ray Data with 1
   vs 2 CPUs (goal >= 1.7x), each run confined to that many cores (``pipeline``), on the
   real books of ``../shared/data/corpus`` when present (else a generated corpus of
   ``--pipeline-mb``). Throughput is MB of decoded text per second. The same runs give the
   output's footprint without shards against the input text (goal <= 0.5x), the shards' bytes
   per token beside what format_version 1 cost for the same examples (goal <= 4), the
   driver's peak memory, and the example fill per split (non-pad share of the positions; goal
   >= 0.95 with the ``books`` profile, the default for a folder of books, ``--profile``).

The loader figure (samples/s streamed from a loopback S3 server vs the small preset's
consumption) is ``benchmarks/train/train.py --s3``.

    python benchmarks/corpus/corpus.py [--mb 8] [--corpus DIR] [--pipeline-mb 100] [--profile books]
                               [--skip pack,minhash,filters,pipeline]
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from benchmarks.corpus import filters as corpus_filters, minhash as corpus_minhash
from benchmarks.corpus import pack as corpus_pack, pipeline as corpus_pipeline
from synthetic import prose

BOOKS = Path(__file__).resolve().parents[3] / "shared" / "data" / "corpus"


def _docs(mb: float, seed: int) -> list[str]:
    return corpus_minhash.load_texts(None, mb, seed=seed)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", type=float, default=8.0, help="MB of text for the pack and MinHash figures")
    p.add_argument("--pipeline-mb", type=float, default=100.0,
                   help="MB of text (before the planted duplicates) in the corpus of the 1-vs-2 CPU run")
    p.add_argument("--corpus", default=str(BOOKS) if BOOKS.is_dir() else None,
                   help="folder of raw text for the 1-vs-2 CPU run (default: the shared books when present)")
    p.add_argument("--profile", default=None, choices=("web", "books", "bert-format"),
                   help="input profile of the 1-vs-2 CPU run (default: books for --corpus, web for the "
                        "synthetic corpus)")
    p.add_argument("--skip", default="", help="comma list of parts to skip: pack,minhash,filters,pipeline")
    args = p.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    results = {}
    tmp = Path(tempfile.mkdtemp(prefix="corpus-bench-"))
    try:
        texts = _docs(args.mb, seed=0)
        from pipelines.config import TokenizerConfig
        from pipelines.tokenizer import train_tokenizer

        train_tokenizer(texts[:2000], TokenizerConfig(vocab_size=30522), tmp / "tok")
        tok_json = str(tmp / "tok" / "tokenizer.json")
        if "pack" not in skip:
            results["pack"] = corpus_pack.run(texts, tok_json)
            r = results["pack"]
            print(f"tokenize+pack {r['pack_mb_per_sec']:.2f} MB/s vs encode_batch {r['raw_mb_per_sec']:.2f} MB/s"
                  f" -> {r['ratio']:.2f}x (goal >= 0.8x)", flush=True)
        if "minhash" not in skip:
            results["minhash"] = corpus_minhash.run(texts)
            r = results["minhash"]
            print(f"minhash {r['minhash_mb_s']:.2f} MB/s vs datasketch {r['datasketch_mb_s']:.2f} MB/s"
                  f" -> {r['ratio']:.2f}x (goals >= 5x, >= 0.8 MB/s/core)", flush=True)
        if "filters" not in skip:
            from synthetic import web_junk

            results["filters"] = corpus_filters.run(web_junk.mix(400, 50, seed=0, books=BOOKS / "gutenberg",
                                                                  exclude=corpus_filters.REFERENCE_SOURCES))
            corpus_filters.report(results["filters"])
        if "pipeline" not in skip:
            if args.corpus:
                raw = Path(args.corpus)
                sample = [p.read_text(errors="replace") for p in sorted(raw.rglob("*.txt"))[:12]]
                train_tokenizer(sample, TokenizerConfig(vocab_size=30522), tmp / "tok_books")
                pipe_tok = str(tmp / "tok_books" / "tokenizer.json")
                profile = args.profile or "books"
            else:
                n_docs = int(len(texts) * args.pipeline_mb / args.mb)
                raw = prose.write_corpus(tmp / "raw", num_docs=n_docs, seed=5, num_files=16, bad_files=False)
                pipe_tok = tok_json
                profile = args.profile or "web"
            disk_mb = sum(f.stat().st_size for f in raw.rglob("*") if f.is_file()) / 1e6
            one = corpus_pipeline.measure(str(raw), pipe_tok, 1, str(tmp / "out1"), profile)
            two = corpus_pipeline.measure(str(raw), pipe_tok, 2, str(tmp / "out2"), profile)
            mb = one["text_bytes"] / 1e6
            results["pipeline"] = {"corpus": str(raw), "profile": profile, "raw_mb_on_disk": round(disk_mb, 2), "text_mb": round(mb, 2),
                                   "seconds_1cpu": round(one["seconds"], 2), "seconds_2cpu": round(two["seconds"], 2),
                                   "mb_s_1cpu": round(mb / one["seconds"], 3), "mb_s_2cpu": round(mb / two["seconds"], 3),
                                   "speedup": round(one["seconds"] / two["seconds"], 2),
                                   "run_1cpu": one, "run_2cpu": two}
            r = results["pipeline"]
            print(f"pipeline on {r['text_mb']:.1f} MB of text: {r['mb_s_1cpu']:.3f} MB/s on 1 CPU vs "
                  f"{r['mb_s_2cpu']:.3f} MB/s on 2 CPUs -> {r['speedup']:.2f}x (goal >= 1.7x)", flush=True)
            print(f"footprint without shards: {two['footprint_ratio']:.3f}x the input text "
                  f"({(two['output_bytes'] - two['shard_bytes']) / 1e6:.2f} MB for {mb:.1f} MB; goal <= 0.5x); "
                  f"shards {two['bytes_per_token']:.2f} bytes/token vs {two['v1_bytes_per_token']:.2f} in "
                  f"format 1 (goal <= 4); driver peak RSS {one['driver_peak_rss_mb']:.0f} MB (1 CPU), "
                  f"{two['driver_peak_rss_mb']:.0f} MB (2 CPUs)", flush=True)
            fill = ", ".join(f"{k} {v:.3f}" for k, v in two["fill"].items())
            print(f"example fill ({profile} profile; non-pad share of positions): {fill}"
                  f"{' (goal >= 0.95 for books)' if profile == 'books' else ''}; documents kept "
                  f"{two['documents_kept']}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
