"""MinHash signatures and LSH band keys: numpy over whole batches, plus one numba kernel.

Signature of a document = for each of ``num_perm`` permutations ``pi_k(h) = (a_k*h + b_k) mod p``
(``p = 2**61 - 1``, the Mersenne prime datasketch and datatrove use) the minimum of ``pi_k`` over
the 64-bit hashes ``h`` of the document's shingles. Two documents agree on one permutation with
probability equal to the Jaccard similarity of their shingle sets.

Words are maximal runs of bytes that are not ASCII whitespace or ASCII punctuation, with ASCII
letters lower-cased (datatrove's "simplified text"): punctuation and case edits do not break a
near-duplicate match, non-ASCII bytes are kept as they are. In scripts written without spaces
(Chinese, Japanese, Thai...) every character is a word and CJK punctuation a separator
(``pipelines.language.scripts.space_out``).

Shingles are cut per run: a run is a maximal sequence of a document's words of one kind, either
spaced-script words or spaceless-script characters (punctuation and whitespace between words do
not end a run; a change of kind does). A spaced run gives its word ``cfg.ngram``-grams (5), a
spaceless run its character ``cfg.spaceless_ngram``-grams (3); a run shorter than its n is one
shingle, its whole sequence, and no shingle reaches across a change of kind. A document with no
word has no shingle and gets the ``EMPTY`` signature (it is never anyone's near-duplicate).

Why per run. Each kind gets the n that suits it: a changed character breaks every shingle it is
in, so the fewer characters a shingle spans, the more of them a copy with a few characters changed
keeps (docs/languages.md measures both lengths); three Han characters carry about what five words
do. And the shingle set of a text is the union of its runs' sets, so a copy that adds, drops or
edits a little text of either kind keeps every other run's shingles, whatever the mix of scripts.
The former rule, one n per document by its majority script, gave a Chinese page with an English
code block character 3-grams at 51% Han and word 5-grams at 49%: near copies on either side of
50% shared no shingle at all. Costs: a Latin word or number inside Chinese text splits the Han run
around it, and runs shorter than n become short shingles that unrelated documents share a little
more often (docs/languages.md: far below any threshold). Text without spaceless characters is
one spaced run per document and hashes exactly as it always did, and so does text written only
in spaceless scripts (one spaceless run).

Why it is fast (no Python per shingle or per word):

1. Word hashes. The whole batch is one ``uint8`` array. A byte table maps separators to 0 and
   word bytes to their (lower-cased) value. The polynomial ``sum_j c_j * P**(j - start)`` of each
   word (mod 2**64, wrapping uint64 arithmetic) is one gather of powers and one ``add.reduceat``;
   a murmur3 ``fmix64`` finaliser then mixes the bits.
2. Shingle hashes. Word kinds come from the first code point of each word (three byte gathers
   and a 64K-entry table, only when some text holds such characters); a run number per word is
   a cumulative sum over kind and document changes. ``n`` shifted multiply-adds over the
   word-hash array compute every n-gram's Horner polynomial at once (rolling arithmetic), again
   followed by ``fmix64``; n-grams whose first and last words lie in different runs are masked
   out. With two kinds and two lengths this is one pass per kind, each over the stretch from its
   first to its last word; runs shorter than n are folded in at most n - 1 vector steps.
3. Permutations and minimum: one fused compiled loop (numba, ``_min_permuted``), shingle-major
   with the ``num_perm`` permutations innermost so LLVM vectorises it (AVX2: 4 lanes, 5
   ``vpmuludq`` per 4 values). ``a*h`` is a 61x61-bit product; it is split into 32-bit halves,
   whose partial products fit in uint64, and folded with ``2**61 = 1 (mod p)``: one Mersenne fold
   ``(x & p) + (x >> 61)`` plus one conditional subtract gives the exact residue, and the
   running per-document minimum is updated in place (no intermediate arrays).
   ``pipelines.dedup.minhash_numpy`` is the numpy fallback (selected by ``BACKEND``, or when numba is
   not installed): same values bit for bit, but 17 memory-bound vector passes per (shingle,
   permutation).

Measured (``python -m benchmarks.corpus_minhash --mb 4 --repeats 2``, one core of the shared
2-core dev box, under load): ~17.6 MB/s, 7.8x a datasketch ``update_batch`` loop (numpy
fallback: 2-6 MB/s, 1.5-2.6x). The kernel costs ~2 ns per (shingle, permutation) there (the
numpy passes ~6-25 ns) and is now ~40% of the time; the numpy word/shingle hashing is the rest.

Trade-off of numba: importing it costs ~0.5 s, and the first call of the kernel in a process
JIT-compiles it (~2 s). With ``cache=True`` the machine code is cached on disk (``__pycache__``
next to this file, or numba's user cache dir when that is read-only; recompiled when this file
changes), so later processes only load it (~1 s first call, mostly numba's own start-up). Each
Ray worker pays this once. ``nogil=True`` lets threads run the kernel concurrently.

Trade-offs: word hashing is byte-level, so Unicode whitespace and punctuation outside ASCII are
word characters; normalisation upstream (NFC, whitespace) makes this rarely matter. Hash values
are exact residues, so the result equals a plain Python big-integer implementation bit for bit
(the tests check this), and is deterministic given ``cfg.seed`` on any machine.
"""
from __future__ import annotations

