"""What ingestion asks of storage: every byte of a compressed file read once, and never fewer bytes
than the listing promised.

Bytes are counted where the filesystem serves them: a filesystem registered with fsspec for the
test (a ``LocalFileSystem`` whose open files count what they return), so the count covers every
path into storage (streams, ranged reads) without touching our modules. A second one serves only
the first bytes of each file, as a store does whose GET disagrees with its listing.
"""
from __future__ import annotations

import bz2
import dataclasses
import gzip
import random
import tracemalloc
from collections import Counter

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from fsspec.implementations.local import LocalFileOpener, LocalFileSystem

from common import storage
from pipelines.ingest import integrity, plan_reads, read_documents, resolve_sources
from pipelines.ingest.spill import PendingRows
from pipelines.ingest.splitters import Row
from tests.pipelines.ingest.test_ingest import CFG, WORDS, jsonl_payload, kept, make_docs, rows, text_payload
from tests.pipelines.ingest.test_split_reads import every, seekable_zstd

SERVED: Counter = Counter()  # path -> bytes the counting filesystem returned


class _CountingFile(LocalFileOpener):
    def read(self, *args, **kwargs):
        data = super().read(*args, **kwargs)
        SERVED[self.path] += len(data)
        return data

    def read1(self, *args, **kwargs):
        data = self.f.read1(*args, **kwargs)
        SERVED[self.path] += len(data)
        return data

    def readinto(self, buffer):
        n = self.f.readinto(buffer)
        SERVED[self.path] += n or 0
        return n


class _Serving(LocalFileSystem):
    """A local filesystem under its own protocol, its files opened by ``opener``."""
    protocol = "ingest-counting"
    opener = _CountingFile

    @classmethod
    def _strip_protocol(cls, path):
        path = fsspec.utils.stringify_path(path)
        for proto in (cls.protocol,) if isinstance(cls.protocol, str) else cls.protocol:
            if path.startswith(f"{proto}://"):
                path = path[len(proto) + 3:]
        return super()._strip_protocol(path)

    def _open(self, path, mode="rb", block_size=None, **kwargs):
        return self.opener(self._strip_protocol(path), mode, fs=self, **kwargs)


class _ShortFile(LocalFileOpener):
    """Delivers at most ``SHORT`` bytes of the file, then end of data: a wrong Content-Length."""

    def read(self, n=-1):
        left = max(0, SHORT - self.f.tell())
        return self.f.read(left if n is None or n < 0 else min(n, left))

    read1 = read


class _Short(_Serving):
    protocol = "ingest-short"
    opener = _ShortFile


SHORT = 100
fsspec.register_implementation("ingest-counting", _Serving, clobber=True)
fsspec.register_implementation("ingest-short", _Short, clobber=True)


# ---------------------------------------------------------------------------------------------
# Every byte read once
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["gz", "bz2", "zst", "seekable.zst"])
def test_a_compressed_file_is_read_exactly_once(tmp_path, kind):
    docs = make_docs(3000, seed=51)
    payload = jsonl_payload(docs)[0]
    blob = {"gz": lambda: gzip.compress(payload[:90_000]) + gzip.compress(payload[90_000:]),
            "bz2": lambda: bz2.compress(payload, 1),
            "zst": lambda: zstandard.ZstdCompressor(write_checksum=True).compress(payload),
            "seekable.zst": lambda: seekable_zstd(payload, every(20_000, len(payload)))}[kind]()
    path = tmp_path / f"docs.jsonl.{kind.split('.')[-1]}"
    path.write_bytes(blob)
    SERVED.clear()
    out = rows(f"ingest-counting://{path}", name="docs")
    assert kept(out) == docs  # every document, checked
    assert SERVED == {str(path): len(blob)}  # each byte served once: no verify pass, no re-read


