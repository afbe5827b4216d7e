"""The word trigram Kneser-Ney model of ``pipelines.filters.kneser_ney``.

Every probability against an independent, plain-Python, dict-based implementation of the formulas
of the module docstring (on a small random corpus with <unk> words, unseen trigrams, unseen
contexts and a word with no right neighbour, and on the shipped reference); each distribution
sums to 1 over the whole vocabulary; the discounts are n1 / (n1 + 2 n2); the share of <unk>
tokens; the context gain (over the model's own context-free p1), averaged over the positions that
hold a known word only (not <unk>, <s>, numbers or punctuation, which stay as context; 0.0 when
there is none), against the reference implementation; it is lower for text whose words are
shuffled within sentences, below zero for tokens drawn from p1 and, on the shipped model, below the
lm_quality block's -0.25 for text in random word order (words drawn uniformly from the vocabulary,
with or without stop words, or by their frequency; sentences shuffled, short-sentence pages
included); book prose the reference does not contain stays above it but for pages of a book's
index (>= 99 % kept), the demo corpus above -0.1; and the tokeniser on examples.
"""
from __future__ import annotations

import copy
import math
import random
import re
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest

from pipelines.filters import kneser_ney as kn
from pipelines.filters.kneser_ney import KneserNey, Score, tokens

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


@pytest.fixture(scope="module", params=[1, 2, 3], ids=lambda m: f"min_count={m}")
def pair(request):
    return KneserNey(TEXTS, min_count=request.param), RefKN(DOCS, request.param), request.param


def by_ids(model: KneserNey, ids) -> tuple[np.ndarray, np.ndarray]:
    """``log_probs`` of an id sequence (after <s> <s>), bypassing the word lookup only."""
    m = copy.copy(model)
    m.ids = lambda toks: np.array([kn.START, kn.START, *toks], dtype=np.int64)
    return m.log_probs(list(ids))


def names(model: KneserNey) -> dict[int, str]:
    out = {i: w for w, i in model.vocab.items()}
    out[kn.UNK], out[kn.START] = U, S
    return out


# ---------------------------------------------------------------------------------------------
# Values against the reference implementation
# ---------------------------------------------------------------------------------------------
def test_corpus_tokenises_as_written():
    assert all(tokens(t) == d for t, d in zip(TEXTS, DOCS))


def test_counts_and_discounts(pair):
    model, ref, min_count = pair
    assert model.V == ref.V and ref.N == sum(map(len, DOCS))
    assert set(model.vocab) == ref.words
    assert model.D3 == pytest.approx(ref.D3, abs=1e-15) and model.D2 == pytest.approx(ref.D2, abs=1e-15)
    assert 0 < model.D2 < 1 and 0 < model.D3 < 1
    assert all((h in model.vocab) == (min_count == 1) for h in HAPAX)  # seen once: <unk> from 2 on


def test_discounts_of_hand_counted_corpus():
    # Trigrams of "x y x y x" after <s> <s>: (s s x) (s x y) (x y x) x2 (y x y): n1 = 3, n2 = 1.
    # (b, c) continuations: (s x) {s}, (x y) {s, y}, (y x) {x}: n1 = 2, n2 = 1.
    m = KneserNey(["x y x y x"], min_count=1)
    assert m.D3 == pytest.approx(3 / 5) and m.D2 == pytest.approx(2 / 4)


def test_log_probs_on_random_sequences(pair):
    model, ref, _ = pair
    rng = random.Random(1)
    pool = WORDS + HAPAX + ["fin", "neverseen", "."]
    seq = [rng.choice(pool) for _ in range(3000)]
    lp, lu = model.log_probs(seq)
    rp, ru = ref.log_probs(seq)
    np.testing.assert_allclose(lp, rp, rtol=0, atol=1e-9)
    np.testing.assert_allclose(lu, ru, rtol=0, atol=1e-9)