import string
from dataclasses import dataclass

import numpy as np

from common.hashing import fmix64
from pipelines.dedup import minhash_numpy
from pipelines.config import DedupConfig
from pipelines.language.scripts import SPACELESS_RANGES, space_out

try:
    import numba
except ImportError:  # pragma: no cover - numba is a declared dependency; numpy path still works
    numba = None

MERSENNE = (1 << 61) - 1
EMPTY = np.uint64((1 << 64) - 1)  # signature value of a document without a single word
WORD_BASE = 0x100000001B3  # odd, so powers never collapse to 0 mod 2**64
SHINGLE_BASE = 0x9E3779B97F4A7C15
_SLICE_CHARS = 4 << 20  # characters of text hashed at once (bounds the byte-level arrays)

_P = np.uint64(MERSENNE)
_U61 = np.uint64(61)
# Which permutation/min kernel ``signatures_from_shingles`` uses by default.
BACKEND = "numba" if numba is not None else "numpy"


def _byte_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint64)
    for ch in string.whitespace + string.punctuation + "\x00":
        table[ord(ch)] = 0
    for ch in string.ascii_uppercase:
        table[ord(ch)] = ord(ch.lower())
    return table


BYTE_TABLE = _byte_table()


@dataclass(frozen=True)
class Permutations:
    """Parameters of the ``num_perm`` hash functions ``(a*h + b) mod p``, drawn from ``seed``."""
    a: np.ndarray  # uint64 in [1, p)
    b: np.ndarray  # uint64 in [0, p)

    @classmethod
    def from_config(cls, cfg: DedupConfig) -> Permutations:
        num_perm = cfg.num_bands * cfg.rows_per_band
        if num_perm < 1 or cfg.ngram < 1:
            raise ValueError(f"dedup config: need ngram >= 1 and bands*rows >= 1, got {cfg}")
        rng = np.random.Generator(np.random.PCG64(cfg.seed))
        a = rng.integers(1, MERSENNE, size=num_perm, dtype=np.uint64)
        b = rng.integers(0, MERSENNE, size=num_perm, dtype=np.uint64)
        return cls(a=a, b=b)


