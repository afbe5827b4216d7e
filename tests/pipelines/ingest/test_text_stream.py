"""Streaming input: line splitting at chunk boundaries, storage vs data errors, byte ranges."""
from __future__ import annotations

import bz2
import dataclasses
import gzip
import io
import json
import os
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from pipelines.ingest import ReadTask, Sources, plan_reads, read_documents, resolve_sources
from pipelines.ingest.text_stream import CORRUPT_ERRORS, LineReader, StorageError, decompressed
from tests.pipelines.ingest.test_ingest import CFG, COMPRESS, make_docs, text_payload


# ---------------------------------------------------------------------------------------------
# Byte ranges: a partition of a file yields every document exactly once, with whole-file ids
# ---------------------------------------------------------------------------------------------
def tricky_text() -> bytes:
    docs = make_docs(12, seed=21)
    return (b"\n\n" + docs[0].encode() + b"\n\n\n" + docs[1].encode() + b"\r\n\r\n" + docs[2].encode()
            + b"\n  \n\t\n" + b"bad caf\xc3\xa9 \xff utf8 doc\nsecond line\n\n" + ("long line " * 30).encode()
            + b"\n\nold mac one\rold mac two\r\rold mac three\r \rmixed\r\nends\n\r\n"
            + b"\n\n" + "\n\n".join(docs[3:]).encode() + b"\n \nlast without newline")


def tricky_jsonl() -> bytes:
    lines = [json.dumps({"text": d}).encode() for d in make_docs(12, seed=22)]
    lines[3] = b"{broken"
    lines[5] = json.dumps({"text": "y" * 300}).encode()
    return b"\n".join(lines[:6]) + b"\n\n" + b"\n".join(lines[6:])


def range_rows(path, cfg, size: int) -> list[tuple]:
    total = path.stat().st_size
    out = []
    for lo in range(0, total, size):
        end = lo + size if lo + size < total else None
        out += [(r["id"], r["text"], r["reason"]) for r in rows_of(path, cfg, start=lo, end=end)]
    return out


def rows_of(path, cfg, **kw):
    return [{k: b[k][i] for k in b} for b in read_documents(str(path), cfg, **kw) for i in range(len(b["id"]))]


@pytest.mark.parametrize("name,mode", [("t.txt", "blank_line"), ("t.txt", "line"), ("t.jsonl", "blank_line")])
def test_byte_ranges_partition_the_documents(tmp_path, name, mode):
    path = tmp_path / name
    path.write_bytes(tricky_jsonl() if name.endswith(".jsonl") else tricky_text())
    cfg = dataclasses.replace(CFG, text_mode=mode, max_document_bytes=200)
    whole = [(r["id"], r["text"], r["reason"]) for r in rows_of(path, cfg)]
    assert {r[2] for r in whole} >= {"", "ingest:oversize"} and len(whole) > 10
    assert {r[2] for r in whole} & {"ingest:invalid_utf8", "ingest:bad_json"}
    for size in (1, 2, 5, 16, 61, 200, 10_000):
        assert range_rows(path, cfg, size) == whole, size


def test_byte_ranges_after_a_whitespace_line_longer_than_a_document(tmp_path):
    """A whitespace-only line over max_document_bytes is oversize, not blank, for the splitter:
    a range entering after it must see it the same way."""
    path = tmp_path / "w.txt"
    path.write_bytes(b"first doc\n\n" + b" \t" * 150 + b"\nright after it\nmore\n\nlast doc\n")
    cfg = dataclasses.replace(CFG, max_document_bytes=200)
    whole = [(r["id"], r["text"], r["reason"]) for r in rows_of(path, cfg)]
    assert [r[2] for r in whole] == ["", "ingest:oversize", ""]
    for size in (1, 7, 16, 100, 299, 320):
        assert range_rows(path, cfg, size) == whole, size


