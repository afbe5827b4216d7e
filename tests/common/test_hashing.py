"""Hashing helpers against independent pure-Python implementations, and stable across processes."""
from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from common.hashing import (HashingReader, digest, fmix64, hash64, sha256_bytes,
                            stable_uid, unit_float)

MASK64 = (1 << 64) - 1


def ref_splitmix64(x: int) -> int:
    """splitmix64's output function on one state (Vigna), with Python integers."""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def ref_hash64(seed: int, value: int) -> int:
    return ref_splitmix64((value & MASK64) ^ ref_splitmix64(seed & MASK64))


def ref_fmix64(x: int) -> int:
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & MASK64
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & MASK64
    return x ^ (x >> 33)


def test_hashing_reader_hashes_everything_read_including_the_drained_rest():
    data = os.urandom(3 << 20) + b"tail"
    reader = HashingReader(io.BytesIO(data))
    assert reader.read(10) == data[:10] and reader.read(0) == b""
    assert reader.read(1 << 20) == data[10:10 + (1 << 20)]
    reader.drain(chunk=4096)  # what the consumer left unread, e.g. tar end padding
    assert reader.bytes_read == len(data)
    assert reader.hexdigest() == hashlib.sha256(data).hexdigest() == sha256_bytes(data)
    assert reader.read() == b"" and reader.hexdigest() == hashlib.sha256(data).hexdigest()
    whole = HashingReader(io.BytesIO(data))
    assert whole.read() == data and whole.hexdigest() == reader.hexdigest()


def test_stable_uid_is_blake2b_cut_to_63_bits():
    ids = [f"web/x.txt:{i}" for i in range(2000)] + ["", "ünïcode:0", "lone \ud800 surrogate:5"]
    uids = [stable_uid(i) for i in ids]
    assert len(set(uids)) == len(ids) and all(0 <= u < 2**63 for u in uids)
    ref = int.from_bytes(hashlib.blake2b(b"web/x.txt:7", digest_size=8).digest(), "little") & (2**63 - 1)
    assert uids[7] == ref
    assert max(uids) > 2**62  # the whole 63-bit range is used, nothing is cut lower


def test_stable_uid_is_the_same_in_another_process():
    """Never Python's ``hash``: another process with another hash seed computes the same uids."""
    ids = ["web/x.txt:7", "2024/b.jsonl.zst:0", "c.parquet:row3"]
    code = f"from common.hashing import stable_uid; print([stable_uid(i) for i in {ids!r}])"
    for seed in ("0", "12345"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONHASHSEED": seed}, cwd=Path(__file__).resolve().parents[2])
        assert out.stdout.strip() == str([stable_uid(i) for i in ids])


def test_hash64_is_splitmix64_of_seed_and_value():
    values = np.array([0, 1, 2, 12345, -1, -(2**63), 2**63 - 1, 0x5EED], dtype=np.int64)
    for seed in (0, 1, 12345, -7, 2**64 + 3):
        got = hash64(seed, values)
        assert got.dtype == np.uint64 and got.shape == values.shape
        assert got.tolist() == [ref_hash64(seed, int(v)) for v in values]
    assert (hash64(1, values) != hash64(2, values)).all()
    assert hash64(3, np.arange(5, dtype=np.int64)[::-1]).tolist() == hash64(3, np.arange(5))[::-1].tolist()
    assert hash64(3, [7, 8]).tolist() == [ref_hash64(3, 7), ref_hash64(3, 8)]  # lists work too


def test_fmix64_matches_murmur3_and_is_a_bijection_on_a_sample():
    rng = np.random.default_rng(0)
    xs = np.concatenate([np.array([0, 1, 2**63, MASK64], dtype=np.uint64),
                         rng.integers(0, 2**64 - 1, size=2000, dtype=np.uint64, endpoint=True)])
    got = fmix64(xs)
    assert got.tolist() == [ref_fmix64(int(x)) for x in xs]
    assert len(set(got.tolist())) == len(set(xs.tolist()))


def test_unit_float_is_uniform_in_the_unit_interval():
    assert unit_float(np.array([0, MASK64, 2**63], dtype=np.uint64)).tolist() == [0.0, 1 - 2**-53, 0.5]
    u = unit_float(hash64(5, np.arange(100_000)))
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.005
    assert abs(np.mean(u < 0.1) - 0.1) < 0.005


def test_digest():
    assert digest({"b": 1, "a": [1, 2]}) == digest({"a": [1, 2], "b": 1})  # key order does not matter
    assert digest({"a": 1}) != digest({"a": 2}) and len(digest("x")) == 16 and len(digest("x", 40)) == 40
    assert digest("x") == hashlib.sha256(b'"x"').hexdigest()[:16]

