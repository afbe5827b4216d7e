"""Words, symbols and sentences: the text statistics the filter blocks share.

Words are whitespace-separated tokens (``str.split``, in C), as in the Gopher paper, whose rules
speak of words "containing an alphabetic character" and of their mean length, and as in C4's
line rules. datatrove counts NLTK Treebank tokens instead (punctuation split off as tokens of its
own), which needs NLTK's punkt data (a download) and runs at a few MB/s; over those tokens, every
comma and full stop is a token without a letter, and prose with much dialogue falls below
Gopher's 0.8 share of words with a letter. Tests and the benchmark run datatrove with these same
tokens (``benchmarks/corpus_filters.DatatroveTokenizer``), so the two agree rule for rule.

``is_symbol`` decides datatrove's "non-symbol word": a token made only of punctuation and
symbols (Unicode categories P* and S*, and control characters: "--", "&", "...") is not a word
for the word count and the mean word length, but stays a token for the ratios, as in datatrove.

``sentence_count`` stands in for punkt's sentence splitter in C4's minimum-sentence rule: a
sentence ends at a run of terminal marks (optionally followed by closing quotes or brackets)
that is followed by a space or the end of the line, or at a CJK full stop (。！？), after which
those scripts put no space; a line always holds at least one sentence.
It does not know abbreviations ("Mr. Smith" counts two), which errs on the side of keeping.

``TERMINAL_PUNCTUATION`` holds the sentence-final marks of the common scripts (Latin, CJK,
Arabic, Devanagari, Ethiopic, Armenian, Myanmar, Khmer...), a subset of Unicode's
Sentence_Terminal property, which datatrove's FineWeb line-punctuation rule uses.
"""
from __future__ import annotations

import functools
import re
import unicodedata

_LETTER = re.compile(r"[^\W\d_]")

TERMINAL_PUNCTUATION = frozenset(
    ".!?\u3002\uff01\uff1f\uff61\uff0e\u061f\u06d4\u0964\u0965\u1362\u1367\u1368\u0589\u055c\u055e"
    "\u104a\u104b\u17d4\u17d5\u1803\u1809\ua4ff\ua60e\ua60f\ua6f3\ua6f7\ufe52\ufe56\ufe57"
    "\u203c\u203d\u2047\u2048\u2049\u2e2e\u0700\u0701\u0702\u07f9\u0df4")
# Closing quotes and brackets that may follow a sentence's terminal mark.
CLOSERS = "\"'\u201d\u2019\u00bb\u203a)]"
# CJK full stops end a sentence wherever they stand (the scripts put no space after them); the
# others only before a space or the end of the line ("3.14", "e.g.x" do not end one).
_CJK_STOPS = "\u3002\uff01\uff1f\uff61\uff0e"
_SENTENCE_END = re.compile(
    "[" + _CJK_STOPS + "]+[\"'\u201d\u2019)\\]\u300d\u300f\uff09]*|"
    "[" + re.escape("".join(sorted(TERMINAL_PUNCTUATION - set(_CJK_STOPS)))) + "\u2026]+[\"'\u201d\u2019)\\]]*(?=\\s|$)")


def words(text: str) -> list[str]:
    """The words of ``text``, in order (see the module docstring): English's splitter; other
    languages' are in ``pipelines.language.segmenters``."""
    return text.split()


@functools.lru_cache(maxsize=1 << 16)
def is_symbol(token: str) -> bool:
    """True for a token made only of punctuation and symbols (not a word for datatrove)."""
    # Cached: the punctuation tokens of a corpus are a small set ("," "." "--" ...).
    return all(unicodedata.category(c)[0] in "PS" or unicodedata.category(c) == "Cc" for c in token)


def has_letter(token: str) -> bool:
    return token[:1].isalpha() or _LETTER.search(token) is not None


def sentence_count(line: str) -> int:
    """Sentences in one line (at least one; see the module docstring)."""
    ends = [m.end() for m in _SENTENCE_END.finditer(line)]
    if not ends:
        return 1
    return len(ends) + (1 if line[ends[-1]:].strip() else 0)


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """The (start, end) character spans of ``sentence_count``'s sentences in ``text``."""
    spans, start = [], 0
    for m in _SENTENCE_END.finditer(text):
        spans.append((start, m.end()))
        start = m.end()
    if not spans or text[start:].strip():
        spans.append((start, len(text)))
    return spans