# ---------------------------------------------------------------------------------------------
# Reads held to the listed size
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["a.txt", "a.jsonl.gz", "a.txt.zst", "a.parquet"])
def test_a_file_cut_after_listing_is_a_storage_error(tmp_path, name):
    docs = make_docs(400, seed=52)
    path = tmp_path / "src" / name
    path.parent.mkdir()
    if name.endswith(".parquet"):
        pq.write_table(pa.table({"text": docs}), path, row_group_size=50)
    else:
        payload = (jsonl_payload if ".jsonl" in name else text_payload)(docs)[0]
        path.write_bytes({"txt": lambda b: b, "gz": gzip.compress,
                          "zst": lambda b: zstandard.ZstdCompressor().compress(b)}[name.rsplit(".", 1)[1]](payload))
    sources = resolve_sources([str(path.parent)])
    listed = path.stat().st_size
    assert sources.size(str(path)) == listed
    with open(path, "r+b") as f:  # truncated after it was listed (an interrupted upload replaced it)
        f.truncate(listed * 2 // 3)
    for task in plan_reads(sources, CFG, split_bytes=None):
        with pytest.raises(storage.StorageError) as info:
            list(read_documents(task.path, CFG, name=task.name, size=task.size))
        assert str(path) in str(info.value) and f"listed as {listed} bytes" in str(info.value)
        assert f"ended at byte {listed * 2 // 3} (" in str(info.value)


def test_a_range_the_file_no_longer_reaches_is_a_storage_error(tmp_path):
    path = tmp_path / "src" / "big.txt"
    path.parent.mkdir()
    path.write_bytes(text_payload(make_docs(2000, seed=53))[0])
    sources = resolve_sources([str(path.parent)])
    listed = path.stat().st_size
    tasks = plan_reads(sources, CFG, split_bytes=listed // 4 + 1)
    assert len(tasks) == 4
    with open(path, "r+b") as f:
        f.truncate(listed // 2)
    for task in tasks:  # the first two read on to the cut, the others start past it
        where = listed // 2 if task.start < listed // 2 else task.start - 1
        with pytest.raises(storage.StorageError, match=rf"^{path}: listed as {listed} bytes, but a read from byte "
                                                       rf"\d+ ended at byte {where} \(\d+ bytes read in all\)"):
            list(read_documents(task.path, CFG, start=task.start, end=None if task.end < 0 else task.end,
                                name=task.name, size=task.size))


@pytest.mark.parametrize("name", ["a.txt", "a.txt.gz", "a.jsonl.bz2"])
def test_a_store_that_serves_less_than_it_lists_is_an_error_not_an_empty_file(tmp_path, name):
    """The case of the issue: reads stop at a wrong Content-Length while the listing has the
    true size. Without the listing's size the file would look short (or empty), and say nothing."""
    payload = text_payload(make_docs(300, seed=54))[0]
    path = tmp_path / name
    path.write_bytes({"txt": lambda b: b, "gz": gzip.compress, "bz2": bz2.compress}[name.rsplit(".", 1)[1]](payload))
    listed = path.stat().st_size
    with pytest.raises(storage.StorageError, match=rf"listed as {listed} bytes, but a read from byte \d+ ended at "
                                                   rf"byte {SHORT} \({SHORT} bytes read in all\)"):
        rows_of(f"ingest-short://{path}", size=listed)
    unchecked = rows_of(f"ingest-short://{path}", size=None)  # what happened before: data silently lost
    assert len(kept(unchecked)) < 10


def rows_of(path, **kw):
    return [{k: b[k][i] for k in b} for b in read_documents(path, CFG, name="x", **kw) for i in range(len(b["id"]))]


# ---------------------------------------------------------------------------------------------
# Rows waiting for their member's check
# ---------------------------------------------------------------------------------------------
def test_pending_rows_come_back_in_order_from_memory_and_disk():
    rng = random.Random(55)
    queue = PendingRows(memory_bytes=2_000)
    reference: list[tuple[Row, int]] = []  # the same queue as a plain list
    end, out, expected = 0, [], []
    for step in range(3000):
        end += rng.randint(0, 50)
        row = Row(f"f:{end}", "t" * rng.randint(0, 300) + "\ud800" * (step % 97 == 0), "", f"d{step}", "", "utf-8")
        queue.add(row, end)
        reference.append((row, end))
        if rng.random() < 0.05:
            limit = end - rng.randint(0, 500)
            out += list(queue.take(limit))
            expected += [r for r in reference if r[1] <= limit]
            reference = [r for r in reference if r[1] > limit]
            assert len(queue) == len(reference)
    out += list(queue.take(None))
    expected += reference
    queue.close()
    assert out == expected and queue.spilled > 2000 and queue.peak_memory < 2_000 + 1_000


def test_a_single_member_gzip_does_not_hold_its_documents_in_memory(tmp_path, monkeypatch):
    """One member: no row can be released before the last byte, so they wait on disk, not in memory."""
    rng = random.Random(56)
    docs = [" ".join(rng.choice(WORDS) for _ in range(3000)) for _ in range(600)]  # ~20 KB lines
    payload = "".join(d + "\n" for d in docs).encode()
    path = tmp_path / "one.txt.gz"
    path.write_bytes(gzip.compress(payload, 1))
    assert len(payload) > 10 << 20
    monkeypatch.setattr(integrity, "PENDING_BYTES", 256 << 10)
    cfg = dataclasses.replace(CFG, text_mode="line", batch_size=10)
    tracemalloc.start()
    seen, offset = 0, 0
    for batch in read_documents(str(path), cfg, name="one"):
        for rid, text, reason in zip(batch["id"], batch["text"], batch["reason"]):
            assert (rid, text, reason) == (f"one:{offset}", docs[seen], "")
            offset += len(text) + 1
            seen += 1
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert seen == len(docs)
    assert peak < 6 << 20  # the 10 MB of documents never sat in memory at once


def test_a_document_across_a_member_boundary_waits_for_both_members(tmp_path):
    """Members cut in the middle of documents, the third one damaged: exactly the documents that
    end before the damaged member starts are kept, whatever the cut."""
    docs = make_docs(1500, seed=57)
    payload, offsets = text_payload(docs)
    cuts = [20_011, 40_007, 60_013, len(payload)]
    members = [payload[a:b] for a, b in zip([0, *cuts], cuts)]
    blobs = [gzip.compress(m) for m in members]
    broken = bytearray(blobs[2])
    broken[len(broken) // 2] ^= 0xFF
    path = tmp_path / "cut.txt.gz"
    path.write_bytes(blobs[0] + blobs[1] + bytes(broken) + blobs[3])
    out = rows(path)
    ends = [o + len(d.encode()) for o, d in zip(offsets, docs)]  # where each document's text ends
    expected = [d for d, e in zip(docs, ends) if e <= cuts[1]]
    assert kept(out) == expected
    assert {r["reason"] for r in out if r["text"] not in expected} == {"ingest:corrupt_compression"}
    straddling = next(r for r in out if r["reason"])
    assert int(straddling["id"].rsplit(":", 1)[1]) < cuts[1]  # begins in a good member, ends in a bad one
    assert "gzip member 3 failed its check" in straddling["detail"]
