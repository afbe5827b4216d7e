"""Is this plain text one long hard-wrapped text? A look at the sources before any stage runs.

``ingest.text_mode=blank_line`` (the ``web`` profile) makes every blank-line-separated block of a
plain-text file a document. That is right for a file of short documents, one per block, and
wrong for a book, a manual or a thesis exported as text: their blocks are paragraphs, a few dozen
words each, and the filters' length rules (Gopher's 50 words, C4's 3 sentences) drop nearly all
of them. Such text is recognisable before the build reads it, from its first bytes:

- its blocks span several lines (``MIN_WRAPPED`` of the blocks of two lines or more), and
- those lines were broken by a greedy wrap at a fixed width: ``width`` is the 95th percentile of
  the lines' widths in display columns (between ``MIN_WIDTH`` and ``MAX_WIDTH``: 70 is
  ``textwrap``'s default, 72-80 ``fmt``'s, ``man``'s and most editors'; a Chinese or Japanese
  character is two columns, as a terminal and the wrapping tools count it, so a Japanese manual
  wrapped at 38 characters is 76 columns), and every line but a block's last would have taken
  the next line's first break unit had it fit (a word; one character in a script written without
  spaces, which may break anywhere), with ``SLACK`` columns of leeway for indented or
  hand-wrapped text, in most of the block's lines;
- and the median block holds fewer words than the build's ``filter.gopher_quality.min_doc_words``
  (in a script written without spaces, told by its long space-separated tokens, its characters
  over ``CHARS_PER_WORD``: a Chinese word as jieba cuts it is one to two characters).

Such paragraphs hurt a build twice: where the language's length rules run they drop nearly all
of them, and where they do not (a language without calibrated thresholds) every paragraph is a
document too short to fill an example, since examples never span documents. The line says both.

Negatives, by construction: JSON Lines, Parquet and the other record formats are not looked at
(``file_kind`` is not ``text``); one sentence per line (bert-format) ends lines where sentences
end, at any length, so its 95th-percentile width is not a wrap width or its lines would have taken
the next word; web-like paragraphs are one long line each (no block spans lines); verse and lists
break lines far before ``MIN_WIDTH`` and are left alone (a poem's blocks are not a wrap: the books
profile may still suit a collection, but nothing here can tell). Blocks of one long text that are
already long enough (median at or above ``min_doc_words``) pass the filters as they are: no hint.

``wrapped_paragraphs_hint`` reads at most ``READ_BYTES`` from each of at most ``MAX_FILES`` plain,
uncompressed text files (``common.storage``, so ``s3://`` works), ``text_shape`` judges one such
sample. Both are pure of side effects; the CLI's pre-flight and the ingest stage print the line.
"""
from __future__ import annotations

import re
import statistics
import unicodedata
from dataclasses import dataclass
from typing import Any, Sequence

READ_BYTES = 256 << 10  # read from the start of each file
CHARS_PER_WORD = 1.5  # characters per word in scripts written without spaces (for the minimum)
WIDE = frozenset("WF")  # East Asian widths a terminal draws in two columns
# Characters per space-separated token of wide characters above which a text is in a script
# written without spaces (Chinese, Japanese: spaces only around Latin words and commands);
# Korean, wide but spaced, has about 3.
UNSPACED_TOKEN_CHARS = 10
MAX_FILES = 8  # files sampled
MIN_BLOCKS = 10  # fewer blocks in a sample say nothing
MIN_WIDTH, MAX_WIDTH = 50, 110  # wrap widths recognised (columns)
SLACK = 3  # columns of leeway in the greedy-wrap test
MIN_WRAPPED = 0.3  # share of the blocks that must be wrapped paragraphs of several lines
_BLANK = re.compile(r"\n[ \t\r\f\v]*\n")


@dataclass(frozen=True)
class TextShape:
    """What ``text_shape`` found in a sample: its blocks, the share wrapped, the wrap width (display
    columns) and the median words per block (estimated from characters in an unspaced script,
    ``spaced`` False, whose median is ``median_chars``)."""
    blocks: int
    wrapped_share: float
    width: int
    median_words: float
    spaced: bool = True
    median_chars: float = 0.0


def columns(text: str) -> int:
    """The display width of ``text``: two columns per wide (CJK) character, one otherwise."""
    return sum(2 if unicodedata.east_asian_width(ch) in WIDE else 1 for ch in text)


def _first_unit(line: str) -> int:
    """Columns of the break unit that starts ``line``: its first word, or one wide character."""
    head = line.lstrip()
    if head and unicodedata.east_asian_width(head[0]) in WIDE:
        return 2
    return columns(head.split()[0]) if head.split() else 0


def _blocks(sample: str, truncated: bool) -> list[list[str]]:
    blocks = [[line.rstrip() for line in b.split("\n") if line.strip()] for b in _BLANK.split(sample)]
    if truncated and len(blocks) > 1:
        blocks = blocks[:-1]  # cut by the read limit
    return [b for b in blocks if b]


