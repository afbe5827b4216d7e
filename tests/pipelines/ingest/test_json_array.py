""".json files: a JSON array of records is streamed element by element; anything else is JSON Lines."""
from __future__ import annotations

import dataclasses
import gzip
import io
import json

import pytest

from pipelines.ingest.json_array import elements, starts_array
from tests.pipelines.ingest.test_ingest import CFG, kept, make_docs, offset, rows

TRICKY = ['plain', 'with "quotes" and \\ backslash', 'brackets ] [ } { , inside', '\\"\\\\',
          'unicode caf\u00e9 \u2603 \U0001f600', 'line\nbreaks\r\nand\ttabs', 'ends with backslash \\']


def array_file(records: list, indent: int | None = None) -> tuple[bytes, list[int]]:
    """A JSON array and the byte offset of each element (found by writing it piece by piece)."""
    data, offsets = b"[", []
    sep = b"\n  " if indent else b" "
    for i, rec in enumerate(records):
        data += (b"," if i else b"") + sep
        offsets.append(len(data))
        data += json.dumps(rec, ensure_ascii=False).encode()
    return data + b"\n]\n", offsets


@pytest.mark.parametrize("chunk", [1, 2, 7, 1 << 20])
def test_elements_match_json_loads(chunk):
    records = [{"text": t, "n": [1, {"x": "]"}]} for t in TRICKY] + [17, "s", None, [], {}]
    data, offsets = array_file(records, indent=2)
    got = list(elements(io.BytesIO(data), max_bytes=1 << 20, chunk=chunk))
    assert [json.loads(ln.data) for ln in got] == json.loads(data)
    assert [ln.offset for ln in got] == offsets
    assert not any(ln.oversize for ln in got)


def test_json_array_file_gives_one_document_per_record(tmp_path):
    docs = make_docs(40, seed=41) + TRICKY
    records = [{"text": d, "id": i} for i, d in enumerate(docs)]
    records[5] = {"body": "no text field"}
    records[9] = "not a record"
    data, offsets = array_file(records)
    for name, blob in (("a.json", data), ("a.json.gz", gzip.compress(data))):
        path = tmp_path / name
        path.write_bytes(blob)
        rs = rows(path)
        assert [offset(r) for r in rs] == offsets
        assert kept(rs) == [d for i, d in enumerate(docs) if i not in (5, 9)]
        assert [r["reason"] for r in rs if r["reason"]] == ["ingest:missing_field"] * 2
        assert rs[5]["detail"] == "record 6: no field 'text'"


def test_json_array_oversize_and_malformed_elements(tmp_path):
    path = tmp_path / "b.json"
    path.write_bytes(b'\xef\xbb\xbf [{"text": "ok one"}, {"text": "' + b"y" * 500 + b'"}, {"text": oops},'
                     b' {"text": "ok two"}] trailing')
    rs = rows(path, dataclasses.replace(CFG, max_document_bytes=200))
    assert [r["reason"] for r in rs] == ["", "ingest:oversize", "ingest:bad_json", "", "ingest:bad_json"]
    assert kept(rs) == ["ok one", "ok two"] and "record 2" in rs[1]["detail"]


def test_json_lines_in_a_json_file_and_empty_array(tmp_path):
    (tmp_path / "l.json").write_text('{"text": "first"}\n{"text": "second"}\n')
    assert kept(rows(tmp_path / "l.json")) == ["first", "second"]
    (tmp_path / "e.json").write_text(" [ ] ")
    assert [r["reason"] for r in rows(tmp_path / "e.json")] == ["ingest:empty_file"]
    assert starts_array(b"\xef\xbb\xbf \n [") and not starts_array(b'{"a": [1]}')