def test_log_probs_on_training_documents(pair):
    model, ref, _ = pair
    for d in DOCS[:20]:
        lp, lu = model.log_probs(d)
        rp, ru = ref.log_probs(d)
        np.testing.assert_allclose(lp, rp, rtol=0, atol=1e-9)
        np.testing.assert_allclose(lu, ru, rtol=0, atol=1e-9)


TRIPLES = [
    ("the", "old", "man"),  # likely seen
    ("dark", "dark", "dark"),  # likely unseen trigram
    ("fin", "the", "man"),  # context (fin, the) never seen: fin only ends documents
    ("the", "fin", "man"),  # b = fin has no continuation: p2 falls to p1
    ("zephyr", "the", "old"),  # <unk> in the context
    ("the", "quokka", "was"),
    ("the", "old", "xylem"),  # <unk> predicted
    ("neverseen", "neverseen", "neverseen"),
    (".", "the", "."),
    ("?", "?", "?"),
]


@pytest.mark.parametrize("triple", TRIPLES, ids="-".join)
def test_log_probs_of_triples(pair, triple):
    model, ref, _ = pair
    lp, lu = model.log_probs(list(triple))
    rp, ru = ref.log_probs(list(triple))
    assert lp.shape == lu.shape == (3,)
    np.testing.assert_allclose(lp, rp, rtol=0, atol=1e-9)
    np.testing.assert_allclose(lu, ru, rtol=0, atol=1e-9)


def test_seen_trigrams_and_contexts_are_covered(pair):
    # The cases above do exercise every branch of the formulas.
    _, ref, _ = pair
    assert ref.ctx_total[S, S] == len(DOCS)
    assert "fin" in ref.words and ref.b_total["fin"] == 0 and ref.cont["fin"] > 0  # never a context
    assert any(n >= 3 for n in ref.tri.values()) and any(n == 1 for n in ref.tri.values())
    assert ("dark", "dark", "dark") not in ref.tri


def test_score_is_the_mean_of_log_probs(pair):
    model, ref, _ = pair
    text = TEXTS[5] + " neverseen " + TEXTS[6]
    toks = tokens(text)
    rp, ru = ref.log_probs(toks)
    sc = model.score(text)
    assert isinstance(sc, Score) and sc.tokens == len(toks)
    assert sc.perplexity == pytest.approx(math.exp(-sum(rp) / len(rp)), rel=1e-12)  # all tokens
    known = [ref.known_word(w) for w in toks]
    assert 0 < sum(known) < len(toks) - 5  # "." and "?" (and <unk>) are left out of the gain
    assert sc.context_gain == pytest.approx(ref.context_gain(toks), abs=1e-12)
    assert sc.context_gain == pytest.approx(
        math.fsum(p - u for p, u, k in zip(rp, ru, known) if k) / sum(known), abs=1e-12)
    assert abs(sc.context_gain - sum(p - u for p, u in zip(rp, ru)) / len(rp)) > 1e-3  # not all tokens
    assert sc.unknown_frac == pytest.approx(ref.unknown_frac(toks), abs=1e-15) and sc.unknown_frac > 0
    head = model.score(text, max_tokens=10)
    hp, hu = ref.log_probs(toks[:10])
    assert head.tokens == 10 and head.perplexity == pytest.approx(math.exp(-sum(hp) / 10), rel=1e-12)
    assert head.context_gain == pytest.approx(ref.context_gain(toks[:10]), abs=1e-12)
    assert head.unknown_frac == pytest.approx(ref.unknown_frac(toks[:10]), abs=1e-15)
    assert model.score(text, max_tokens=10 ** 6) == sc
    assert model.score(" -- ( ) ") == Score(float("inf"), 0.0, 0.0, 0)


