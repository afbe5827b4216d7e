"""pipelines.ingest.shape: one long hard-wrapped text is recognised before the build cuts it into
paragraphs its filters drop; records, sentence-per-line text, verse and web paragraphs are not."""
from __future__ import annotations

import json
import textwrap
import unicodedata

import pytest

from pipelines.config import CorpusConfig
from pipelines.ingest.shape import READ_BYTES, text_shape, wrapped_paragraphs_hint
from tests.pipelines._languages import documents

SPACED = ("es", "de", "fr", "pt", "ko")


def paragraphs(lang: str, words: int = 25) -> list[str]:
    """The language's real documents cut into paragraphs of about ``words`` words."""
    out = []
    for doc in documents(lang):
        tokens = doc.split()
        out += [" ".join(tokens[i:i + words]) for i in range(0, len(tokens), words)]
    return [p for p in out if len(p.split()) > 3]


def columns(text: str) -> int:
    """Display columns, as a terminal counts them (wcwidth's rule for these scripts)."""
    return sum(2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1 for ch in text)


def wrap_columns(text: str, width: int) -> str:
    """A greedy wrap at ``width`` display columns (Hangul two each), as w3m and lynx wrap the text
    dumps of Debian's manuals; ``textwrap`` counts characters."""
    lines, line = [], ""
    for word in text.split():
        if line and columns(line) + 1 + columns(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return "\n".join(lines + [line])


def hard_wrapped(lang: str, width: int = 72, words: int = 25) -> str:
    return "\n\n".join(wrap_columns(p, width) for p in paragraphs(lang, words)) + "\n"


@pytest.mark.parametrize("lang", SPACED)
@pytest.mark.parametrize("width", [60, 72, 79])
def test_hard_wrapped_paragraphs_of_every_language_are_recognised(lang, width):
    shape = text_shape(hard_wrapped(lang, width), min_words=50)
    assert shape is not None and shape.median_words < 50
    assert width - 8 <= shape.width <= width and shape.wrapped_share > 0.5


def unspaced_wrapped(lang: str, chars: int = 60, width: int = 36) -> str:
    """The language's real documents (no spaces) cut into paragraphs of ``chars`` characters and
    wrapped at ``width`` characters: 2 * ``width`` display columns."""
    out = []
    for doc in documents(lang):
        text = "".join(doc.split())
        out += [text[i:i + chars] for i in range(0, len(text) - chars // 2, chars)]
    return "\n\n".join("\n".join(p[i:i + width] for i in range(0, len(p), width)) for p in out) + "\n"


@pytest.mark.parametrize("lang", ["zh-cn", "zh-tw"])
def test_hard_wrapped_text_without_spaces_is_measured_in_columns_and_characters(lang, tmp_path):
    """A Chinese manual wrapped at 36 characters is 72 columns wide, as a terminal shows it; its
    paragraphs are counted in characters (their words estimated from them for the minimum)."""
    text = unspaced_wrapped(lang)
    shape = text_shape(text, min_words=50)
    assert shape is not None and not shape.spaced
    assert 66 <= shape.width <= 72 and shape.median_chars == 60 and shape.median_words == 40
    assert text_shape(text, min_words=30) is None  # 60 characters: about 40 words, enough for 30
    (tmp_path / "guide.txt").write_text(text, encoding="utf-8")
    line = wrapped_paragraphs_hint([str(tmp_path / "guide.txt")], CorpusConfig.from_dict({"language": ["zh"]}))
    assert line is not None and "paragraphs of a median 60 characters, each a document" in line


def test_indented_wrapped_text_with_headings_and_short_lines_is_recognised():
    parts = []
    for i, p in enumerate(paragraphs("es")):
        parts.append(f"{i}.{i % 3}. Sección {i}" if i % 4 == 0 else
                     textwrap.fill(p, width=72, initial_indent="    ", subsequent_indent="    "))
    assert text_shape("\n\n".join(parts), min_words=50) is not None


def test_long_paragraphs_pass_the_filters_as_they_are():
    """Blocks already above the word minimum are documents the filters keep: nothing to say."""
    text = hard_wrapped("de", words=150)
    assert text_shape(text, min_words=50) is None
    assert text_shape(text, min_words=400) is not None  # the build's own minimum decides


def test_other_shapes_are_left_alone():
    sentences = [s.strip() + "." for d in documents("fr") for s in d.split(".") if len(s.split()) > 3]
    # bert-format: one sentence per line, blocks of a few sentences
    bert = "\n\n".join("\n".join(sentences[i:i + 4]) for i in range(0, len(sentences), 4))
    assert text_shape(bert, min_words=50) is None
    # web-like paragraphs: one long line each
    web = "\n\n".join(paragraphs("pt", 60))
    assert text_shape(web, min_words=50) is None
    # verse: stanzas of short lines (broken far before any wrap width)
    verse = "\n\n".join(textwrap.fill(p, width=32) for p in paragraphs("es", 20))
    assert text_shape(verse, min_words=50) is None
    # JSON Lines put in a .txt: each record is one long line
    records = "\n".join(json.dumps({"text": p}, ensure_ascii=False) for p in paragraphs("de"))
    assert text_shape(records, min_words=50) is None
    assert text_shape(hard_wrapped("es")[:500], min_words=50) is None  # too few blocks to tell


def test_the_hint_names_the_files_the_median_and_the_profile(tmp_path):
    (tmp_path / "guide.txt").write_text(hard_wrapped("es") * 40)  # past the read limit
    assert (tmp_path / "guide.txt").stat().st_size > READ_BYTES
    (tmp_path / "records.jsonl").write_text(hard_wrapped("de"))  # not plain text: never read
    files = [str(tmp_path / "guide.txt"), str(tmp_path / "records.jsonl")]
    line = wrapped_paragraphs_hint(files, CorpusConfig.from_dict({"language": ["es"]}))
    assert line.startswith("guide.txt: hard-wrapped text (lines broken at about ")
    assert ("ingest.text_mode=blank_line cuts into paragraphs of a median 25 words, each a document: shorter than "
            "the 50 words filter.gopher_quality.min_doc_words asks for") in line
    assert line.endswith("use --profile books (a whole file is one document), or --set ingest.text_mode=file")
    named = wrapped_paragraphs_hint(files, CorpusConfig(), names=["raw/guide.txt", "raw/records.jsonl"])
    assert named.startswith("raw/guide.txt: ")
    # Nothing to say: whole files are documents already; a lower minimum; only records.
    assert wrapped_paragraphs_hint(files, CorpusConfig.from_dict({"profile": "books"})) is None
    assert wrapped_paragraphs_hint(files, CorpusConfig.from_dict({"ingest": {"text_mode": "file"}})) is None
    low = {"language": ["es"], "filter": {"by_language": {"es": {"gopher_quality": {"min_doc_words": 10}}}}}
    assert wrapped_paragraphs_hint(files, CorpusConfig.from_dict(low)) is None
    assert wrapped_paragraphs_hint(files[1:], CorpusConfig()) is None


def test_the_hint_reads_through_the_store(s3_server, tmp_path):
    """An s3:// source is sampled with a ranged read, as a local one."""
    from common import storage

    uri = f"{s3_server.bucket('shape')}/guide.txt"
    storage.write_text(uri, hard_wrapped("fr"))
    line = wrapped_paragraphs_hint([uri], CorpusConfig.from_dict({"language": ["fr"]}))
    assert line is not None and line.startswith("guide.txt: hard-wrapped text")
