"""Calibrate the per-language filter thresholds on parallel text (pipelines/language/profiles.py).

    .venv/bin/python benchmarks/corpus/language_texts.py            # once: the Debian texts (README there)
    .venv/bin/python benchmarks/corpus/calibrate_languages.py [--texts bench_out/languages] [--json out.json]

The Debian Reference is one manual in many languages, section by section (the extracted
documents keep their section anchor). For each development language L and each statistic a
filter rule thresholds, the English default threshold is carried over to L by what the same
sections measure in both languages:

- counts (words per document, sentences per document, words per line, newlines per word) and
  lengths (characters per short line): ``T_L = T_en x median over aligned sections of
  stat_L / stat_en``: a Chinese section holds so many jieba words and sentences for every English
  word and sentence of its original;
- shares and means over words (mean word length, share of words with a letter): the same scale
  factor, from the medians of the two distributions (the sections of a partial translation need
  not pair up one to one for these);
- stop words: the language's eight most frequent tokens of letters on its text, as Gopher's
  English list is English's most frequent words.

A rule is kept as English's where the factor is within ``--tolerance`` of 1 (spaced European
languages mostly are). It prints the factors and the proposed overrides per language: a rule so
calibrated drops about as much of L as the default drops of English (what the build keeps per
language is measured by ``benchmarks/corpus/languages.py``). Only the development texts are read
(the held-out ones stay for acceptance).
"""
from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter
from pathlib import Path

from pipelines.config import C4Config, FineWebConfig, GopherQualityConfig
from pipelines.filters.text import has_letter, is_symbol, sentence_count
from pipelines.language.segmenters import splitter

LANGS = {"zh-cn": ("zh", "jieba"), "zh-tw": ("zh", "jieba"), "fr": ("fr", "characters"), "de": ("de", "characters"),
         "es": ("es", "characters"), "pt": ("pt", "characters")}


def load(folder: Path, name: str) -> dict[str, str]:
    """anchor -> document text."""
    out = {}
    for line in (folder / "dev" / f"{name}.jsonl").read_text().splitlines():
        rec = json.loads(line)
        out[rec["source"].split(":", 1)[1].replace(f".{name}.", ".")] = rec["text"]
    return out


def stats(text: str, split) -> dict[str, float]:
    words = split(text)
    real = [w for w in words if not is_symbol(w)]
    lines = [ln for ln in text.split("\n") if ln.strip()]
    return {"words": len(real), "mean_word_length": sum(map(len, real)) / max(len(real), 1),
            "alpha_ratio": sum(1 for w in words if has_letter(w)) / max(len(words), 1),
            "sentences": sum(sentence_count(ln) for ln in lines),
            "words_per_line": statistics.median(len(split(ln)) for ln in lines) if lines else 0,
            "chars_per_line": statistics.median(len(ln) for ln in lines) if lines else 0,
            "newlines_per_word": text.count("\n") / max(len(words), 1)}


def factor(en: list[dict], other: list[dict], key: str) -> float:
    pairs = [o[key] / e[key] for e, o in zip(en, other) if e[key] and o[key]]
    return statistics.median(pairs) if pairs else 1.0


def stop_words(texts: list[str], split, n: int = 8) -> list[str]:
    counts = Counter(w for t in texts for w in split(t) if not is_symbol(w) and any(c.isalpha() for c in w))
    return [w for w, _ in counts.most_common(n)]


def calibrate(folder: Path, tolerance: float) -> dict:
    en_docs = load(folder, "en")
    en_split = splitter("whitespace")
    gq, c4, fw = GopherQualityConfig(), C4Config(), FineWebConfig()
    out = {}
    for name, (code, split_name) in LANGS.items():
        split = splitter(split_name)
        docs = load(folder, name)
        common = sorted(set(docs) & set(en_docs))
        e = [stats(en_docs[k], en_split) for k in common]
        o = [stats(docs[k], split) for k in common]
        med = {k: statistics.median(s[k] for s in o) / statistics.median(s[k] for s in e)
               for k in ("mean_word_length", "alpha_ratio")}
        f = {k: factor(e, o, k) for k in ("words", "sentences", "words_per_line", "chars_per_line",
                                          "newlines_per_word")}
        proposal: dict[str, dict] = {"gopher_quality": {}, "c4": {}, "fineweb": {}}

        def put(section, key, value, scale, digits=2):
            if abs(scale - 1) > tolerance:
                proposal[section][key] = round(value * scale, digits) if digits else max(1, round(value * scale))

        put("gopher_quality", "min_doc_words", gq.min_doc_words, f["words"], 0)
        put("gopher_quality", "min_avg_word_length", gq.min_avg_word_length, med["mean_word_length"])
        put("gopher_quality", "max_avg_word_length", gq.max_avg_word_length, med["mean_word_length"])
        put("gopher_quality", "max_non_alpha_words_ratio", gq.max_non_alpha_words_ratio, med["alpha_ratio"])
        put("c4", "min_num_sentences", c4.min_num_sentences, f["sentences"], 0)
        put("c4", "min_words_per_line", c4.min_words_per_line, f["words_per_line"], 0)
        put("fineweb", "short_line_length", fw.short_line_length, f["chars_per_line"], 0)
        put("fineweb", "new_line_ratio", fw.new_line_ratio, f["newlines_per_word"])
        proposal["gopher_quality"]["stop_words"] = stop_words(list(docs.values()), split)
        out[name] = {"code": code, "aligned_sections": len(common), "factors": {**f, **med},
                     "proposal": {k: v for k, v in proposal.items() if v}}
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--texts", default="bench_out/languages", help="benchmarks/corpus/language_texts.py's output")
    ap.add_argument("--tolerance", type=float, default=0.15, help="keep English's threshold within this of it")
    ap.add_argument("--json", help="also write the result here")
    args = ap.parse_args(argv)
    result = calibrate(Path(args.texts), args.tolerance)
    for name, r in result.items():
        factors = ", ".join(f"{k} {v:.2f}" for k, v in r["factors"].items())
        print(f"{name} ({r['aligned_sections']} sections aligned with English): {factors}")
        print(f"  proposal: {json.dumps(r['proposal'], ensure_ascii=False)}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    return result


if __name__ == "__main__":
    main()
