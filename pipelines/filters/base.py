"""Running the filter blocks over a batch: the filter stage's map function.

A block is one module of this package that declares itself (``pipelines.filters.registry``:
its name, config section and position; what it sees and returns: ``pipelines.filters.block``).
``build_blocks`` builds the blocks ``filter.blocks`` names from their sections; they run in
that order and the first verdict decides, so cheap, selective blocks belong first.

Languages (``pipelines.language``). Each document is filtered with its language's profile: its
word splitter (whitespace for English and other spaced scripts, a segmenter for Japanese,
Chinese, Thai) and the blocks built from the filter sections with that language's overrides
(``Filters.blocks_for``; a language without calibrated thresholds runs only the
script-independent blocks). With one configured language every document gets its profile (the
language block drops the others); with several, or none (any language), the document's language
is identified first, with the language block's own model and sample, once per document.

``filter_batch`` is the filter stage's map function: it normalises every row that ingestion did
not already reject, runs the blocks, sets ``reason``/``detail`` on drops and writes the detected
language in a ``language`` column, which ``pipelines.engine.parts`` counts per language (kept and
dropped: the manifest's ``languages``) and removes before writing. An empty document after
normalisation is always dropped (``filter:empty``), whatever the blocks.

Every document is counted under a language when ``language`` is among the blocks, whichever block
dropped it: a document dropped before the language block ran (a word rule of the build's one
language) is identified then, with the language block's model and sample, so the per-language
kept + dropped add up to the stage's ``documents_in`` and a report can say in which language the
drops were (``pipelines.orchestration.drop_report``). A document with no text left is counted as
``und`` (undetermined). The price is one identification per such drop, paid only on drops:
about 0.1 ms per document (Debian's Spanish reference split at blank lines, 4,184 short blocks
nearly all dropped before the language block: 0.45 s more of one CPU than the blocks' own 0.16 s,
in a 4.5 s filter stage on Ray). Without the language block nothing is identified and the column
stays "" (no per-language counts).

The filter config (``pipelines.config.FilterConfig``) is typed ``Any`` here: it is made from the
blocks' declarations, so this module, which the blocks' package imports, does not import it.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np

from pipelines.filters import registry
from pipelines.filters.block import Block, Doc, Verdict
from pipelines.filters.normalize import normalize_text

__all__ = ["Block", "Doc", "Filters", "Verdict", "build_blocks", "filter_batch", "references", "run_blocks"]


def build_blocks(cfg: Any, code: str = "en") -> list[Block]:
    """The blocks ``cfg.blocks`` names that language ``code`` runs, in order, each built from its
    section with the language's overrides (``pipelines.language.profiles``)."""
    from pipelines.language.profiles import blocks_for, profile_for

    profile = profile_for(code)
    names, _ = blocks_for(profile, list(cfg.blocks), references(cfg), frozenset(cfg.by_language.get(code, {})))
    out = []
    for name in names:
        spec = registry.spec(name)
        section = cfg.section(name, code, profile.overrides)
        out.append(spec.build(section, profile.splitter) if spec.splitter else spec.build(section))
    return out


def references(cfg: Any) -> dict[str, str | None]:
    """language -> its lm_quality reference (English: the configured one, None = shipped)."""
    out = {code: (s.get("lm_quality") or {}).get("reference") for code, s in cfg.by_language.items()}
    out["en"] = cfg.lm_quality.reference
    return out


class Filters:
    """The blocks per language for one filter config, built on first use (module docstring)."""

    def __init__(self, cfg: Any):
        from pipelines.language.profiles import profile_for
        from pipelines.language.segmenters import splitter

        self.cfg = cfg
        self.languages = cfg.language.languages
        self.fixed = self.languages[0] if self.languages and len(self.languages) == 1 else None
        self._blocks: dict[str, list[Block]] = {}
        self._profile, self._splitter = profile_for, splitter
        # Whether documents get a language: every one, kept or dropped (module docstring).
        self.identifies = "language" in cfg.blocks

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


UNDETERMINED = "und"  # the language counted for a document with no text left (ISO 639-2)


def _identify(doc: Doc, filters: Filters) -> str:
    """The language a document the language block did not see is counted under."""
    if not doc.text.strip():
        return UNDETERMINED
    if doc.ranked is None:
        from pipelines.filters.language import classify

        doc.ranked = classify(doc.text, filters.cfg.language.sample_chars)
    return doc.ranked[0][0] if doc.ranked else UNDETERMINED


_FILTERS_CACHE: dict[str, Filters] = {}


def _cached_filters(cfg: Any, version: str = "") -> Filters:
    # One set of blocks per config (and filter-stage key: it covers the files the blocks read)
    # and process: building the language block loads its model.
    key = json.dumps(dataclasses.asdict(cfg), sort_keys=True) + version
    if key not in _FILTERS_CACHE:
        _FILTERS_CACHE[key] = Filters(cfg)
    return _FILTERS_CACHE[key]


def filter_batch(batch: dict[str, np.ndarray], cfg: Any, protected: Any = None,
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
        if not doc.language and filters.identifies:  # dropped before the language block ran
            doc.language = _identify(doc, filters)
        languages[i] = doc.language
        if verdict is None:
            texts[i] = doc.text  # as the rewriting blocks left it
        else:
            # The quarantine shows the document as it came in (normalised), not a block's rewrite.
            texts[i] = normalized
            reasons[i], details[i] = verdict
    return {**batch, "text": texts, "reason": reasons, "detail": details, "language": languages}
