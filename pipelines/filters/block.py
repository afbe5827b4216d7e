"""What a filter block is: called with a ``Doc``, it keeps it (None) or drops it (a ``Verdict``).

A block is built from its config section (``filter.<name>``; declared with the block,
``pipelines.filters.registry``) and called with a ``Doc``; it returns None to keep the document
or a ``Verdict``: the reason ``filter:<block>:<rule>`` and a ``detail`` with the measured value
against the threshold (``"words=3 < 50"``, made by ``below``/``above``). A block may also
rewrite the document (C4 removes lines, PII replaces addresses) or annotate it (the language
block sets ``Doc.language``).

``Doc`` carries the text and the statistics several blocks need, computed once and only when
asked for: the word tokens serve the Gopher quality, Gopher repetition, C4 and FineWeb blocks.
A block that rewrites the text says whether the words survive (C4 removing only blank lines
leaves them as they were), so they are not recomputed for nothing.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple, Protocol

from common.config import check
from pipelines.filters import text as textstats


class Verdict(NamedTuple):
    reason: str  # "filter:<block>:<rule>"
    detail: str  # measured value vs threshold


class Doc:
    """One document while the blocks look at it: its text, language and cached statistics."""

    __slots__ = ("text", "language", "language_score", "ranked", "split", "_words")

    def __init__(self, text: str, split: Callable[[str], list[str]] = textstats.words):
        self.text = text
        self.language = ""  # set by the language block: the top language's code
        self.language_score = 0.0
        self.ranked: list[tuple[str, float]] | None = None  # language ID's ranking, once computed
        self.split = split  # the language's word splitter (pipelines.language.segmenters)
        self._words: list[str] | None = None

    @property
    def words(self) -> list[str]:
        if self._words is None:
            self._words = self.split(self.text)
        return self._words

    def set_text(self, text: str, *, same_words: bool = False) -> None:
        """Rewrite the text; ``same_words``: only whitespace changed, the tokens stay valid."""
        self.text = text
        if not same_words:
            self._words = None


class Block(Protocol):
    name: str

    def __call__(self, doc: Doc) -> Verdict | None: ...


def nonnegative(section: Any, *names: str) -> None:
    """For a section's ``validate()``: each named threshold is >= 0 or None (None disables the rule)."""
    for n in names:
        v = getattr(section, n)
        check(v is None or v >= 0, f"{n} must be >= 0 or null (null disables the rule)")


def below(rule: str, measure: str, value: float, limit: float | None) -> Verdict | None:
    """Helpers for a rule's verdict; a None limit disables the rule."""
    if limit is not None and value < limit:
        return Verdict(rule, f"{measure}={fmt(value)} < {fmt(limit)}")
    return None


def above(rule: str, measure: str, value: float, limit: float | None) -> Verdict | None:
    if limit is not None and value > limit:
        return Verdict(rule, f"{measure}={fmt(value)} > {fmt(limit)}")
    return None


def fmt(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:.3g}"
