"""Normalisation and quality filtering of documents (datatrove / Gopher-style heuristics).

``normalize_text`` canonicalises a document before anything hashes or counts it, so that exact
dedup and the filters see one spelling of each text, in this order: every line break as ``\\n``
(``\\r\\n``, ``\\r``, ``\\v``, ``\\f``, U+0085, U+2028/9); control characters and invisible junk
(BOM, zero-width space, soft hyphen) removed; the Unicode normal form (``unicode_form``); tabs and
Unicode spaces as a plain space and runs of spaces collapsed; trailing spaces stripped per line;
three or more newlines collapsed to a paragraph break; the whole stripped. Zero-width
(non-)joiners are kept: they carry meaning in several scripts. The result is idempotent.

``check_document`` runs small checks in a fixed order and returns the first failing one's reason,
``filter:<name>``; ``evaluate_document`` also returns a ``detail`` with the measured value against
the threshold (``"words=3 < 5"``). The order puts cheap length checks first, so most junk is
dropped before the line and n-gram statistics are computed. Checks and their FilterConfig fields:

======================  ===================================  =====================================
reason                  measure                              fields
======================  ===================================  =====================================
empty                   nothing left after normalisation     (always on)
min_chars / max_chars   characters                           min_chars, max_chars
min_words / max_words   whitespace-separated words           min_words, max_words
mean_word_length        mean length of words without         min_mean_word_length,
                        surrounding punctuation              max_mean_word_length
alpha_ratio             share of words with a letter         min_alpha_ratio
symbol_ratio            ('#' + '...' + '…') per word         max_symbol_ratio
repeated_lines          share of lines repeating an          max_repeated_line_ratio
                        earlier line (Gopher dup_line_frac)
repeated_line_chars     characters in such lines / all       max_repeated_line_char_ratio
bullet_lines            lines starting with a bullet         max_bullet_line_ratio
ellipsis_lines          lines ending in '...' or '…'         max_ellipsis_line_ratio
stop_words              occurrences of Gopher's 8 English    min_stop_words
                        stop words
top_2gram               characters covered by the most       max_top_2gram_ratio
                        frequent repeated word 2-gram
======================  ===================================  =====================================

A threshold of ``0`` or ``None`` disables its check (for a ``max_*`` ratio, "no limit"). The stop
word check assumes English, as ELECTRA's corpora are; set ``min_stop_words=0`` for other
languages. Rows that ingestion already rejected pass through ``filter_batch`` untouched.
"""
from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from typing import NamedTuple

import numpy as np

from pipelines.config import FilterConfig

UNICODE_FORMS = ("NFC", "NFKC", "NFD", "NFKD", "none")
# Gopher's stop-word list (Rae et al. 2021, appendix A).
STOP_WORDS = frozenset({"the", "be", "to", "of", "and", "that", "have", "with"})
BULLETS = ("•", "●", "○", "▪", "◦", "‣", "⁃", "·", "-", "*", "–")

_LINE_BREAKS = re.compile("\r\n?|[\x0b\x0c\x85\u2028\u2029]")
# C0/C1 controls except \t and \n (line breaks are already \n), BOM, zero-width space, soft hyphen.
_CONTROL = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f\ufeff\u200b\u00ad]")
# Two or more spaces, or any single non-ASCII space/tab: a lone " " (the common case) is left alone.
_SPACE_CHARS = "\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000"  # non-ASCII spaces (category Zs)
_SPACES = re.compile(f"[\t {_SPACE_CHARS}]{{2,}}|[\t{_SPACE_CHARS}]")
_TRAILING_SPACE = re.compile(" +\n")
_MANY_NEWLINES = re.compile("\n{3,}")
# Words are whitespace tokens after punctuation (except apostrophes: "don't" is one word) became
# spaces. str.translate + split run in C at ~60 MB/s; a word regex ran at ~10 MB/s.
_WORD_BREAKS = str.maketrans(
    {c: " " for c in string.punctuation.replace("'", "") + "“”‘«»„…–—¿¡·•"})
