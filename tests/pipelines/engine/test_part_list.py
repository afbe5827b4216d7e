"""Part lists: built in chunks, sorted or kept in order, indexed like a list, stored as one Arrow
IPC file whose size, sha256 and part count are checked on load (no Ray)."""
from __future__ import annotations

import dataclasses
import hashlib
import json

import numpy as np
import pyarrow as pa
import pytest

from common import storage
from pipelines.engine import part_list
from pipelines.engine.part_list import PartList, PartListBuilder, StoredParts


def _records(n: int) -> list[dict]:
    # Names out of order (so sorting matters); every third record lacks row_groups.
    out = []
    for i in range(n):
        r = {"name": f"part-{(i * 37) % n:05d}.parquet", "rows": i * 3 + 1, "bytes": 1000 + i * 11}
        if i % 3:
            r["row_groups"] = i % 4 + 1
        out.append(r)
    return out


def _full(records: list[dict]) -> list[dict]:
    return [{"name": r["name"], "rows": r["rows"], "bytes": r["bytes"], "row_groups": r.get("row_groups", 0)}
            for r in records]


def test_builder_sorts_across_chunks_and_keeps_order_unsorted(monkeypatch):
    monkeypatch.setattr(part_list, "BUILD_CHUNK", 7)
    records = _records(50)  # 7 full chunks and a partial one
    builder = PartListBuilder()
    builder.add(records[:20])
    builder.add(records[20:])  # adds in two calls flush at the same boundaries
    assert list(builder.build()) == sorted(_full(records), key=lambda r: r["name"])
    unsorted = PartListBuilder(sort=False)
    unsorted.add(iter(records))
    assert list(unsorted.build()) == _full(records)
    assert list(PartList.of(records)) == _full(records)
    assert PartListBuilder().build() == PartList()


def test_totals_columns_and_names():
    records = _records(30)
    parts = PartList.of(records)
    assert parts.rows == sum(r["rows"] for r in records)
    assert parts.bytes == sum(r["bytes"] for r in records)
    assert parts.column("bytes").dtype == np.int64
    assert parts.column("bytes").tolist() == [r["bytes"] for r in records]
    assert parts.names.to_pylist() == [r["name"] for r in records]
    assert PartList.of(parts) is parts
    assert (PartList().rows, PartList().bytes) == (0, 0)


def test_indexing_and_slicing_match_a_list():
    want = _full(_records(12))
    parts = PartList.of(want)
    assert len(parts) == 12 and parts and not PartList()
    for i in (0, 5, 11, -1, -12):
        assert parts[i] == want[i]
    for i in (12, -13):
        with pytest.raises(IndexError):
            parts[i]
    for s in (slice(2, 7), slice(None, 3), slice(-4, None), slice(8, 3), slice(5, 100)):
        assert list(parts[s]) == want[s]
    with pytest.raises(ValueError, match="step 1"):
        parts[::2]


def test_encode_decode_round_trip_and_bad_input():
    parts = PartList.of(_records(20))
    data = parts.encode()
    assert PartList.decode(data, "x") == parts
    # An independent reader sees the same table.
    assert pa.ipc.open_file(pa.BufferReader(data)).read_all().to_pylist() == list(parts)
    with pytest.raises(ValueError, match="somewhere/parts.arrow"):
        PartList.decode(b"not an arrow file at all", "somewhere/parts.arrow")
    with pytest.raises(ValueError, match="columns"):
        PartList(pa.table({"name": ["a"], "rows": pa.array([1], pa.int32())}))


def test_stored_parts_save_and_load(tmp_path):
    parts = PartList.of(_records(25))
    stored = StoredParts.save(str(tmp_path), "parts.arrow", parts)
    blob = (tmp_path / "parts.arrow").read_bytes()
    assert stored.size == len(blob) and stored.sha256 == hashlib.sha256(blob).hexdigest()
    assert (stored.parts, stored.rows, stored.bytes) == (25, parts.rows, parts.bytes)
    assert stored.load(str(tmp_path)) == parts
    # The marker keeps the record as JSON; it must come back identical.
    assert StoredParts(**json.loads(json.dumps(stored.to_dict()))) == stored


def test_empty_list_writes_nothing(tmp_path):
    stored = StoredParts.save(str(tmp_path), "parts.arrow", PartList())
    assert stored == StoredParts() and list(tmp_path.iterdir()) == []
    assert stored.load(str(tmp_path)) == PartList()


@pytest.mark.parametrize("damage", ["truncate", "flip", "missing"])
def test_damaged_list_file_is_an_error_naming_it(tmp_path, damage):
    stored = StoredParts.save(str(tmp_path), "parts.arrow", PartList.of(_records(10)))
    path = tmp_path / "parts.arrow"
    blob = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(blob[:-5])
    elif damage == "flip":
        path.write_bytes(blob[:40] + bytes([blob[40] ^ 0xFF]) + blob[41:])  # same size, other sha256
    else:
        path.unlink()
    with pytest.raises(storage.StorageError, match="_SUCCESS") as err:
        stored.load(str(tmp_path))
    assert str(path) in str(err.value)


def test_part_count_differing_from_marker_is_an_error(tmp_path):
    stored = StoredParts.save(str(tmp_path), "parts.arrow", PartList.of(_records(10)))
    with pytest.raises(storage.StorageError, match="11") as err:
        dataclasses.replace(stored, parts=11).load(str(tmp_path))
    assert str(tmp_path / "parts.arrow") in str(err.value)
