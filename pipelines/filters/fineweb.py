"""FineWeb's quality rules (Penedo et al. 2024), as datatrove's FineWebQualityFilter.

Over the non-blank lines, with ``filter.fineweb`` (a None threshold disables its rule):

==================  ===========================================================  =========
rule (reason)       measure                                                      default
==================  ===========================================================  =========
line_punct_ratio    lines ending in terminal punctuation / lines                 >= 0.12
short_line_ratio    lines of at most ``short_line_length`` (30) chars / lines    <= 0.67
char_dup_ratio      characters in lines equal to an earlier line / characters    <= 0.01
                    of the document without newlines
list_ratio          newlines / words                                             <= 0.3
==================  ===========================================================  =========

``allow_closing_quotes`` (default on; not in datatrove, whose rule drops pages of dialogue)
also counts a line whose terminal mark is followed by closing quotes or brackets ('."', '?”').
``line_punct_exclude_zero`` keeps a document whose ratio is exactly 0 (datatrove's option for
corpora without punctuation). Terminal punctuation is ``text.TERMINAL_PUNCTUATION``, the
sentence-final marks of the common scripts; words are the shared tokens. After the C4 block the
text has no blank lines, so ``list_ratio`` is one newline per line, as in datatrove's pipeline.
"""
from __future__ import annotations

from dataclasses import dataclass

from common.config import check
from pipelines.filters.block import Doc, Verdict, above, below, nonnegative
from pipelines.filters.gopher_repetition import duplicates
from pipelines.filters.registry import register
from pipelines.filters.text import CLOSERS, TERMINAL_PUNCTUATION


@dataclass
class FineWebConfig:
    line_punct_thr: float | None = 0.12  # min share of lines ending in terminal punctuation
    line_punct_exclude_zero: bool = False
    # Not in datatrove: a terminal mark followed by closing quotes or brackets ('."', '?”', '.)')
    # also counts as a punctuated line. false: datatrove's rule.
    allow_closing_quotes: bool = True
    short_line_thr: float | None = 0.67  # max share of lines of <= short_line_length characters
    short_line_length: int = 30
    char_duplicates_ratio: float | None = 0.01  # max characters in duplicated lines / all
    new_line_ratio: float | None = 0.3  # max newlines per word (lists)

    def validate(self) -> None:
        nonnegative(self, "line_punct_thr", "short_line_thr", "char_duplicates_ratio", "new_line_ratio")
        check(self.short_line_length >= 0, "short_line_length must be >= 0")


_P = "filter:fineweb:"


class FineWeb:
    name = "fineweb"

    def __init__(self, cfg: FineWebConfig):
        self.cfg = cfg

    def __call__(self, doc: Doc) -> Verdict | None:
        cfg, text = self.cfg, doc.text
        lines = [line for line in text.split("\n") if line.strip()]
        if not lines:
            return Verdict("filter:empty", "no non-blank line")
        n = len(lines)
        if cfg.line_punct_thr is not None:
            if cfg.allow_closing_quotes:
                # [-1:] of an all-closers line is "", never in the set: no second strip needed
                ratio = sum(1 for line in lines if line.rstrip(CLOSERS)[-1:] in TERMINAL_PUNCTUATION) / n
            else:
                ratio = sum(1 for line in lines if line[-1] in TERMINAL_PUNCTUATION) / n
            if not (ratio == 0 and cfg.line_punct_exclude_zero):
                found = below(_P + "line_punct_ratio", "line_punct_ratio", ratio, cfg.line_punct_thr)
                if found:
                    return found
        limit = cfg.short_line_length
        found = above(_P + "short_line_ratio", "short_line_ratio",
                      sum(1 for line in lines if len(line) <= limit) / n, cfg.short_line_thr)
        if found:
            return found
        newlines = text.count("\n")
        if cfg.char_duplicates_ratio is not None:
            chars = max(len(text) - newlines, 1)
            found = above(_P + "char_dup_ratio", "char_dup_ratio", duplicates(lines)[1] / chars,
                          cfg.char_duplicates_ratio)
            if found:
                return found
        if cfg.new_line_ratio is not None and newlines:
            return above(_P + "list_ratio", "list_ratio", newlines / max(len(doc.words), 1), cfg.new_line_ratio)
        return None


@register("fineweb", config=FineWebConfig, position=50, counts_words=True)
def build(cfg: FineWebConfig) -> FineWeb:
    return FineWeb(cfg)