def _concat(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """All texts as one byte array joined by a separator; returns (bytes, start offset per doc)."""
    encoded = [t.encode("utf-8", "surrogatepass") for t in texts]
    lengths = np.fromiter((len(e) + 1 for e in encoded), dtype=np.int64, count=len(encoded))
    starts = np.zeros(len(encoded), dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return np.frombuffer(b"\n".join(encoded) + b"\n", dtype=np.uint8), starts


def _spaceless_table() -> np.ndarray:
    """Which BMP code points are spaceless-script characters (every range there is in the BMP)."""
    table = np.zeros(1 << 16, dtype=bool)
    for a, b in SPACELESS_RANGES:
        table[ord(a):ord(b) + 1] = True
    return table


SPACELESS_TABLE = _spaceless_table()


def _words(texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(hash, doc index, is a spaceless-script character) of every word of every text, in order."""
    spaced = [space_out(t) for t in texts]
    buf, doc_starts = _concat(spaced)
    codes = BYTE_TABLE[buf]
    is_word = np.zeros(len(buf) + 1, dtype=bool)
    np.not_equal(codes, 0, out=is_word[1:])
    starts = np.flatnonzero(is_word[1:] > is_word[:-1])
    if len(starts) == 0:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, bool)
    spaceless = np.zeros(len(starts), dtype=bool)
    if any(a is not b for a, b in zip(spaced, texts)):  # else no text holds a spaceless character
        # ``space_out`` made every spaceless character a word of its own, and all of them are
        # 3-byte UTF-8 (U+0800..U+FFFF): a word is one exactly when its first code point is one.
        three = np.flatnonzero((buf[starts] & 0xF0) == 0xE0)
        at = starts[three]
        point = ((buf[at].astype(np.int64) & 0x0F) << 12) | ((buf[at + 1].astype(np.int64) & 0x3F) << 6) \
            | (buf[at + 2].astype(np.int64) & 0x3F)
        spaceless[three] = SPACELESS_TABLE[point]
    # sum_j c_j * B**j over the word (global positions j), then times B**-start: B is odd, so it
    # is invertible mod 2**64 and the result is the word's own polynomial, wherever it stands.
    powers = np.full(len(buf), WORD_BASE, dtype=np.uint64)
    powers[0] = 1
    np.cumprod(powers, out=powers)
    codes *= powers
    poly = np.add.reduceat(codes, starts)
    poly *= _inverse_powers(starts)
    first = np.searchsorted(starts, doc_starts)
    counts = np.diff(first, append=len(starts))
    docs = np.repeat(np.arange(len(texts), dtype=np.int64), counts)
    return fmix64(poly), docs, spaceless


def word_hashes(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """64-bit hash of every word of every text, in order; returns (hashes, doc index per word).
    Each character of a script written without spaces is a word (``pipelines.language.scripts``)."""
    words, docs, _ = _words(texts)
    return words, docs


def _inverse_powers(exponents: np.ndarray) -> np.ndarray:
    """``WORD_BASE ** -e mod 2**64`` for each e, by square-and-multiply over the exponent bits."""
    result = np.ones(len(exponents), dtype=np.uint64)
    base = np.uint64(pow(WORD_BASE, -1, 1 << 64))
    e = exponents.astype(np.uint64)
    one = np.uint64(1)
    for _ in range(int(exponents.max()).bit_length()):
        np.multiply(result, base, out=result, where=(e & one).astype(bool))
        base = np.uint64((int(base) * int(base)) & ((1 << 64) - 1))
        e >>= one
    return result


def shingle_hashes(texts: list[str], ngram: int,
                   spaceless_ngram: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Hash (reduced mod p) of every shingle; returns (hashes, doc index), sorted by doc.

    A run is a maximal sequence of a document's words of one kind: spaced-script words, or
    spaceless-script characters. Shingles are the ``ngram``-grams of each spaced run and the
    ``spaceless_ngram``-grams (default: ``ngram``) of each spaceless run; a run shorter than its
    n is one shingle, its whole sequence. No shingle reaches from one run into the next.
    """
    words, docs, spaceless = _words(texts)
    if len(words) == 0:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    size = {False: ngram, True: ngram if spaceless_ngram is None else spaceless_ngram}
    opens = np.ones(len(words), dtype=bool)  # the word opens a run
    np.not_equal(docs[1:], docs[:-1], out=opens[1:])
    if spaceless.any():
        opens[1:] |= spaceless[1:] != spaceless[:-1]
        run = np.cumsum(opens)
    else:
        run = docs  # one run per document
    parts, part_docs = [], []
    if size[False] != size[True] and spaceless.any() and not spaceless.all():
        for kind in (False, True):
            mine = spaceless == kind
            # Roll over the stretch from the first to the last word of this kind only.
            lo, hi = int(mine.argmax()), len(words) - int(mine[::-1].argmax())
            acc, valid = _run_ngrams(words[lo:hi], run[lo:hi], size[kind])
            valid &= mine[lo:lo + len(valid)]
            parts.append(acc[valid])
            part_docs.append(docs[lo:lo + len(valid)][valid])
    else:  # one n for every word: one pass
        acc, valid = _run_ngrams(words, run, size[bool(spaceless[0])])
        parts.append(acc[valid])
        part_docs.append(docs[:len(valid)][valid])
    first = np.flatnonzero(opens)
    length = np.diff(first, append=len(words))
    short = length < np.where(spaceless[first], size[True], size[False])
    if short.any():
        parts.append(_whole_runs(words, first[short], length[short]))
        part_docs.append(docs[first[short]])
    h = fmix64(np.concatenate(parts))
    d = np.concatenate(part_docs)
    order = np.argsort(d, kind="stable")
    return _mod_p(h[order]), d[order]


def _run_ngrams(words: np.ndarray, run: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Horner polynomial of every n consecutive words (``n`` shifted multiply-adds, all n-grams at
    once), and whether each lies within one run."""
    span = len(words) - n + 1
    if span <= 0:
        return np.zeros(0, np.uint64), np.zeros(0, dtype=bool)
    q = np.uint64(SHINGLE_BASE)
    acc = words[:span].copy()
    for k in range(1, n):
        acc *= q
        acc += words[k:k + span]
    return acc, run[:span] == run[n - 1:]


def _whole_runs(words: np.ndarray, first: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Horner polynomial of each whole run (first word, number of words), runs of a few words."""
    q = np.uint64(SHINGLE_BASE)
    acc = words[first].copy()
    for k in range(1, int(length.max())):
        more = length > k
        idx = np.where(more, first + k, 0)
        acc = np.where(more, acc * q + words[idx], acc)
    return acc


def _mod_p(x: np.ndarray) -> np.ndarray:
    x = (x & _P) + (x >> _U61)
    return np.minimum(x, x - _P)  # x - p wraps around to a huge value when x < p


def _split_perms(perms: Permutations) -> tuple[np.ndarray, np.ndarray]:
    """``a`` as 32-bit halves (uint32 arrays, so the compiled loop knows they fit in 32 bits)."""
    return ((perms.a & np.uint64(0xFFFFFFFF)).astype(np.uint32),
            (perms.a >> np.uint64(32)).astype(np.uint32))


if numba is not None:
    _K_P = np.uint64(MERSENNE)
    _K_M32, _K_M29 = np.uint64((1 << 32) - 1), np.uint64((1 << 29) - 1)
    _K_3, _K_29, _K_32, _K_61 = np.uint64(3), np.uint64(29), np.uint64(32), np.uint64(61)

    @numba.njit(cache=True, nogil=True)
    def _min_permuted(h, docs, a_lo, a_hi, b, out):  # pragma: no cover - compiled
        """``out[d, k] = min(out[d, k], (a_k*h_i + b_k) mod p)`` for every shingle i of doc d.

        Shingle-major, permutations innermost (contiguous rows: the loop vectorises). With
        ``a = ahi*2**32 + alo``, ``h = hhi*2**32 + hlo`` (``ahi, hhi < 2**29``) and ``2**61 = 1``:
        ``a*h = 8*ahi*hhi + mid*2**32 + alo*hlo`` where ``mid = ahi*hlo + alo*hhi < 2**62`` and
        ``mid*2**32 = (mid >> 29) + ((mid & (2**29-1)) << 32)``; ``alo*hlo < 2**64`` folds to
        ``(lo & p) + (lo >> 61)``. Sum + b < 2**63 + 2**34; one fold and one conditional
        subtract give the exact residue.
        """
        for i in range(h.shape[0]):
            x = h[i]
            hlo = x & _K_M32
            hhi = x >> _K_32
            row = out[docs[i]]
            for k in range(row.shape[0]):
                alo = np.uint64(a_lo[k])
                ahi = np.uint64(a_hi[k])
                mid = ahi * hlo + alo * hhi
                lo = alo * hlo
                s = ((ahi * hhi) << _K_3) + (mid >> _K_29) + ((mid & _K_M29) << _K_32)
                s = s + (lo & _K_P) + (lo >> _K_61) + b[k]
                s = (s & _K_P) + (s >> _K_61)  # <= p + 4
                s = min(s, s - _K_P)  # s - p wraps around to a huge value when s < p
                row[k] = min(row[k], s)


def signatures_from_shingles(h: np.ndarray, docs: np.ndarray, n_docs: int,
                             perms: Permutations, backend: str | None = None) -> np.ndarray:
    """Per-document minimum over its shingles (``h < p``, sorted by ``docs``); EMPTY where none.

    ``backend``: "numba" (fused compiled kernel) or "numpy" (fallback); default ``BACKEND``.
    """
    backend = backend or BACKEND
    if backend == "numpy":
        return minhash_numpy.signatures(h, docs, n_docs, perms.a, perms.b)
    if backend != "numba" or numba is None:
        raise ValueError(f"unknown or unavailable MinHash backend {backend!r}")
    out = np.full((n_docs, len(perms.a)), EMPTY, dtype=np.uint64)
    a_lo, a_hi = _split_perms(perms)
    _min_permuted(np.ascontiguousarray(h, dtype=np.uint64),
                  np.ascontiguousarray(docs, dtype=np.int64), a_lo, a_hi,
                  np.ascontiguousarray(perms.b, dtype=np.uint64), out)
    return out


def minhash_signatures(texts: list[str], cfg: DedupConfig,
                       backend: str | None = None) -> np.ndarray:
    """MinHash signatures, uint64 of shape (len(texts), bands*rows); deterministic given cfg.seed.

    Texts are processed in slices of about ``_SLICE_CHARS`` characters: the byte-level arrays
    cost ~20 bytes per input byte, so this bounds memory whatever the batch size. A document's
    signature does not depend on the other documents of its batch or slice. ``backend``: see
    ``signatures_from_shingles``.
    """
    texts = list(texts)
    perms = Permutations.from_config(cfg)
    out = np.empty((len(texts), len(perms.a)), dtype=np.uint64)
    lo = 0
    while lo < len(texts):
        hi, size = lo, 0
        while hi < len(texts) and (hi == lo or size + len(texts[hi]) <= _SLICE_CHARS):
            size += len(texts[hi])
            hi += 1
        h, docs = shingle_hashes(texts[lo:hi], cfg.ngram, cfg.spaceless_ngram)
        out[lo:hi] = signatures_from_shingles(h, docs, hi - lo, perms, backend)
        lo = hi
    return out


def band_hashes(signatures: np.ndarray, cfg: DedupConfig) -> np.ndarray:
    """One 63-bit key per (document, band): shape (n, num_bands), int64 >= 0.

    Two documents share a band key when their ``rows_per_band`` values in that band are all
    equal (up to a 2**-63 chance of a hash collision per pair and band, accepted: it can only
    add a candidate edge, which the threshold then governs like any other).
    """
    n, num_perm = signatures.shape
    if num_perm != cfg.num_bands * cfg.rows_per_band:
        raise ValueError(f"signature width {num_perm} != bands*rows of {cfg}")
    rows = signatures.reshape(n, cfg.num_bands, cfg.rows_per_band)
    # Seeded with the band number, so equal values in two different bands never share a bucket.
    band_ids = fmix64(np.arange(1, cfg.num_bands + 1, dtype=np.uint64))
    acc = np.repeat(band_ids[None, :], n, axis=0)
    q = np.uint64(SHINGLE_BASE)
    for r in range(cfg.rows_per_band):
        acc = fmix64(acc * q + rows[:, :, r])
    return (acc >> np.uint64(1)).astype(np.int64)


def lsh_threshold(cfg: DedupConfig) -> float:
    """Jaccard similarity at which a pair becomes a candidate with probability ~1/2."""
    return (1.0 / cfg.num_bands) ** (1.0 / cfg.rows_per_band)
