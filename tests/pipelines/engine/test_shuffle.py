"""The storage shuffle: map files with partition slices, reduce by partition, on disk and on S3."""
from __future__ import annotations

import collections
import re
import struct
import zlib

import numpy as np
import pyarrow as pa
import pytest

from common import storage
from pipelines.engine import shuffle as sh


def test_hash_partition_is_a_function_of_the_key():
    keys = np.array([5, -3, 2**62, 5, 0, -3], dtype=np.int64)
    part = sh.hash_partition(keys, 4)
    assert part.dtype == np.int64 and ((0 <= part) & (part < 4)).all()
    assert part[0] == part[3] and part[1] == part[5]
    many = sh.hash_partition(np.arange(10_000), 7)
    assert np.bincount(many, minlength=7).min() > 1200  # spread evenly (10000 / 7 = 1428)


def _trailer(data: bytes, partitions: int) -> tuple[list[int], list[int], tuple[int, int]]:
    """(slice starts + the end, crc32 per slice, (partitions, magic)) parsed with struct alone."""
    tail = data[-(12 * partitions + 8 + 16):]
    records = [struct.unpack_from("<qI", tail, 12 * p) for p in range(partitions)]
    (end,) = struct.unpack_from("<q", tail, 12 * partitions)
    return [r[0] for r in records] + [end], [r[1] for r in records], struct.unpack("<qq", tail[-16:])


def test_a_map_file_holds_each_partition_as_one_checksummed_slice():
    rng = np.random.default_rng(1)
    part = rng.integers(0, 5, 300)
    part[part == 3] = 4  # partition 3 stays empty
    table = pa.table({"k": np.arange(300), "s": [f"r{i}" for i in range(300)], sh.PART: part})
    data = sh.encode_map_file(table, 5)
    sh.check_map_file(data, 5)
    with pytest.raises(ValueError, match="not a 6-partition"):
        sh.check_map_file(data, 6)
    offsets, crcs, (partitions, magic) = _trailer(data, 5)
    assert sh.trailer_bytes(5) == 12 * 5 + 24 and len(data) == offsets[-1] + sh.trailer_bytes(5)
    assert partitions == 5 and magic.to_bytes(8, "big") == b"ELECSHV2" and offsets[0] == 0
    assert offsets[3] == offsets[4]
    for p in range(5):
        blob = data[offsets[p]:offsets[p + 1]]
        # the crc32 of (p, start, end) then the slice, computed here with zlib alone
        assert crcs[p] == zlib.crc32(blob, zlib.crc32(struct.pack("<qqq", p, offsets[p], offsets[p + 1])))
        got = pa.ipc.open_stream(pa.py_buffer(blob)).read_all() if blob else None
        want = np.flatnonzero(part == p)
        if len(want) == 0:
            assert got is None
        else:  # rows of the partition, in their original order, without the partition column
            assert got.column_names == ["k", "s"] and got.column("k").to_pylist() == want.tolist()
    with pytest.raises(ValueError, match=r"must be in \[0, 5\)"):
        sh.encode_map_file(pa.table({"k": [1], sh.PART: [5]}), 5)


# Keys whose 8 bytes occur once in a map file: a flipped byte among them changes one value.
_BASE = 0x1122334455667700


def _one_file(folder, partitions: int = 4, rows: int = 400) -> tuple[sh.Shuffled, bytes, np.ndarray]:
    """A one-map-file shuffle written to ``folder`` without Ray (what a map task writes)."""
    part = np.arange(rows) % partitions
    part[part == 2] = 1  # partition 2 is empty
    table = pa.table({"k": _BASE + np.arange(rows, dtype=np.int64), sh.PART: part})
    data = sh.encode_map_file(table, partitions)
    storage.write_bytes(storage.join(str(folder), "map-a.arrows"), data)
    return sh.Shuffled(str(folder), partitions, (sh.MapFile("map-a.arrows", len(data), rows),)), data, part


def _keys(shuffled: sh.Shuffled, p: int) -> list[int] | None:
    table = sh.read_partition(shuffled, p)
    return None if table is None else table.column("k").to_pylist()


def _is_a_data_error(exc: BaseException) -> bool:
    """Neither the storage layer nor the stage runner retries it (a damaged object stays damaged)."""
    from common import retry
    from pipelines.orchestration import checks

    return (isinstance(exc, storage.StorageError) and not isinstance(exc, storage.StoreUnavailableError)
            and not retry.transient(exc) and not checks.transient(exc))


def test_an_intact_map_file_reads_back_every_partition(tmp_path):
    shuffled, _, part = _one_file(tmp_path)
    for p in range(4):
        want = (_BASE + np.flatnonzero(part == p)).tolist()
        assert _keys(shuffled, p) == (want or None)


