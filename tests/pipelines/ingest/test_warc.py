"""WARC/WET records: text payloads become documents with their target URI, the rest is counted."""
from __future__ import annotations

import dataclasses
import gzip

from tests.pipelines.ingest.test_ingest import CFG, kept, offset, rows


def record(kind: str, block: bytes, *, uri: str | None = None, ctype: str | None = None,
           version: str = "1.0") -> bytes:
    head = [f"WARC/{version}", f"WARC-Type: {kind}", "WARC-Date: 2024-01-01T00:00:00Z",
            "WARC-Record-ID: <urn:uuid:00000000-0000-0000-0000-000000000000>"]
    if uri is not None:
        head.append(f"WARC-Target-URI: {uri}")
    if ctype is not None:
        head.append(f"Content-Type: {ctype}")
    head.append(f"Content-Length: {len(block)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + block + b"\r\n\r\n"


def http(body: bytes, ctype: str, extra: str = "") -> bytes:
    return (f"HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\n{extra}Content-Length: {len(body)}\r\n\r\n").encode() + body


WET_TEXT = ["First page text.\nSecond line of it.", "Zweite Seite: Gr\u00fc\u00dfe aus K\u00f6ln."]


def wet_records() -> list[bytes]:
    return [record("warcinfo", b"software: test\r\nformat: WARC File Format 1.0\r\n", ctype="application/warc-fields"),
            record("conversion", WET_TEXT[0].encode(), uri="http://a.example/one", ctype="text/plain"),
            record("conversion", WET_TEXT[1].encode(), uri="http://b.example/zwei", ctype="text/plain",
                   version="1.1")]


def test_wet_file_plain_and_gzipped_per_record(tmp_path):
    recs = wet_records()
    starts = [sum(map(len, recs[:i])) for i in range(len(recs))]
    for name, blob in (("c.warc.wet", b"".join(recs)), ("c.wet.gz", b"".join(gzip.compress(r) for r in recs))):
        path = tmp_path / name
        path.write_bytes(blob)
        rs = rows(path)
        assert [offset(r) for r in rs] == starts  # ids: name:offset of the record
        assert [r["reason"] for r in rs] == ["ingest:warc_skipped", "", ""]
        assert kept(rs) == WET_TEXT
        assert [r["url"] for r in rs] == ["", "http://a.example/one", "http://b.example/zwei"]
        assert rs[0]["detail"] == "WARC-Type warcinfo"


def test_warc_response_resource_and_skipped_records(tmp_path):
    page = "Caf\u00e9 text served as plain text.".encode("cp1252")
    recs = [record("request", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", uri="http://x/", ctype="application/http; msgtype=request"),
            record("response", http(page, "text/plain; charset=windows-1252"), uri="http://x/",
                   ctype="application/http; msgtype=response"),
            record("metadata", b"fetchTimeMs: 12\r\n", uri="http://x/", ctype="application/warc-fields"),
            record("response", http(b"<html><body>hi</body></html>", "text/html"), uri="http://y/",
                   ctype="application/http; msgtype=response"),
            record("response", http(b"\x1f\x8b...", "text/plain", "Content-Encoding: gzip\r\n"), uri="http://z/",
                   ctype="application/http; msgtype=response"),
            record("resource", b"A resource record holding text.", uri="file:///r.txt", ctype="text/plain"),
            record("resource", b"\x89PNG\r\n", uri="file:///i.png", ctype="image/png"),
            record("conversion", b"y" * 300, uri="http://big/", ctype="text/plain")]
    path = tmp_path / "crawl.warc.gz"
    path.write_bytes(b"".join(gzip.compress(r) for r in recs))
    rs = rows(path, dataclasses.replace(CFG, max_document_bytes=200))
    assert [r["reason"] for r in rs] == [
        "ingest:warc_skipped", "", "ingest:warc_skipped", "ingest:html", "ingest:unsupported_payload", "",
        "ingest:unsupported_payload", "ingest:oversize"]
    assert kept(rs) == ["Caf\u00e9 text served as plain text.", "A resource record holding text."]
    assert [r["encoding"] for r in rs if not r["reason"]] == ["cp1252", "utf-8"]
    assert [r["url"] for r in rs] == ["http://x/"] * 3 + ["http://y/", "http://z/", "file:///r.txt",
                                                          "file:///i.png", "http://big/"]
    assert "no HTML text extractor" in rs[3]["detail"] and "content-encoding: gzip" in rs[4]["detail"]


def test_bad_record_stops_the_file_with_one_row(tmp_path):
    good = record("conversion", b"kept before the damage", uri="http://ok/", ctype="text/plain")
    path = tmp_path / "bad.wet"
    path.write_bytes(good + b"WARC/1.0\r\nWARC-Type: conversion\r\nContent-Length: lots\r\n\r\nxx\r\n\r\n" + good)
    rs = rows(path)
    assert [r["reason"] for r in rs] == ["", "ingest:bad_warc"]
    assert offset(rs[1]) == len(good) and "Content-Length 'lots'" in rs[1]["detail"]
    (tmp_path / "cut.wet").write_bytes(good[:-30])
    (row,) = rows(tmp_path / "cut.wet")
    assert row["reason"] == "ingest:bad_warc" and "ends inside the block" in row["detail"]
    (tmp_path / "notwarc.warc").write_bytes(b"just some text\n")
    assert [r["reason"] for r in rows(tmp_path / "notwarc.warc")] == ["ingest:bad_warc"]


def test_url_is_written_and_encodings_are_counted(tmp_path, ray_local):
    import pyarrow.parquet as pq

    from pipelines.engine import parts
    from pipelines.ingest import ingest_dataset, resolve_sources

    src = tmp_path / "src"
    src.mkdir()
    (src / "c.wet.gz").write_bytes(b"".join(gzip.compress(r) for r in wet_records()))
    (src / "latin.txt").write_bytes("D\u00e9j\u00e0 vu, na\u00efve caf\u00e9.\n\nplain\n".encode("cp1252"))
    out = parts.write_documents(ingest_dataset(resolve_sources([str(src)]), CFG), data=str(tmp_path / "data"),
                                rejected=str(tmp_path / "rej"), prefix_chars=100, full_text=False)
    assert out["encodings"] == {"utf-8": {"kept": 3, "dropped": 0}, "cp1252": {"kept": 1, "dropped": 0}}
    tables = [pq.read_table(tmp_path / "data" / f["name"]) for f in out["files"]]
    assert all(t.column_names == ["id", "uid", "text", "reason", "detail", "url"] for t in tables)
    urls = sorted(u for t in tables for u in t.column("url").to_pylist())
    assert urls == ["", "", "http://a.example/one", "http://b.example/zwei"]
