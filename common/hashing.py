"""Hashing helpers shared by the corpus pipeline and the trainer, each defined once.

* ``sha256_bytes`` / ``HashingReader``: content identity of files (tokenizer,
  shards, manifest). ``HashingReader`` hashes while a stream is consumed, so a reader verifies a
  shard in the same pass that parses it instead of reading it twice.
* ``stable_uid``: the 63-bit document id hash (blake2b of the id string; never Python's ``hash``,
  which changes per process).
* ``hash64``: splitmix64 of (seed, int64 values), vectorised: per-document seeds and coin flips
  (validation split, packing RNG, tokenizer sample) that depend on nothing but the document.
* ``fmix64``: murmur3's finaliser (MinHash shingles, shuffle partitions).
* ``digest``: a short hex digest of a JSON-able value (cache keys).
"""
from __future__ import annotations

import hashlib
import json
from typing import IO, Any

import numpy as np

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class HashingReader:
    """A read-only stream wrapper that counts and hashes every byte read through it."""

    def __init__(self, raw: IO[bytes]):
        self._raw = raw
        self._sha = hashlib.sha256()
        self.bytes_read = 0

    def read(self, n: int = -1) -> bytes:
        data = self._raw.read(n)
        self._sha.update(data)
        self.bytes_read += len(data)
        return data

    def drain(self, chunk: int = 1 << 20) -> None:
        """Read (and hash) whatever the consumer left unread, e.g. tar end-of-archive padding."""
        while self.read(chunk):
            pass

    def hexdigest(self) -> str:
        return self._sha.hexdigest()


def stable_uid(text: str) -> int:
    """Deterministic 63-bit hash of a string (fits int64, never negative)."""
    raw = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(raw, "little") & ((1 << 63) - 1)


def _splitmix(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        x = x + np.uint64(_GOLDEN)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def hash64(seed: int, values: np.ndarray) -> np.ndarray:
    """A well-mixed uint64 hash of (seed, value) for an int64 array (splitmix64, vectorised)."""
    s = _splitmix(np.array([seed & _MASK64], dtype=np.uint64))[0]
    return _splitmix(np.asarray(values).astype(np.int64).view(np.uint64) ^ s)


def fmix64(x: np.ndarray) -> np.ndarray:
    """murmur3's 64-bit finaliser, vectorised: a bijection that mixes every input bit into every
    output bit (MinHash shingles, shuffle partition numbers)."""
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(33))
        x *= np.uint64(0xFF51AFD7ED558CCD)
        x ^= x >> np.uint64(33)
        x *= np.uint64(0xC4CEB9FE1A85EC53)
        x ^= x >> np.uint64(33)
    return x


def unit_float(h: np.ndarray) -> np.ndarray:
    """uint64 hashes as floats uniform in [0, 1) (53 significant bits)."""
    return (np.asarray(h, dtype=np.uint64) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


def digest(value: Any, length: int = 16) -> str:
    """Short sha256 hex of a JSON-able value (sorted keys): a cache key."""
    blob = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:length]
