"""Language identification with py3langid, as datatrove's LanguageFilter decides.

py3langid (langid.py's naive Bayes model over byte n-grams, 97 languages) ships its model inside
the wheel: nothing is downloaded at run time, unlike datatrove's fastText filter. The model gives
every language a probability (``norm_probs``); the document is kept when one of
``filter.language.languages`` has a probability above ``min_score`` (datatrove's rule and its
default 0.65), or, with ``languages`` null, when the top language does. ``Doc.language`` gets the
top language either way, and the filter stage counts kept and dropped documents per language.

Reasons: ``filter:language:languages`` (the top language is not a wanted one) and
``filter:language:min_score`` (it is, but not confidently enough), with the scores in
``detail``.

py3langid walks the document's bytes through its n-gram automaton in a Python loop; here that
loop is compiled with numba (``_walk``) and the model's float16 table is widened once for a fast
matrix product, the rest being py3langid's own formula (temperature, softmax, aliases), so the
probabilities agree with py3langid's ``rank`` to float32 rounding (a test checks). If a
py3langid release changes its internals, ``classify`` falls back to py3langid's own code.
Even so it is the costliest block, so it reads a sample: the first ``sample_chars`` characters,
cut at a space (None: the whole text, as datatrove). A few hundred words decide the language of a
document as well as all of them; a page that changes language after its start is the price.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from operator import itemgetter

import numba
import numpy as np

from pipelines.filters.block import Doc, Verdict, nonnegative
from pipelines.filters.registry import register


@dataclass
class LanguageConfig:
    languages: list[str] | None = field(default_factory=lambda: ["en"])  # null: any language
    min_score: float | None = 0.65  # datatrove's language_threshold (the top language's probability)
    # Not in datatrove: characters classified (the start of the document, cut at a space);
    # null: the whole text. Language ID is the costliest block on long documents.
    sample_chars: int | None = 2000

    def validate(self) -> None:
        nonnegative(self, "min_score", "sample_chars")


_P = "filter:language:"


@functools.cache
def identifier():
    """The py3langid model with normalised probabilities (loaded once per process)."""
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def sample(text: str, chars: int | None) -> str:
    if chars is None or len(text) <= chars:
        return text
    cut = text.rfind(" ", 0, chars)
    return text[:cut if cut > chars // 2 else chars]


def classify(text: str, chars: int | None = None) -> list[tuple[str, float]]:
    """(language, probability) for every language, best first."""
    text = sample(text, chars).replace("\n", " ")
    model = _compiled()
    return identifier().rank(text) if model is None else model.rank(text)


@numba.njit(cache=True, nogil=True)
def _walk(nextmove: np.ndarray, rowbase: np.ndarray, output: np.ndarray, data: np.ndarray,
          out: np.ndarray) -> int:  # pragma: no cover - compiled
    """The byte DFA of py3langid's ``visit_counts``: the features met, in order, into ``out``."""
    state = 0
    n = 0
    for b in data:
        state = nextmove[rowbase[state] + b]
        f = output[state]
        if f >= 0:
            out[n] = f
            n += 1
    return n


class _Compiled:
    """py3langid's ``rank`` with its per-byte Python loop compiled (same model, same formula)."""

    def __init__(self, ident):
        self.ident = ident
        self.nextmove = np.frombuffer(ident.tk_nextmove, dtype=np.dtype(ident.tk_nextmove.typecode))
        self.rowbase = np.asarray(ident._rowbase, dtype=np.int64)
        self.output = np.asarray(ident.tk_output, dtype=np.int64)
        # numpy has no fast float16 matmul: the model's float16 table widened once (the product
        # is widened to float32 anyway), trading its memory (~57 MB) for most of the time.
        self.table = ident.nb_ptc.astype(np.float32)

    def rank(self, text: str) -> list[tuple[str, float]]:
        ident = self.ident
        data = ident._encode(text)
        buf = np.frombuffer(data, dtype=np.uint8)
        feats = np.empty(len(buf), dtype=np.int64)
        n = _walk(self.nextmove, self.rowbase, self.output, buf, feats)
        if n:
            idx, counts = np.unique(feats[:n], return_counts=True)
            scores = np.log1p(counts.astype(np.float32)) @ self.table[idx] + ident.nb_pc
        else:
            scores = np.zeros(len(ident.nb_classes), dtype=np.float32)
        scores = scores.astype(np.float32) * np.float32(1.0 / math.sqrt(len(data) or 1))
        np.exp(scores - scores.max(), out=scores)
        scores /= scores.sum()
        for i, j in ident._alias_pairs:
            scores[i] += scores[j]
            scores[j] = 0.0
        merged: dict[str, float] = {}
        for lang, score in zip(ident.nb_classes, scores.tolist()):
            merged.setdefault(lang, score)
        return sorted(merged.items(), key=itemgetter(1), reverse=True)


@functools.cache
def _compiled() -> _Compiled | None:
    ident = identifier()
    needed = ("tk_nextmove", "_rowbase", "tk_output", "nb_ptc", "nb_pc", "nb_classes", "_alias_pairs", "_encode")
    if not all(hasattr(ident, a) for a in needed) or not ident._norm_probs:
        return None  # another py3langid layout: its own (slower) code
    return _Compiled(ident)


class Language:
    name = "language"

    def __init__(self, cfg: LanguageConfig):
        self.cfg = cfg
        self.wanted = None if cfg.languages is None else frozenset(cfg.languages)
        unknown = (self.wanted or frozenset()) - set(identifier().labels)
        if unknown:
            raise ValueError(f"filter.language.languages: py3langid does not know {sorted(unknown)}")

    def __call__(self, doc: Doc) -> Verdict | None:
        # Identified already when the document's language chose its profile (several languages)
        ranked = doc.ranked if doc.ranked is not None else classify(doc.text, self.cfg.sample_chars)
        top, score = ranked[0]
        doc.language, doc.language_score = top, score
        limit = self.cfg.min_score
        if self.wanted is None:
            if limit is not None and not score > limit:
                return Verdict(_P + "min_score", f"{top}={score:.3g} <= {limit:.3g}")
            return None
        best = max((s for lang, s in ranked if lang in self.wanted), default=0.0)
        if best > (limit if limit is not None else -1.0) and (limit is not None or top in self.wanted):
            return None
        if top not in self.wanted:
            return Verdict(_P + "languages", f"{top}={score:.3g}; {'/'.join(sorted(self.wanted))}={best:.3g}")
        return Verdict(_P + "min_score", f"{top}={score:.3g} <= {limit:.3g}")


@register("language", config=LanguageConfig, position=60)
def build(cfg: LanguageConfig) -> Language:
    return Language(cfg)
