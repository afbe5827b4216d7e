"""numpy fallback for the MinHash permutation/min step of ``pipelines.dedup.minhash`` (no numba).

Same result bit for bit as the numba kernel there (the tests compare both with a big-integer
reference). ``a*h`` is a 61x61-bit product; uint64 would overflow, so ``a`` and ``h`` are split
at bit 31 into halves below 2**31 / 2**30. The four partial products fit in 64 bits,
``2**62 = 2 (mod p)`` and ``x*2**31 = (x >> 30) + ((x << 31) & p) (mod p)`` fold them, the sum of
all terms plus ``b`` stays below 2**64 and one Mersenne fold plus one conditional subtract gives
the exact residue. That is 17 vector operations per (shingle, permutation), done on cache-sized
chunks with preallocated buffers, and ``minimum.reduceat`` takes the per-document minimum.
Memory-bound: each pass streams the chunk through L2 (~6 ns per (shingle, permutation)).
"""
from __future__ import annotations

import numpy as np

EMPTY = np.uint64((1 << 64) - 1)
CHUNK = 1024  # shingles per permutation block: (1024 x 112) uint64 = 0.9 MB, stays in L2

_P = np.uint64((1 << 61) - 1)
_M31 = np.uint64((1 << 31) - 1)
_U31, _U30, _U61 = np.uint64(31), np.uint64(30), np.uint64(61)


class Kernel:
    """Preallocated buffers for ``min_k (a_k*h + b_k) mod p`` over chunks of shingles."""

    def __init__(self, a: np.ndarray, b: np.ndarray, chunk: int = CHUNK):
        self.a0 = a & _M31
        self.a1 = a >> _U31
        self.a1x2 = self.a1 << np.uint64(1)
        self.b = b
        shape = (chunk, len(a))
        self.s, self.t, self.mid = (np.empty(shape, np.uint64) for _ in range(3))

    def permute(self, h: np.ndarray) -> np.ndarray:
        """``(a*h + b) mod p`` for a chunk of hashes ``h < p``: shape (len(h), num_perm)."""
        m = len(h)
        s, t, mid = self.s[:m], self.t[:m], self.mid[:m]
        h0 = (h & _M31)[:, None]
        h1 = (h >> _U31)[:, None]
        np.multiply(h0, self.a0, out=s)        # a0*h0 < 2**62
        np.multiply(h0, self.a1, out=mid)
        np.multiply(h1, self.a0, out=t)
        mid += t                               # a1*h0 + a0*h1 < 2**62
        np.multiply(h1, self.a1x2, out=t)      # a1*h1*2**62 = 2*a1*h1 (mod p)
        s += t
        np.right_shift(mid, _U30, out=t)       # mid*2**31 = (mid >> 30) + low 30 bits << 31
        s += t
        mid <<= _U31
        mid &= _P
        s += mid
        s += self.b                            # total < 2**62 + 3*2**61 + 2**32 < 2**64
        np.right_shift(s, _U61, out=t)
        s &= _P
        s += t                                 # <= p + 7
        np.subtract(s, _P, out=t)
        np.minimum(s, t, out=s)
        return s


def signatures(h: np.ndarray, docs: np.ndarray, n_docs: int,
               a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per-document minimum over its shingles (``h`` sorted by ``docs``); EMPTY where none."""
    out = np.full((n_docs, len(a)), EMPTY, dtype=np.uint64)
    kernel = Kernel(a, b)
    for lo in range(0, len(h), CHUNK):
        hi = min(lo + CHUNK, len(h))
        vals = kernel.permute(h[lo:hi])
        d = docs[lo:hi]
        seg = np.flatnonzero(np.diff(d, prepend=-1))
        mins = np.minimum.reduceat(vals, seg, axis=0)
        rows = d[seg]
        out[rows] = np.minimum(out[rows], mins)  # a doc may continue from the previous chunk
    return out
