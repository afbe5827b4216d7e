"""MinHash signatures: bit-exact against a plain Python reference, and statistically sound."""
from __future__ import annotations

import dataclasses
import random
import string

import numpy as np
import pytest

from pipelines.config import DedupConfig
from pipelines.dedup.minhash import (EMPTY, MERSENNE, SHINGLE_BASE, WORD_BASE, Permutations,
                                     band_hashes, lsh_threshold, minhash_signatures)
from pipelines.language.scripts import CJK_PUNCTUATION_RANGES, SPACELESS_RANGES
from tests.common.test_hashing import ref_fmix64

MASK64 = (1 << 64) - 1
SEPARATORS = set((string.whitespace + string.punctuation + "\x00").encode())


def _in(ch: str, ranges) -> bool:
    return any(lo <= ch <= hi for lo, hi in ranges)


def ref_tokens(text: str) -> list[tuple[bytes, bool]]:
    """Words as documented, each with whether it is a spaceless-script character: such a
    character is a word of its own, CJK punctuation separates words, and elsewhere a word is a
    run of bytes that are not ASCII whitespace/punctuation, ASCII letters lower-cased."""
    out: list[tuple[bytes, bool]] = []
    cur = bytearray()

    def flush():
        if cur:
            out.append((bytes(cur), False))
            cur.clear()

    for ch in text:
        if _in(ch, SPACELESS_RANGES):
            flush()
            out.append((ch.encode("utf-8"), True))
        elif _in(ch, CJK_PUNCTUATION_RANGES):
            flush()
        else:
            for byte in ch.encode("utf-8"):
                if byte in SEPARATORS:
                    flush()
                else:
                    cur.append(byte + 32 if 65 <= byte <= 90 else byte)
    flush()
    return out


def ref_words(text: str) -> list[bytes]:
    return [w for w, _ in ref_tokens(text)]


def ref_shingles(text: str, ngram: int, spaceless_ngram: int) -> list[tuple[bytes, ...]]:
    """Runs of words of one kind, each cut into its own n-grams (n by kind); a run shorter than
    its n is one shingle. Plain tuples of words: Python sets of them give the true Jaccard."""
    runs: list[list[bytes]] = []
    kinds: list[bool] = []
    for word, spaceless in ref_tokens(text):
        if not runs or kinds[-1] != spaceless:
            runs.append([])
            kinds.append(spaceless)
        runs[-1].append(word)
    shingles = []
    for run, spaceless in zip(runs, kinds):
        n = spaceless_ngram if spaceless else ngram
        if len(run) < n:
            shingles.append(tuple(run))
        else:
            shingles.extend(tuple(run[i:i + n]) for i in range(len(run) - n + 1))
    return shingles


def ref_word_hash(word: bytes) -> int:
    return ref_fmix64(sum(c * pow(WORD_BASE, j, 1 << 64) for j, c in enumerate(word)) & MASK64)


def ref_minhash(shingles: list[tuple[bytes, ...]], cfg: DedupConfig) -> list[int]:
    """One shingle at a time, one permutation at a time, with Python big integers."""
    hashed = []
    for gram in shingles:
        acc = 0
        for word in gram:
            acc = (acc * SHINGLE_BASE + ref_word_hash(word)) & MASK64
        hashed.append(ref_fmix64(acc) % MERSENNE)
    perms = Permutations.from_config(cfg)
    if not hashed:
        return [int(EMPTY)] * len(perms.a)
    return [min((int(a) * s + int(b)) % MERSENNE for s in hashed) for a, b in zip(perms.a, perms.b)]


def ref_signature(text: str, cfg: DedupConfig) -> list[int]:
    return ref_minhash(ref_shingles(text, cfg.ngram, cfg.spaceless_ngram), cfg)


def head_signature(text: str, cfg: DedupConfig) -> list[int]:
    """What the code before shingles per run (issue 47, item 4) gave a text with no spaceless
    character: word n-grams of the whole text, or its whole word sequence when shorter."""
    words = ref_words(text)
    n = cfg.ngram
    grams = [tuple(words[i:i + n]) for i in range(len(words) - n + 1)] if len(words) >= n else [tuple(words)]
    return ref_minhash([g for g in grams if g], cfg)


