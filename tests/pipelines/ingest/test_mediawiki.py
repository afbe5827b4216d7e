"""MediaWiki dumps (Wikipedia ``pages-articles``): articles become their prose, everything else is
counted; ids are page ids; a multistream dump is split at its streams with the rows of a whole
read; a damaged stream costs only its pages; bad XML is one row, never fatal."""
from __future__ import annotations

import bz2
import dataclasses
import gzip
from collections import Counter

import pytest
import zstandard

from pipelines.ingest import plan_reads, read_documents, resolve_sources
from pipelines.ingest.documents import file_kind
from pipelines.ingest.mediawiki import Site
from pipelines.ingest.multistream import HEADER_READ, plan_ranges, stream_offsets
from pipelines.ingest.wikitext import to_text
from tests.pipelines.ingest._mediawiki import (ARTICLES, FOOTER, dump, english_pages, english_text, header, other_pages,
                                               page, write_multistream)
from tests.pipelines.ingest.test_ingest import CFG, kept, rows
from tests.pipelines.ingest.test_reads import SERVED  # also registers the ingest-counting:// filesystem

SKIPPED = ["ingest:mediawiki_redirect"] + ["ingest:mediawiki_namespace"] * 4 + ["ingest:empty_document"]


def as_tuples(batches) -> list[tuple]:
    return [(b["id"][i], b["text"][i], b["reason"][i]) for b in batches for i in range(len(b["id"]))]


def read_task(task, prefix: str = "") -> list[tuple]:
    return as_tuples(read_documents(prefix + task.path, CFG, start=task.start, end=None if task.end < 0 else task.end,
                                    name=task.name, size=task.size))


# ---------------------------------------------------------------------------------------------
# Articles → text
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("lang", sorted(ARTICLES))
def test_an_article_becomes_its_prose_and_other_pages_are_counted(tmp_path, lang):
    title, wikitext, expected = ARTICLES[lang]
    path = tmp_path / f"{lang}wiki-20240301-pages-articles.xml.bz2"
    path.write_bytes(bz2.compress(dump(lang, [page(10, title, wikitext)] + other_pages(lang, 20))))
    rs = rows(path, name=f"{lang}/dump")
    assert rs[0]["text"] == expected  # exactly: what stays, what goes
    assert [r["reason"] for r in rs] == [""] + SKIPPED
    assert [r["id"] for r in rs] == [f"{lang}/dump:page{n}" for n in (10, *range(20, 26))]
    assert rs[0]["url"].startswith(f"https://{lang}.wikipedia.org/wiki/") and rs[0]["encoding"] == "utf-8"
    assert [r["text"] for r in rs[1:6]] == [""] * 5  # skipped pages are counted, not kept
    assert rs[1]["detail"] == f"'{title} (Insel)' redirects to '{title}'"
    assert rs[3]["detail"].startswith("namespace 2 (")
    assert rs[6]["text"].startswith("{{Infobox island")  # the empty document's wikitext, for the quarantine


def rules(lang: str = "en"):
    return Site.parse(header(lang).encode()).rules


