"""Gopher's quality rules (Rae et al. 2021, appendix A), as datatrove's GopherQualityFilter.

Over the document's tokens (``pipelines.filters.text``), with ``filter.gopher_quality``:

=========================  ==================================================  ===============
rule (reason suffix)       measure                                             default
=========================  ==================================================  ===============
min_doc_words              words (whitespace tokens not only punctuation)      >= 50
max_doc_words              the same                                            <= 100000
min_avg_word_length        mean length of those words                          >= 3
max_avg_word_length        the same                                            <= 10
max_symbol_word_ratio      '#' per token, and '...' + '…' per token            <= 0.1 (each)
max_bullet_lines_ratio     lines starting (after spaces) with '•' or '-'       <= 0.9
max_ellipsis_lines_ratio   lines ending with '...' or '…'                      <= 0.3
max_non_alpha_words_ratio  tokens with at least one letter / all tokens        >= 0.8
min_stop_words             distinct stop words present (case-sensitive)        >= 2
=========================  ==================================================  ===============

The rules and their order are datatrove's, including its quirks that the thresholds were tuned
with: punctuation-only tokens ("--", "&") count in the symbol and letter ratios' denominators, the
stop words are matched case-sensitively (and with any attached punctuation: "the," is not "the")
and counted once each. ``max_non_alpha_words_ratio`` is datatrove's
name for what is a minimum share of words with a letter. A None threshold disables its rule.

The statistics come from one pass over the tokens: tokens starting with a letter (most of them)
are words with a letter without further checks; only the rest are inspected one by one.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from pipelines.filters.block import Doc, Verdict, above, below, nonnegative
from pipelines.filters.registry import register
from pipelines.filters.text import has_letter, is_symbol


# Field names and defaults are datatrove's (0.10.1) constructor arguments; every threshold
# is ``X | None`` and None disables that rule (as in the other datatrove blocks).
@dataclass
class GopherQualityConfig:
    min_doc_words: int | None = 50
    max_doc_words: int | None = 100_000
    min_avg_word_length: float | None = 3
    max_avg_word_length: float | None = 10
    max_symbol_word_ratio: float | None = 0.1  # '#' and ellipses per word
    max_bullet_lines_ratio: float | None = 0.9
    max_ellipsis_lines_ratio: float | None = 0.3
    max_non_alpha_words_ratio: float | None = 0.8  # datatrove's name: the MIN share of words with a letter
    min_stop_words: int | None = 2
    stop_words: list[str] = field(default_factory=lambda: ["the", "be", "to", "of", "and", "that", "have", "with"])

    def validate(self) -> None:
        nonnegative(self, "min_doc_words", "max_doc_words", "min_avg_word_length", "max_avg_word_length",
                    "max_symbol_word_ratio", "max_bullet_lines_ratio", "max_ellipsis_lines_ratio",
                    "max_non_alpha_words_ratio", "min_stop_words")


_P = "filter:gopher_quality:"


class GopherQuality:
    name = "gopher_quality"

    def __init__(self, cfg: GopherQualityConfig):
        self.cfg = cfg
        self.stop_words = frozenset(cfg.stop_words)

    def __call__(self, doc: Doc) -> Verdict | None:
        cfg = self.cfg
        tokens = doc.words
        n_tokens = len(tokens)
        if not n_tokens:
            return Verdict(_P + "min_doc_words", "words=0")
        rest = [t for t in tokens if not t[0].isalpha()]  # digits, punctuation, '_'...
        symbols = [t for t in rest if not t[0].isalnum() and is_symbol(t)]
        n_words = n_tokens - len(symbols)
        found = (below(_P + "min_doc_words", "words", n_words, cfg.min_doc_words)
                 or above(_P + "max_doc_words", "words", n_words, cfg.max_doc_words))
        if found:
            return found
        if n_words:
            mean = (sum(map(len, tokens)) - sum(map(len, symbols))) / n_words
            found = (below(_P + "min_avg_word_length", "avg_word_length", mean, cfg.min_avg_word_length)
                     or above(_P + "max_avg_word_length", "avg_word_length", mean, cfg.max_avg_word_length))
            if found:
                return found
        text = doc.text
        if cfg.max_symbol_word_ratio is not None:
            found = (above(_P + "max_symbol_word_ratio", "hash_ratio", text.count("#") / n_tokens,
                           cfg.max_symbol_word_ratio)
                     or above(_P + "max_symbol_word_ratio", "ellipsis_ratio",
                              (text.count("...") + text.count("…")) / n_tokens, cfg.max_symbol_word_ratio))
            if found:
                return found
        found = self._lines(text)
        if found:
            return found
        if cfg.max_non_alpha_words_ratio is not None:
            with_letter = n_tokens - len(rest) + sum(map(has_letter, rest))
            found = below(_P + "max_non_alpha_words_ratio", "alpha_words_ratio", with_letter / n_tokens,
                          cfg.max_non_alpha_words_ratio)
            if found:
                return found
        if cfg.min_stop_words is not None:
            count = len(self.stop_words.intersection(tokens))
            return below(_P + "min_stop_words", "stop_words", count, cfg.min_stop_words)
        return None

    def _lines(self, text: str) -> Verdict | None:
        cfg = self.cfg
        if cfg.max_bullet_lines_ratio is None and cfg.max_ellipsis_lines_ratio is None:
            return None
        lines = text.splitlines()
        n = len(lines)
        if cfg.max_bullet_lines_ratio is not None:
            bullets = sum(1 for s in lines if s.lstrip().startswith(("•", "-")))
            found = above(_P + "max_bullet_lines_ratio", "bullet_lines_ratio", bullets / n,
                          cfg.max_bullet_lines_ratio)
            if found:
                return found
        if cfg.max_ellipsis_lines_ratio is not None:
            ellipses = sum(1 for s in lines if s.rstrip().endswith(("...", "…")))
            return above(_P + "max_ellipsis_lines_ratio", "ellipsis_lines_ratio", ellipses / n,
                         cfg.max_ellipsis_lines_ratio)
        return None


@register("gopher_quality", config=GopherQualityConfig, position=10, counts_words=True)
def build(cfg: GopherQualityConfig) -> GopherQuality:
    return GopherQuality(cfg)
