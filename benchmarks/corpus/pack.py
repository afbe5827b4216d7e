"""Tokenize+pack throughput against raw ``tokenizers`` ``encode_batch`` on the same text.

Baseline: ``Tokenizer.encode_batch`` over every non-empty line of the text, in batches of the
same documents our packer sees (the fastest way to call the raw tokenizer from Python, both
sides use all cores). Ours: ``pipelines.pack.ExamplePacker`` over document batches, which
splits lines, tokenises them (one ``encode_batch_fast`` call per batch), packs ELECTRA examples
and builds the int32/uint8 output arrays. Both run in this process, interleaved, best of
``repeats`` each; the ratio ours / raw is the figure the README quotes (goal >= 0.8).

    python -m benchmarks.corpus.pack [--input FILE] [--mb 8] [--seq-len 128]

Without ``--input`` the text is generated (``synthetic.prose``); a 30522-vocab WordPiece
is trained on it first (not timed).
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

BATCH_DOCS = 256  # documents per Ray Data batch in the pipeline


def _batches(texts: list[str], size: int) -> list[list[str]]:
    return [texts[i:i + size] for i in range(0, len(texts), size)]


def _time_raw(tokenizer, batches: list[list[str]]) -> tuple[float, int]:
    from pipelines.pack import document_lines

    line_batches = [[ln for t in b for ln in document_lines(t)] for b in batches]  # not timed
    start = time.perf_counter()
    tokens = 0
    for lines in line_batches:
        tokens += sum(len(e) for e in tokenizer.encode_batch(lines))
    return time.perf_counter() - start, tokens


def _time_ours(packer, batches: list[list[str]]) -> tuple[float, int, int]:
    uid_batches = []
    base = 0
    for b in batches:  # input batches as Ray Data hands them over (not timed)
        uid_batches.append({"uid": np.arange(base, base + len(b), dtype=np.int64),
                            "text": np.array(b, dtype=object)})
        base += len(b)
    start = time.perf_counter()
    tokens = examples = 0
    for batch in uid_batches:
        out = packer(batch)
        examples += out.num_rows
        tokens += len(out.column("input_ids").combine_chunks().values)
    return time.perf_counter() - start, tokens, examples


def run(texts: list[str], tokenizer_json: str, *, seq_len: int = 128, repeats: int = 3) -> dict:
    """Time raw encode_batch and tokenize+pack on ``texts`` (documents); return the figures."""
    from tokenizers import Tokenizer

    from pipelines.config import PackConfig
    from pipelines.pack import ExamplePacker

    tokenizer = Tokenizer.from_file(tokenizer_json)
    packer = ExamplePacker(tokenizer_json, PackConfig(seq_len=seq_len))
    batches = _batches(texts, BATCH_DOCS)
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    raws, ours = [], []
    for _ in range(repeats):  # interleaved, so both see the same machine load
        raws.append(_time_raw(tokenizer, batches))
        ours.append(_time_ours(packer, batches))
    raw_s, raw_tokens = min(raws)
    ours_s, ours_tokens, examples = min(ours)
    return {"mb": round(mb, 2), "documents": len(texts), "examples": examples,
            "raw_seconds": round(raw_s, 3), "raw_mb_per_sec": round(mb / raw_s, 2),
            "raw_tokens_per_sec": round(raw_tokens / raw_s), "pack_seconds": round(ours_s, 3),
            "pack_mb_per_sec": round(mb / ours_s, 2), "pack_tokens_per_sec": round(ours_tokens / ours_s),
            "ratio": round(raw_s / ours_s, 3)}


def _texts(args: argparse.Namespace) -> list[str]:
    if args.input:
        raw = Path(args.input).read_text(encoding="utf-8", errors="replace")
        return [d for d in raw.split("\n\n") if d.strip()]
    from synthetic.prose import documents

    out, size, seed = [], 0, 0
    while size < args.mb * 1e6:
        chunk = documents(500, seed=seed)
        out += chunk
        size += sum(len(t) for t in chunk)
        seed += 1
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--input", help="a text file (blank-line-separated documents); default: generated")
    p.add_argument("--mb", type=float, default=8.0, help="MB of generated text when no --input")
    p.add_argument("--seq-len", type=int, default=128, help="example length")
    p.add_argument("--vocab-size", type=int, default=30522, help="WordPiece vocabulary to train")
    p.add_argument("--repeats", type=int, default=3, help="timed repetitions (best is kept)")
    args = p.parse_args()

    from pipelines.config import TokenizerConfig
    from pipelines.tokenizer import train_tokenizer

    texts = _texts(args)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        info = train_tokenizer(texts, TokenizerConfig(vocab_size=args.vocab_size), tmp)
        print(f"trained WordPiece: vocab {info.vocab_size} in {time.perf_counter() - start:.1f} s")
        r = run(texts, str(Path(tmp) / "tokenizer.json"), seq_len=args.seq_len, repeats=args.repeats)
    print(f"text: {r['mb']} MB, {r['documents']} documents -> {r['examples']} examples")
    print(f"raw encode_batch : {r['raw_mb_per_sec']:7.2f} MB/s {r['raw_tokens_per_sec']:>11,} tokens/s")
    print(f"tokenize + pack  : {r['pack_mb_per_sec']:7.2f} MB/s {r['pack_tokens_per_sec']:>11,} tokens/s")
    print(f"ratio (goal >= 0.8): {r['ratio']:.2f}x")


if __name__ == "__main__":
    main()
