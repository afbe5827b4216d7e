"""pipelines.ingest.boilerplate: Project Gutenberg's licence header and footer, cut and quarantined."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipelines.config import CorpusConfig
from pipelines.ingest import iter_rows
from pipelines.ingest.boilerplate import REASONS, boilerplate_span, strip_rows
from pipelines.ingest.splitters import Row

BOOKS = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "corpus" / "gutenberg"
BODY = "\n\nIt was a dark and stormy night.\nThe rain fell in torrents.\n"


def book(header_end: str, footer_start: str, eol: str = "\n") -> tuple[str, str, str]:
    """(text, header, footer) of a generated book with the given marker lines."""
    # The marker's own line break goes with the header; the blank lines after it stay.
    header = eol.join(["The Project Gutenberg EBook of A Test, by Nobody", "", "Title: A Test", "",
                       header_end.replace("\n", eol), ""])
    footer = eol.join([footer_start, "", "*** END OF THIS PROJECT GUTENBERG EBOOK A TEST ***", "",
                       "Updated editions will replace the previous one.", ""])
    body = BODY.replace("\n", eol)
    return header + body + footer, header, footer


@pytest.mark.parametrize("header_end", [
    "*** START OF THIS PROJECT GUTENBERG EBOOK A TEST ***",
    "*** START OF THE PROJECT GUTENBERG EBOOK A TEST ***",
    "***START OF THE PROJECT GUTENBERG EBOOK A TEST***",
    "*** START OF THIS PROJECT GUTENBERG EBOOK A TEST, BY\nA. N. AUTHOR ***",  # the title wraps
    "*** START OF THE PROJECT GUTENBERG ETEXT A TEST ***",
    "*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*",
])
@pytest.mark.parametrize("footer_start", [
    "End of the Project Gutenberg EBook of A Test, by Nobody",
    "End of Project Gutenberg's A Test, by Nobody",
    "End of Project Gutenberg\u2019s A Test, by Nobody",
    "End of the Project Gutenberg Etext of A Test",
    "*** END OF THE PROJECT GUTENBERG EBOOK A TEST ***",
])
def test_every_marker_variant_leaves_the_body_alone(header_end, footer_start):
    text, header, footer = book(header_end, footer_start)
    start, end = boilerplate_span(text)
    assert (text[:start], text[start:end], text[end:]) == (header, BODY, footer)


@pytest.mark.parametrize("eol", ["\r\n", "\r"])
def test_crlf_and_lone_cr_line_ends(eol):
    text, header, footer = book("*** START OF THIS PROJECT GUTENBERG EBOOK A TEST ***",
                                "End of the Project Gutenberg EBook of A Test", eol)
    start, end = boilerplate_span(text)
    assert (text[:start], text[end:]) == (header, footer)


def test_a_text_without_markers_or_with_one_kind_only():
    assert boilerplate_span(BODY) == (0, len(BODY))
    # "small print" and "project gutenberg" inside prose are not markers.
    prose = "I can read small print without spectacles.\nA Project Gutenberg volunteer typed it.\n"
    assert boilerplate_span(prose) == (0, len(prose))
    only_footer = BODY + "End of Project Gutenberg's A Test\nlicence\n"
    assert boilerplate_span(only_footer) == (0, len(BODY))
    only_header = "Title: X\n*** START OF THIS PROJECT GUTENBERG EBOOK X ***\n" + BODY
    assert boilerplate_span(only_header) == (len(only_header) - len(BODY), len(only_header))


def test_cut_parts_become_quarantine_rows_and_the_document_keeps_its_id():
    text, header, footer = book("*** START OF THIS PROJECT GUTENBERG EBOOK A TEST ***",
                                "End of the Project Gutenberg EBook of A Test")
    rows = list(strip_rows([Row("a.txt:0", text, encoding="utf-8"), Row("b.txt:0", "", "ingest:empty_file"),
                            Row("c.txt:0", BODY, encoding="utf-8")]))
    assert rows == [Row("a.txt:0", BODY, encoding="utf-8"),
                    Row("a.txt:0/header", header, REASONS[0], f"{len(header)} characters of Project Gutenberg header"),
                    Row("a.txt:0/footer", footer, REASONS[1], f"{len(footer)} characters of Project Gutenberg footer"),
                    Row("b.txt:0", "", "ingest:empty_file"), Row("c.txt:0", BODY, encoding="utf-8")]
    assert "".join(r.text for r in rows[:3]) != text and len(rows[0].text + header + footer) == len(text)


def test_only_the_books_profile_strips(tmp_path):
    text, header, footer = book("*** START OF THIS PROJECT GUTENBERG EBOOK A TEST ***",
                                "End of the Project Gutenberg EBook of A Test")
    path = tmp_path / "pg1.txt"
    path.write_text(text)
    books = CorpusConfig.from_dict({"profile": "books"}).ingest
    assert books.strip_boilerplate
    assert [(r.id, r.reason, r.text) for r in iter_rows(str(path), books, name="pg1.txt")] == [
        ("pg1.txt:0", "", BODY), ("pg1.txt:0/header", REASONS[0], header),
        ("pg1.txt:0/footer", REASONS[1], footer.removesuffix("\n"))]  # a file's last line break is not text
    for profile in ("web", "bert-format"):  # their documents are exactly as before
        cfg = CorpusConfig.from_dict({"profile": profile}).ingest
        assert not cfg.strip_boilerplate
        unstripped = [(r.id, r.text) for r in iter_rows(str(path), cfg, name="pg1.txt")]
        assert "".join(t for _, t in unstripped).lower().count("project gutenberg") == 4


def test_real_books_lose_their_licence_and_keep_their_text():
    if not BOOKS.is_dir():
        pytest.skip(f"{BOOKS} is absent (the 58 Project Gutenberg books of ../shared/data/corpus)")
    for name, first, last in (("pg2680.txt", "Produced by J. Boulton", "president of the Academy."),
                              ("pg1257.txt", "Produced by John P. Roberts III", "\u2015\u2015\u2015\u2015"),
                              ("pg110.txt", "E-text transcribed by Steve Menyhert", "went on.")):
        path = BOOKS / name
        if not path.exists():
            pytest.skip(f"{path} is absent")
        text = path.read_text(encoding="utf-8-sig")
        start, end = boilerplate_span(text)
        body = text[start:end]
        assert body.strip().startswith(first), (name, body[:200])
        assert body.strip().endswith(last), (name, body[-200:])
        assert not re.search(r"\*\*\* ?(START|END) OF TH", body), name
        assert "Project Gutenberg License" in text[end:] and "Project Gutenberg License" not in body
    # Every book of the folder has both markers, and none keeps the licence.
    for path in sorted(BOOKS.glob("*.txt")):
        text = path.read_text(encoding="utf-8-sig")
        start, end = boilerplate_span(text)
        assert 0 < start < end < len(text), path.name
        assert "Project Gutenberg-tm" not in text[start:end], path.name
