"""Normalisation and quality filters: every drop reason fires on a crafted document, none on prose."""
from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from pipelines.config import FilterConfig
from pipelines.filters import check_document, evaluate_document, filter_batch, normalize_text

SENTENCES = [
    "The committee met on Tuesday to discuss the budget for the coming year.",
    "After a long winter, the river finally thawed and the boats returned to the harbour.",
    "She had never seen a city so crowded, with markets spilling into every narrow street.",
    "Researchers measured the temperature of the lake every morning for three months.",
    "Most of the old houses in the village were built from local stone and timber.",
    "He explained that the engine failed because nobody had replaced the worn belt.",
    "In 1887 the railway reached the valley, and with it came merchants from the coast.",
    "The library keeps a small collection of maps drawn by sailors in the last century.",
    "Children walked to school along a path that followed the edge of the forest.",
    "It is difficult to say whether the new policy will change anything at all.",
    "Our neighbours grow tomatoes, beans and a surprising variety of herbs.",
    "When the storm arrived, the power went out and the whole street fell silent.",
    "The museum reopened in spring with an exhibition about early photography.",
    "Few people remember that the bridge was designed by a young engineer from Lyon.",
    "A good teacher listens carefully before offering an answer to a question.",
    "The report argues that cheaper housing would attract families back to the centre.",
    "During the festival, musicians played in the square until well after midnight.",
    "Farmers worried that the dry summer would ruin much of the harvest.",
    "The letter, written in faded ink, described a journey across the mountains.",
    "Scientists still debate how the first stars formed in the early universe.",
    "Visitors are asked to leave their bags at the entrance of the gallery.",
    "The council voted to protect the meadow from further development.",
]


def prose(seed: int = 0, paragraphs: int = 4) -> str:
    """Realistic English: paragraphs of distinct, varied sentences."""
    rng = random.Random(seed)
    picked = rng.sample(SENTENCES, k=min(len(SENTENCES), paragraphs * 4))
    return "\n\n".join(" ".join(picked[i * 4:(i + 1) * 4]) for i in range(paragraphs))


CFG = FilterConfig()


@pytest.mark.parametrize("seed", range(8))
def test_prose_passes_every_check(seed):
    for paragraphs in (1, 3, 5):
        text = normalize_text(prose(seed, paragraphs), CFG)
        assert evaluate_document(text, CFG) is None, text


def _lines(*lines: str) -> str:
    return "\n".join(lines)


# Each case: (expected reason, text, config overrides). Texts are crafted to pass every check that
# runs before the one they target, so the reason proves the targeted check fires.
CRAFTED = [
    ("filter:min_chars", "Too short to keep.", {}),
    ("filter:max_chars", prose(1), {"max_chars": 200}),
    ("filter:min_words", "Incomprehensibilities notwithstanding, extraordinarily", {}),
    ("filter:max_words", prose(2), {"max_words": 30}),
    ("filter:mean_word_length", " ".join(["I a", "o y"] * 20), {}),
    ("filter:mean_word_length", " ".join(["incomprehensibilities", "counterrevolutionaries"] * 10), {}),
    ("filter:alpha_ratio", " ".join(str(n) for n in range(100, 160)) + " the and of", {}),
    ("filter:symbol_ratio", prose(3) + " " + " ".join(f"#tag{i}" for i in range(40)), {}),
    ("filter:repeated_lines", _lines(*SENTENCES[:6], *([SENTENCES[7]] * 5)), {}),
    ("filter:repeated_line_chars",
     _lines("Short one here.", "Another line.", "Third line now.", "Fourth line is.", "Fifth one.",
            "Sixth line.", "Seventh line.", " ".join(SENTENCES[:6]), " ".join(SENTENCES[:6])), {}),
    ("filter:bullet_lines", _lines(*(f"• {s}" for s in SENTENCES[:10])), {}),
    ("filter:ellipsis_lines", _lines(*(s[:-1] + "..." if i % 2 else s for i, s in enumerate(SENTENCES[:10]))), {}),
    ("filter:stop_words", "Cats sleep all day. Dogs bark loudly at night. Birds sing in tall trees "
                          "while bees visit flowers in gardens near old houses.", {}),
    ("filter:top_2gram", "The offer is simple and the price is low. " + " ".join(
        f"click here {w}" for w in ("today", "now", "fast", "please", "again", "friend", "quickly",
                                    "immediately", "soon", "yourself", "everyone", "first")), {}),
]


@pytest.mark.parametrize("reason,text,overrides", CRAFTED, ids=[f"{c[0]}-{i}" for i, c in enumerate(CRAFTED)])
def test_each_reason_fires(reason, text, overrides):
    cfg = dataclasses.replace(CFG, **overrides)
    text = normalize_text(text, cfg)
    verdict = evaluate_document(text, cfg)
    assert verdict is not None and verdict.reason == reason, (verdict, text)
    assert check_document(text, cfg) == reason
    assert ("<" in verdict.detail) or (">" in verdict.detail)