@pytest.mark.parametrize("wikitext,expected", [
    ("See [[:Category:Islands]] and [[Image:X.jpg|thumb|cap]][[Media:A.ogg|listen]].", "See Category:Islands and."),
    ("[[wikt:isle|Isle]] of [[Re:Zero]]; [[:de:Berlin|Berlin (German)]][[de:Berlin]][[zh-min-nan:X]]",
     "Isle of Re:Zero; Berlin (German)"),
    ("A &amp; B &#x41;&#66; &mdash; x&nbsp;y", "A & B AB — x y"),
    ("<poem>line one\nline two</poem>after", "line one\n\nline two\n\nafter"),
    ("a<br />b <div>block</div>text", "a b\n\nblock\n\ntext"),
    ("Hello __TOC__ world __NOTOC__ __KEIN_INHALTSVERZEICHNIS__ __目次__. Call __init__.",
     "Hello world. Call __init__."),
    ("-{H|zh-hans:计算机;zh-hant:電腦}-在-{zh-cn:信息; zh-tw:資訊}-时代", "在信息时代"),
    ("-{zh;zh-hans;zh-hant|文字}-和-{R|raw}-", "文字和raw"),
    ("== See also ==\n* [[X]]\n== Kultur ==\n=== Literatur ===\nDer Ort ist bekannt.",
     "Kultur\n\nLiteratur\n\nDer Ort ist bekannt."),
    ("== A ==\n== B ==\n=== B1 ===\ntext\n== C ==\n<!-- nothing -->", "B\n\nB1\n\ntext"),
    ("Before <!-- <ref>hidden</ref> --> after<ref group=n>note</ref>.", "Before after."),
    ("[[File:x.jpg|thumb|A [[nested|link]] caption]]<gallery>\nFile:a.jpg|cap\n</gallery>"
     "<syntaxhighlight lang=python>print(1)</syntaxhighlight><nowiki>[[not a link]]</nowiki>", "[[not a link]]"),
    ("''italic'' and '''bold''' and '''''both'''''", "italic and bold and both"),
    ("; Term\n: Definition\n* item\nparagraph line\nsame paragraph\n\nnext", "Term\n\nDefinition\n\nitem\n\n"
     "paragraph line same paragraph\n\nnext"),
    ("{{Infobox|a=1}}{{#if:x|y}}{{{arg}}}\n{|\n| cell\n|}\n<table><tr><td>html</td></tr></table>", ""),
    ("Link [http://a.example label text], [http://b.example] and http://c.example/x.", "Link label text, and http://c.example/x."),
])
def test_wikitext_constructs(wikitext, expected):
    assert to_text(wikitext, rules()) == expected


def test_localised_namespaces_come_from_the_siteinfo():
    text = "Text.[[Datei:A.jpg|mini|Bild]][[Kategorie:X]][[Bild:B.png]][[Category:Y]][[File:C.png]]"
    assert to_text(text, rules("de")) == "Text."
    assert to_text("[[Datei:A.jpg|mini|Bild]] text", rules("ja")) == "mini|Bild text"  # an ordinary link there
    assert to_text("[[ファイル:A.jpg|サムネイル]][[Файл:B.jpg]] text", rules("ja")) == "Файл:B.jpg text"


# ---------------------------------------------------------------------------------------------
# Detection and the same rows from every container
# ---------------------------------------------------------------------------------------------
def test_detection_by_name_and_by_content(tmp_path):
    for name, kind in (("enwiki-20240301-pages-articles.xml", "mediawiki"),
                       ("enwiki-20240301-pages-articles-multistream3.xml-p1p41242", "mediawiki"),
                       ("dewiki-20240301-pages-meta-current.xml", "mediawiki"), ("export.xml", "xml"),
                       ("notes.txt", "text"), ("pages-articles.txt", "text")):
        assert file_kind(name) == kind, name
    data = dump("en", [page(10, "Heligoland", ARTICLES["en"][1])])
    (tmp_path / "export.xml").write_bytes(b'<?xml version="1.0" encoding="utf-8"?>\n' + data)
    assert kept(rows(tmp_path / "export.xml")) == [ARTICLES["en"][2]]
    (tmp_path / "catalog.xml").write_bytes(b"<catalog>\n<book>One</book>\n\n<book>Two</book>\n</catalog>\n")
    assert kept(rows(tmp_path / "catalog.xml")) == ["<catalog>\n<book>One</book>", "<book>Two</book>\n</catalog>"]
    # Special:Export output: no siteinfo (canonical names), several revisions (the last is read).
    history = ("<mediawiki>\n<page><title>Island</title><ns>0</ns><id>7</id>"
               "<revision><id>1</id><text>Old text.</text></revision>"
               "<revision><id>2</id><text>New text with [[File:x.jpg]].</text></revision></page>\n</mediawiki>\n")
    (tmp_path / "x-pages-meta-history.xml.gz").write_bytes(gzip.compress(history.encode()))
    (row,) = rows(tmp_path / "x-pages-meta-history.xml.gz")
    assert (row["id"], row["text"], row["url"]) == (f"{tmp_path}/x-pages-meta-history.xml.gz:page7",
                                                    "Island\n\nNew text with.", "")
    (tmp_path / "enwiki-pages-articles.xml").write_bytes(b"not an export\n")
    (row,) = rows(tmp_path / "enwiki-pages-articles.xml")
    assert row["reason"] == "ingest:bad_mediawiki" and "no <mediawiki> export header" in row["detail"]


