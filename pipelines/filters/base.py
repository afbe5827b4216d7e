"""The filter blocks' one interface, their registry, and running them over a batch.

A block is built from its config section (``filter.<name>``) and called with a ``Doc``; it
returns None to keep the document or a ``Verdict``: the reason ``filter:<block>:<rule>`` and a
``detail`` with the measured value against the threshold (``"words=3 < 50"``). Blocks run in the
order ``filter.blocks`` lists them and the first verdict decides, so cheap, selective blocks
belong first. A block may also rewrite the document (C4 removes lines, PII replaces addresses)
or annotate it (the language block sets ``Doc.language``).

``Doc`` carries the text and the statistics several blocks need, computed once and only when
asked for: the word tokens serve the Gopher quality, Gopher repetition, C4 and FineWeb blocks.
A block that rewrites the text says whether the words survive (C4 removing only blank lines
leaves them as they were), so they are not recomputed for nothing.

Languages (``pipelines.language``). Each document is filtered with its language's profile: its
word splitter (whitespace for English and other spaced scripts, a segmenter for Japanese,
Chinese, Thai) and the blocks built from the filter sections with that language's overrides
(``Filters.blocks_for``; a language without calibrated thresholds runs only the
script-independent blocks). With one configured language every document gets its profile (the
language block drops the others); with several, or none (any language), the document's language
is identified first, with the language block's own model and sample, once per document.

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


# name -> factory taking the block's config section; filled by the block modules on import.
REGISTRY: dict[str, Callable[[Any], Block]] = {}


def register(name: str) -> Callable[[Callable[[Any], Block]], Callable[[Any], Block]]:
    def wrap(factory: Callable[[Any], Block]) -> Callable[[Any], Block]:
        assert name in FILTER_BLOCKS, f"block {name!r} missing from config.FilterBlock"
        REGISTRY[name] = factory
        return factory
    return wrap


def build_blocks(cfg: FilterConfig, code: str = "en") -> list[Block]:
    """The blocks ``cfg.blocks`` names that language ``code`` runs, in order, each built from its
    section with the language's overrides (``pipelines.language.profiles``)."""
    from pipelines.filters import (c4, code as code_block, fineweb, gopher_quality,  # noqa: F401
                                   gopher_repetition, language, lm_quality, pii)
    from pipelines.language.profiles import blocks_for, profile_for

    profile = profile_for(code)
    names, _ = blocks_for(profile, list(cfg.blocks), references(cfg), frozenset(cfg.by_language.get(code, {})))
    out = []
    for name in names:
        section = cfg.section(name, code, profile.overrides)
        out.append(REGISTRY[name](section, profile.splitter) if name == "lm_quality" else REGISTRY[name](section))
    return out


def references(cfg: FilterConfig) -> dict[str, str | None]:
    """language -> its lm_quality reference (English: the configured one, None = shipped)."""
    out = {code: (s.get("lm_quality") or {}).get("reference") for code, s in cfg.by_language.items()}
    out["en"] = cfg.lm_quality.reference
    return out


class Filters:
    """The blocks per language for one filter config, built on first use (module docstring)."""

    def __init__(self, cfg: FilterConfig):
        from pipelines.language.profiles import profile_for
        from pipelines.language.segmenters import splitter

        self.cfg = cfg
        self.languages = cfg.language.languages
        self.fixed = self.languages[0] if self.languages and len(self.languages) == 1 else None
        self._blocks: dict[str, list[Block]] = {}
        self._profile, self._splitter = profile_for, splitter

    def language_of(self, doc: Doc) -> str:
        """The language whose profile filters ``doc``."""
        if self.fixed is not None:
            return self.fixed
        if doc.ranked is None:
            from pipelines.filters.language import classify

            doc.ranked = classify(doc.text, self.cfg.language.sample_chars)
        return doc.ranked[0][0] if doc.ranked else "en"

    def prepare(self, doc: Doc) -> list[Block]:
        """Give ``doc`` its language's splitter; return that language's blocks (only the language
        block, which drops it, for an identified language the build does not keep)."""
        code = self.language_of(doc)
        if self.fixed is None and self.languages is not None and code not in self.languages:
            code = "\x00unwanted"
            if code not in self._blocks:
                self._blocks[code] = [b for b in build_blocks(self.cfg, "en") if b.name == "language"]
            return self._blocks[code]
        if code not in self._blocks:
            self._blocks[code] = build_blocks(self.cfg, code)
        doc.split = self._splitter(self._profile(code).splitter)
        return self._blocks[code]


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


_FILTERS_CACHE: dict[str, Filters] = {}


def _cached_filters(cfg: FilterConfig, version: str = "") -> Filters:
    # One set of blocks per config (and filter-stage key: it covers the files the blocks read)
    # and process: building the language block loads its model.
    key = json.dumps(dataclasses.asdict(cfg), sort_keys=True) + version
    if key not in _FILTERS_CACHE:
        _FILTERS_CACHE[key] = Filters(cfg)
    return _FILTERS_CACHE[key]


def filter_batch(batch: dict[str, np.ndarray], cfg: FilterConfig, protected: Any = None,
                 version: str = "") -> dict[str, np.ndarray]:
    """Normalise and filter every not-yet-rejected row (see the module docstring); with
    ``protected`` (a ``ProtectedSet`` or a Ray reference to one), a document the blocks keep is
    then checked against it (``pipelines.decontaminate.check``). ``version``: the filter stage's
    key, so that blocks built for an earlier build are not reused."""
    filters = _cached_filters(cfg, version)
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
        verdict = run_blocks(doc, filters.prepare(doc))
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
