"""C4 block: lines removed and documents dropped by each rule, the rewritten text equal to
datatrove's C4QualityFilter's, and the closing-quote relaxation."""
from __future__ import annotations

import pytest

from benchmarks.corpus.filters import datatrove_filters, datatrove_verdict, exact_config
from pipelines.config import FilterConfig
from pipelines.filters import Doc, normalize_text, run_blocks
from tests.pipelines.filters._docs import SENTENCES, block, exact_block, reason, verdict

B = block("c4")
P = "filter:c4:"
FIVE = "\n".join(SENTENCES[:5])  # five kept lines of one sentence each


def kept_text(b, text: str) -> str | None:
    doc = Doc(normalize_text(text, FilterConfig()))
    return doc.text if run_blocks(doc, [b]) is None else None


@pytest.mark.parametrize("line", [
    "Menu Home About Contact",  # no terminal punctuation
    "And then there was more...",  # ends in an ellipsis
    "Click here.",  # fewer than 3 words
    "Please enable JavaScript to view this page.",
    "By using this site you agree to our Terms of Use.",
    "This site uses cookies to improve your experience.",
    "See our privacy policy for details.",
    "A word " + "x" * 1001 + " too long.",
])
def test_line_rules_remove_the_line_only(line):
    text = FIVE[:len(SENTENCES[0])] + "\n" + line + FIVE[len(SENTENCES[0]):]
    assert kept_text(B, text) == FIVE
    assert datatrove_verdict(datatrove_filters(exact_config())[2:3], text) == (None, FIVE)


def test_citations_are_cut_from_kept_lines():
    text = FIVE.replace("year.", "year[1] [edit].", 1).replace("harbour.", "harbour [citation needed].")
    assert kept_text(B, text) == FIVE.replace("year.", "year .").replace("harbour.", "harbour .")
    assert kept_text(block("c4", remove_citations=False), text) == text


@pytest.mark.parametrize("expected,text", [
    (None, FIVE),
    (P + "min_num_sentences", "\n".join(SENTENCES[:4])),
    (None, " ".join(SENTENCES[:5])),  # five sentences on one line
    (P + "min_num_sentences", FIVE.replace(".", "", 1)),  # the first line is removed: 4 left
    (P + "lorem_ipsum", FIVE + "\nLorem ipsum dolor sit amet."),
    (None, FIVE + "\nLorem ipsum dolor sit amet"),  # on a removed line: the page stays
    (P + "curly_bracket", FIVE + "\nfunction f() { return 1; }."),
    (None, FIVE + "\nfunction f() { return 1; }"),  # on a removed line
])
def test_document_rules(expected, text):
    assert reason(B, text) == expected
    assert (datatrove_verdict(datatrove_filters(exact_config())[2:3], text)[0] is None) == (expected is None)


def test_min_num_sentences_detail_and_off():
    assert verdict(B, "\n".join(SENTENCES[:4])).detail == "sentences=4 < 5"
    assert reason(block("c4", min_num_sentences=None), "\n".join(SENTENCES[:4])) is None
    # Every line removed and the sentence rule off: nothing is left.
    assert reason(block("c4", min_num_sentences=None), "no punctuation here\nnor here") == "filter:empty"


def test_closing_quotes():
    quoted = "\n".join(f"\u201c{s}\u201d" for s in SENTENCES[:3]) + "\n" + "\n".join(
        f"({s})" for s in SENTENCES[3:6])
    assert kept_text(B, quoted) == quoted  # relaxed (default): closing marks after the full stop
    exact = exact_block("c4")
    assert reason(exact, quoted) == P + "min_num_sentences"  # datatrove's rule removes them all
    assert datatrove_verdict(datatrove_filters(exact_config())[2:3], quoted)[0] is not None
    straight = "\n".join(f'"{s}"' for s in SENTENCES[:6])
    assert kept_text(exact, straight) == kept_text(B, straight) == straight


def test_blank_lines_go_as_in_datatrove():
    text = "\n\n".join(SENTENCES[:6])
    assert kept_text(B, text) == "\n".join(SENTENCES[:6])
    assert datatrove_verdict(datatrove_filters(exact_config())[2:3], text) == (None, "\n".join(SENTENCES[:6]))


def test_switches_turn_rules_off():
    assert reason(block("c4", filter_lorem_ipsum=False), FIVE + "\nLorem ipsum dolor sit amet.") is None
    assert reason(block("c4", filter_curly_bracket=False), FIVE + "\nf() { return 1; }.") is None
    js = FIVE + "\nPlease enable JavaScript to view this page."
    assert kept_text(block("c4", filter_javascript=False), js) == js
    assert kept_text(block("c4", filter_no_terminal_punct=False), FIVE + "\nno end mark") == FIVE + "\nno end mark"