def test_every_container_gives_the_same_rows(tmp_path):
    pages = english_pages(40)
    data = dump("en", pages)
    blobs = {"xml": data, "xml.gz": gzip.compress(data), "xml.bz2": bz2.compress(data),
             "xml.zst": zstandard.ZstdCompressor().compress(data)}
    out = {}
    for suffix, blob in blobs.items():
        (tmp_path / f"enwiki-pages-articles.{suffix}").write_bytes(blob)
        out[suffix] = as_tuples(read_documents(str(tmp_path / f"enwiki-pages-articles.{suffix}"), CFG, name="d"))
    multi, _ = write_multistream(tmp_path, "enwiki", "en", pages, per_stream=7)
    out["multistream"] = as_tuples(read_documents(str(multi), CFG, name="d"))
    assert all(rows_ == out["xml"] for rows_ in out.values())
    articles = [i for i in range(40) if i % 4 != 3 and i % 7 != 5]
    assert [t for _, t, r in out["xml"] if r == ""] == [english_text(i) for i in articles]
    assert Counter(r for _, _, r in out["xml"]) == {"": len(articles), "ingest:mediawiki_redirect": 10,
                                                    "ingest:mediawiki_namespace": 40 - 10 - len(articles)}


# ---------------------------------------------------------------------------------------------
# Multistream: split at the index's streams
# ---------------------------------------------------------------------------------------------
def test_multistream_split_reads_each_stream_once_with_the_rows_of_a_whole_read(tmp_path):
    src = tmp_path / "wiki"
    src.mkdir()
    pages = english_pages(240)
    path, offsets = write_multistream(src, "enwiki-20240301", "en", pages, per_stream=10)
    index = src / "enwiki-20240301-pages-articles-multistream-index.txt.bz2"
    size = path.stat().st_size
    assert stream_offsets(str(index), index.stat().st_size) == offsets
    sources = resolve_sources([str(src)])
    whole = read_task(plan_reads(sources, CFG, split_bytes=None)[0])
    assert [i for i, _, r in whole if r == ""] == [f"wiki/{path.name}:page{p.id}" for p in pages
                                                   if "redirect" not in p.title and not p.title.startswith("Talk:")]
    split_bytes = size // 5
    tasks = plan_reads(sources, CFG, split_bytes=split_bytes)
    assert {t.path for t in tasks} == {str(path)}  # the index is the planner's, not a document file
    assert len(tasks) == 5 and tasks[0].start == 0 and tasks[-1].end == -1
    assert [t.start for t in tasks[1:]] == [t.end for t in tasks[:-1]] and {t.start for t in tasks[1:]} <= set(offsets)
    SERVED.clear()
    split = [row for t in tasks for row in read_task(t, "ingest-counting://")]
    assert split == whole
    # Every compressed byte once, plus the header stream's first ranged read per later task.
    assert SERVED == {str(path): size + (len(tasks) - 1) * HEADER_READ}
    assert plan_ranges(offsets, size, split_bytes) == [(t.start, t.end) for t in tasks]