# A whitespace-separated token without a single letter ("1998", "--", "$5", "#").
_NO_LETTER_TOKEN = re.compile(r"(?<!\S)(?:[^\w\s]|[\d_])+(?!\S)")


class FilterVerdict(NamedTuple):
    reason: str  # "filter:<name>"
    detail: str  # measured value vs threshold


def normalize_text(text: str, cfg: FilterConfig) -> str:
    """Canonical form of a document (see the module docstring for each step)."""
    form = cfg.unicode_form
    if form not in UNICODE_FORMS:
        raise ValueError(f"filter.unicode_form={form!r}; expected one of {UNICODE_FORMS}")
    # Each substitution is skipped when a (memchr-fast) containment test shows it has nothing to
    # do, which is the common case for clean text.
    if not text.isascii() or "\r" in text or "\x0b" in text or "\x0c" in text:
        text = _LINE_BREAKS.sub("\n", text)
    # Controls go before the normal form: removing one between a letter and a combining mark
    # afterwards would leave a composable pair behind (and the function not idempotent).
    text = _CONTROL.sub("", text)
    if form != "none":
        text = unicodedata.normalize(form, text)
    if not text.isascii() or "  " in text or "\t" in text:
        text = _SPACES.sub(" ", text)
    if " \n" in text:
        text = _TRAILING_SPACE.sub("\n", text)
    if "\n\n\n" in text:
        text = _MANY_NEWLINES.sub("\n\n", text)
    return text.strip()


def check_document(text: str, cfg: FilterConfig) -> str | None:
    """The first failing check's reason (``filter:<name>``), or None to keep the document."""
    verdict = evaluate_document(text, cfg)
    return None if verdict is None else verdict.reason


def evaluate_document(text: str, cfg: FilterConfig) -> FilterVerdict | None:
    """Like ``check_document`` but with the measured value in ``detail``."""
    if not text.strip():
        # Always on, whatever the thresholds: nothing is left (e.g. only control characters).
        return FilterVerdict("filter:empty", "no text left after normalisation")
    found = _length_checks(text, cfg)
    if found:
        return found
    tokens = text.split()
    found = _count_checks(len(tokens), cfg)
    if found or not tokens:
        return found
    # Lower-case words and their counts, computed once for the word, stop-word and n-gram checks.
    words = text.lower().translate(_WORD_BREAKS).split()
    return (_word_checks(text, tokens, words, cfg=cfg)
            or _line_checks(text, cfg)
            or _stop_word_check(words, cfg)
            or _ngram_check(text, words, cfg))


def filter_batch(batch: dict[str, np.ndarray], cfg: FilterConfig) -> dict[str, np.ndarray]:
    """Normalise and check every not-yet-rejected row; set ``reason``/``detail`` for drops."""
    texts = np.array(batch["text"], dtype=object, copy=True)
    reasons = np.array(batch["reason"], dtype=object, copy=True)
    details = np.array(batch["detail"], dtype=object, copy=True)
    for i in range(len(texts)):
        if reasons[i]:
            continue
        text = normalize_text(str(texts[i]), cfg)
        texts[i] = text
        verdict = evaluate_document(text, cfg)
        if verdict is not None:
            reasons[i], details[i] = verdict
    return {**batch, "text": texts, "reason": reasons, "detail": details}


# ---------------------------------------------------------------------------------------------
# The checks. Each returns a verdict for its first failure or None.
# ---------------------------------------------------------------------------------------------
def _below(name: str, measure: str, value: float, *, limit: float | None) -> FilterVerdict | None:
    if limit and value < limit:
        return FilterVerdict(f"filter:{name}", f"{measure}={_fmt(value)} < {_fmt(limit)}")
    return None


