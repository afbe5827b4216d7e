"""Project Gutenberg licence boilerplate: the header before a book's text and the footer after it.

Every Project Gutenberg file wraps the book in the project's own text: a header (title page
data, "This eBook is for the use of anyone anywhere...") that ends with a START marker, and a
footer (the full licence, several hundred lines) that begins at an END marker. Kept in a
corpus, the licence is the most repeated text of a book collection ("gutenberg" becomes one of
its frequent tokens) and teaches the model nothing about the books.

Markers (the variants met in the releases of the last three decades; case-insensitive, each at
the start of a line):

* header end: ``*** START OF THE PROJECT GUTENBERG EBOOK <TITLE> ***`` (also ``THIS``,
  ``***START OF ...***`` without spaces, ``ETEXT``, ``E-BOOK``, and a title that wraps onto the
  next line, whose closing ``***`` is then there); in the old releases, whose "small print"
  licence came first, ``*END*THE SMALL PRINT! ...``;
* footer start: ``*** END OF THE PROJECT GUTENBERG EBOOK ...`` and the line that usually
  precedes it, ``End of the Project Gutenberg EBook of <title>`` / ``End of Project
  Gutenberg's <title>`` (straight or curly apostrophe) / ``End of the Project Gutenberg Etext``.

Algorithm, per document: the header ends after the last header marker that comes before the
first footer marker (so an old file's small print, which follows its START-like banner, goes
too); the footer starts at the first footer marker after the header. The marker lines go with
the boilerplate. A document without a marker is left whole; with only one kind, only that part
goes. Nothing is lost: the cut text becomes a row of its own (reason ``ingest:boilerplate_header``
or ``ingest:boilerplate_footer``, id ``<document id>/header`` or ``/footer``), which the ingest
stage quarantines in ``rejected/`` and counts apart from the documents (``stats.ingest.boilerplate``).
The document keeps its id, so its split and everything keyed by it do not change.

The rule works on whatever ingest calls a document. The books profile, which switches it on
(``ingest.strip_boilerplate``), makes a whole file one document, so the header and footer are
the file's. Under ``blank_line`` the markers sit in documents of their own and only what precedes
or follows them in that document goes: use it with ``text_mode=file``.
"""
from __future__ import annotations

import re
from typing import Iterable, Iterator

from pipelines.ingest.splitters import Row

REASONS = ("ingest:boilerplate_header", "ingest:boilerplate_footer")
_LINE_START = r"(?:^|(?<=[\r\n]))[ \t\ufeff]*"  # lines end at \n, \r\n or a lone \r
_PG = r"PROJECT\s+GUTENBERG"
_BOOK = r"(?:E-?BOOK|E-?TEXT)"
_START = re.compile(_LINE_START + r"\*{3}\s*START\s+OF\s+(?:THE|THIS)\s+" + _PG + r"\s+" + _BOOK + r"([^\r\n]*)",
                    re.I)
_SMALL_PRINT_END = re.compile(_LINE_START + r"\*END\*?\s*THE\s+SMALL\s+PRINT![^\r\n]*", re.I)
_FOOTER = re.compile(_LINE_START + r"(?:\*{3}\s*END\s+OF\s+(?:THE|THIS)\s+" + _PG
                     + r"|END\s+OF\s+(?:THE\s+)?" + _PG + r"(?:['\u2019]S|\s+" + _BOOK + r"))", re.I)
_EOL = re.compile(r"\r\n|\r|\n")


def boilerplate_span(text: str) -> tuple[int, int]:
    """``(start, end)`` of the book inside ``text``: the header is ``text[:start]``, the footer
    ``text[end:]``; ``(0, len(text))`` when there is no marker."""
    footer = _FOOTER.search(text)
    limit = footer.start() if footer else len(text)
    start = 0
    for m in _START.finditer(text, 0, limit):
        start = max(start, _after_start(text, m))
    for m in _SMALL_PRINT_END.finditer(text, 0, limit):
        start = max(start, _line_end(text, m.end()))
    if footer is not None and footer.start() < start:  # a wrapped START title ran past it
        footer = _FOOTER.search(text, start)
    end = footer.start() if footer else len(text)
    return start, max(start, end)


def _line_end(text: str, pos: int) -> int:
    """Just past the line break that ends the line ``pos`` is on (the marker's break goes with it)."""
    eol = _EOL.search(text, pos)
    return eol.end() if eol else len(text)


def _after_start(text: str, m: re.Match) -> int:
    """The end of a START marker: its line, or, when its title wraps (no closing ``***`` on the
    line), the next line that closes it, within two lines."""
    end = _line_end(text, m.end())
    if "***" in m.group(1):
        return end
    for _ in range(2):
        nxt = _line_end(text, end)
        line = text[end:nxt]
        if "***" in line and len(line) < 200:
            return nxt
        end = nxt
    return _line_end(text, m.end())


def strip_rows(rows: Iterable[Row]) -> Iterator[Row]:
    """Kept documents without their boilerplate, each followed by the cut parts as rows of their
    own (reasons ``REASONS``); other rows pass unchanged."""
    for row in rows:
        if row.reason or not row.text:
            yield row
            continue
        start, end = boilerplate_span(row.text)
        if start == 0 and end == len(row.text):
            yield row
            continue
        yield row._replace(text=row.text[start:end])
        for part, reason, text in (("header", REASONS[0], row.text[:start]),
                                   ("footer", REASONS[1], row.text[end:])):
            if text:
                # No encoding: the ingest stage counts encodings over documents only.
                yield Row(f"{row.id}/{part}", text, reason, f"{len(text)} characters of Project Gutenberg "
                          f"{part}", row.url, "")