def test_is_word_marks_the_known_words(pair):
    model, ref, _ = pair
    name = names(model)
    assert model.is_word.shape == (model.V,) and model.is_word.dtype == bool
    assert [bool(model.is_word[i]) for i in range(model.V)] == [ref.known_word(name[i]) for i in range(model.V)]
    assert not model.is_word[kn.UNK] and not model.is_word[kn.START]
    assert not model.is_word[model.vocab["."]] and model.is_word[model.vocab["the"]]
    assert int(model.is_word.sum()) == len(ref.words) - 2  # every entry but "." and "?"


def test_context_gain_counts_known_words_only(pair):
    model, ref, min_count = pair
    # No known word: the gain is 0.0; perplexity and the <unk> share still count every token.
    for text in (". ? neverseen 1999 .", "?", "neverseen", "Xyzzy, 42!"):
        toks = tokens(text)
        sc = model.score(text)
        assert sc.context_gain == 0.0 and ref.context_gain(toks) == 0.0, text
        assert sc.perplexity == pytest.approx(math.exp(-sum(ref.log_probs(toks)[0]) / len(toks)), rel=1e-12)
        assert sc.unknown_frac == pytest.approx(ref.unknown_frac(toks), abs=1e-15) and sc.tokens == len(toks)
    # One known word among marks and <unk>: the gain is that word's, in the context of what precedes it.
    toks = ["neverseen", ".", "old", "?", "1999"]
    p3, p1 = model.log_probs(toks)
    assert model.score(" ".join(toks)).context_gain == pytest.approx(p3[2] - p1[2], abs=1e-12)
    assert p3[2] == pytest.approx(math.log(ref.p3(U, ".", "old")), abs=1e-9)  # <unk> and "." are its context
    # ... and that context matters: the same word after other non-words gains otherwise.
    assert model.score(". . old").context_gain != pytest.approx(model.score("? neverseen old").context_gain)
    assert model.score("the fin old").context_gain == pytest.approx(ref.context_gain(["the", "fin", "old"]),
                                                                    abs=1e-12)
    # <unk> only at min_count >= 2: "zephyr" (seen once) is a known word at min_count 1.
    sc = model.score("zephyr the")
    assert sc.context_gain == pytest.approx(ref.context_gain(["zephyr", "the"]), abs=1e-12)
    p3, p1 = model.log_probs(["zephyr", "the"])
    assert sc.context_gain == pytest.approx((p3[1] - p1[1]) if min_count > 1 else float(np.mean(p3 - p1)),
                                            abs=1e-12)


def test_context_gain_with_numbers_marks_and_other_letters():
    # A corpus with digits, every mark, non-ASCII words and the number-like letters of "½", "¼lb" and
    # "x²" (tokens of their own: only "x²" starts with a letter).
    base = ["the 12 cats , 12 dogs ; the café : 7 élan ! ½ x² ? ¼lb",
            "in 1999 the 12 cats ran . ½ of x² , the café .",
            "7 dogs ran in the café ; 1999 ½ élan ! once"] * 2
    base += ["the dogs of 12 élan ran : x² cats , 7 ? lonely 2024"]  # (seen once: <unk>)
    docs = [tokens(t) for t in base]
    model, ref = KneserNey(base, min_count=2), RefKN(docs, 2)
    name = names(model)
    assert {"12", "1999", "7", ",", ";", ":", "!", "?", ".", "½", "¼lb", "x²", "café", "élan"} <= set(model.vocab)
    assert [bool(model.is_word[i]) for i in range(model.V)] == [ref.known_word(name[i]) for i in range(model.V)]
    assert {name[i] for i in np.flatnonzero(model.is_word)} == {"the", "cats", "dogs", "café", "élan", "x²", "in",
                                                              "ran", "of", "once"}
    assert "lonely" not in model.vocab and "2024" not in model.vocab
    rng = random.Random(4)
    pool = sorted(model.vocab) + ["blorf", "2024", "lonely"]
    for n in (1, 2, 5, 50, 400):
        toks = [rng.choice(pool) for _ in range(n)]
        sc = model.score(" ".join(toks))
        assert sc.tokens == n and sc.context_gain == pytest.approx(ref.context_gain(toks), abs=1e-12), toks
        rp, _ = ref.log_probs(toks)
        assert sc.perplexity == pytest.approx(math.exp(-sum(rp) / n), rel=1e-12)
    assert model.score("12 , 1999 ½ . blorf ¼lb").context_gain == 0.0