def test_without_its_index_a_dump_is_one_task(tmp_path):
    src = tmp_path / "wiki"
    src.mkdir()
    path, offsets = write_multistream(src, "enwiki", "en", english_pages(60), per_stream=10)
    index = src / "enwiki-pages-articles-multistream-index.txt.bz2"
    assert len(plan_reads(resolve_sources([str(src)]), CFG, split_bytes=1000)) > 1
    assert len(plan_reads(resolve_sources([str(path)]), CFG, split_bytes=1000)) == 1  # not listed
    index.write_bytes(bz2.compress(b"5:1:A\n3:2:B\n"))  # not increasing: not this dump's
    assert [(t.start, t.end) for t in plan_reads(resolve_sources([str(src)]), CFG, split_bytes=1000)] == [(0, -1)]
    index.write_bytes(bz2.compress(b"".join(f"{o}:1:A\n".encode() for o in offsets))[:-20])  # damaged
    assert [(t.start, t.end) for t in plan_reads(resolve_sources([str(src)]), CFG, split_bytes=1000)] == [(0, -1)]


# ---------------------------------------------------------------------------------------------
# Damage
# ---------------------------------------------------------------------------------------------
def _damaged(tmp_path, stream: int):
    """A 12-stream dump with page stream ``stream`` (1-based; 0: the header) damaged."""
    src = tmp_path / "wiki"
    src.mkdir()
    pages = english_pages(120)
    path, offsets = write_multistream(src, "enwiki", "en", pages, per_stream=10)
    sources = resolve_sources([str(src)])
    reference = read_task(plan_reads(sources, CFG, split_bytes=None)[0])
    blob = bytearray(path.read_bytes())
    bounds = [0, *offsets, len(blob)]
    blob[(bounds[stream] + bounds[stream + 1]) // 2] ^= 0x55
    path.write_bytes(bytes(blob))
    return path, pages, offsets, resolve_sources([str(src)]), reference


@pytest.mark.parametrize("stream", [1, 6, 12])  # the first page stream (right after the header), the last
def test_a_damaged_stream_quarantines_only_its_pages(tmp_path, stream):
    path, pages, offsets, sources, reference = _damaged(tmp_path, stream=stream)
    lost = {f"wiki/{path.name}:page{p.id}" for p in pages[(stream - 1) * 10:stream * 10]}  # that stream's pages
    expected = [row for row in reference if row[0] not in lost]
    tasks = plan_reads(sources, CFG, split_bytes=path.stat().st_size // 4)
    assert len(tasks) == 4
    for out in ([row for t in tasks for row in read_task(t)], read_task(plan_reads(sources, CFG, split_bytes=None)[0])):
        assert [row for row in out if row[2] != "ingest:corrupt_compression"] == expected
        assert any(row[2] == "ingest:corrupt_compression" for row in out)


def test_a_damaged_header_stream(tmp_path):
    path, pages, offsets, sources, _ = _damaged(tmp_path, stream=0)
    tasks = plan_reads(sources, CFG, split_bytes=path.stat().st_size // 3)
    first, *later = [read_task(t) for t in tasks]
    assert [r for _, _, r in first] == ["ingest:corrupt_compression"]  # a whole read stops there too
    for task, out in zip(tasks[1:], later):  # no namespace names: the task's range is one row
        ((rid, _, reason),) = out
        assert rid == f"wiki/{path.name}:{task.start}+0" and reason == "ingest:corrupt_compression"
    assert [r for _, _, r in read_task(plan_reads(sources, CFG, split_bytes=None)[0])] == ["ingest:corrupt_compression"]


def test_bad_xml_is_one_row_and_reading_goes_on(tmp_path):
    good = [page(1, "Alpha", "Alpha is a letter."), page(2, "Beta", "Beta too."), page(3, "Gamma", "Gamma, third."),
            page(4, "Delta", "Delta " * 50), page(5, "Epsilon", "Fifth.")]
    broken = [good[0].xml,
              good[1].xml.replace("<title>Beta</title>", "<title>Beta & Co</title>"),  # unescaped "&"
              "  stray text between pages\n",
              good[2].xml.replace("  </page>\n", ""),  # cut off by the next <page>
              page(9, "Latin", "cafX").xml,  # its "X" becomes a Latin-1 byte below
              good[3].xml, good[4].xml.replace("<id>5</id>", "<id></id>"), good[0].xml[:200]]
    data = (header("en") + "".join(broken)).encode().replace(b"cafX</text>", b"caf\xe9</text>")
    path = tmp_path / "enwiki-pages-articles.xml"
    path.write_bytes(data)
    rs = rows(path, dataclasses.replace(CFG, max_document_bytes=len(good[3].xml) - 10), name="d")
    assert [(r["id"], r["reason"]) for r in rs] == [
        # the stray text's row: the offset where the bytes after the last page start (its line end)
        ("d:page1", ""), ("d:page2", "ingest:bad_mediawiki"), (f"d:{data.index(b'  stray') - 1}", "ingest:bad_mediawiki"),
        ("d:page3", "ingest:bad_mediawiki"), ("d:page9", "ingest:invalid_utf8"), ("d:page4", "ingest:oversize"),
        (f"d:{data.rindex(b'<page>', 0, data.rindex(b'<page>'))}", "ingest:bad_mediawiki"),
        ("d:page1", "ingest:bad_mediawiki")]
    assert rs[0]["text"] == "Alpha\n\nAlpha is a letter."
    assert "not well-formed" in rs[1]["detail"] and "stray text" in rs[2]["text"]
    assert "without </page> before the next <page>" in rs[3]["detail"]
    assert "no page id" in rs[6]["detail"] and "ends inside this page" in rs[7]["detail"]


# ---------------------------------------------------------------------------------------------
# Ray Data, end to end
# ---------------------------------------------------------------------------------------------
def test_ingest_dataset_splits_a_multistream_dump(tmp_path, ray_local):
    from pipelines.ingest import ingest_dataset

    src = tmp_path / "src"
    src.mkdir()
    pages = english_pages(100)
    path, _ = write_multistream(src, "enwiki-20240301", "en", pages, per_stream=8)
    de = src / "dewiki-20240301-pages-articles.xml.bz2"
    de.write_bytes(bz2.compress(dump("de", [page(10, "Helgoland", ARTICLES["de"][1])] + other_pages("de", 20))))
    (src / "notes.txt").write_text("A plain text document.\n")
    sources = resolve_sources([str(src)])
    whole = ingest_dataset(sources, CFG, split_bytes=None).take_all()
    split = ingest_dataset(sources, CFG, split_bytes=path.stat().st_size // 3).take_all()
    key = lambda r: (r["id"], r["text"], r["reason"])  # noqa: E731
    assert sorted(map(key, split)) == sorted(map(key, whole))
    ids = [r["id"] for r in whole]
    assert len(ids) == len(set(ids)) and not any("index" in i for i in ids)
    texts = {r["text"] for r in whole if r["reason"] == ""}
    assert {ARTICLES["de"][2], "A plain text document.", english_text(0)} <= texts
    assert Counter(r["reason"] for r in whole)["ingest:mediawiki_redirect"] == 25 + 1
    assert FOOTER.strip() not in "".join(texts)


@pytest.mark.parametrize("chunk", [1, 7, 64, 1000])
def test_reads_cut_anywhere_give_the_same_rows(tmp_path, monkeypatch, chunk):
    """Pages, tags and the closing tag cut by the read chunk, in every place."""
    import pipelines.ingest.mediawiki as mediawiki

    data = dump("en", english_pages(12)) + b"  \n"
    path = tmp_path / "enwiki-pages-articles.xml"
    path.write_bytes(data)
    reference = as_tuples(read_documents(str(path), CFG, name="d"))
    monkeypatch.setattr(mediawiki, "CHUNK", chunk)
    assert as_tuples(read_documents(str(path), CFG, name="d")) == reference
    small = dataclasses.replace(CFG, max_document_bytes=2000)  # the articles are larger: skipped while read
    assert [r for _, _, r in as_tuples(read_documents(str(path), small, name="d"))] == [
        "ingest:oversize" if r == "" else r for _, _, r in reference]
