"""synthetic.web_corpus: sizes, determinism, truth, filter keep rate, LSH on the planted copies.

Checked against independent code: the files are read back with ``zstandard`` and ``json``
alone, Jaccard similarity is recomputed with ``str.translate``/``split`` (not the generator's
regex), and the LSH check uses the pipeline's own MinHash and band keys.
"""
from __future__ import annotations

import json
import string
import tracemalloc
from collections import Counter
from itertools import combinations
from pathlib import Path

import pytest
import zstandard

from pipelines.config import CorpusConfig, DedupConfig
from pipelines.dedup.minhash import band_hashes, minhash_signatures
from pipelines.filters import build_blocks, normalize_text, run_blocks
from pipelines.filters.base import Doc
from synthetic import web_corpus as wc

BOOKS = Path("/work/shared/data/corpus/gutenberg")
_PUNCT = str.maketrans({c: " " for c in string.punctuation})


def _jaccard(a: str, b: str, n: int = 5) -> float:
    def grams(t):
        w = t.translate(_PUNCT).lower().split()
        return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)}
    x, y = grams(a), grams(b)
    return len(x & y) / len(x | y)


def _lines(path: Path) -> bytes:
    with open(path, "rb") as f:
        return zstandard.ZstdDecompressor().stream_reader(f).read()


@pytest.fixture(scope="module")
def books():
    if not BOOKS.is_dir():
        pytest.skip(f"{BOOKS} is absent (the shared Gutenberg books)")
    return BOOKS


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, books):
    out = tmp_path_factory.mktemp("web")
    summary = wc.write_web_corpus(out, 3_000_000, seed=3, books=books, file_bytes=1 << 20)
    return out, summary


def _by_id(out: Path) -> dict[str, dict]:
    return {r["id"]: r for r in wc.read_documents(out)}


def test_files_sizes_and_summary(corpus):
    out, summary = corpus
    files = sorted((out / "data").glob("*.jsonl.zst"))
    assert [f.name for f in files] == summary["files"] and len(files) == 3  # 3 MB / 1 MiB per file
    records, raw = [], 0
    for f in files:
        data = _lines(f)
        raw += len(data)
        records += [json.loads(line) for line in data.splitlines()]
    assert all(set(r) == {"id", "text"} for r in records)
    assert len({r["id"] for r in records}) == len(records)
    texts = [r["text"] for r in records]
    text_bytes = sum(len(t.encode()) for t in texts)
    assert summary["documents"] == len(texts) and summary["text_bytes"] == text_bytes and summary["jsonl_bytes"] == raw
    assert 3_000_000 <= text_bytes < 3_000_000 + 10_000  # stops at the first document past the size
    assert summary["compressed_bytes"] == sum(f.stat().st_size for f in files) < raw / 2
    assert json.loads((out / "summary.json").read_text()) == summary
    assert summary["source"] == "books" and summary["sentences"] > 100_000
    truth = {t["id"]: t["kind"] for t in wc.read_truth(out)}
    plain = [len(r["text"].encode()) for r in records if r["id"] not in truth]
    assert min(plain) >= 1000 and max(plain) <= 8000 + 1500  # 1-8 KB, plus the sentence that crosses
    planted = Counter(truth.values())
    assert summary["planted"] == {"plain": len(texts) - len(truth), **planted}
    n = len(texts)
    assert abs(planted["exact"] / n - 0.05) < 0.02 and abs(planted["near"] / n - 0.03) < 0.015
    assert abs(planted["boilerplate"] / n - 0.10) < 0.03


def test_deterministic_given_seed(tmp_path, books):
    a = wc.write_web_corpus(tmp_path / "a", 200_000, seed=5, books=books)
    b = wc.write_web_corpus(tmp_path / "b", 200_000, seed=5, books=books)
    c = wc.write_web_corpus(tmp_path / "c", 200_000, seed=6, books=books)
    for name in a["files"]:
        assert (tmp_path / "a/data" / name).read_bytes() == (tmp_path / "b/data" / name).read_bytes()
        assert _lines(tmp_path / "a/data" / name) != _lines(tmp_path / "c/data" / name)
    assert (tmp_path / "a/truth.jsonl").read_bytes() == (tmp_path / "b/truth.jsonl").read_bytes()
    timing = ("seconds", "mb_per_sec", "pool_seconds")
    assert {k: v for k, v in a.items() if k not in timing} == {k: v for k, v in b.items() if k not in timing}


