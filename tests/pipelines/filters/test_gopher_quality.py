"""Gopher quality block: each rule on hand-made documents at datatrove's default thresholds,
just inside and just outside, with datatrove's own GopherQualityFilter deciding alike."""
from __future__ import annotations

import pytest

from tests.pipelines.filters._docs import SENTENCES, block, datatrove_keeps, prose, reason

WORDS = " ".join(SENTENCES).replace(",", "").replace(".", "").split()  # plain words, no punctuation
B = block("gopher_quality")
P = "filter:gopher_quality:"


def words(n: int, start: int = 0) -> str:
    return " ".join(WORDS[(start + i) % len(WORDS)] for i in range(n)) + "."


def _fixed_length(n: int, length: int, extra: int = 0) -> str:
    # "the" and "and" (stop words, 3 letters) plus n-2 words of `length` letters (+extra on one).
    body = ["x" * length for _ in range(n - 2)]
    body[0] += "y" * extra
    return "the " + " ".join(body) + " and"


CASES = [
    # (rule or None = kept, text)
    (None, words(50)),
    (P + "min_doc_words", words(49)),
    (None, words(50) + " -- ... & ,"),  # symbol-only tokens are not words...
    (P + "min_doc_words", words(49) + " -- & ,"),  # ...so they do not reach the minimum
    (None, " ".join(["the", "and"] + ["cat"] * 58)),  # mean word length exactly 3
    (P + "min_avg_word_length", " ".join(["the", "and"] + ["cat"] * 57 + ["at"])),
    (None, "the and " + " ".join(["abcdefghij"] * 56 + ["abcdefghijklmnopq"] * 2)),  # mean exactly 10
    (P + "max_avg_word_length", "the and " + " ".join(["abcdefghij"] * 56 + ["abcdefghijklmnopqr"] * 2)),
    (None, words(54) + " " + " ".join(["#tag"] * 6)),  # 6 '#' / 60 tokens = 0.1
    (P + "max_symbol_word_ratio", words(53) + " " + " ".join(["#tag"] * 7)),
    (None, words(54) + " " + " ".join(["wait... now"] * 3)),  # 3 '...' / 60 tokens
    (P + "max_symbol_word_ratio", words(53) + " " + " ".join(["so... now"] * 7)),
    (None, "\n".join(["- " + words(6, i * 6) for i in range(9)] + [words(6, 60)])),  # 9/10 bullets
    (P + "max_bullet_lines_ratio", "\n".join("• " + words(6, i * 6) for i in range(10))),
    (None, "\n".join([words(6, i * 6)[:-1] + "..." for i in range(3)] + [words(6, i * 6) for i in range(3, 10)])),
    (P + "max_ellipsis_lines_ratio",
     "\n".join([words(6, i * 6)[:-1] + "…" for i in range(4)] + [words(6, i * 6) for i in range(4, 10)])),
    (None, words(48) + " " + " ".join(str(1000 + i) for i in range(12))),  # 48/60 with a letter = 0.8
    (P + "max_non_alpha_words_ratio", words(47) + " " + " ".join(str(1000 + i) for i in range(13))),
    (None, "the " + " ".join(["cats"] * 55) + " and"),
    (P + "min_stop_words", "the " + " ".join(["cats"] * 55) + " the"),  # one distinct stop word
    (P + "min_stop_words", "The " + " ".join(["cats"] * 55) + " And"),  # case-sensitive, as datatrove
]


@pytest.mark.parametrize("expected,text", CASES, ids=[f"{i}-{c[0]}" for i, c in enumerate(CASES)])
def test_rule_and_boundary(expected, text):
    assert reason(B, text) == expected
    assert datatrove_keeps("gopher_quality", text) == (expected is None)


def test_max_doc_words_boundary():
    text = " ".join(["the", "and"] + ["word"] * 99_998)
    assert reason(B, text) is None
    assert reason(B, text + " more") == P + "max_doc_words"
    assert reason(block("gopher_quality", max_doc_words=None), text + " more") is None


def test_detail_shows_value_and_threshold():
    b = block("gopher_quality")
    from tests.pipelines.filters._docs import verdict
    assert verdict(b, "only three words").detail == "words=3 < 50"
    assert verdict(b, words(53) + " " + " ".join(["#tag"] * 7)).detail == "hash_ratio=0.117 > 0.1"


@pytest.mark.parametrize("expected,text", [c for c in CASES if c[0]])
def test_none_disables_the_rule(expected, text):
    field = expected.rsplit(":", 1)[1]
    assert reason(block("gopher_quality", **{field: None}), text) != expected


def test_prose_passes():
    for start in range(0, 22, 3):
        assert reason(B, prose(3, 4, start)) is None
