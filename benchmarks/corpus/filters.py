"""Filter-stage throughput: our filter blocks vs datatrove's filters on the same documents.

Both sides get the same documents (the labelled mix of ``synthetic.web_junk``: book prose and web
junk, normalised once beforehand) and the same thresholds (datatrove's defaults, which are ours),
and run on one core in one process. datatrove runs GopherQualityFilter, GopherRepetitionFilter,
C4QualityFilter and FineWebQualityFilter in that order, each on the documents the previous one
kept, as its pipeline does; ours runs the same four blocks. datatrove's English tokenizer needs
NLTK's punkt data (a download), so datatrove gets ``DatatroveTokenizer``: our whitespace words and
our sentence splitter, i.e. the same tokens; the comparison measures the filters, not NLTK.
Our closing-quote relaxation is switched off for the timed run, so both sides decide alike.

Printed: MB/s (of text) for each side and the ratio (goal >= 1x); ours with the language block
too, for information; each default block's own MB/s (every document through every block, so
each is timed on the whole mix) and the decontamination check's against GLUE's dev sets; and
the drop rate of junk and the keep rate of prose (goals >= 0.95 each), per junk kind, of the
defaults before the language-model and code blocks (``PREVIOUS_BLOCKS``) and of today's, side by
side. The clean prose comes from books the language model's reference was not cut from.

    python benchmarks/corpus/filters.py [--clean 400] [--per-kind 50] [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

from pipelines.config import C4Config, FilterConfig, FineWebConfig
from pipelines.filters import Doc, build_blocks, normalize_text, run_blocks
from pipelines.filters.lm_quality import REFERENCE_SOURCES
from pipelines.filters.text import sentence_spans

BOOKS = Path(__file__).resolve().parents[3] / "shared" / "data" / "corpus" / "gutenberg"

GLUE = BOOKS.parents[1] / "glue"
DATATROVE_BLOCKS = ["gopher_quality", "gopher_repetition", "c4", "fineweb"]
# The web defaults before the code and language-model blocks (issue 26's starting point).
PREVIOUS_BLOCKS = ["gopher_quality", "gopher_repetition", "c4", "fineweb", "language"]


def datatrove_tokenizer():
    """A datatrove ``WordTokenizer`` with our tokens: whitespace words, our sentence splitter."""
    from datatrove.utils.word_tokenizers import WordTokenizer

    class DatatroveTokenizer(WordTokenizer):
        def word_tokenize(self, text: str) -> list[str]:
            return text.split()

        def sent_tokenize(self, text: str) -> list[str]:
            return [text[a:b] for a, b in sentence_spans(text)]

        def span_tokenize(self, text: str) -> list[tuple[int, int]]:
            return sentence_spans(text)

    return DatatroveTokenizer("en")


def datatrove_filters(cfg: FilterConfig, tokenizer=None) -> list:
    """datatrove's four filters with ``cfg``'s thresholds (None -> datatrove's "off")."""
    from datatrove.pipeline.filters import (C4QualityFilter, FineWebQualityFilter, GopherQualityFilter,
                                            GopherRepetitionFilter)

    tok = tokenizer or datatrove_tokenizer()
    q, r, c, f = cfg.gopher_quality, cfg.gopher_repetition, cfg.c4, cfg.fineweb
    off = -1  # datatrove's C4 disables a threshold with -1
    return [
        GopherQualityFilter(min_doc_words=q.min_doc_words, max_doc_words=q.max_doc_words,
                            min_avg_word_length=q.min_avg_word_length, max_avg_word_length=q.max_avg_word_length,
                            max_symbol_word_ratio=q.max_symbol_word_ratio,
                            max_bullet_lines_ratio=q.max_bullet_lines_ratio,
                            max_ellipsis_lines_ratio=q.max_ellipsis_lines_ratio,
                            max_non_alpha_words_ratio=q.max_non_alpha_words_ratio,
                            min_stop_words=q.min_stop_words, stop_words=q.stop_words, language=tok),
        GopherRepetitionFilter(dup_line_frac=r.dup_line_frac, dup_para_frac=r.dup_para_frac,
                               dup_line_char_frac=r.dup_line_char_frac, dup_para_char_frac=r.dup_para_char_frac,
                               top_n_grams=tuple((n, x) for n, x in r.top_n_grams if x is not None),
                               dup_n_grams=tuple((n, x) for n, x in r.dup_n_grams if x is not None),
                               language=tok),
        C4QualityFilter(remove_citations=c.remove_citations, filter_no_terminal_punct=c.filter_no_terminal_punct,
                        min_num_sentences=off if c.min_num_sentences is None else c.min_num_sentences,
                        min_words_per_line=off if c.min_words_per_line is None else c.min_words_per_line,
                        max_word_length=off if c.max_word_length is None else c.max_word_length,
                        filter_lorem_ipsum=c.filter_lorem_ipsum, filter_javascript=c.filter_javascript,
                        filter_curly_bracket=c.filter_curly_bracket, filter_policy=c.filter_policy, language=tok),
        FineWebQualityFilter(line_punct_thr=f.line_punct_thr if f.line_punct_thr is not None else 0,
                             line_punct_exclude_zero=f.line_punct_exclude_zero,
                             short_line_thr=f.short_line_thr if f.short_line_thr is not None else 1.0,
                             short_line_length=f.short_line_length,
                             char_duplicates_ratio=f.char_duplicates_ratio if f.char_duplicates_ratio is not None
                             else float("inf"),
                             new_line_ratio=f.new_line_ratio if f.new_line_ratio is not None else float("inf"),
                             language=tok),
    ]


def datatrove_verdict(filters: list, text: str) -> tuple[str | None, str]:
    """(None, final text) when every filter keeps ``text``, else (filter name: reason, text)."""
    from datatrove.data import Document

    doc = Document(text=text, id="0")
    for f in filters:
        result = f.filter(doc)
        keep, reason = (result, "") if isinstance(result, bool) else result
        if not keep:
            return f"{type(f).__name__}:{reason}", doc.text
    return None, doc.text


def exact_config(blocks: list[str] | None = None) -> FilterConfig:
    """Our defaults with datatrove's exact line-punctuation rules (no closing-quote relaxation)."""
    return FilterConfig(blocks=blocks or list(DATATROVE_BLOCKS), c4=C4Config(allow_closing_quotes=False),
                        fineweb=FineWebConfig(allow_closing_quotes=False))


def _time(fn, texts: list[str], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn(texts)
        best = min(best, time.perf_counter() - start)
    return best


def quality(docs: list[tuple[str, str]], cfg: FilterConfig) -> dict:
    """Keep rate of the prose, drop rate of the junk (overall and per kind), precision of drops."""
    blocks = build_blocks(cfg)
    kept, total, reasons = Counter(), Counter(), Counter()
    for text, label in docs:
        verdict = run_blocks(Doc(normalize_text(text, cfg)), blocks)
        total[label] += 1
        kept[label] += verdict is None
        if verdict is not None:
            reasons[verdict.reason] += 1
    junk = [k for k in total if k != "clean"]
    junk_total, junk_dropped = sum(total[k] for k in junk), sum(total[k] - kept[k] for k in junk)
    clean_dropped = total["clean"] - kept["clean"]
    return {"clean_kept": kept["clean"] / max(total["clean"], 1),
            "junk_dropped": junk_dropped / max(junk_total, 1),
            "precision": junk_dropped / max(junk_dropped + clean_dropped, 1),
            "per_kind_dropped": {k: round((total[k] - kept[k]) / total[k], 3) for k in sorted(junk)},
            "documents": dict(total), "reasons": dict(reasons.most_common())}


def block_rates(texts: list[str], cfg: FilterConfig, repeats: int, glue: Path | None = GLUE) -> dict[str, float]:
    """MB/s of each block of ``cfg`` on every text alone, and of the decontamination check."""
    mb = sum(len(t.encode()) for t in texts) / 1e6
    rates = {}
    for block in build_blocks(cfg):
        rates[block.name] = round(mb / _time(lambda b: [block(Doc(t)) for t in b], texts, repeats), 2)
    if glue is not None and Path(glue).is_dir():
        from pipelines.decontaminate.check import contamination
        from pipelines.decontaminate.protected import build

        protected = build([str(glue)], 13)
        rates["decontaminate"] = round(mb / _time(lambda b: [contamination(t, protected) for t in b], texts,
                                                  repeats), 2)
    return rates


def run(docs: list[tuple[str, str]], *, repeats: int = 3) -> dict:
    base = FilterConfig()
    texts = [normalize_text(t, base) for t, _ in docs]
    mb = sum(len(t.encode()) for t in texts) / 1e6
    cfg = exact_config()
    ours_blocks = build_blocks(cfg)
    with_language = build_blocks(exact_config(DATATROVE_BLOCKS + ["language"]))
    theirs = datatrove_filters(cfg)

    def ours(batch: list[str], blocks=ours_blocks) -> None:
        for t in batch:
            run_blocks(Doc(t), blocks)

    def datatrove(batch: list[str]) -> None:
        for t in batch:
            datatrove_verdict(theirs, t)

    agree = sum((run_blocks(Doc(t), ours_blocks) is None) == (datatrove_verdict(theirs, t)[0] is None)
                for t in texts)
    t_ours = _time(ours, texts, repeats)
    t_theirs = _time(datatrove, texts, repeats)
    t_lang = _time(lambda b: ours(b, with_language), texts, repeats)
    return {"mb": round(mb, 3), "documents": len(texts), "ours_mb_s": round(mb / t_ours, 2),
            "datatrove_mb_s": round(mb / t_theirs, 2), "ratio": round(t_theirs / t_ours, 2),
            "ours_with_language_mb_s": round(mb / t_lang, 2), "verdicts_agree": agree / len(texts),
            "block_mb_s": block_rates(texts, base, repeats),
            "quality_previous": quality(docs, FilterConfig(blocks=list(PREVIOUS_BLOCKS))),
            "quality": quality(docs, base)}


def report(r: dict) -> None:
    print(f"filters on {r['mb']:.2f} MB ({r['documents']} documents, 1 core): ours {r['ours_mb_s']:.2f} MB/s vs "
          f"datatrove {r['datatrove_mb_s']:.2f} MB/s -> {r['ratio']:.2f}x (goal >= 1x); with language ID "
          f"{r['ours_with_language_mb_s']:.2f} MB/s; keep/drop verdicts agree on {r['verdicts_agree']:.3f}",
          flush=True)
    print("MB/s per block (each on every document): "
          + ", ".join(f"{name} {rate:.2f}" for name, rate in r["block_mb_s"].items()), flush=True)
    for label, key in (("previous defaults", "quality_previous"), ("defaults", "quality")):
        q = r[key]
        print(f"{label} on the mix: clean prose kept {q['clean_kept']:.3f} (goal >= 0.95), junk dropped "
              f"{q['junk_dropped']:.3f} (goal >= 0.95), precision of drops {q['precision']:.3f}; per kind "
              f"{q['per_kind_dropped']}", flush=True)


def main() -> None:
    from synthetic import web_junk

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clean", type=int, default=400, help="clean prose documents in the mix")
    p.add_argument("--per-kind", type=int, default=50, help="junk documents of each kind")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--books", default=str(BOOKS), help="folder of Gutenberg books for the clean side "
                                                    "(default: the shared books; synthetic prose when absent)")
    args = p.parse_args()
    r = run(web_junk.mix(args.clean, args.per_kind, seed=0, books=Path(args.books), exclude=REFERENCE_SOURCES),
            repeats=args.repeats)
    report(r)
    print(json.dumps(r, indent=1))


if __name__ == "__main__":
    main()