def _above(name: str, measure: str, value: float, *, limit: float | None) -> FilterVerdict | None:
    if limit and value > limit:
        return FilterVerdict(f"filter:{name}", f"{measure}={_fmt(value)} > {_fmt(limit)}")
    return None


def _fmt(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:.3g}"


def _length_checks(text: str, cfg: FilterConfig) -> FilterVerdict | None:
    n = len(text)
    return (_below("min_chars", "chars", n, limit=cfg.min_chars)
            or _above("max_chars", "chars", n, limit=cfg.max_chars))


def _count_checks(n: int, cfg: FilterConfig) -> FilterVerdict | None:
    return (_below("min_words", "words", n, limit=cfg.min_words)
            or _above("max_words", "words", n, limit=cfg.max_words))


def _word_checks(text: str, tokens: list[str], words: list[str], *, cfg: FilterConfig) -> FilterVerdict | None:
    mean = sum(map(len, words)) / len(words) if words else 0.0
    found = (_below("mean_word_length", "mean_word_length", mean, limit=cfg.min_mean_word_length)
             or _above("mean_word_length", "mean_word_length", mean, limit=cfg.max_mean_word_length))
    if found:
        return found
    n = len(tokens)
    # Purely alphabetic tokens are a lower bound on tokens with a letter; the exact (slower regex)
    # count is only needed when the bound alone would fail.
    alpha = sum(map(str.isalpha, tokens)) / n
    if cfg.min_alpha_ratio and alpha < cfg.min_alpha_ratio:
        alpha = 1.0 - len(_NO_LETTER_TOKEN.findall(text)) / n
    symbols = (text.count("#") + text.count("...") + text.count("…")) / n
    return (_below("alpha_ratio", "alpha_ratio", alpha, limit=cfg.min_alpha_ratio)
            or _above("symbol_ratio", "symbol_ratio", symbols, limit=cfg.max_symbol_ratio))


def _line_checks(text: str, cfg: FilterConfig) -> FilterVerdict | None:
    lines = [line.strip() for line in text.split("\n")]
    lines = [line for line in lines if line]
    if not lines:
        return None
    seen: set[str] = set()
    dup_lines = dup_chars = 0
    for line in lines:
        if line in seen:
            dup_lines += 1
            dup_chars += len(line)
        seen.add(line)
    total_chars = sum(map(len, lines))
    n = len(lines)
    bullets = sum(1 for line in lines if line.startswith(BULLETS))
    ellipses = sum(1 for line in lines if line.endswith(("...", "…")))
    return (_above("repeated_lines", "repeated_line_ratio", dup_lines / n,
                   limit=cfg.max_repeated_line_ratio)
            or _above("repeated_line_chars", "repeated_line_char_ratio", dup_chars / total_chars,
                      limit=cfg.max_repeated_line_char_ratio)
            or _above("bullet_lines", "bullet_line_ratio", bullets / n, limit=cfg.max_bullet_line_ratio)
            or _above("ellipsis_lines", "ellipsis_line_ratio", ellipses / n,
                      limit=cfg.max_ellipsis_line_ratio))


def _stop_word_check(words: list[str], cfg: FilterConfig) -> FilterVerdict | None:
    if not cfg.min_stop_words:
        return None
    count = sum(map(STOP_WORDS.__contains__, words))
    return _below("stop_words", "stop_words", count, limit=cfg.min_stop_words)


def _ngram_check(text: str, words: list[str], cfg: FilterConfig) -> FilterVerdict | None:
    limit = cfg.max_top_2gram_ratio
    if not limit or len(words) < 2:
        return None
    # Gopher / datatrove: characters covered by the top 2-gram's occurrences over the text's.
    (top, count), = Counter(zip(words, words[1:])).most_common(1)
    if count < 2:
        return None  # a 2-gram seen once is not repetition
    ratio = count * (len(top[0]) + 1 + len(top[1])) / len(text)
    return _above("top_2gram", "top_2gram_ratio", ratio, limit=limit)
