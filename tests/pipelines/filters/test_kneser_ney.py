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

import math
import random

import numpy as np
import pytest

from pipelines.filters import kneser_ney as kn
from pipelines.filters.kneser_ney import KneserNey, Score, tokens
from tests.pipelines.filters._kn_reference import (DOCS, HAPAX, S, TEXTS, U, WORDS, RefKN, by_ids,
                                                     names)


@pytest.fixture(scope="module", params=[1, 2, 3], ids=lambda m: f"min_count={m}")
def pair(request):
    return KneserNey(TEXTS, min_count=request.param), RefKN(DOCS, request.param), request.param



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


