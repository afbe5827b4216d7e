"""A word trigram language model with interpolated Kneser-Ney smoothing, built in numpy.

What the ``lm_quality`` block scores documents with. Tokens are lower-cased words (letters with
inner apostrophes), digit runs and the punctuation marks ``. , ; : ! ?``; words seen fewer than
``min_count`` times in the reference become ``<unk>``, and every document starts with two
``<s>``. The probability of a token ``c`` after ``a b`` is Chen and Goodman's interpolated
Kneser-Ney with one absolute discount per order (``D = n1 / (n1 + 2 n2)`` from the counts of
counts):

    p3(c | a b) = max(C(abc) - D3, 0) / C(ab.) + D3 N1+(ab.) / C(ab.) * p2(c | b)
    p2(c | b)   = max(N1+(.bc) - D2, 0) / N1+(.b.) + D2 N1+(b.) / N1+(.b.) * p1(c)
    p1(c)       = (N1+(.c) + 1) / (N1+(..) + V)

where ``N1+`` counts distinct left or right neighbours (the continuation counts that make
Kneser-Ney's lower orders ask "how many contexts does this word complete" rather than "how
frequent is it"); an unseen context falls through to the next order.

Per document it reports the perplexity ``exp(-mean log p3)`` (what CCNet buckets documents by),
the share of ``<unk>`` tokens, and the *context gain* ``mean(log p3 - log p1)`` in nats per
word, over the positions that hold a known word (``<unk>``, numbers and punctuation stay as
context but are not averaged: the model has seen them after almost any context, so even in random
order they score above their context-free probability): how far the two tokens before each word
raise the model's probability of it above what the same model gives it with no context. In meaningful text the contexts were seen before with these
words and the gain is clearly positive. In text whose word order carries no information (words
drawn from any list, a sentence's words shuffled) a context has rarely been seen with the word
that follows it, so its probability falls through the discounts' back-off weights (each < 1) and
the gain is negative, whichever words are used. The context-free ``p1`` is the baseline rather
than the words' plain frequencies: those favour frequent words over ``p1``, so that salad of rare
words would gain against them. Perplexity also rises with rare vocabulary and a domain unlike the
reference; the gain mostly cancels that, as a rare word is as rare to both terms.

The n-grams are packed into int64 keys (``(a V + b) V + c``, V < 2^21), counted with
``np.unique``, and indexed by open-addressing hash tables (multiplicative hashing, linear probing,
at most half full); scoring a document is one compiled loop (numba) with three table probes per
token, a cache miss or two each, where binary searches in the sorted keys made twenty. The only
Python loop is the dictionary lookup of each token. Building from a few MB of text takes well
under a second.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import NamedTuple

import numba
import numpy as np

TOKEN = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)*|\d+|[.,;:!?]")
UNK, START = 0, 1
_MAX_VOCAB = 1 << 21  # three ids in one int64 key


def tokens(text: str) -> list[str]:
    return TOKEN.findall(text.lower().replace("\u2019", "'").replace("\u2026", "..."))


class Score(NamedTuple):
    perplexity: float
    context_gain: float  # nats per known word (0 when there is none)
    unknown_frac: float  # share of <unk> tokens
    tokens: int


def _discount(counts: np.ndarray) -> float:
    n1, n2 = int((counts == 1).sum()), int((counts == 2).sum())
    return n1 / (n1 + 2 * n2) if n1 + n2 else 0.5


_MIX = np.uint64(0x9E3779B97F4A7C15)


@numba.njit(cache=True, nogil=True)
def _slot(key: int, bits: int) -> int:  # pragma: no cover - compiled
    return np.int64((np.uint64(key) * _MIX) >> np.uint64(64 - bits))


@numba.njit(cache=True)
def _build_table(keys: np.ndarray, bits: int) -> np.ndarray:  # pragma: no cover - compiled
    """Slot -> index into ``keys`` (-1: empty), linear probing."""
    table = np.full(1 << bits, -1, np.int64)
    mask = (1 << bits) - 1
    for i in range(len(keys)):
        j = _slot(keys[i], bits)
        while table[j] != -1:
            j = (j + 1) & mask
        table[j] = i
    return table


@numba.njit(cache=True, nogil=True)
def _find(keys: np.ndarray, table: np.ndarray, bits: int, key: int) -> int:  # pragma: no cover - compiled
    mask = len(table) - 1
    j = _slot(key, bits)
    while True:
        i = table[j]
        if i == -1 or keys[i] == key:
            return i
        j = (j + 1) & mask


class _Index:
    """Sorted unique int64 ``keys`` with a hash table over them."""

    def __init__(self, keys: np.ndarray):
        self.keys = keys
        self.bits = max(1, int(2 * len(keys) - 1).bit_length())  # at most half full
        self.table = _build_table(keys, self.bits)


@numba.njit(cache=True, nogil=True)
def _kernel(s, V, tri_keys, tri_table, tri_bits, tri_counts, ctx_keys, ctx_table, ctx_bits, ctx_total, ctx_types,
            bi_keys, bi_table, bi_bits, bi_cont, b_total, b_types, p1, D2, D3, out3, out1):  # pragma: no cover
    """The formulas of the module docstring for every token of ``s`` (ids, two START first)."""
    for t in range(len(s) - 2):
        a, b, c = s[t], s[t + 1], s[t + 2]
        q1 = p1[c]
        q2 = q1
        tb = b_total[b]
        if tb > 0:
            i = _find(bi_keys, bi_table, bi_bits, b * V + c)
            cont = bi_cont[i] if i >= 0 else 0
            q2 = max(cont - D2, 0.0) / tb + D2 * b_types[b] / tb * q1
        q3 = q2
        ab = a * V + b
        j = _find(ctx_keys, ctx_table, ctx_bits, ab)
        if j >= 0:
            ct = ctx_total[j]
            i = _find(tri_keys, tri_table, tri_bits, ab * V + c)
            tc = tri_counts[i] if i >= 0 else 0
            q3 = max(tc - D3, 0.0) / ct + D3 * ctx_types[j] / ct * q2
        out3[t] = np.log(q3)
        out1[t] = np.log(q1)


class KneserNey:
    """A trigram model built from ``documents`` (see the module docstring)."""

    def __init__(self, documents: Iterable[str], *, min_count: int = 2, tokenize=None):
        # ``tokenize``: text -> tokens; None: ``tokens`` (the module's regex). A language whose
        # words are not letter runs between spaces gives its segmenter's words here.
        self.tokenize = tokenize or tokens
        split = [self.tokenize(d) for d in documents]
        counts = Counter(t for doc in split for t in doc)
        words = sorted(w for w, c in counts.items() if c >= min_count)
        if len(words) + 2 >= _MAX_VOCAB:
            raise ValueError(f"vocabulary of {len(words)} words exceeds {_MAX_VOCAB - 2}; raise min_count")
        self.vocab = {w: i + 2 for i, w in enumerate(words)}
        V = self.V = len(words) + 2
        # The ids the context gain is averaged over: known words (not <unk>, <s>, numbers, marks).
        self.is_word = np.zeros(V, dtype=bool)
        self.is_word[[i for w, i in self.vocab.items() if w[0].isalpha()]] = True
        seqs = [self.ids(doc) for doc in split if doc]
        if not seqs:
            raise ValueError("the reference text has no words")
        a, b, c = (np.concatenate([s[k:len(s) - 2 + k] for s in seqs]) for k in range(3))
        # Trigram counts, and per context (a, b): the total count and the number of distinct c.
        self.tri_keys, self.tri_counts = np.unique((a * V + b) * V + c, return_counts=True)
        self.D3 = _discount(self.tri_counts)
        self.ctx_keys, first, self.ctx_types = np.unique(self.tri_keys // V, return_index=True, return_counts=True)
        self.ctx_total = np.add.reduceat(self.tri_counts, first) if len(first) else np.zeros(0, np.int64)
        # Bigram continuation counts N1+(.bc): the distinct a before each (b, c).
        self.bi_keys, self.bi_cont = np.unique(self.tri_keys % (V * V), return_counts=True)
        self.D2 = _discount(self.bi_cont)
        bb = self.bi_keys // V
        self.b_total = np.bincount(bb, weights=self.bi_cont, minlength=V)  # N1+(.b.)
        self.b_types = np.bincount(bb, minlength=V).astype(np.float64)  # N1+(b.)
        cont = np.bincount(self.bi_keys % V, minlength=V).astype(np.float64)  # N1+(.c)
        self.p1 = (cont + 1) / (cont.sum() + V)
        self._tri, self._ctx, self._bi = _Index(self.tri_keys), _Index(self.ctx_keys), _Index(self.bi_keys)

    def ids(self, toks: list[str]) -> np.ndarray:
        get = self.vocab.get
        return np.array([START, START, *(get(t, UNK) for t in toks)], dtype=np.int64)

    def log_probs(self, toks: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Natural-log ``p3`` of every token after its two predecessors, and its ``log p1``."""
        return self._log_probs(self.ids(toks))

    def _log_probs(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        out3, out1 = np.empty(len(s) - 2), np.empty(len(s) - 2)
        tri, ctx, bi = self._tri, self._ctx, self._bi
        _kernel(s, self.V, tri.keys, tri.table, tri.bits, self.tri_counts, ctx.keys, ctx.table, ctx.bits,
                self.ctx_total, self.ctx_types, bi.keys, bi.table, bi.bits, self.bi_cont, self.b_total,
                self.b_types, self.p1, self.D2, self.D3, out3, out1)
        return out3, out1

    def score(self, text: str, max_tokens: int | None = None) -> Score:
        """Perplexity, context gain and unknown share of ``text`` (its first ``max_tokens`` tokens)."""
        toks = self.tokenize(text)
        if max_tokens is not None:
            toks = toks[:max_tokens]
        if not toks:
            return Score(float("inf"), 0.0, 0.0, 0)
        s = self.ids(toks)
        lp, l1 = self._log_probs(s)
        words = self.is_word[s[2:]]
        gain = float((lp - l1)[words].mean()) if words.any() else 0.0
        return Score(float(np.exp(-lp.mean())), gain, float((s[2:] == UNK).mean()), len(toks))
