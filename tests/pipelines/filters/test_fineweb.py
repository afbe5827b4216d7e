"""FineWeb block: each ratio on hand-made documents around datatrove's thresholds, with
datatrove's FineWebQualityFilter deciding alike."""
from __future__ import annotations

import pytest

from tests.pipelines.filters._docs import SENTENCES, block, datatrove_keeps, exact_block, reason, verdict

B = block("fineweb")
P = "filter:fineweb:"
# Lines of more than 30 characters, 6+ words, no terminal punctuation.
BARE = [s.rstrip(".") + " today" for s in SENTENCES]


def lines(punctuated: int, bare: int, short: int = 0) -> str:
    out = SENTENCES[:punctuated] + BARE[punctuated:punctuated + bare] + [f"Short line {i}" for i in range(short)]
    return "\n".join(out)


CASES = [
    (None, lines(3, 22)),  # 3/25 = 0.12 punctuated lines
    (P + "line_punct_ratio", lines(2, 20)),  # 2/22 = 0.09
    (None, lines(4, 0, short=8)),  # 8/12 = 0.667 short lines
    (P + "short_line_ratio", lines(3, 0, short=7)),  # 0.7
    (P + "char_dup_ratio", lines(10, 0) + "\n" + SENTENCES[0]),
    (None, lines(20, 0) + "\nAll right."),  # no duplicate
    # 12 lines of 3 long words (not short lines): 11 newlines / 36 words = 0.306
    (P + "list_ratio", "\n".join(f"Internationalisation documentation requirement{i}." for i in range(12))),
]


@pytest.mark.parametrize("expected,text", CASES, ids=[f"{i}-{c[0]}" for i, c in enumerate(CASES)])
def test_rule(expected, text):
    assert reason(B, text) == expected
    assert reason(exact_block("fineweb"), text) == expected
    assert datatrove_keeps("fineweb", text) == (expected is None)


def test_char_dup_boundary():
    # One repeated line of c characters in a document of n characters (without newlines): c/n.
    base = "\n".join(SENTENCES * 3)  # each sentence thrice: far above 0.01
    assert reason(B, base) == P + "char_dup_ratio"
    long = "\n".join(SENTENCES[:20] + [s.replace(".", " again today.") for s in SENTENCES[:20]])
    dup = "A short repeated line."  # 22 chars
    text = long + "\n" + dup + "\n" + dup
    ratio = len(dup) / (len(text) - text.count("\n"))
    assert ratio < 0.01 and reason(B, text) is None and datatrove_keeps("fineweb", text)
    assert verdict(B, text + "\n" + dup).detail.startswith("char_dup_ratio=")


def test_list_ratio_boundary():
    three = "\n".join(f"Number {i} here." for i in range(10))  # 9 newlines / 30 words = 0.3
    assert reason(block("fineweb", short_line_thr=None), three) is None
    assert reason(block("fineweb", short_line_thr=None), three + "\nDone.") == P + "list_ratio"


def test_options():
    text = "\n".join(BARE[:10])
    assert reason(B, text) == P + "line_punct_ratio"
    assert reason(block("fineweb", line_punct_exclude_zero=True), text) is None
    assert reason(block("fineweb", line_punct_thr=None), text) is None
    quoted = "\n".join(f'{s[:-1]}?"' for s in SENTENCES[:2]) + "\n" + "\n".join(BARE[:14])
    assert reason(B, quoted) is None  # 2/16 = 0.125 counting '?"' as punctuated
    assert reason(exact_block("fineweb"), quoted) == P + "line_punct_ratio"
    assert not datatrove_keeps("fineweb", quoted)
