"""Marks: one object per part with marks, one GET per marking task, checked by crc32."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from common import storage
from pipelines.dedup import marks as mk
from pipelines.engine.shuffle import MapFileError


def _pairs(ray, n: int, num_files: int, seed: int = 3):
    rng = np.random.default_rng(seed)
    u = rng.permutation(10 * n)[:n].astype(np.int64)
    file = rng.integers(0, num_files, n)
    file[file == 2] = 3  # part 2 has no marks
    v = u + 1_000_000
    ds = ray.data.from_items([{"u": int(a), "v": int(b), "file": int(f)} for a, b, f in zip(u, v, file)],
                             override_num_blocks=4)
    return ds, u, v, file


@pytest.mark.parametrize("ranges", [None, 1, 3])
def test_each_part_gets_exactly_its_marks_in_one_object(ray_local, tmp_path, monkeypatch, ranges):
    ds, u, v, file = _pairs(ray_local, 600, 7)
    marks = mk.build_marks(ds, num_files=7, folder=str(tmp_path / "m"), name="t", file_bytes=4 << 10, ranges=ranges,
                           slice_bytes=1)
    assert marks.count == 600 and marks.stats["map_files"] > 1
    assert marks.parts.tolist() == sorted(set(file.tolist())) and 2 not in marks.parts
    assert not (tmp_path / "m" / "map").exists()  # the shuffle's map files are gone once the objects exist
    reads = []
    real = storage.read_bytes
    monkeypatch.setattr(storage, "read_bytes", lambda uri: reads.append(uri) or real(uri))
    for f in range(7):
        reads.clear()
        got = mk.read_marks(marks, f)
        if f not in file:
            assert got is None and reads == []  # no request for a part without marks
            continue
        assert reads == [marks.uri(f)]  # one GET
        want = sorted(zip(u[file == f].tolist(), v[file == f].tolist()))
        assert sorted(zip(got.column("u").to_pylist(), got.column("v").to_pylist())) == want
    marks.remove()
    assert not (tmp_path / "m").exists()


def test_a_damaged_marks_object_is_named(ray_local, tmp_path):
    ds, _, _, file = _pairs(ray_local, 200, 5)
    marks = mk.build_marks(ds, num_files=5, folder=str(tmp_path / "m"), name="t")
    part = int(marks.parts[0])
    path = tmp_path / "m" / "by-part" / f"part-{part:06d}.arrow"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x04
    path.write_bytes(bytes(data))
    with pytest.raises(MapFileError, match=rf"part-{part:06d}\.arrow: damaged: crc32"):
        mk.read_marks(marks, part)


def test_apply_marks_sets_the_reason_of_marked_active_rows(ray_local, tmp_path):
    ds = ray_local.data.from_items([{"u": 5, "v": 1, "file": 0}, {"u": 7, "v": 2, "file": 0}])
    marks = mk.build_marks(ds, num_files=1, folder=str(tmp_path / "m"), name="t")
    table = pa.table({"uid": [1, 5, 7, 9], "reason": ["", "", "filter:x", ""], "detail": ["", "", "d", ""]})
    out = mk.apply_marks(table, 0, marks=marks, reason="dedup:exact")
    assert out.column("reason").to_pylist() == ["", "dedup:exact", "filter:x", ""]
    assert out.column("detail").to_pylist() == ["", "duplicate of uid 1", "d", ""]


def test_no_pairs_no_objects(ray_local, tmp_path):
    ds = ray_local.data.from_items([{"u": 1, "v": 0, "file": 0}]).filter(lambda r: r["u"] < 0)
    marks = mk.build_marks(ds, num_files=3, folder=str(tmp_path / "m"), name="t")
    assert marks.count == 0 and marks.folder is None and mk.read_marks(marks, 0) is None


def test_a_parts_object_does_not_depend_on_the_order_its_marks_arrive_in(ray_local, tmp_path):
    """Built twice from the same pairs, shuffled differently (another order of the rows, other map
    files, ranges, blocks and reduce memory, so other orders of arrival): the same objects, byte
    for byte, and so the same crc32s. Each holds its part's marks sorted by (u, v), as an Arrow
    stream of the columns u, v that one table written here also gives."""
    rng = np.random.default_rng(11)
    n = 900
    u = rng.integers(0, 400, n).astype(np.int64)  # repeated u: the order among them is v's
    v = rng.integers(0, 1 << 40, n).astype(np.int64)
    file = rng.integers(0, 5, n)
    rows = [{"u": int(a), "v": int(b), "file": int(f)} for a, b, f in zip(u, v, file)]
    assert len(set(zip(u.tolist(), file.tolist()))) < n  # some part gets one u twice

    def objects(order, folder, **kwargs) -> tuple[mk.Marks, dict[int, bytes]]:
        ds = ray_local.data.from_items([rows[i] for i in order], override_num_blocks=kwargs.pop("blocks"))
        marks = mk.build_marks(ds, num_files=5, folder=str(tmp_path / folder), name="t", **kwargs)
        return marks, {int(p): storage.read_bytes(marks.uri(int(p))) for p in marks.parts}

    first, a = objects(np.arange(n), "a", blocks=1, file_bytes=1 << 20, ranges=1)
    second, b = objects(rng.permutation(n), "b", blocks=6, file_bytes=2 << 10, ranges=3, memory_bytes=256,
                        slice_bytes=1)
    assert first.stats["map_files"] == 1 and second.stats["map_files"] > 3  # shuffled differently
    assert sorted(a) == sorted(b) == sorted(set(file.tolist()))
    assert a == b
    assert first.crcs.tolist() == second.crcs.tolist()
    for p, data in a.items():
        order = np.lexsort((v[file == p], u[file == p]))
        want = pa.table({"u": u[file == p][order], "v": v[file == p][order]})
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, want.schema) as writer:
            writer.write_table(want)
        assert data == sink.getvalue().to_pybytes()
        got = mk.read_marks(second, p)
        assert got.equals(want)