@pytest.mark.parametrize("keep", ["most_of_the_trailer", "half_the_data", "nothing"])
def test_a_truncated_map_file_is_named_with_its_size(tmp_path, keep):
    shuffled, data, part = _one_file(tmp_path)
    cut = {"most_of_the_trailer": len(data) - 5, "half_the_data": len(data) // 2, "nothing": 0}[keep]
    (tmp_path / "map-a.arrows").write_bytes(data[:cut])
    uri = storage.join(str(tmp_path), "map-a.arrows")
    # A reader of the last partition reads the trailer's tail (where the magic says the file is
    # whole): every shuffle's reduce has one, so a cut file is always named. A reader of earlier
    # partitions reads only their records and slices: when those are all there (a cut in the
    # tail), it gets its rows, each slice checked against its crc32; when not, it names the file.
    for p in range(4):
        if keep == "most_of_the_trailer" and p < 3:
            want = (_BASE + np.flatnonzero(part == p)).tolist()
            assert _keys(shuffled, p) == (want or None)
            continue
        with pytest.raises(sh.MapFileError) as err:
            sh.read_partition(shuffled, p)
        assert str(err.value) == (f"{uri}: partition {p}: truncated: the map side wrote {len(data)} bytes, "
                                  f"the store holds {cut}; run the build again (the stage recomputes its "
                                  "shuffle from its input)")
        assert _is_a_data_error(err.value)
    with pytest.raises(sh.MapFileError, match=r"partition 0: truncated"):  # a range ending at the last one
        sh.read_partitions(shuffled, 0, 4)


def test_a_flipped_byte_in_a_slice_fails_its_checksum(tmp_path):
    shuffled, data, part = _one_file(tmp_path)
    offsets, _, _ = _trailer(data, 4)
    victim = int(np.flatnonzero(part == 3)[5])  # a key of partition 3
    at = data.index(struct.pack("<q", _BASE + victim))
    assert offsets[3] <= at < offsets[4] and data.count(struct.pack("<q", _BASE + victim)) == 1
    damaged = bytearray(data)
    damaged[at] ^= 0x10
    (tmp_path / "map-a.arrows").write_bytes(bytes(damaged))
    # Arrow alone reads the damaged slice without complaint: one key silently changed.
    silently = pa.ipc.open_stream(pa.py_buffer(bytes(damaged[offsets[3]:offsets[4]]))).read_all()
    assert silently.column("k").to_pylist().count(_BASE + victim) == 0
    uri = storage.join(str(tmp_path), "map-a.arrows")
    with pytest.raises(sh.MapFileError, match=rf"^{re.escape(uri)}: partition 3: damaged: bytes "
                                              rf"\[{offsets[3]}, {offsets[4]}\) have crc32 0x[0-9a-f]{{8}}, "
                                              r"the trailer says 0x[0-9a-f]{8}; run the build again") as err:
        sh.read_partition(shuffled, 3)
    assert _is_a_data_error(err.value)
    for p in (0, 1, 2):  # the other slices are intact and still read
        want = (_BASE + np.flatnonzero(part == p)).tolist()
        assert _keys(shuffled, p) == (want or None)


@pytest.mark.parametrize("field,partition,what", [
    ("start", 1, "damaged: bytes"),  # a start moved inside the data: the slice's checksum fails
    ("crc", 0, "damaged: bytes"),
    ("crc", 2, "damaged trailer: the record of an empty slice"),  # no data read, still checked
    ("end", 3, "damaged trailer: slice"),  # the end offset pushed past the data
])
def test_a_flipped_byte_in_the_trailer_is_caught(tmp_path, field, partition, what):
    shuffled, data, _ = _one_file(tmp_path)
    record = len(data) - sh.trailer_bytes(4) + 12 * partition
    at = {"start": record, "crc": record + 8, "end": len(data) - 24 + 2}[field]
    damaged = bytearray(data)
    damaged[at] ^= 0x01 if field != "end" else 0x40
    (tmp_path / "map-a.arrows").write_bytes(bytes(damaged))
    uri = storage.join(str(tmp_path), "map-a.arrows")
    with pytest.raises(sh.MapFileError, match=rf"^{re.escape(uri)}: partition {partition}: {what}"):
        sh.read_partition(shuffled, partition)


def test_a_map_file_of_the_unchecked_format_is_refused(tmp_path):
    """Version 1 (offsets only, magic "ELECSHUF"): refused by name, never misread."""
    offsets = np.array([0, 0, 0, 0, 0], dtype="<i8")
    old = offsets.tobytes() + struct.pack("<qq", 4, 0x454C4543_53485546)
    old = b"\0" * (sh.trailer_bytes(4) - len(old)) + old  # as long as a new trailer: the magic decides
    (tmp_path / "map-old.arrows").write_bytes(old)
    shuffled = sh.Shuffled(str(tmp_path), 4, (sh.MapFile("map-old.arrows", len(old), 0),))
    with pytest.raises(sh.MapFileError, match=r"map-old\.arrows: partition 3: not a 4-partition shuffle map "
                                              r"file of this format \(partitions 4, magic 0x454c454353485546"):
        sh.read_partition(shuffled, 3)
    # A reader of earlier partitions does not read the magic; their records fail their checksums.
    with pytest.raises(sh.MapFileError, match=r"map-old\.arrows: partition 0: damaged trailer"):
        sh.read_partition(shuffled, 0)


def test_reduce_tasks_own_contiguous_ranges_sized_by_bytes():
    def tasks(partitions: int, total: int, task_bytes: int) -> list[tuple[int, int]]:
        files = (sh.MapFile("a", total // 2, 1), sh.MapFile("b", total - total // 2, 1))
        return sh.reduce_tasks(sh.Shuffled("f", partitions, files), task_bytes)

    for partitions, total, task_bytes, count in [(4096, 100 << 30, 256 << 20, 400), (4096, 1 << 20, 256 << 20, 8),
                                                 (3, 1 << 30, 1 << 20, 3), (1000, 10_000, 1000, 10)]:
        got = tasks(partitions, total, task_bytes)
        assert len(got) == count
        assert got[0][0] == 0 and got[-1][1] == partitions  # every partition once, in order
        assert all(a[1] == b[0] for a, b in zip(got, got[1:])) and all(lo < hi for lo, hi in got)
        sizes = [hi - lo for lo, hi in got]
        assert max(sizes) - min(sizes) <= 1


def test_a_range_of_partitions_costs_two_reads_per_map_file_and_only_its_bytes(tmp_path, monkeypatch):
    partitions, rng = 12, np.random.default_rng(7)
    files, parts = [], []
    for i in range(3):
        part = rng.integers(0, partitions, 500)
        part[part == 5] = 6  # partition 5 is empty everywhere
        parts.append(part)
        table = pa.table({"k": np.arange(500, dtype=np.int64) + 1000 * i, sh.PART: part})
        data = sh.encode_map_file(table, partitions)
        storage.write_bytes(storage.join(str(tmp_path), f"map-{i}.arrows"), data)
        files.append(sh.MapFile(f"map-{i}.arrows", len(data), 500))
    shuffled = sh.Shuffled(str(tmp_path), partitions, tuple(files))
    written = sum(f.bytes for f in files)
    calls: list[list[tuple[str, int, int]]] = []
    real = storage.read_ranges

    def counted(requests):
        calls.append(list(requests))
        return real(requests)

    monkeypatch.setattr(storage, "read_ranges", counted)
    read = 0
    for lo, hi in [(0, 4), (4, 9), (9, 12)]:
        calls.clear()
        got = sh.read_partitions(shuffled, lo, hi)
        for p, table in zip(range(lo, hi), got):
            want = [1000 * i + j for i, part in enumerate(parts) for j in np.flatnonzero(part == p).tolist()]
            assert (table.column("k").to_pylist() if table is not None else []) == want
        index, slices = calls
        assert len(index) == len(slices) == 3  # one index read and one data read per map file
        for (_, a, b), f in zip(index, files):  # the range's records, not the trailer to its end
            assert b - a == (12 * (hi - lo) + 8 if hi < partitions else 12 * (hi - lo) + 24)
            assert b == f.bytes or b < f.bytes - 24
        read += sum(b - a for _, a, b in index + slices)
    data_bytes = sum(f.bytes - sh.trailer_bytes(partitions) for f in files)
    # every slice once; per map file each record once, the tail once, and the next range's first
    # start again at each of the 2 boundaries between ranges (8 bytes each)
    assert read == data_bytes + 3 * (12 * partitions + 8 * 2 + 24) == written + 3 * 8 * 2


def _keyed(batch: dict, *, partitions: int) -> dict:
    k = batch["id"].astype(np.int64) * 7919 % 10_007
    return {"k": k, "v": batch["id"].astype(np.int64), sh.PART: sh.hash_partition(k, partitions)}


def _groups(rows: dict, *, partition: int) -> dict:
    keys = np.unique(rows["k"])
    return {"part": np.full(len(keys), partition), "k": keys,
            "n": np.array([np.count_nonzero(rows["k"] == k) for k in keys])}


@pytest.mark.parametrize("blocks,file_bytes", [(1, sh.FILE_BYTES), (64, 16 << 10), (64, sh.FILE_BYTES)])
def test_every_key_reaches_exactly_one_reduce_call(ray_local, tmp_path, blocks, file_bytes):
    n, parts = 20_000, 6
    ds = ray_local.data.range(n, override_num_blocks=blocks).map_batches(
        _keyed, batch_format="numpy", fn_kwargs={"partitions": parts})
    shuffled = sh.shuffle(ds, partitions=parts, folder=str(tmp_path / "s"), file_bytes=file_bytes, name="t")
    # Map files follow the bytes, not the blocks: one per ~file_bytes of rows.
    assert shuffled.stats["blocks_in"] >= blocks and shuffled.rows == n
    assert len(shuffled.files) == (1 if file_bytes == sh.FILE_BYTES else shuffled.stats["map_files"]) >= 1
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == [f.name for f in shuffled.files]
    out = sh.reduce(shuffled, _groups, with_partition=True).take_all()
    counts = collections.Counter((np.arange(n) * 7919 % 10_007).tolist())
    assert {r["k"]: r["n"] for r in out} == counts  # each key once, with all its rows
    assert all(int(sh.hash_partition(np.array([r["k"]]), parts)[0]) == r["part"] for r in out)
    # A map file whose trailer is not a whole map file's (same size, other bytes) is refused by name.
    bad = tmp_path / "s" / shuffled.files[0].name
    bad.write_bytes(b"\0" * bad.stat().st_size)
    with pytest.raises(sh.MapFileError, match=rf"{shuffled.files[0].name}: partition {parts - 1}: not a "
                                              rf"{parts}-partition"):
        sh.read_partition(shuffled, parts - 1)
    with pytest.raises(sh.MapFileError, match=rf"{shuffled.files[0].name}: partition 0: damaged trailer"):
        sh.read_partition(shuffled, 0)
    shuffled.remove()
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("task_bytes", [1, 1 << 40])  # a task per partition; the minimum of 8 tasks
def test_reduce_tasks_over_partition_ranges_give_every_partition_once(ray_local, tmp_path, task_bytes):
    n, parts = 5_000, 40
    ds = ray_local.data.range(n, override_num_blocks=4).map_batches(
        _keyed, batch_format="numpy", fn_kwargs={"partitions": parts})
    shuffled = sh.shuffle(ds, partitions=parts, folder=str(tmp_path / "s"), file_bytes=8 << 10)
    assert len(shuffled.files) > 1
    assert len(sh.reduce_tasks(shuffled, task_bytes)) == (parts if task_bytes == 1 else sh.MIN_REDUCE_TASKS)
    out = sh.reduce(shuffled, _groups, with_partition=True, task_bytes=task_bytes).take_all()
    counts = collections.Counter((np.arange(n) * 7919 % 10_007).tolist())
    assert {r["k"]: r["n"] for r in out} == counts and len(out) == len(counts)
    assert all(int(sh.hash_partition(np.array([r["k"]]), parts)[0]) == r["part"] for r in out)


def test_reduce_of_an_empty_shuffle(ray_local, tmp_path):
    from ray.data.expressions import col

    ds = ray_local.data.range(10).map_batches(_keyed, batch_format="numpy", fn_kwargs={"partitions": 3})
    shuffled = sh.shuffle(ds.filter(expr=col("v") < 0), partitions=3, folder=str(tmp_path))
    assert shuffled.files == () and shuffled.rows == 0
    assert sh.reduce(shuffled, _groups, with_partition=True).take_all() == []
    assert sh.read_partition(shuffled, 2) is None


def test_shuffle_on_s3_reads_partitions_by_ranges(ray_s3):
    ray, s3 = ray_s3
    folder = s3.bucket("shuffle") + "/work/x"
    ds = ray.data.range(5000, override_num_blocks=8).map_batches(_keyed, batch_format="numpy",
                                                                fn_kwargs={"partitions": 4})
    shuffled = sh.shuffle(ds, partitions=4, folder=folder, file_bytes=20 << 10)
    assert len(shuffled.files) > 1 and storage.listdir(folder) == [f.name for f in shuffled.files]
    total = 0
    for p in range(4):
        rows = sh.read_partition(shuffled, p)
        keys = rows.column("k").to_numpy()
        assert (sh.hash_partition(keys, 4) == p).all()
        total += rows.num_rows
    assert total == 5000
    with pytest.raises(IndexError):
        sh.read_partition(shuffled, 4)
