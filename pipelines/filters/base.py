"""The filter blocks' one interface, their registry, and running them over a batch.

A block is built from its config section (``filter.<name>``) and called with a ``Doc``; it
returns None to keep the document or a ``Verdict``: the reason ``filter:<block>:<rule>`` and a
``detail`` with the measured value against the threshold (``"words=3 < 50"``). Blocks run in the
order ``filter.blocks`` lists them and the first verdict decides, so cheap, selective blocks
belong first. A block may also rewrite the document (C4 removes lines, PII replaces addresses)
or annotate it (the language block sets ``Doc.language``).

``Doc`` carries the text and the statistics several blocks need, computed once and only when
asked for: the word tokens (``pipelines.filters.text.words``) serve the Gopher quality,
Gopher repetition and FineWeb blocks. A block that rewrites the text says whether the words
survive (C4 removing only blank lines leaves them as they were), so they are not recomputed
for nothing.

``filter_batch`` is the filter stage's map function: it normalises every row that ingestion did
not already reject, runs the blocks, sets ``reason``/``detail`` on drops and writes the detected
language in a ``language`` column ("" where the language block did not run), which
``pipelines.engine.parts`` counts per language and removes before writing. An empty document after
normalisation is always dropped (``filter:empty``), whatever the blocks.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, NamedTuple, Protocol

import numpy as np

from pipelines.config import FILTER_BLOCKS, FilterConfig
from pipelines.filters import text as textstats
from pipelines.filters.normalize import normalize_text


class Verdict(NamedTuple):
    reason: str  # "filter:<block>:<rule>"
    detail: str  # measured value vs threshold


class Doc:
    """One document while the blocks look at it: its text, language and cached statistics."""

    __slots__ = ("text", "language", "language_score", "_words")

    def __init__(self, text: str):
        self.text = text
        self.language = ""  # set by the language block: the top language's code
        self.language_score = 0.0
        self._words: list[str] | None = None

    @property
    def words(self) -> list[str]:
        if self._words is None:
            self._words = textstats.words(self.text)
        return self._words

    def set_text(self, text: str, *, same_words: bool = False) -> None:
        """Rewrite the text; ``same_words``: only whitespace changed, the tokens stay valid."""
        self.text = text
        if not same_words:
            self._words = None


class Block(Protocol):
    name: str

    def __call__(self, doc: Doc) -> Verdict | None: ...


# name -> factory taking the block's config section; filled by the block modules on import.
REGISTRY: dict[str, Callable[[Any], Block]] = {}


def register(name: str) -> Callable[[Callable[[Any], Block]], Callable[[Any], Block]]:
    def wrap(factory: Callable[[Any], Block]) -> Callable[[Any], Block]:
        assert name in FILTER_BLOCKS, f"block {name!r} missing from config.FilterBlock"
        REGISTRY[name] = factory
        return factory
    return wrap


def build_blocks(cfg: FilterConfig) -> list[Block]:
    """The blocks ``cfg.blocks`` names, in order, each built from its own section."""
    from pipelines.filters import (c4, code, fineweb, gopher_quality, gopher_repetition, language,  # noqa: F401
                                   lm_quality, pii)

    return [REGISTRY[name](getattr(cfg, name)) for name in cfg.blocks]


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


def run_blocks(doc: Doc, blocks: list[Block]) -> Verdict | None:
    """The first block's verdict, or None when every block keeps the document."""
    if not doc.text.strip():
        return Verdict("filter:empty", "no text left after normalisation")
    for block in blocks:
        verdict = block(doc)
        if verdict is not None:
            return verdict
    if not doc.text.strip():  # a rewriting block removed everything
        return Verdict("filter:empty", "no text left after filtering")
    return None


_BLOCKS_CACHE: dict[str, list[Block]] = {}


def _cached_blocks(cfg: FilterConfig, version: str = "") -> list[Block]:
    # One set of blocks per config (and filter-stage key: it covers the files the blocks read)
    # and process: building the language block loads its model.
    key = json.dumps(dataclasses.asdict(cfg), sort_keys=True) + version
    if key not in _BLOCKS_CACHE:
        _BLOCKS_CACHE[key] = build_blocks(cfg)
    return _BLOCKS_CACHE[key]


def filter_batch(batch: dict[str, np.ndarray], cfg: FilterConfig, protected: Any = None,
                 version: str = "") -> dict[str, np.ndarray]:
    """Normalise and filter every not-yet-rejected row (see the module docstring); with
    ``protected`` (a ``ProtectedSet`` or a Ray reference to one), a document the blocks keep is
    then checked against it (``pipelines.decontaminate.check``). ``version``: the filter stage's
    key, so that blocks built for an earlier build are not reused."""
    blocks = _cached_blocks(cfg, version)
    if protected is not None:
        from pipelines.decontaminate.check import contamination, resolve

        protected = resolve(protected)
    texts = np.array(batch["text"], dtype=object, copy=True)
    reasons = np.array(batch["reason"], dtype=object, copy=True)
    details = np.array(batch["detail"], dtype=object, copy=True)
    languages = np.full(len(texts), "", dtype=object)
    for i in range(len(texts)):
        if reasons[i]:
            continue
        normalized = normalize_text(str(texts[i]), cfg)
        doc = Doc(normalized)
        verdict = run_blocks(doc, blocks)
        if verdict is None and protected is not None:
            found = contamination(doc.text, protected)
            verdict = None if found is None else Verdict(*found)
        languages[i] = doc.language
        if verdict is None:
            texts[i] = doc.text  # as the rewriting blocks left it
        else:
            # The quarantine shows the document as it came in (normalised), not a block's rewrite.
            texts[i] = normalized
            reasons[i], details[i] = verdict
    return {**batch, "text": texts, "reason": reasons, "detail": details, "language": languages}
