"""Gopher's repetition rules (Rae et al. 2021, table A1), as datatrove's GopherRepetitionFilter.

With ``filter.gopher_repetition`` (a None threshold disables its rule), in datatrove's order:

====================  =====================================================================  =======
rule (reason suffix)  measure                                                                default
====================  =====================================================================  =======
dup_para_frac         paragraphs (split at blank lines) equal to an earlier one / all        <= 0.3
dup_para_char_frac    characters in those paragraphs / characters of the document            <= 0.2
dup_line_frac         lines equal to an earlier line / all lines                             <= 0.3
dup_line_char_frac    characters in those lines / characters of the document                 <= 0.2
top_<n>_gram          occurrences x characters of the most frequent word n-gram / document   n=2..4:
                      characters (ties: the n-gram seen first)                               .20 .18 .16
dup_<n>_grams         characters of word n-grams repeating an earlier one, scanning left to  n=5..10:
                      right and jumping over a repeat (no overlap counted twice) / document  .15 ... .10
====================  =====================================================================  =======

Word n-grams are over the shared tokens (``pipelines.filters.text``); an n-gram's characters
are its words' plus one space between words for top n-grams and without spaces for duplicated
n-grams, as in datatrove. Note that the top n-gram rule counts a single occurrence too, so a
very short document fails it.

How it is computed: n-grams are tuples of the shared tokens (their hashes are cached, so a
tuple hashes fast) and counted by ``collections.Counter`` in C. The duplicated n-gram scan is
sequential by definition (a repeat makes it jump), so it runs only when needed: if no n-gram of
the smallest checked size repeats, none of a larger size can (clean prose, usually); otherwise
the characters of every repeated occurrence bound each size's fraction, and the exact
left-to-right scan runs only for a size whose bound exceeds its threshold. (datatrove joins the
words of a duplicated n-gram without spaces before comparing, so "ab c" equals "a bc" there;
here they differ, a case only contrived text reaches.)
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from itertools import accumulate
from operator import itemgetter
from typing import Any

from common.config import check
from pipelines.filters.block import Doc, Verdict, above, nonnegative
from pipelines.filters.registry import register


@dataclass
class GopherRepetitionConfig:
    dup_line_frac: float | None = 0.3
    dup_para_frac: float | None = 0.3
    dup_line_char_frac: float | None = 0.2
    dup_para_char_frac: float | None = 0.2
    # [n, max character fraction] pairs; a null fraction disables that n.
    # (Typed loosely here, checked in validate(): the loader types a list's items alike.)
    top_n_grams: list[list[Any]] = field(default_factory=lambda: [[2, 0.2], [3, 0.18], [4, 0.16]])
    dup_n_grams: list[list[Any]] = field(default_factory=lambda: [
        [5, 0.15], [6, 0.14], [7, 0.13], [8, 0.12], [9, 0.11], [10, 0.10]])

    def validate(self) -> None:
        nonnegative(self, "dup_line_frac", "dup_para_frac", "dup_line_char_frac", "dup_para_char_frac")
        for name in ("top_n_grams", "dup_n_grams"):
            for pair in getattr(self, name):
                check(len(pair) == 2 and type(pair[0]) is int and pair[0] >= 1
                      and (pair[1] is None or (type(pair[1]) in (int, float) and pair[1] >= 0)),
                      f"{name}: expected [n >= 1, fraction or null] pairs, got {list(pair)}")


_P = "filter:gopher_repetition:"
_PARAGRAPHS = re.compile(r"\n{2,}")
_LINES = re.compile(r"\n+")


def duplicates(items: list[str]) -> tuple[int, int]:
    """(items equal to an earlier one, their characters)."""
    if len(set(items)) == len(items):
        return 0, 0
    seen: set[str] = set()
    count = chars = 0
    for x in items:
        if x in seen:
            count += 1
            chars += len(x)
        else:
            seen.add(x)
    return count, chars


class GopherRepetition:
    name = "gopher_repetition"

    def __init__(self, cfg: GopherRepetitionConfig):
        self.cfg = cfg
        self.top = [(int(n), f) for n, f in cfg.top_n_grams if f is not None]
        self.dup = [(int(n), f) for n, f in cfg.dup_n_grams if f is not None]

    def __call__(self, doc: Doc) -> Verdict | None:
        cfg, text = self.cfg, doc.text
        size = len(text)
        paragraphs = _PARAGRAPHS.split(text.strip())
        count, chars = duplicates(paragraphs)
        found = (above(_P + "dup_para_frac", "dup_para_frac", count / len(paragraphs), cfg.dup_para_frac)
                 or above(_P + "dup_para_char_frac", "dup_para_char_frac", chars / size, cfg.dup_para_char_frac))
        if found:
            return found
        lines = _LINES.split(text)
        count, chars = duplicates(lines)
        found = (above(_P + "dup_line_frac", "dup_line_frac", count / len(lines), cfg.dup_line_frac)
                 or above(_P + "dup_line_char_frac", "dup_line_char_frac", chars / size, cfg.dup_line_char_frac))
        if found or not (self.top or self.dup):
            return found
        return self._ngrams(doc.words, size)

    def _ngrams(self, words: list[str], size: int) -> Verdict | None:
        if len(words) < 2:
            return None  # no 2-gram at all: datatrove skips every n-gram rule too
        for n, frac in self.top:
            if n > len(words):
                continue
            counts = Counter(zip(*(words[k:] for k in range(n))))
            # max() keeps the first of equal counts: datatrove's Counter.most_common(1) does too.
            gram, best = max(counts.items(), key=itemgetter(1))
            chars = best * (sum(map(len, gram)) + n - 1)
            found = above(_P + f"top_{n}_gram", f"top_{n}_gram_char_frac", chars / size, frac)
            if found:
                return found
        if not self.dup:
            return None
        # An n-gram can only repeat where its first m words do (m <= n): the positions where the
        # smallest n-gram repeats bound the repeats of every larger n.
        smallest = min(n for n, _ in self.dup)
        if smallest > len(words):
            return None
        grams = list(zip(*(words[k:] for k in range(smallest))))
        if len(set(grams)) == len(grams):
            return None  # no n-gram of any checked size repeats (clean prose, usually)
        seen: set[tuple[str, ...]] = set()
        repeats = []
        for i, g in enumerate(grams):
            if g in seen:
                repeats.append(i)
            else:
                seen.add(g)
        ends = list(accumulate(map(len, words), initial=0))
        for n, frac in sorted(self.dup):
            last = len(words) - n + 1
            if last < 1:
                continue
            bound = sum(ends[i + n] - ends[i] for i in repeats if i < last)
            if bound <= frac * size:
                continue  # even counting every repeat, within the limit
            found = above(_P + f"dup_{n}_grams", f"dup_{n}_gram_char_frac",
                          _scan(words, ends, n) / size, frac)
            if found:
                return found
        return None


def _scan(words: list[str], ends: list[int], n: int) -> int:
    """datatrove's left-to-right scan: a repeated n-gram adds its characters and jumps n words."""
    seen: set[tuple[str, ...]] = set()
    chars, i, last = 0, 0, len(words) - n + 1
    while i < last:
        g = tuple(words[i:i + n])
        if g in seen:
            chars += ends[i + n] - ends[i]
            i += n
        else:
            seen.add(g)
            i += 1
    return chars


@register("gopher_repetition", config=GopherRepetitionConfig, position=20)
def build(cfg: GopherRepetitionConfig) -> GopherRepetition:
    return GopherRepetition(cfg)