def test_truth_offsets_and_copies(corpus):
    out, _ = corpus
    docs = _by_id(out)
    raw = {f.name: _lines(f) for f in (out / "data").glob("*.jsonl.zst")}

    def at(file: str, offset: int) -> dict:  # the JSON line that starts at this decompressed offset
        data = raw[file]
        assert offset == 0 or data[offset - 1:offset] == b"\n"
        return json.loads(data[offset:data.index(b"\n", offset)])

    truth = wc.read_truth(out)
    for t in truth:
        me = at(t["file"], t["offset"])
        assert me["id"] == t["id"]
        if t["kind"] == "boilerplate":
            header, footer = wc.site_boilerplate(t["site"])
            assert me["text"].startswith(header + "\n\n") and me["text"].endswith("\n\n" + footer)
            continue
        src = at(t["of_file"], t["of_offset"])
        assert src["id"] == t["of"] and t["of"] not in {x["id"] for x in truth if x["kind"] != "boilerplate"}
        assert src["id"] < me["id"]  # copies of earlier documents
        if t["kind"] == "exact":
            assert me["text"] == src["text"]
        else:
            sim = _jaccard(src["text"], me["text"])
            assert me["text"] != src["text"] and 0.8 <= sim < 1.0
            assert sim == pytest.approx(t["jaccard"], abs=0.02)
    assert len({t["of_file"] for t in truth if "of_file" in t} | {t["file"] for t in truth}) == 3


def _filtered(texts: list[str]) -> list[str | None]:
    cfg = CorpusConfig.from_dict({"profile": "web"}).filter
    blocks = build_blocks(cfg)
    out = []
    for text in texts:
        doc = Doc(normalize_text(text, cfg))
        out.append(doc.text if run_blocks(doc, blocks) is None else None)
    return out


def test_web_filters_keep_the_clean_documents(corpus):
    out, _ = corpus
    docs = wc.read_documents(out)
    kinds = {t["id"]: t["kind"] for t in wc.read_truth(out)}
    kept = Counter()
    for d, f in zip(docs, _filtered([d["text"] for d in docs])):
        kept[(kinds.get(d["id"], "plain"), f is not None)] += 1
    for kind in ("plain", "boilerplate"):
        assert kept[(kind, True)] / (kept[(kind, True)] + kept[(kind, False)]) >= 0.9, kept


def test_lsh_finds_near_copies_and_not_boilerplate(corpus):
    out, _ = corpus
    docs = _by_id(out)
    truth = wc.read_truth(out)
    near = [t for t in truth if t["kind"] == "near"]
    pages = [t for t in truth if t["kind"] == "boilerplate"]
    ids = [t["of"] for t in near] + [t["id"] for t in near] + [t["id"] for t in pages]
    texts = _filtered([docs[i]["text"] for i in ids])
    assert all(t is not None for t in texts)
    cfg = DedupConfig()
    bands = band_hashes(minhash_signatures(texts, cfg), cfg)
    k = len(near)
    assert all(texts[i] != texts[k + i] for i in range(k))  # still different after the filters
    found = sum(bool(set(bands[i]) & set(bands[k + i])) for i in range(k))
    assert found >= 0.9 * k
    # Pages of one site share ~170 words of boilerplate after C4, yet are not near duplicates.
    by_site: dict[int, list[int]] = {}
    for j, t in enumerate(pages):
        by_site.setdefault(t["site"], []).append(2 * k + j)
    pairs = linked = 0
    for rows in by_site.values():
        for a, b in combinations(rows, 2):
            pairs += 1
            linked += bool(set(bands[a]) & set(bands[b]))
            if pairs <= 200:
                assert _jaccard(texts[a], texts[b]) < 0.3
    assert pairs > 300 and linked <= 1
    for j, t in enumerate(pages[:20]):  # the shared text reaches near dedup: ~170 words of it
        header, footer = wc.site_boilerplate(t["site"])
        kept = [p for p in header.split("\n\n") + footer.split("\n\n") if p in texts[2 * k + j]]
        assert 120 <= sum(len(p.split()) for p in kept) <= 200