def test_unknown_frac(pair):
    model, ref, min_count = pair
    assert model.score("the old man .").unknown_frac == 0.0
    assert model.score("neverseen quokka").unknown_frac == (1.0 if min_count > 1 else 0.5)
    assert model.score("zephyr the neverseen man").unknown_frac == (0.5 if min_count > 1 else 0.25)
    assert model.score("Neverseen. NEVERSEEN? 1999 the").unknown_frac == 0.5  # 3 of 6 (the corpus has no digits)
    # the numbers of the Score are those of the same tokens
    sc = model.score("blorf blorf the old man", max_tokens=3)
    assert sc.tokens == 3 and sc.unknown_frac == pytest.approx(2 / 3)


# ---------------------------------------------------------------------------------------------
# Normalisation: each p3(. | a b), p2 via unseen contexts, and p1 sum to 1 over every id
# ---------------------------------------------------------------------------------------------
def test_distributions_sum_to_one(pair):
    model, ref, _ = pair
    name = names(model)
    w = model.vocab
    g = lambda word: w.get(word, kn.UNK)  # noqa: E731
    contexts = [
        (kn.START, kn.START),  # every document's start
        (kn.START, g("the")),
        (g("the"), g("old")),
        (g("dark"), g("dark")),  # probably unseen: p2
        (g("the"), g("fin")),  # b without continuation: p1
        (kn.UNK, kn.UNK),
        (g("."), kn.START),  # <s> as b after a word: an unseen context
        (kn.START, kn.UNK),
    ]
    for a, b in contexts:
        lp = np.array([by_ids(model, [a, b, c])[0][2] for c in range(model.V)])
        assert math.fsum(np.exp(lp)) == pytest.approx(1, abs=1e-9), (name[a], name[b])
        # the same distribution, value by value, from the reference
        expect = [math.log(ref.p3(name[a], name[b], name[c])) for c in range(model.V)]
        np.testing.assert_allclose(lp, expect, rtol=0, atol=1e-9)
    l1 = by_ids(model, list(range(model.V)))[1]
    assert math.fsum(np.exp(l1)) == pytest.approx(1, abs=1e-9)
    np.testing.assert_allclose(l1, [math.log(ref.p1(name[c])) for c in range(model.V)], rtol=0, atol=1e-12)
    assert math.fsum(ref.p1(c) for c in ref.vocabulary()) == pytest.approx(1, abs=1e-12)


# ---------------------------------------------------------------------------------------------
# The shipped reference: the same values at V ~ 10^4, and the context gain's behaviour
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def shipped():
    from pipelines.filters import lm_quality

    return lm_quality.model(None, 2), lm_quality.reference_documents(lm_quality.reference_text(None))


def test_large_vocabulary_matches_reference_implementation(shipped):
    # A third of the shipped reference (V ~ 7,000, the ids packed into int64 keys as in production).
    _, docs = shipped
    docs = docs[::3]
    model, ref = KneserNey(docs), RefKN([tokens(d) for d in docs], 2)
    assert model.V == ref.V > 5000
    assert model.D2 == pytest.approx(ref.D2, abs=1e-15) and model.D3 == pytest.approx(ref.D3, abs=1e-15)
    from synthetic import prose

    text = " ".join(prose.documents(5, seed=2)) + " " + docs[3][:3000] + " " + shipped[1][4][:3000]
    toks = tokens(text + " Xyzzy plugh, 1999!")
    lp, lu = model.log_probs(toks)
    rp, ru = ref.log_probs(toks)
    np.testing.assert_allclose(lp, rp, rtol=0, atol=1e-9)
    np.testing.assert_allclose(lu, ru, rtol=0, atol=1e-9)
    assert model.score(text).unknown_frac == pytest.approx(ref.unknown_frac(tokens(text)), abs=1e-15)
    assert [bool(model.is_word[model.vocab.get(t, kn.UNK)]) for t in toks] == [ref.known_word(t) for t in toks]
    assert sum(map(ref.known_word, toks)) < len(toks) - 100  # numbers, marks and <unk> among them
    sc = model.score(" ".join(toks))
    assert sc.tokens == len(toks) and sc.context_gain == pytest.approx(ref.context_gain(toks), abs=1e-9)


