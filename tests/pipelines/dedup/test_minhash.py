"""MinHash signatures: bit-exact against a plain Python reference, and statistically sound."""
from __future__ import annotations

import random
import string

import numpy as np
import pytest

from pipelines.config import DedupConfig
from tests.common.test_hashing import ref_fmix64
from pipelines.dedup.minhash import (EMPTY, MERSENNE, SHINGLE_BASE, WORD_BASE, Permutations,
                               band_hashes, lsh_threshold, minhash_signatures)

MASK64 = (1 << 64) - 1
SEPARATORS = set((string.whitespace + string.punctuation + "\x00").encode())


def ref_words(text: str) -> list[bytes]:
    """Words as documented: runs of bytes that are not ASCII whitespace/punctuation, lower-cased."""
    words, cur = [], bytearray()
    for byte in text.encode("utf-8"):
        if byte in SEPARATORS:
            if cur:
                words.append(bytes(cur))
            cur = bytearray()
        else:
            cur.append(byte + 32 if 65 <= byte <= 90 else byte)
    if cur:
        words.append(bytes(cur))
    return words


def ref_word_hash(word: bytes) -> int:
    return ref_fmix64(sum(c * pow(WORD_BASE, j, 1 << 64) for j, c in enumerate(word)) & MASK64)


def ref_signature(text: str, cfg: DedupConfig) -> list[int]:
    """One shingle at a time, one permutation at a time, with Python big integers."""
    hashes = [ref_word_hash(w) for w in ref_words(text)]
    n = cfg.ngram
    grams = [hashes[i:i + n] for i in range(len(hashes) - n + 1)] if len(hashes) >= n else [hashes]
    shingles = []
    for gram in grams:
        if not gram:
            continue
        acc = 0
        for h in gram:
            acc = (acc * SHINGLE_BASE + h) & MASK64
        shingles.append(ref_fmix64(acc) % MERSENNE)
    perms = Permutations.from_config(cfg)
    if not shingles:
        return [int(EMPTY)] * len(perms.a)
    return [min((int(a) * s + int(b)) % MERSENNE for s in shingles)
            for a, b in zip(perms.a, perms.b)]


def test_signatures_equal_reference_bit_for_bit():
    cfg = DedupConfig(num_bands=4, rows_per_band=5, seed=7)
    texts = [
        "The quick brown fox jumps over the lazy dog, again and again.",
        "THE Quick; brown -- fox!",  # fewer words than n: one shingle of the whole sequence
        "single",
        "",  # no word at all
        "  \n\t ...  ",
        "Ünïcödé wörds stay wörds, and ASCII Case folds: Straße STRASSE straße.",
        " ".join(random.Random(3).choice(["alpha", "beta", "gamma", "delta"]) for _ in range(60)),
    ]
    got = minhash_signatures(texts, cfg)
    assert got.dtype == np.uint64 and got.shape == (len(texts), 20)
    for i, text in enumerate(texts):
        assert got[i].tolist() == ref_signature(text, cfg), text


def test_signature_of_a_document_does_not_depend_on_its_batch():
    cfg = DedupConfig()
    rng = random.Random(1)
    texts = [" ".join(rng.choice(string.ascii_lowercase) * rng.randint(1, 6)
                      for _ in range(rng.randint(0, 40))) for _ in range(30)]
    whole = minhash_signatures(texts, cfg)
    parts = np.concatenate([minhash_signatures(texts[i:i + 7], cfg) for i in range(0, 30, 7)])
    assert np.array_equal(whole, parts)
    assert all(v < MERSENNE or v == EMPTY for v in whole.ravel().tolist())


def test_signatures_deterministic_per_seed():
    texts = ["a b c d e f g h i j k", "one two three four five six"]
    a = minhash_signatures(texts, DedupConfig(seed=1))
    assert np.array_equal(a, minhash_signatures(texts, DedupConfig(seed=1)))
    assert not np.array_equal(a, minhash_signatures(texts, DedupConfig(seed=2)))


def _pair_at_jaccard(rng: random.Random, target: float, size: int = 400) -> tuple[str, str, float]:
    """Two texts whose word 1-gram shingle sets (ngram=1, distinct words) have a known Jaccard."""
    shared = int(round(size * 2 * target / (1 + target)))
    pool = [f"w{rng.getrandbits(40):x}" for _ in range(2 * size)]
    common, rest = pool[:shared], pool[shared:]
    a = common + rest[:size - shared]
    b = common + rest[size - shared:2 * (size - shared)]
    true = len(set(a) & set(b)) / len(set(a) | set(b))
    return " ".join(a), " ".join(b), true


@pytest.mark.parametrize("target", [0.2, 0.5, 0.8, 0.95])
def test_estimated_jaccard_matches_true_jaccard(target):
    cfg = DedupConfig(ngram=1, num_bands=32, rows_per_band=8)  # 256 permutations
    rng = random.Random(int(target * 100))
    errors = []
    for _ in range(4):
        a, b, true = _pair_at_jaccard(rng, target)
        sig = minhash_signatures([a, b], cfg)
        errors.append(float(np.mean(sig[0] == sig[1])) - true)
    # Standard error of one estimate is sqrt(J(1-J)/256) <= 0.031; the mean of 4 is within 0.05.
    assert abs(np.mean(errors)) < 0.05, errors
    assert max(abs(e) for e in errors) < 0.12, errors