def _wrapped(block: list[str], width: int) -> bool:
    """Most of the block's lines but its last would not have taken the next line's first word."""
    pairs = list(zip(block, block[1:]))
    full = sum(columns(line) + 1 + _first_unit(nxt) > width - SLACK for line, nxt in pairs)
    return full >= 0.75 * len(pairs)


def text_shape(sample: str, *, min_words: int, truncated: bool = False) -> TextShape | None:
    """The shape of ``sample`` (the start of a plain-text file; ``truncated``: it was cut, so its
    last block may be partial) when it is hard-wrapped paragraphs shorter than ``min_words``
    words (module docstring); None when it is anything else, or too short to tell."""
    blocks = _blocks(sample.replace("\r\n", "\n"), truncated)
    if len(blocks) < MIN_BLOCKS:
        return None
    multi = [b for b in blocks if len(b) >= 2]
    lengths = sorted(columns(line) for b in multi for line in b)
    if not lengths:
        return None
    width = lengths[min(len(lengths) - 1, int(0.95 * len(lengths)))]
    if not MIN_WIDTH <= width <= MAX_WIDTH:
        return None
    wrapped = sum(_wrapped(b, width) for b in multi) / len(blocks)
    wide = [t for b in blocks for line in b for t in line.split()
            if any(unicodedata.east_asian_width(ch) in WIDE for ch in t)]
    spaced = sum(map(len, wide)) <= UNSPACED_TOKEN_CHARS * max(1, len(wide))
    chars = statistics.median(sum(len("".join(line.split())) for line in b) for b in blocks)
    median = statistics.median(sum(len(line.split()) for line in b) for b in blocks) if spaced \
        else round(chars / CHARS_PER_WORD, 1)
    if wrapped < MIN_WRAPPED or median >= min_words:
        return None
    return TextShape(blocks=len(blocks), wrapped_share=round(wrapped, 3), width=width, median_words=median,
                     spaced=spaced, median_chars=chars)


def _min_words(cfg: Any) -> int:
    """The word count a document needs to pass this build's filters (Gopher's ``min_doc_words``;
    its default when the block is off, as C4's 3 sentences ask about as much)."""
    gq = cfg.filter.gopher_quality
    languages = cfg.filter.language.languages or []
    if len(languages) == 1:  # the one language's own threshold, when set
        over = cfg.filter.by_language.get(languages[0], {}).get("gopher_quality", {})
        return int(over.get("min_doc_words", gq.min_doc_words) or 0)
    return int(gq.min_doc_words or 0)


def wrapped_paragraphs_hint(files: Sequence[str], cfg: Any, *, names: Sequence[str] | None = None) -> str | None:
    """One line when the plain-text ``files`` (paths or URIs; ``names``: how to call them, default
    the file names) look like one long hard-wrapped text that ``cfg`` (a ``CorpusConfig``) would
    cut into paragraphs too short for its filters: the files, the median paragraph, the width and
    the profile that fits (``--profile books``). None when ``cfg.ingest.text_mode`` is not
    ``blank_line``, when no file is uncompressed plain text, or when the text is of another shape.
    Reads at most ``READ_BYTES`` of each of at most ``MAX_FILES`` such files."""
    from common import storage
    from pipelines.ingest.documents import file_kind
    from pipelines.ingest.text_stream import compression_of

    if cfg.ingest.text_mode != "blank_line":
        return None
    min_words = _min_words(cfg)
    if min_words <= 1:
        return None
    shown = list(names) if names is not None else [f.rstrip("/").rsplit("/", 1)[-1] for f in files]
    found: list[tuple[str, TextShape]] = []
    looked = 0
    for path, name in zip(files, shown):
        compression, base = compression_of(path)
        if compression is not None or file_kind(base) != "text":
            continue
        looked += 1
        if looked > MAX_FILES:
            break
        data = storage.read_range(path, 0, READ_BYTES + 1)
        sample = data[:READ_BYTES].decode("utf-8", errors="replace")
        shape = text_shape(sample, min_words=min_words, truncated=len(data) > READ_BYTES)
        if shape is not None:
            found.append((name, shape))
    if not found or len(found) < 0.5 * min(looked, MAX_FILES):
        return None
    spaced = sum(s.spaced for _, s in found) * 2 >= len(found)
    size = (f"{statistics.median(s.median_words for _, s in found):g} words" if spaced else
            f"{statistics.median(s.median_chars for _, s in found):g} characters")
    width = statistics.median(s.width for _, s in found)
    listed = ", ".join(n for n, _ in found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
    return (f"{listed}: hard-wrapped text (lines broken at about {width:g} columns) that ingest.text_mode=blank_line "
            f"cuts into paragraphs of a median {size}, each a document: shorter than the {min_words} words "
            f"filter.gopher_quality.min_doc_words asks for where the language's length rules run, and too short "
            f"to fill an example (examples never span documents); for long texts use --profile books (a whole "
            f"file is one document), or --set ingest.text_mode=file")