def test_shipped_model_distribution_sums_to_one(shipped):
    model, _ = shipped
    assert model.V > 10000
    for a, b in [(model.vocab["of"], model.vocab["the"]), (kn.START, kn.START), (kn.UNK, model.vocab["said"])]:
        total = math.fsum(math.exp(by_ids(model, [a, b, c])[0][2]) for c in range(model.V))
        assert total == pytest.approx(1, abs=1e-9)


def shuffle_within_sentences(text: str, seed: int) -> str:
    import re

    rng = random.Random(seed)
    out = []
    for sentence in re.split(r"(?<=[.!?])\s+", text):
        w = sentence.split()
        rng.shuffle(w)
        out.append(" ".join(w))
    return " ".join(out)


def test_shuffled_text_gains_less_and_loses(shipped):
    from synthetic import prose

    from tests.pipelines.filters._docs import prose as hand_prose

    model, _ = shipped
    texts = prose.documents(30, seed=11) + [hand_prose(3, 4, s) for s in range(0, 22, 5)]
    if BOOKS.is_dir():
        from pipelines.filters.lm_quality import REFERENCE_SOURCES
        from synthetic import web_junk

        texts += web_junk.clean_documents(20, seed=5, books=BOOKS, exclude=REFERENCE_SOURCES)
    diffs, gains = [], []
    for i, t in enumerate(texts):
        shuffled = shuffle_within_sentences(t, i)
        assert sorted(tokens(shuffled)) == sorted(tokens(t))  # same words, same frequencies
        gains.append(model.score(shuffled).context_gain)
        diffs.append(model.score(t).context_gain - gains[-1])
    assert min(diffs) > 0, min(diffs)
    assert np.mean(diffs) > 0.5
    assert max(gains) < 0, max(gains)  # random order within each sentence: a loss
    assert max(gains) < MIN_GAIN, max(gains)  # (-0.41 measured): what the block drops


@pytest.mark.parametrize("which", ["small", "shipped"])
def test_p1_samples_gain_below_zero(shipped, which):
    # Tokens drawn from p1 independently of their context: the expected gain per token is
    # -KL(p1 || p3(. | context)) <= 0.
    model = shipped[0] if which == "shipped" else KneserNey(TEXTS, min_count=2)
    rng = np.random.default_rng(0)
    p1 = np.exp(by_ids(model, list(range(model.V)))[1])  # (checked against the formula above)
    gains = []
    for _ in range(40):
        ids = rng.choice(model.V, size=500, p=p1 / p1.sum())
        lp, l1 = by_ids(model, ids)
        gains.append(float((lp - l1).mean()))
    assert max(gains) < 0.0, max(gains)


# Text in random word order, whatever its words: Gopher's stop words, the reference's vocabulary
# (its words seen at least twice, counted here from the reference's tokens).
STOP = ("the", "be", "to", "of", "and", "that", "have", "with")


@pytest.fixture(scope="module")
def reference_words(shipped):
    counts = Counter(t for d in shipped[1] for t in tokens(d) if t.isalpha())
    words = sorted(w for w, n in counts.items() if n >= 2)
    return words, [counts[w] for w in words]


