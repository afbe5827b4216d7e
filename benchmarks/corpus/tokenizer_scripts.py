"""The trained tokenizer on a mixed corpus and on Korean: BERT's recipe against the shipped one, side by side.

    .venv/bin/python benchmarks/corpus/tokenizer_scripts.py [--vocab 16000] [--books DIR] [--json OUT] [--smoke]

Baseline: ``tokenizers``' own ``BertWordPieceTokenizer`` (BERT's recipe: BertNormalizer lower-casing
and stripping accents, the 1,000 most frequent characters as the alphabet), trained on the same
texts with the same vocabulary size. Shipped: ``pipelines.tokenizer.train_tokenizer`` with the
default ``TokenizerConfig`` (no language list), which strips only Latin, Greek and Cyrillic accents
where BERT's stripping would damage a script the alphabet holds, and keeps the characters covering
99.99% of the sample beyond the 1,000 most frequent.

Texts (real; no network): ``bench_out/languages/<group>/<lang>.jsonl`` when
``benchmarks/corpus/language_texts.py`` has extracted them, else the committed test assets
(``tests/assets/languages``); English from ``--books`` (the 58 books, the first ``--book-mb`` MB)
when the folder exists, else the synthetic prose generator.

1. **Mixed corpus** (English, Chinese simplified and traditional, Chinese fortunes, Korean, French,
   German; no language list): distinct characters, alphabet kept (single-character entries of the
   vocabulary), [UNK] share of the tokens, and the share of Han and Hangul characters that end in
   an [UNK] token (a WordPiece word with an unknown character is one [UNK]).
2. **Korean** (the Debian FAQ): vocabulary entries holding whole syllables and holding conjoining
   jamo, tokens per character, [UNK] share, and whether a syllable survives normalisation.

Both tokenizers encode every text they were trained on. The CPU (model, amx_bf16 / avx512_bf16)
and load average are printed beside the figures; the figures are counts, not speeds.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer
from tokenizers.implementations import BertWordPieceTokenizer

from benchmarks.shared import REPO, load_test_helper
from benchmarks.shared.machine import finish, machine, machine_line
from pipelines.config import TokenizerConfig
from pipelines.tokenizer import train_tokenizer

MIXED = ("zh-cn", "zh-tw", "zh-fortunes", "ko", "fr", "de")
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def texts_of(lang: str) -> list[str]:
    for group in ("dev", "heldout"):
        path = REPO / "bench_out" / "languages" / group / f"{lang}.jsonl"
        if path.is_file():
            return [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines() if line]
    return load_test_helper("pipelines._languages").documents(lang)


def english(books: Path, mb: float) -> list[str]:
    if not books.is_dir():
        from synthetic.prose import documents
        return documents(400, seed=1)
    out, size = [], 0
    for path in sorted(books.glob("*.txt")):
        for para in path.read_text(encoding="utf-8", errors="replace").split("\n\n"):
            if para.strip():
                out.append(para)
                size += len(para.encode())
            if size >= mb * 1e6:
                return out
    return out


def bert_baseline(texts: list[str], vocab: int) -> Tokenizer:
    tok = BertWordPieceTokenizer(lowercase=True, strip_accents=True, clean_text=True, handle_chinese_chars=True)
    tok.train_from_iterator(texts, vocab_size=vocab, min_frequency=2, limit_alphabet=1000,
                            special_tokens=SPECIALS, show_progress=False)
    return tok._tokenizer


def shipped(texts: list[str], vocab: int) -> Tokenizer:
    with tempfile.TemporaryDirectory() as tmp:
        train_tokenizer(texts, TokenizerConfig(vocab_size=vocab), tmp)
        return Tokenizer.from_file(f"{tmp}/tokenizer.json")


def _han(c: str) -> bool:
    return 0x4E00 <= ord(c) <= 0x9FFF or 0x3400 <= ord(c) <= 0x4DBF or 0xAC00 <= ord(c) <= 0xD7A3


def _jamo(c: str) -> bool:
    return 0x1100 <= ord(c) <= 0x11FF or 0x3130 <= ord(c) <= 0x318F


def measure(tok: Tokenizer, texts: list[str]) -> dict[str, Any]:
    unk = tok.token_to_id("[UNK]")
    encoded = tok.encode_batch(texts, add_special_tokens=False)
    tokens = sum(len(e.ids) for e in encoded)
    lost = total = 0
    for text, e in zip(texts, encoded):
        for (a, b), i in zip(e.offsets, e.ids):
            n = sum(_han(c) for c in text[a:b])
            total += n
            lost += n if i == unk else 0
    vocab = [t for t in tok.get_vocab() if t not in SPECIALS]
    return {"tokens": tokens, "unk_share": sum(e.ids.count(unk) for e in encoded) / max(tokens, 1),
            "han_hangul_lost": lost / max(total, 1), "alphabet": sum(len(t) == 1 for t in vocab),
            "with_syllables": sum(any(0xAC00 <= ord(c) <= 0xD7A3 for c in t) for t in vocab),
            "with_jamo": sum(any(map(_jamo, t)) for t in vocab),
            "chars_per_token": sum(len(t) for t in texts) / max(tokens, 1),
            "syllable_kept": tok.normalizer.normalize_str("한국어") == "한국어"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab", type=int, default=16000)
    ap.add_argument("--books", type=Path, default=REPO.parent / "shared" / "data" / "corpus" / "gutenberg")
    ap.add_argument("--book-mb", type=float, default=2.0)
    ap.add_argument("--json", default=None)
    ap.add_argument("--smoke", action="store_true", help="small vocabulary, little English (seconds)")
    args = ap.parse_args(argv)
    if args.smoke:
        args.vocab, args.book_mb = 4000, 0.2
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    before = machine()
    print(machine_line(before), flush=True)
    mixed = english(args.books, args.book_mb) + [t for lang in MIXED for t in texts_of(lang)]
    korean = texts_of("ko")
    distinct = len({c for t in mixed for c in t if not c.isspace()})
    result: dict[str, Any] = {"machine": before, "args": {k: str(v) for k, v in vars(args).items()},
                              "mixed": {"texts": len(mixed), "distinct_chars": distinct}, "korean": {}}
    for name, train in (("bert", bert_baseline), ("shipped", shipped)):
        result["mixed"][name] = measure(train(mixed, args.vocab), mixed)
        result["korean"][name] = measure(train(korean, min(args.vocab, 8000)), korean)
    print(f"mixed corpus: {len(mixed)} texts, {distinct} distinct characters, vocab {args.vocab}")
    print(f"{'':10} {'alphabet':>9} {'[UNK] share':>12} {'Han+Hangul lost':>16}")
    for name in ("bert", "shipped"):
        m = result["mixed"][name]
        print(f"{name:10} {m['alphabet']:>9} {m['unk_share']:>12.4%} {m['han_hangul_lost']:>16.4%}")
    print(f"korean: {len(korean)} texts, {sum(map(len, korean))} characters")
    print(f"{'':10} {'syllable entries':>17} {'jamo entries':>13} {'chars/token':>12} {'[UNK] share':>12}")
    for name in ("bert", "shipped"):
        k = result["korean"][name]
        print(f"{name:10} {k['with_syllables']:>17} {k['with_jamo']:>13} {k['chars_per_token']:>12.2f} "
              f"{k['unk_share']:>12.4%}")
    finish(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