def test_byte_range_details_say_where_line_numbers_start(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes(b"good doc one\n\nsecond\nbad \xff\n")
    (row,) = rows_of(path, dataclasses.replace(CFG, detect_charset=False), start=5)
    assert row["reason"] == "ingest:invalid_utf8"
    assert row["detail"] == "line 3 after byte 13: invalid start byte at byte 25"  # entered at byte 13
    with pytest.raises(ValueError, match="byte ranges"):
        rows_of(path, dataclasses.replace(CFG, text_mode="file"), start=5)


def test_plan_reads_splits_large_files_whose_format_allows_it(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "big.txt").write_bytes(b"x\n" * 500)
    (src / "big.jsonl").write_bytes(b'{"text": "x"}\n' * 100)
    (src / "big.txt.gz").write_bytes(gzip.compress(b"x\n" * 5000, 0))
    (src / "big.txt.bz2").write_bytes(bz2.compress(random.Random(1).randbytes(2000)))
    (src / "big.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(random.Random(2).randbytes(1000)))
    pq.write_table(pa.table({"text": [f"row {i}" for i in range(200)]}), src / "big.parquet", row_group_size=20)
    (src / "small.txt").write_bytes(b"x\n")
    sources = resolve_sources([str(src)])
    names = ["big.jsonl", "big.jsonl.zst", "big.parquet", "big.txt", "big.txt.bz2", "big.txt.gz", "small.txt"]
    paths = [str(src / n) for n in names]
    sizes = [os.path.getsize(p) for p in paths]
    assert list(sources.files) == paths and list(sources.sizes) == sizes
    tasks = plan_reads(sources, CFG, split_bytes=400)
    assert [t for t in tasks if t.path == paths[3]] == [
        ReadTask(paths[3], "src/big.txt", 0, 400, 1000), ReadTask(paths[3], "src/big.txt", 400, 800, 1000),
        ReadTask(paths[3], "src/big.txt", 800, -1, 1000)]
    for i in (0, 1, 2):  # uncompressed JSONL, zstd (by frame, when it has a seek table), Parquet
        assert sizes[i] > 400
        assert [(t.start, t.end, t.size) for t in tasks if t.path == paths[i]] == [
            (lo, lo + 400 if lo + 400 < sizes[i] else -1, sizes[i]) for lo in range(0, sizes[i], 400)]
    assert sizes[4] > 400 and sizes[5] > 400  # gzip and bz2: one task each, however large
    assert [t for t in tasks if t.path in paths[4:]] == [
        ReadTask(p, "src/" + n, 0, -1, size) for p, n, size in zip(paths[4:], names[4:], sizes[4:])]
    whole_files = plan_reads(sources, dataclasses.replace(CFG, text_mode="file"), split_bytes=400)
    assert [t for t in whole_files if t.path == paths[3]] == [ReadTask(paths[3], "src/big.txt", 0, -1, 1000)]
    assert plan_reads(sources, CFG, split_bytes=None) == [
        ReadTask(p, "src/" + n, 0, -1, size) for p, n, size in zip(paths, names, sizes)]


def test_plan_reads_asks_the_store_nothing(tmp_path):
    """Planning uses the listing's sizes only: it works for files that are not there at all."""
    gone = [str(tmp_path / "gone" / n) for n in ("a.jsonl", "b.parquet", "c.txt.zst", "d.txt.gz")]
    sources = Sources(tuple(gone), tuple(f"gone/{n}" for n in ("a.jsonl", "b.parquet", "c.txt.zst", "d.txt.gz")),
                      "fp", (1000, 1000, 1000, 1000))
    tasks = plan_reads(sources, CFG, split_bytes=300)
    assert [(t.name, t.start, t.end, t.size) for t in tasks] == [
        (name, lo, hi, 1000) for name in ("gone/a.jsonl", "gone/b.parquet", "gone/c.txt.zst")
        for lo, hi in ((0, 300), (300, 600), (600, 900), (900, -1))] + [("gone/d.txt.gz", 0, -1, 1000)]
    # A listing without sizes (Sources built by hand): one task per file, reads not checked.
    assert plan_reads(Sources(tuple(gone), tuple(gone), "fp"), CFG, split_bytes=300) == [
        ReadTask(p, p, 0, -1, -1) for p in gone]


# ---------------------------------------------------------------------------------------------
# Line reader boundaries
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("chunk", [1, 3, 7, 64])
def test_line_reader_chunk_boundaries(chunk):
    data = b"a\nbb\n\nccccccccccccccccccc\nd\n" + b"e" * 40 + b"\nlast-no-newline"
    lines = list(LineReader(io.BytesIO(data), max_line=20, chunk=chunk))
    expected, pos = [], 0
    for part in data.split(b"\n"):
        n = len(part) + (1 if pos + len(part) < len(data) else 0)
        expected.append((pos, n, n > 20))
        pos += n
    assert [(ln.offset, ln.length, ln.oversize) for ln in lines] == expected
    assert b"".join(ln.data for ln in lines if not ln.oversize) == b"".join(
        data[o:o + n] for o, n, big in expected if not big)


class _FlakyStorage(io.BytesIO):
    """A file whose storage fails after ``good`` bytes (a disk or network error, not bad data)."""

    def __init__(self, data: bytes, good: int):
        super().__init__(data)
        self.good = good

    def read(self, n=-1):
        if self.tell() >= self.good:
            raise ConnectionResetError("peer went away")
        return super().read(n if n is not None and 0 <= n <= self.good - self.tell() else self.good - self.tell())


@pytest.mark.parametrize("compression", ["gzip", "bz2", "zstd"])
def test_storage_errors_are_not_mistaken_for_corrupt_data(compression):
    payload = text_payload(make_docs(3000, seed=4))[0]
    blob = {"gzip": gzip.compress, "bz2": lambda b: bz2.compress(b, 1),
            "zstd": COMPRESS["zst"]}[compression](payload)
    stream = decompressed(_FlakyStorage(blob, len(blob) // 2), compression)
    with pytest.raises(StorageError, match="peer went away"):
        for _ in LineReader(stream, max_line=1 << 20):
            pass
    truncated = decompressed(io.BytesIO(blob[: len(blob) // 2]), compression)
    with pytest.raises(CORRUPT_ERRORS) as info:  # the same cut as data damage is a corrupt stream
        for _ in LineReader(truncated, max_line=1 << 20):
            pass
    assert not isinstance(info.value, StorageError)


def test_range_entry_points_with_every_kind_of_line_end():
    from pipelines.ingest.text_stream import first_line_start, previous_line_blank

    data = b"one\r\ntwo\rthree\n\r\n  \r\rfour\n\n\r\t\r\nfive\r"
    lines = data.splitlines(keepends=True)  # Python's universal newlines: the reference
    starts = [sum(map(len, lines[:i])) for i in range(len(lines) + 1)]
    raw = io.BytesIO(data)
    for block in (1, 2, 3, 64):
        for start in range(len(data) + 1):
            assert first_line_start(raw, start, block=block) == min(s for s in starts if s >= start), (block, start)
        for i, s in enumerate(starts[:-1]):
            assert previous_line_blank(raw, s, block=block) == (i == 0 or not lines[i - 1].strip()), (block, s)