def salad(rng: random.Random, draw, stop: float, n_tokens: int = 300) -> str:
    """Sentences of 6-18 words, each a stop word with probability ``stop``, else ``draw()``."""
    sentences, n = [], 0
    while n < n_tokens:
        words = [rng.choice(STOP) if rng.random() < stop else draw() for _ in range(rng.randint(6, 18))]
        if len(words) > 9 and rng.random() < 0.5:
            words[rng.randrange(3, len(words) - 3)] += ","
        sentences.append(" ".join(words).capitalize() + rng.choice(".....?!"))
        n += len(words) + 1
    return " ".join(sentences)


@pytest.mark.parametrize("draw,stop", [("uniform", 0.0), ("uniform", 0.15), ("uniform", 0.3), ("frequency", 0.0)],
                         ids=["uniform", "uniform-15%-stop", "uniform-30%-stop", "frequency"])
def test_random_word_order_loses(shipped, reference_words, draw, stop):
    model, _ = shipped
    words, counts = reference_words
    assert len(words) > 10000 and set(words) <= set(model.vocab)
    rng = random.Random(f"{draw}-{stop}")
    if draw == "uniform":
        pick = lambda: rng.choice(words)  # noqa: E731
    else:
        pick = lambda: rng.choices(words, counts)[0]  # noqa: E731
    scores = [model.score(salad(rng, pick, stop)) for _ in range(40)]
    assert all(s.tokens >= 300 and s.unknown_frac == 0 for s in scores)
    gains = [s.context_gain for s in scores]
    assert max(gains) < 0, max(gains)
    assert max(gains) < MIN_GAIN - 0.15, max(gains)  # -0.64 to -0.72 measured


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


def test_index_like():
    numbered = "Hippeastrum, 250.\n\nHolly-trees, sexes of, 93.\n\nCape of Good Hope, plants of, 110, 375."
    assert index_like(numbered) and index_like(numbered.replace(", 375.", ", 375,"))
    names = ["Cervulus moschatus, horns of.", "Cervus alces.", "Cervus campestris, odour of.", "Ceryle, male of.",
             "Cetacea, nakedness of.", "Ceylon, beard in.", "Chaffinch, proportion of.", "Chamaeleon, horns of."]
    assert index_like("\n\n".join(names)) and not index_like("\n\n".join(names[:7]))
    assert not index_like("\n\n".join(reversed(names)))
    from tests.pipelines.filters._docs import SENTENCES

    assert not index_like("\n\n".join(SENTENCES)) and not index_like("\n".join(SENTENCES[:12]))
    assert not index_like("In 1887 the railway reached the valley, 20 miles away.\n\nThe end.")
    assert not index_like("")


@pytest.mark.skipif(not BOOKS.is_dir(), reason=f"no books at {BOOKS}")
def test_book_prose_not_in_the_reference_gains(shipped):
    from pipelines.config import LmQualityConfig
    from pipelines.filters.lm_quality import REFERENCE_SOURCES
    from synthetic import web_junk

    assert LmQualityConfig().min_context_gain == MIN_GAIN
    model, _ = shipped
    docs = web_junk.clean_documents(200, seed=5, books=BOOKS, exclude=REFERENCE_SOURCES)
    assert len(docs) == 200
    gains = [model.score(d, 2000).context_gain for d in docs]  # (what the block scores)
    below = [i for i, g in enumerate(gains) if g < MIN_GAIN]
    assert len(below) <= 2, below  # >= 99 % kept (two index pages here: -0.95 and -0.71)
    assert all(index_like(docs[i]) for i in below), [docs[i][:300] for i in below if not index_like(docs[i])]
    rest = [g for d, g in zip(docs, gains) if not index_like(d)]
    assert len(rest) > 180 and min(rest) > -0.1, min(rest)  # the prose itself: +0.09 measured
    assert np.median(gains) > 0.5