def test_streams_with_bounded_memory(tmp_path, books, monkeypatch):
    monkeypatch.setattr(wc, "RESERVOIR", 32)
    wc.sentence_pool(str(books))  # cached: not part of the measurement

    def peak(n: int) -> int:
        tracemalloc.start()
        wc.write_web_corpus(tmp_path / str(n), n, seed=0, books=books)
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return top

    small, large = peak(500_000), peak(2_000_000)
    assert large < 1.3 * small + (1 << 20), (small, large)


def test_without_books_uses_generated_prose(tmp_path):
    summary = wc.write_web_corpus(tmp_path, 300_000, seed=1, books=tmp_path / "absent")
    assert summary["source"] == "synthetic.prose" and summary["documents"] > 50
    docs = wc.read_documents(tmp_path)
    kept = [f is not None for f in _filtered([d["text"] for d in docs])]
    assert sum(kept) >= 0.9 * len(kept)


def test_sentences_are_sentence_like():
    para = ('"Yes," said he. CHAPTER IV. It was a dark and stormy night, and the rain fell in torrents. '
            'See note [12] below for the details of it. And so... it ended on that very day. '
            '"Go home!" Then the old man left the room without a word.')
    got = [s for s in wc.split_sentences(para) if wc.sentence_like(s)]
    assert got == ["It was a dark and stormy night, and the rain fell in torrents.",
                   "Then the old man left the room without a word."]
    assert wc.split_sentences('He said, "Go home." Then he left.') == ['He said, "Go home."', "Then he left."]


def test_seekable_frames_and_seek_table(tmp_path, books):
    plain = wc.write_web_corpus(tmp_path / "p", 2_500_000, seed=2, books=books, min_files=1)
    seek = wc.write_web_corpus(tmp_path / "s", 2_500_000, seed=2, books=books, min_files=1, seekable=True)
    assert plain["files"] == seek["files"] == ["part-00000.jsonl.zst"] and plain["planted"] == seek["planted"]
    blob = (tmp_path / "s/data/part-00000.jsonl.zst").read_bytes()
    # Read back by the format's definition (facebook/zstd contrib/seekable_format), not the writer.
    n, descriptor, magic = int.from_bytes(blob[-9:-5], "little"), blob[-5], int.from_bytes(blob[-4:], "little")
    assert magic == 0x8F92EAB1 and descriptor == 0 and n >= 2
    table_start = len(blob) - 9 - 8 * n - 8
    assert int.from_bytes(blob[table_start:table_start + 4], "little") == 0x184D2A5E
    assert int.from_bytes(blob[table_start + 4:table_start + 8], "little") == 8 * n + 9
    entries = blob[table_start + 8:len(blob) - 9]
    pos, pieces = 0, []
    for i in range(n):
        size, raw = int.from_bytes(entries[8 * i:8 * i + 4], "little"), int.from_bytes(entries[8 * i + 4:8 * i + 8], "little")
        piece = zstandard.ZstdDecompressor().decompress(blob[pos:pos + size])  # each frame on its own
        assert len(piece) == raw and (i == n - 1 or piece.endswith(b"\n"))
        pieces.append(piece)
        pos += size
    assert pos == table_start
    assert b"".join(pieces) == _lines(tmp_path / "p/data/part-00000.jsonl.zst")


def test_near_copies_of_pages_edit_the_article_only():
    w = wc.Writer(wc.sentence_pool(None), seed=9)
    for i in range(40):
        site = i % len(wc.SITES)
        page = w.boilerplate(site)
        header, footer = wc.site_boilerplate(site)
        head = page[:page.index("\n\n", len(header) + 2) + 2]  # header and title: lines C4 drops or keeps as is
        copy, sim = w.near_copy(page, site)
        assert copy.startswith(head) and copy.endswith("\n\n" + footer) and copy != page
        assert 0.8 <= sim < 1 and sim == pytest.approx(_jaccard(page, copy), abs=0.02)
        a, b = _filtered([page, copy])
        assert a is not None and b is not None and a != b
