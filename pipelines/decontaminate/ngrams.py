"""Token n-gram hashes shared by building the protected set and checking documents against it.

Text is normalised before it is cut into tokens: Unicode NFKC, lower case, and only runs of
letters and digits kept as tokens (each character of a script written without spaces a token
of its own: ``pipelines.language.scripts.space_out``; a window is 13 characters of Chinese), so punctuation, spacing, quotes and line breaks never hide a
match ("The cat -- sat." and "the cat sat" give the same tokens). A token's hash is the first 8
bytes of its BLAKE2b digest (cached: a corpus's tokens repeat, so most cost a dictionary lookup);
the hash of the window of ``n`` tokens starting at ``i`` is the polynomial

    h(i) = sum over j < n of t(i + j) * P ** (n - 1 - j)      (mod 2**64)

computed for every window of a text at once with ``n`` vectorised multiply-adds. Only hashes
travel and are stored (8 bytes per n-gram, never strings). Two different windows share a hash
with probability 2**-64 per pair: against ten million protected n-grams, about one false match
per 10,000 GB of checked text.
"""
from __future__ import annotations

import functools
import hashlib
import re
import unicodedata

import numpy as np

from pipelines.language.scripts import space_out

TOKEN = re.compile(r"[^\W_]+")
_P = np.uint64(0x9E3779B97F4A7C15)  # odd, and every bit pattern mixes well


def tokens(text: str) -> list[str]:
    # Each character of a spaceless script (Chinese, Japanese, Thai...) is a token of its own.
    return TOKEN.findall(space_out(unicodedata.normalize("NFKC", text).lower()))


@functools.lru_cache(maxsize=1 << 16)  # the frequent tokens: ~13 MB per process
def token_hash(token: str) -> int:
    return int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "little")


def window_hashes(toks: list[str], n: int) -> np.ndarray:
    """The uint64 hash of every window of ``n`` consecutive tokens (none for fewer tokens)."""
    if len(toks) < n:
        return np.zeros(0, dtype=np.uint64)
    t = np.fromiter(map(token_hash, toks), dtype=np.uint64, count=len(toks))
    m = len(toks) - n + 1
    h = np.zeros(m, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(n):
            h = h * _P + t[j:j + m]
    return h