def test_demo_corpus_gains(shipped):
    from flows import demo
    from synthetic import class_task

    model, _ = shipped
    docs = class_task.classed_documents(3000, seed=0, fraction=demo.CLASS_FRACTION)
    gains = [model.score(d, 2000).context_gain for d in docs]
    assert min(gains) > -0.1, min(gains)  # +0.013 measured
    assert np.median(gains) > 0.2


# Book pages of "sentences" of a few words (footnotes, a price list with dot leaders): shuffling
# the words within each sentence keeps most of their order, yet the shuffled page loses, as its
# <unk>, number and "." tokens (which gain in almost any context) are not averaged (found by
# scanning clean_documents(400, seed) for seeds 2, 5, 6, 7; they gained before that).
@pytest.mark.skipif(not BOOKS.is_dir(), reason=f"no books at {BOOKS}")
@pytest.mark.parametrize("seed,index", [(5, 237), (6, 5)], ids=["footnotes", "dot-leaders"])
def test_shuffled_short_sentence_pages_lose(shipped, seed, index):
    from pipelines.filters.lm_quality import REFERENCE_SOURCES
    from synthetic import web_junk

    model, _ = shipped
    page = web_junk.clean_documents(400, seed=seed, books=BOOKS, exclude=REFERENCE_SOURCES)[index]
    assert not index_like(page)
    assert model.score(page, 2000).context_gain > 0.5  # +1.02 measured
    assert model.score(shuffle_within_sentences(page, index), 2000).context_gain < MIN_GAIN  # -0.55, -0.73


# The index page of that scan: it now loses itself, so the block drops it whole (intended: a page
# of a book's index); shuffled, it loses more.
@pytest.mark.skipif(not BOOKS.is_dir(), reason=f"no books at {BOOKS}")
def test_index_page_loses_and_shuffled_loses_more(shipped):
    from pipelines.filters.lm_quality import REFERENCE_SOURCES
    from synthetic import web_junk

    model, _ = shipped
    page = web_junk.clean_documents(400, seed=7, books=BOOKS, exclude=REFERENCE_SOURCES)[56]
    assert index_like(page) and page.startswith("Hybrids and mongrels compared, 272.")
    gain = model.score(page, 2000).context_gain
    assert gain < MIN_GAIN  # -0.45 measured
    assert model.score(shuffle_within_sentences(page, 56), 2000).context_gain < gain - 0.5  # -1.16 measured


# ---------------------------------------------------------------------------------------------
# Tokens
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,expected", [
    ("The Cat sat.", ["the", "cat", "sat", "."]),
    ("Don't stop: it\u2019s fine, isn\u2019t it?",
     ["don't", "stop", ":", "it's", "fine", ",", "isn't", "it", "?"]),
    ("rock'n'roll o'clock", ["rock'n'roll", "o'clock"]),
    ("'Tis the dogs' bone", ["tis", "the", "dogs", "bone"]),  # outer apostrophes are not part of a word
    ("\u2018quoted\u2019 \"double\"", ["quoted", "double"]),
    ("In 1999, 42 cats; 3.14!", ["in", "1999", ",", "42", "cats", ";", "3", ".", "14", "!"]),
    ("abc123def 7th", ["abc", "123", "def", "7", "th"]),  # digit runs are their own tokens
    ("snake_case well-known (aside) [x] - \u2014 ...",  # other marks are dropped
     ["snake", "case", "well", "known", "aside", "x", ".", ".", "."]),
    ("Wait\u2026 what? \u2026\u2026", ["wait", ".", ".", ".", "what", "?"] + ["."] * 6),  # "\u2026" is "..."
    ("Caf\u00e9 Z\u00fcrich \u00c9COLE", ["caf\u00e9", "z\u00fcrich", "\u00e9cole"]),
    ("don''t", ["don", "t"]),
    ("", []),
])
def test_tokens(text, expected):
    assert tokens(text) == expected


def test_model_rejects_text_without_words():
    with pytest.raises(ValueError, match="no words"):
        KneserNey(["-- ( ) --", ""])
