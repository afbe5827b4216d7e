"""An independent, plain-Python, dict-based implementation of the interpolated Kneser-Ney trigram
model of ``pipelines.filters.kneser_ney`` (written from the formulas of its docstring) and the
small random corpus the model tests share; ``index_like`` recognises a page of a book's index."""
from __future__ import annotations

import copy
import math
import random
import re
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from pipelines.filters import kneser_ney as kn
from pipelines.filters.kneser_ney import KneserNey

S = "<s>"
U = "<unk>"
BOOKS = Path(__file__).resolve().parents[4] / "shared" / "data" / "corpus" / "gutenberg"
MIN_GAIN = -0.25  # the lm_quality block's default min_context_gain (checked below)


# ---------------------------------------------------------------------------------------------
# The independent implementation
# ---------------------------------------------------------------------------------------------
def discount(values) -> float:
    values = list(values)
    n1, n2 = values.count(1), values.count(2)
    assert n1 + n2 > 0  # the corpora here always have some; the module's fallback is not tested
    return n1 / (n1 + 2 * n2)


class RefKN:
    """Interpolated Kneser-Ney over token lists, written from the module docstring's formulas."""

    def __init__(self, docs: list[list[str]], min_count: int):
        counts = Counter(w for d in docs for w in d)
        self.words = {w for w, n in counts.items() if n >= min_count}
        self.V = len(self.words) + 2  # + <unk> and <s>
        self.tri: Counter = Counter()
        for d in docs:
            s = [S, S] + [self.map(w) for w in d]
            for i in range(2, len(s)):
                self.tri[s[i - 2], s[i - 1], s[i]] += 1
        self.N = sum(self.tri.values())  # tokens, one trigram each
        self.ctx_total: Counter = Counter()  # C(ab.)
        self.ctx_types: Counter = Counter()  # N1+(ab.)
        left = defaultdict(set)
        for (a, b, c), n in self.tri.items():
            self.ctx_total[a, b] += n
            self.ctx_types[a, b] += 1
            left[b, c].add(a)
        self.bicont = {bc: len(s) for bc, s in left.items()}  # N1+(.bc)
        self.b_total: Counter = Counter()  # N1+(.b.)
        self.b_types: Counter = Counter()  # N1+(b.)
        self.cont: Counter = Counter()  # N1+(.c)
        for (b, c), n in self.bicont.items():
            self.b_total[b] += n
            self.b_types[b] += 1
            self.cont[c] += 1
        self.bigram_types = len(self.bicont)  # N1+(..)
        self.D3 = discount(self.tri.values())
        self.D2 = discount(self.bicont.values())

    def map(self, w: str) -> str:
        return w if w in self.words else U

    def vocabulary(self) -> list[str]:
        return sorted(self.words) + [U, S]

    def p1(self, c):
        return (self.cont[c] + 1) / (self.bigram_types + self.V)

    def p2(self, b, c):
        t = self.b_total[b]
        if not t:
            return self.p1(c)
        return max(self.bicont.get((b, c), 0) - self.D2, 0) / t + self.D2 * self.b_types[b] / t * self.p1(c)

    def p3(self, a, b, c):
        t = self.ctx_total[a, b]
        if not t:
            return self.p2(b, c)
        return max(self.tri[a, b, c] - self.D3, 0) / t + self.D3 * self.ctx_types[a, b] / t * self.p2(b, c)

    def log_probs(self, toks: list[str]) -> tuple[list[float], list[float]]:
        """log p3 of every token after its two predecessors, and its context-free log p1."""
        s = [S, S] + [self.map(w) for w in toks]
        p3 = [math.log(self.p3(s[i - 2], s[i - 1], s[i])) for i in range(2, len(s))]
        p1 = [math.log(self.p1(s[i])) for i in range(2, len(s))]
        return p3, p1

    def unknown_frac(self, toks: list[str]) -> float:
        return sum(self.map(w) == U for w in toks) / len(toks)

    def known_word(self, w: str) -> bool:
        """A vocabulary entry that starts with a letter (not <unk>, <s>, a number or a mark)."""
        return w in self.words and w[0].isalpha()

    def context_gain(self, toks: list[str]) -> float:
        """mean(log p3 - log p1) over the positions holding a known word; 0.0 when there is none."""
        p3, p1 = self.log_probs(toks)
        d = [p - u for p, u, w in zip(p3, p1, toks) if self.known_word(w)]
        return math.fsum(d) / len(d) if d else 0.0


# ---------------------------------------------------------------------------------------------
# A small random corpus: 40 words with a Markov structure, three words seen once (<unk> at
# min_count 2), and "fin" that only ever ends a document (a context word with no continuation).
# ---------------------------------------------------------------------------------------------
WORDS = ("the a of and to in was he she it his her that with for on at by from they we you this "
         "old man house river road dog cat night day saw found went came took gave "
         "long dark").split()
HAPAX = ["zephyr", "quokka", "xylem"]
assert len(WORDS) == 40


def corpus(seed: int = 0) -> list[list[str]]:
    rng = random.Random(seed)
    nxt = {w: rng.sample(WORDS, 5) for w in WORDS}  # each word's likely successors
    docs = []
    for d in range(60):
        doc = []
        for _ in range(5):  # 60 x 5 = 300 sentences
            w = rng.choice(WORDS[:10])
            sent = [w]
            for _ in range(rng.randint(3, 9)):
                w = rng.choice(nxt[w]) if rng.random() < 0.8 else rng.choice(WORDS)
                sent.append(w)
            doc += sent + [rng.choice(".....?")]
        if d < len(HAPAX):
            doc.insert(7, HAPAX[d])
        if d % 20 == 3:
            doc.append("fin")
        docs.append(doc)
    return docs


DOCS = corpus()
TEXTS = [" ".join(d) for d in DOCS]


def by_ids(model: KneserNey, ids) -> tuple[np.ndarray, np.ndarray]:
    """``log_probs`` of an id sequence (after <s> <s>), bypassing the word lookup only."""
    m = copy.copy(model)
    m.ids = lambda toks: np.array([kn.START, kn.START, *toks], dtype=np.int64)
    return m.log_probs(list(ids))


def names(model: KneserNey) -> dict[int, str]:
    out = {i: w for w, i in model.vocab.items()}
    out[kn.UNK], out[kn.START] = U, S
    return out


def index_like(doc: str) -> bool:
    """A page of a book's index: most of its entries (non-empty lines) end with a page number and
    "." or hold ", <digits>" ("Cape of Good Hope, plants of, 110, 375."), or, where the index gives
    no page numbers ("Cervus alces."), its at least 8 entries are in alphabetical order by their first
    word (at most a fifth of the neighbouring pairs out of order)."""
    lines = [line.strip() for line in doc.splitlines() if line.strip()]
    if not lines:
        return False
    numbered = sum(bool(re.search(r"\d+\.$", line) or re.search(r", \d+", line)) for line in lines)
    if numbered > len(lines) / 2:
        return True
    first = [re.match(r"[^\W\d_]+", line.casefold()) for line in lines]
    if len(lines) < 8 or not all(first):
        return False
    heads = [m.group() for m in first]
    return sum(a <= b for a, b in zip(heads, heads[1:])) >= 0.8 * (len(heads) - 1)