MIXED_TEXTS = [
    "在2023年，我们使用Python和Java开发了一个新的系统。",  # digits and Latin words split the Han runs
    "次のコマンドを実行します：\n    sudo apt-get install build-essential git curl\nそして再起動してください。",
    "ภาษาไทยเขียนติดกัน but English is spaced out, word by word ภาษา",
    "字", "字母", "。、「」", "abc 字 def",  # runs shorter than n, punctuation only
    "The word 漢字 sits inside an English sentence of more than five words here.",
    "ｶﾀｶﾅ 한국어 띄어쓰기 全角ＡＢＣ１２３ 的一是不了",  # half-width kana; Hangul and full-width letters are spaced
]


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
    ] + MIXED_TEXTS
    got = minhash_signatures(texts, cfg)
    assert got.dtype == np.uint64 and got.shape == (len(texts), 20)
    for i, text in enumerate(texts):
        assert got[i].tolist() == ref_signature(text, cfg), text


def _mixed_text(rng: random.Random) -> str:
    """Random runs of Latin words, Han/kana/Thai characters, digits, spaces and punctuation."""
    pieces = ["alpha", "Beta", "gamma", "42", "x", "的", "一", "是", "カ", "ナ", "ก", "ข", "。", "、",
              "「", "」", "！", " ", " ", " ", "\n", ",", "-"]
    return "".join(rng.choice(pieces) for _ in range(rng.randint(0, 60)))


@pytest.mark.parametrize("ngram,spaceless_ngram", [(5, 3), (2, 4), (3, 3), (1, 1)])
def test_mixed_script_signatures_equal_reference_bit_for_bit(ngram, spaceless_ngram):
    """Runs of either kind, of every length around both n, at the start, middle and end."""
    cfg = DedupConfig(ngram=ngram, spaceless_ngram=spaceless_ngram, num_bands=4, rows_per_band=3, seed=3)
    rng = random.Random(ngram * 10 + spaceless_ngram)
    texts = [_mixed_text(rng) for _ in range(150)] + MIXED_TEXTS
    got = minhash_signatures(texts, cfg)
    for i, text in enumerate(texts):
        assert got[i].tolist() == ref_signature(text, cfg), text


# Signatures (default config) computed by the code before shingles per run (issue 47, item 4).
_ENGLISH = [
    "Near-duplicate detection compares documents by the sets of their shingles. Two pages that "
    "differ only in a date, a signature or a few edited words share most of their word five-grams, "
    "so MinHash puts them in the same bucket, and the check before linking them confirms it.",
    "Short text, four words",
    "CASE and Punctuation: (don't) matter -- here; Ünïcödé bytes do, as they are.\n\tTabs too!",
]
_GOLDEN_FIRST = [59679265245170182, 772628950211791310, 7312638413726048]
_GOLDEN_SUM = 523364984537599575  # of all values, mod 2**61


def test_text_without_spaceless_characters_hashes_as_before():
    """Word n-grams of the whole text, exactly as before shingles per run (the values that code
    gave, and its reference above): English, other spaced scripts, CJK punctuation and full-width
    letters alone."""
    sig = minhash_signatures(_ENGLISH, DedupConfig())
    assert [int(x) for x in sig[:, 0]] == _GOLDEN_FIRST
    assert sum(int(x) for x in sig.ravel()) % (1 << 61) == _GOLDEN_SUM
    cfg = DedupConfig(num_bands=4, rows_per_band=5, seed=7)
    rng = random.Random(5)
    texts = [_random_text(rng) for _ in range(100)] + [
        "Full-width punctuation！ is a separator，and ＡＢＣ１２３ are letters and digits here too.",
        "Кириллица пишется с пробелами, как и латиница, и 한국어 띄어쓰기 тоже.",
    ]
    got = minhash_signatures(texts, cfg)
    for i, text in enumerate(texts):
        assert got[i].tolist() == head_signature(text, cfg), text


def test_text_only_in_a_spaceless_script_hashes_as_before():
    """Character n-grams (``spaceless_ngram``) of the whole text, as a text mostly in such a
    script got before: the same as word n-grams of the text with a space between characters."""
    cfg = DedupConfig(num_bands=4, rows_per_band=5, seed=7)
    text = "然而，要学会如何使用它的全部功能并不容易。次のコマンドを実行します。ภาษาไทย"
    spaced = " ".join(c for c in text if c not in "，。")
    assert minhash_signatures([text], cfg)[0].tolist() == \
        head_signature(spaced, dataclasses.replace(cfg, ngram=cfg.spaceless_ngram))


def test_signature_of_a_document_does_not_depend_on_its_batch():
    cfg = DedupConfig()
    rng = random.Random(1)
    texts = [" ".join(rng.choice(string.ascii_lowercase) * rng.randint(1, 6)
                      for _ in range(rng.randint(0, 40))) for _ in range(30)]
    texts[3::4] = [_mixed_text(rng) for _ in texts[3::4]]  # some batches mixed, some not
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
    texts[::5] = [_mixed_text(rng) for _ in texts[::5]]
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
    texts += [_mixed_text(rng) for _ in range(100)]
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
