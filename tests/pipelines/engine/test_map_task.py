"""Map tasks: map files of at least ``R x slice_bytes``, sorted in memory or streamed through a
local spill; the reduce side's reads then grow with the data, not with data x reduce tasks.

The layout is parsed here with struct and pyarrow alone; rows are compared against the in-memory
map task's, and requests are counted at ``storage.read_ranges`` (the reduce side's one way to
read), not asked of the module under test.
"""
from __future__ import annotations

import collections
import hashlib
import re
import struct

import numpy as np
import pyarrow as pa
import pytest

from common import storage
from pipelines.engine import map_file as mf
from pipelines.engine import map_task as mt
from pipelines.engine import shuffle as sh

P = 64


def _keyed(batch: dict, *, partitions: int) -> dict:
    k = batch["id"].astype(np.int64) * 7919 % 100_003
    return {"k": k, "v": batch["id"].astype(np.int64), mf.PART: k % partitions}


def _input(ray, n: int, rows_per_block: int):
    return ray.data.range(n, override_num_blocks=n // rows_per_block).map_batches(
        _keyed, batch_format="numpy", fn_kwargs={"partitions": P})


def test_map_file_bytes_is_the_larger_of_file_bytes_and_r_slices():
    assert mt.map_file_bytes(128 << 20, 8, 4 << 20) == 128 << 20  # 8 x 4 MiB = 32 MiB: the file size holds
    assert mt.map_file_bytes(128 << 20, 12_288, 4 << 20) == 48 << 30  # a big cluster's R: 48 GiB per map file
    assert mt.map_file_bytes(1000, 3, 1) == 1000


def _rows(shuffled: sh.Shuffled) -> dict[int, list[tuple[int, int]]]:
    out = {}
    for r in range(shuffled.ranges):
        for p, t in sh.read_range(shuffled, r):
            out[p] = sorted(zip(t.column("k").to_pylist(), t.column("v").to_pylist()))
    return out


def _check_layout(shuffled: sh.Shuffled, folder: str) -> None:
    """Each map file named by a blake2b of its content, ending in this shuffle's trailer, its
    slices' rows in their ranges' partitions, its rows adding up."""
    R = shuffled.ranges
    total = 0
    for f in shuffled.files:
        data = storage.read_bytes(storage.join(folder, f.name))
        m = re.fullmatch(r"([0-9a-f]{2})/map-([0-9a-f]{24})\.arrows", f.name)
        assert m and m.group(2) == hashlib.blake2b(data, digest_size=12).hexdigest()
        assert len(data) == f.bytes and struct.unpack("<qqq", data[-24:]) == (P, R, mf.MAGIC)
        tail = data[-(12 * R + 32):]
        starts = [struct.unpack_from("<q", tail, 12 * r)[0] for r in range(R)] + [struct.unpack_from("<q", tail, 12 * R)[0]]
        n = 0
        for r in range(R):
            lo, hi = r * P // R, (r + 1) * P // R
            if starts[r + 1] > starts[r]:
                t = pa.ipc.open_stream(pa.py_buffer(data[starts[r]:starts[r + 1]])).read_all()
                assert t.column_names == ["k", "v", mf.PART] and t.schema.field(mf.PART).type == pa.int32()
                part = t.column(mf.PART).to_numpy()
                assert ((part >= lo) & (part < hi)).all() and (part == t.column("k").to_numpy() % P).all()
                assert (np.diff(part) >= 0).all()  # sorted by partition within the slice
                n += t.num_rows
        assert n == f.rows
        total += n
    assert total == shuffled.rows


def test_a_streamed_map_file_holds_the_rows_an_in_memory_one_does(ray_local, tmp_path):
    n = 6000
    ds = _input(ray_local, n, 1000)
    in_memory = sh.shuffle(ds, partitions=P, folder=str(tmp_path / "a"), file_bytes=1 << 30, ranges=4, slice_bytes=1)
    # 4 x 8 KB = 32 KB per map file, sorted through a spill of 2 KB (runs on local disk)
    streamed = sh.shuffle(ds, partitions=P, folder=str(tmp_path / "b"), file_bytes=2 << 10, ranges=4,
                          slice_bytes=8 << 10)
    assert not in_memory.stats["streamed"] and len(in_memory.files) == 1
    assert streamed.stats["streamed"] and streamed.stats["map_file_target"] == 32 << 10
    assert len(streamed.files) == 3  # six blocks of 24 KB, two per map task
    _check_layout(streamed, str(tmp_path / "b"))
    want = collections.defaultdict(list)
    for i in range(n):
        k = i * 7919 % 100_003
        want[k % P].append((k, i))
    assert _rows(streamed) == _rows(in_memory) == {p: sorted(v) for p, v in want.items()}
    streamed.remove()
    in_memory.remove()


