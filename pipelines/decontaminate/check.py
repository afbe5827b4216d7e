"""Checking documents against the protected set, in the filter stage's workers.

A document is tokenised and hashed exactly as the protected texts were (``ngrams``), and its
window hashes are looked up in the sorted protected hashes with one ``searchsorted``. The first
window found decides: reason ``decontaminate:<task>``, detail naming the file and the shared
words. A document shorter than ``n`` tokens has no window and is never dropped, nor is one that
shares only shorter fragments.

The set reaches a worker as a Ray object reference (``resolve``): fetched once per worker
process and kept, so it is built once per build and read from the object store's shared memory,
never rebuilt or re-read from the evaluation files.
"""
from __future__ import annotations

import posixpath
from typing import Any

import numpy as np

from pipelines.decontaminate.ngrams import tokens, window_hashes
from pipelines.decontaminate.protected import ProtectedSet

_RESOLVED: dict[str, ProtectedSet] = {}


def resolve(ref: Any) -> ProtectedSet:
    """The protected set behind a Ray object reference (or the set itself), once per process."""
    if isinstance(ref, ProtectedSet):
        return ref
    key = ref.hex()
    if key not in _RESOLVED:
        import ray

        _RESOLVED.clear()  # one build at a time per worker process
        _RESOLVED[key] = ray.get(ref)
    return _RESOLVED[key]


def contamination(text: str, protected: ProtectedSet) -> tuple[str, str] | None:
    """``(reason, detail)`` when ``text`` holds a protected n-gram, else None."""
    toks = tokens(text)
    h = window_hashes(toks, protected.n)
    if not len(h) or not len(protected.hashes):
        return None
    i = np.searchsorted(protected.hashes, h)
    i[i == len(protected.hashes)] = 0
    hit = np.flatnonzero(protected.hashes[i] == h)
    if not len(hit):
        return None
    first = int(hit[0])
    f = protected.files[int(protected.source[i[first]])]
    words = " ".join(toks[first:first + protected.n])
    return (f"decontaminate:{f['task']}",
            f"{protected.n}-gram of {posixpath.basename(f['uri'])}: \"{words}\" ({len(hit)} windows shared)")
