"""Gopher repetition block: each rule on hand-made documents around datatrove's thresholds, and
the same first failing rule as datatrove's GopherRepetitionFilter on many random documents."""
from __future__ import annotations

import random

import pytest

from tests.pipelines.filters._docs import SENTENCES, _DT, block, datatrove_keeps, prose, reason

B = block("gopher_repetition")
P = "filter:gopher_repetition:"
LONG = [" ".join(SENTENCES[i:i + 3]) for i in range(0, 21, 3)]  # 7 distinct long paragraphs


PHRASES = ["the quick brown fox jumps over", "a lazy dog sleeps in sun", "seven small birds sing at dawn",
           "old boats rest by the pier", "green hills roll toward the sea"]

CASES = [
    (None, prose(4)),
    # 10 paragraphs, 3 repeat an earlier one: 0.3 is not above 0.3 (the repeat is short: few chars)
    (None, "\n\n".join(LONG + ["Yes indeed."] + ["Yes indeed."] * 2)),
    (P + "dup_para_frac", "\n\n".join(LONG[:6] + ["Yes indeed."] + ["Yes indeed."] * 4)),  # 4 of 11
    (P + "dup_para_char_frac", "\n\n".join(LONG[:4] + [LONG[0]])),
    (None, "\n".join(LONG + ["Yes indeed."] * 3) + "\n\nNo."),  # 2 of 11 lines repeat
    (P + "dup_line_frac", "\n".join(LONG[:3] + ["Yes indeed."] * 4)),
    (P + "dup_line_char_frac", "\n".join(LONG[:3] + [LONG[1]])),  # 1 of 4 lines, a quarter of the chars
    (P + "top_2_gram", prose(2) + " " + " ".join(f"click here {w}." for w in "abcdefghijklmnopqrstuvwxyz")),
    (P + "top_3_gram", prose(2) + " " + " ".join(f"buy it now {w}." for w in "abcdefghijklmnop")),
    (P + "top_4_gram", prose(2) + " " + " ".join(f"best deal in town {w}." for w in "abcdefghijklmn")),
    # five 6-word phrases, each said twice: 0.157 of the characters in repeated 5-grams
    (P + "dup_5_grams", prose(1) + " " + " ".join(f"{x}." for x in PHRASES) + " " + " ".join(f"{x}!" for x in PHRASES)),
    (None, prose(2) + " " + " ".join(f"{x}." for x in PHRASES) + " " + " ".join(f"{x}!" for x in PHRASES)),
    # two sentences said twice, in a longer text: 0.111 in repeated 9-grams (limit 0.11)
    (P + "dup_9_grams", prose(2, 5, start=5) + " " + " ".join(SENTENCES[:2] * 2)),
]


@pytest.mark.parametrize("expected,text", CASES, ids=[f"{i}-{c[0]}" for i, c in enumerate(CASES)])
def test_rule(expected, text):
    assert reason(B, text) == expected
    assert datatrove_keeps("gopher_repetition", text) == (expected is None)


def _dt_reason(text: str) -> str | None:
    datatrove_keeps("gopher_repetition", "x")  # builds the datatrove filters
    from datatrove.data import Document

    out = _DT["gopher_repetition"].filter(Document(text=text, id="0"))
    if out is True:
        return None
    name = out[1]
    if name.startswith("duplicated_"):
        name = f"dup_{name.split('_')[1]}_grams"
    return P + name


def _random_doc(rng: random.Random) -> str:
    vocab = rng.choice([["a", "b", "c", "dd"], "the cat sat on a mat and it was fine".split(),
                        " ".join(SENTENCES).split()])
    paragraphs = []
    for _ in range(rng.randint(1, 6)):
        lines = []
        for _ in range(rng.randint(1, 4)):
            if lines and rng.random() < 0.2:
                lines.append(rng.choice(lines))
            else:
                lines.append(" ".join(rng.choice(vocab) for _ in range(rng.randint(1, 40))))
        paragraphs.append("\n".join(lines))
        if rng.random() < 0.15:
            paragraphs.append(rng.choice(paragraphs))
    return "\n\n".join(paragraphs)


def test_same_first_rule_as_datatrove_on_random_documents():
    # Independent implementation: datatrove's pure-Python loops vs our hashed numpy n-grams.
    rng = random.Random(0)
    docs = [_random_doc(rng) for _ in range(400)]
    reasons = [reason(B, d) for d in docs]
    assert reasons == [_dt_reason(d) for d in docs]
    assert len(set(reasons)) >= 8  # the documents exercise most rules, keep included


def test_thresholds_can_be_changed_or_disabled():
    text = CASES[7][1]
    assert reason(block("gopher_repetition", top_n_grams=[[2, None], [3, 0.18]]), text) != P + "top_2_gram"
    assert reason(block("gopher_repetition", top_n_grams=[], dup_n_grams=[]), CASES[10][1]) is None
    assert reason(block("gopher_repetition", dup_n_grams=[[5, 0.16]]), CASES[10][1]) is None
    assert reason(block("gopher_repetition", dup_para_frac=None), CASES[2][1]) == P + "dup_line_frac"