def _reads(monkeypatch, shuffled: sh.Shuffled) -> tuple[int, int]:
    """Requests and bytes of every range's read (the reduce side of ``shuffled``)."""
    got = [0, 0]
    real = storage.read_ranges

    def counting(requests):
        out = real(requests)
        got[0] += len(requests)
        got[1] += sum(len(b) for b in out)
        return out

    monkeypatch.setattr(storage, "read_ranges", counting)
    for r in range(shuffled.ranges):
        for _ in sh.read_range(shuffled, r):
            pass
    monkeypatch.setattr(storage, "read_ranges", real)
    return got[0], got[1]


def test_reads_grow_with_the_data_at_reduce_tasks_that_grow_with_it(ray_local, tmp_path, monkeypatch):
    """The data 4x and the reduce tasks 4x (4 then 16, as a big cluster picks them): with map files
    of a fixed size the reads grow 16x (the previous design, ``slice_bytes=1``); with map files of
    ``R x slice_bytes`` they grow about 4x, each slice read about ``slice_bytes``."""
    got = {}
    for design, slice_bytes in (("fixed", 1), ("r_slices", 4 << 10)):
        for n, ranges in ((6000, 4), (24_000, 16)):
            folder = str(tmp_path / f"{design}-{ranges}")
            shuffled = sh.shuffle(_input(ray_local, n, 100), partitions=P, folder=folder, file_bytes=12 << 10,
                                  ranges=ranges, slice_bytes=slice_bytes)
            assert shuffled.rows == n
            got[design, ranges] = (*_reads(monkeypatch, shuffled), len(shuffled.files))
            shuffled.remove()
    fixed = got["fixed", 16][0] / got["fixed", 4][0]
    grown = got["r_slices", 16][0] / got["r_slices", 4][0]
    assert fixed >= 12, got  # M x R: both 4x
    assert grown <= 4.6, got
    for ranges in (4, 16):
        requests, nbytes, files = got["r_slices", ranges]
        assert requests == 2 * files * ranges  # two reads per (map file, range), as before
        assert nbytes / (requests / 2) >= 0.8 * (4 << 10)  # each slice about slice_bytes (the last file smaller)


def test_blocks_of_different_schemas_stream_as_they_sort_in_memory(ray_local, tmp_path):
    """A column all None in one block is of type null there and string in the next: both map tasks
    (and the reduce side reading their files) give the rows under one schema."""
    n = 400
    k = np.arange(2 * n, dtype=np.int64)
    first = pa.table({"k": k[:n], "s": pa.nulls(n), mf.PART: k[:n] % P})
    second = pa.table({"k": k[n:], "s": [f"w{i}" for i in k[n:]], mf.PART: k[n:] % P})
    ds = ray_local.data.from_arrow([first, second])
    got = {}
    for design, file_bytes, slice_bytes in (("memory", 1 << 30, 1), ("streamed", 1 << 10, 4 << 10)):
        shuffled = sh.shuffle(ds, partitions=P, folder=str(tmp_path / design), file_bytes=file_bytes, ranges=4,
                              slice_bytes=slice_bytes)
        assert shuffled.stats["streamed"] is (design == "streamed")
        rows = {}
        for r in range(4):
            for p, t in sh.read_range(shuffled, r):
                assert t.schema.field("s").type == pa.string()
                rows[p] = sorted(zip(t.column("k").to_pylist(), t.column("s").to_pylist()))
        got[design] = rows
        shuffled.remove()
    want = collections.defaultdict(list)
    for i in k.tolist():
        want[i % P].append((i, None if i < n else f"w{i}"))
    assert got["memory"] == got["streamed"] == {p: sorted(v) for p, v in want.items()}