def test_band_hashes_agree_exactly_when_band_values_agree():
    cfg = DedupConfig(num_bands=3, rows_per_band=2)
    sig = np.array([[1, 2, 3, 4, 5, 6], [1, 2, 9, 4, 5, 6], [3, 4, 1, 2, 5, 6]], dtype=np.uint64)
    keys = band_hashes(sig, cfg)
    assert keys.shape == (3, 3) and keys.dtype == np.int64 and (keys >= 0).all()
    assert keys[0, 0] == keys[1, 0] and keys[0, 2] == keys[1, 2] and keys[0, 1] != keys[1, 1]
    # Equal values in different bands must not share a bucket.
    assert keys[2, 0] != keys[0, 1] and keys[2, 1] != keys[0, 0]
    with pytest.raises(ValueError):
        band_hashes(sig[:, :4], cfg)


def test_threshold_of_the_default_config():
    assert lsh_threshold(DedupConfig()) == pytest.approx(0.719, abs=0.002)


def test_large_batches_are_sliced_without_changing_signatures(monkeypatch):
    import pipelines.dedup.minhash as mh

    rng = random.Random(9)
    texts = [" ".join(f"w{rng.randrange(50)}" for _ in range(rng.randint(0, 30)))
             for _ in range(40)]
    whole = minhash_signatures(texts, DedupConfig())
    monkeypatch.setattr(mh, "_SLICE_CHARS", 100)  # a few documents per slice, some alone
    assert np.array_equal(minhash_signatures(texts, DedupConfig()), whole)


def _random_text(rng: random.Random) -> str:
    kind = rng.randrange(6)
    if kind == 0:
        return rng.choice(["", " ", "\n\t", "...", "-- !? --"])  # no word: EMPTY signature
    if kind == 1:
        return " ".join(rng.choice(["a", "Bb", "ccc"]) for _ in range(rng.randint(1, 4)))  # < n
    alphabet = string.ascii_letters + "  \n.,;!" + "äöüßé"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 400)))


def test_numba_and_numpy_backends_give_identical_signatures():
    pytest.importorskip("numba")
    import pipelines.dedup.minhash as mh

    assert mh.BACKEND == "numba"
    rng = random.Random(11)
    texts = [_random_text(rng) for _ in range(300)] + ["", "x", "one two three four"]
    for cfg in (DedupConfig(), DedupConfig(ngram=1, num_bands=3, rows_per_band=1, seed=5)):
        fast = minhash_signatures(texts, cfg, backend="numba")
        slow = minhash_signatures(texts, cfg, backend="numpy")
        assert fast.dtype == slow.dtype == np.uint64 and fast.shape == slow.shape
        assert np.array_equal(fast, slow)
        assert np.array_equal(minhash_signatures(texts, cfg), fast)  # the default is numba
        empty = [i for i, t in enumerate(texts) if not ref_words(t)]
        assert empty and (fast[empty] == EMPTY).all()
    assert np.array_equal(minhash_signatures([], DedupConfig(), backend="numba"),
                          minhash_signatures([], DedupConfig(), backend="numpy"))


def test_kernels_are_exact_on_extreme_hashes_and_multipliers():
    """Edge values of ``a``, ``b`` and ``h`` (0, 1, 2**k +- 1, p - 1) against big integers."""
    import pipelines.dedup.minhash as mh

    edges = [0, 1, 2, (1 << 29) - 1, 1 << 29, (1 << 31) - 1, 1 << 31, (1 << 32) - 1, 1 << 32,
             (1 << 60) + 12345, MERSENNE - 2, MERSENNE - 1]
    rng = random.Random(4)
    a = [max(1, e) for e in edges] + [rng.randrange(1, MERSENNE) for _ in range(20)]
    b = [edges[i % len(edges)] for i in range(len(a))]
    perms = Permutations(a=np.array(a, np.uint64), b=np.array(b, np.uint64))
    hs = edges + [rng.randrange(MERSENNE) for _ in range(30)]
    docs = sorted(rng.randrange(8) for _ in hs)  # doc 7 may be missing: EMPTY row
    n_docs = 9  # doc 8 has no shingle at all
    want = np.full((n_docs, len(a)), EMPTY, dtype=np.uint64)
    for h, d in zip(hs, docs):
        for k, (ak, bk) in enumerate(zip(a, b)):
            want[d, k] = min(int(want[d, k]), (ak * h + bk) % MERSENNE)
    h_arr, d_arr = np.array(hs, np.uint64), np.array(docs, np.int64)
    backends = ["numpy"] + (["numba"] if mh.numba is not None else [])
    for backend in backends:
        got = mh.signatures_from_shingles(h_arr, d_arr, n_docs, perms, backend)
        assert np.array_equal(got, want), backend