def test_every_config_field_has_a_crafted_case():
    # A threshold field with no failing example would be an untested (possibly unused) knob.
    reasons = {c[0] for c in CRAFTED}
    field_to_reason = {
        "min_chars": "min_chars", "max_chars": "max_chars", "min_words": "min_words",
        "max_words": "max_words", "min_mean_word_length": "mean_word_length",
        "max_mean_word_length": "mean_word_length", "min_alpha_ratio": "alpha_ratio",
        "max_symbol_ratio": "symbol_ratio", "max_repeated_line_ratio": "repeated_lines",
        "max_repeated_line_char_ratio": "repeated_line_chars", "max_bullet_line_ratio": "bullet_lines",
        "max_ellipsis_line_ratio": "ellipsis_lines", "min_stop_words": "stop_words",
        "max_top_2gram_ratio": "top_2gram",
    }
    fields = {f.name for f in dataclasses.fields(FilterConfig)} - {"unicode_form"}
    assert fields == set(field_to_reason)
    assert {f"filter:{r}" for r in field_to_reason.values()} <= reasons


def test_empty_after_normalisation_is_dropped_even_with_checks_off():
    off = FilterConfig(**{f.name: 0 for f in dataclasses.fields(FilterConfig) if f.name != "unicode_form"})
    assert check_document(normalize_text("\x00\x01 \u200b\t\r\n", off), off) == "filter:empty"
    assert check_document("x", off) is None  # with every threshold off, any text passes


def test_details_show_value_and_threshold():
    cfg = dataclasses.replace(CFG, min_chars=0)
    assert evaluate_document("only three words", cfg).detail == "words=3 < 5"
    assert evaluate_document("Too short to keep.", CFG).detail == "chars=18 < 50"
    text = _lines(*SENTENCES[:6], *([SENTENCES[7]] * 5))  # 4 of 11 lines repeat an earlier one
    assert evaluate_document(text, CFG).detail == "repeated_line_ratio=0.364 > 0.3"


@pytest.mark.parametrize("reason,text,overrides", CRAFTED, ids=[f"{c[0]}-{i}" for i, c in enumerate(CRAFTED)])
def test_zero_threshold_disables_the_check(reason, text, overrides):
    name = reason.split(":")[1]
    fields = {"min_chars": ["min_chars"], "max_chars": ["max_chars"], "min_words": ["min_words"],
              "max_words": ["max_words"],
              "mean_word_length": ["min_mean_word_length", "max_mean_word_length"],
              "alpha_ratio": ["min_alpha_ratio"], "symbol_ratio": ["max_symbol_ratio"],
              "repeated_lines": ["max_repeated_line_ratio"],
              "repeated_line_chars": ["max_repeated_line_char_ratio"],
              "bullet_lines": ["max_bullet_line_ratio"], "ellipsis_lines": ["max_ellipsis_line_ratio"],
              "stop_words": ["min_stop_words"], "top_2gram": ["max_top_2gram_ratio"]}[name]
    cfg = dataclasses.replace(CFG, **{**overrides, **{f: 0 for f in fields}})
    assert check_document(normalize_text(text, cfg), cfg) != reason


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
    messy = "  \ufeffA\u0301 b\t\tc\r\n\r\n\r\n\r\nd \x00e\u00a0\u00a0f  \ne\x00\u0301 \u00a0\n\n\n" + prose(4)
    once = normalize_text(messy, CFG)
    assert normalize_text(once, CFG) == once
    assert "\r" not in once and "\t" not in once and "  " not in once and "\n\n\n" not in once


# ---------------------------------------------------------------------------------------------
# filter_batch
# ---------------------------------------------------------------------------------------------
def test_filter_batch_sets_reasons_and_normalises():
    good = "  " + prose(5).replace("\n\n", "\r\n\r\n\r\n") + "\t "
    batch = {
        "id": np.array(["f:0", "f:10", "f:20", "f:30"], dtype=object),
        "uid": np.array([1, 2, 3, 4], dtype=np.int64),
        "text": np.array([good, "Too short.", "raw \xff bytes\t\t", "only three words" + " " * 60], dtype=object),
        "reason": np.array(["", "", "ingest:invalid_utf8", ""], dtype=object),
        "detail": np.array(["", "", "line 3", ""], dtype=object),
    }
    out = filter_batch(batch, dataclasses.replace(CFG, min_chars=11))
    assert list(out["reason"]) == ["", "filter:min_chars", "ingest:invalid_utf8", "filter:min_words"]
    assert list(out["detail"]) == ["", "chars=10 < 11", "line 3", "words=3 < 5"]
    assert out["text"][0] == normalize_text(good, CFG) and "\r" not in out["text"][0]
    assert out["text"][2] == "raw \xff bytes\t\t"  # already rejected rows pass through unchanged
    assert out["text"][3] == "only three words"
    assert list(out["id"]) == list(batch["id"]) and out["uid"].dtype == np.int64
    assert list(batch["reason"]) == ["", "", "ingest:invalid_utf8", ""]  # input not mutated


def test_filter_batch_accepts_numpy_unicode_arrays():
    batch = {"id": np.array(["a:0"]), "uid": np.array([7], dtype=np.int64), "text": np.array([prose(6)]),
             "reason": np.array([""]), "detail": np.array([""])}
    out = filter_batch(batch, CFG)
    assert out["reason"][0] == "" and out["text"][0] == normalize_text(prose(6), CFG)


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
