"""Normalisation: each step on crafted strings, and idempotence on random messy strings."""
from __future__ import annotations

import dataclasses
import random

import pytest

from pipelines.config import FilterConfig
from pipelines.filters import normalize_text
from tests.pipelines.filters._docs import prose

CFG = FilterConfig()


# ---------------------------------------------------------------------------------------------
# Normalisation
# ---------------------------------------------------------------------------------------------
def _cfg(form: str) -> FilterConfig:
    return dataclasses.replace(CFG, unicode_form=form)


def test_unicode_forms():
    decomposed = "Cafe\u0301 \ufb01ne \uff21\u2460"  # e + combining acute, "fi" ligature, fullwidth A, circled 1
    assert normalize_text(decomposed, _cfg("NFC")) == "Caf\u00e9 \ufb01ne \uff21\u2460"
    assert normalize_text(decomposed, _cfg("NFKC")) == "Caf\u00e9 fine A1"
    assert normalize_text(decomposed, _cfg("none")) == decomposed
    with pytest.raises(ValueError, match="unicode_form"):
        normalize_text("x", _cfg("NFX"))


@pytest.mark.parametrize("raw,expected", [
    ("a\x00b\x07c\x1bd\x7fe\x9ff", "abcdef"),  # C0/C1 controls removed
    ("\ufeffhello\u200bworld\u00ad!", "helloworld!"),  # BOM, zero-width space, soft hyphen
    ("col1\tcol2\t\tcol3", "col1 col2 col3"),  # tabs become (one) space
    ("one\r\ntwo\rthree\x0cfour\u2028five", "one\ntwo\nthree\nfour\nfive"),  # line endings
    ("a    b \u00a0 c\u3000d", "a b c d"),  # runs of (Unicode) spaces
    ("line one   \nline two\t\n", "line one\nline two"),  # trailing spaces per line
    ("p1\n\n\n\n\np2\n \n \n\np3", "p1\n\np2\n\np3"),  # 3+ newlines (also via blank-ish lines)
    ("  \n\n  padded text \n\n ", "padded text"),  # strip
    ("zero\u200dwidth joiner\u200c kept", "zero\u200dwidth joiner\u200c kept"),
])
def test_normalisation_cases(raw, expected):
    assert normalize_text(raw, CFG) == expected


def test_normalisation_is_idempotent():
    messy = "  \ufeffA\u0301 b\t\tc\r\n\r\n\r\n\r\nd \x00e\u00a0\u00a0f  \ne\x00\u0301 \u00a0\n\n\n" + prose(2)
    once = normalize_text(messy, CFG)
    assert normalize_text(once, CFG) == once
    assert "\r" not in once and "\t" not in once and "  " not in once and "\n\n\n" not in once


@pytest.mark.parametrize("form", ["NFC", "NFKC", "none"])
def test_normalisation_idempotent_on_random_messy_strings(form):
    pool = list("ab e\n\t\r") + ["\u0301", "\x00", "\x0c", "\u00a0", "\u2028", "\ufeff", "\u200b", "\ufb01",
                                 "\uff21", "\u3000", "\u00ad", "\x85", "\u200d", "é", "\u2460"]
    rng = random.Random(7)
    cfg = _cfg(form)
    for _ in range(500):
        raw = "".join(rng.choice(pool) for _ in range(rng.randint(0, 40)))
        once = normalize_text(raw, cfg)
        assert normalize_text(once, cfg) == once, repr(raw)
        assert "\r" not in once and "\t" not in once and "  " not in once and "\n\n\n" not in once
