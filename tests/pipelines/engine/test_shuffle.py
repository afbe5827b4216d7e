"""The storage shuffle: map files with partition slices, reduce by partition, on disk and on S3."""
from __future__ import annotations

import collections
import struct

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


def test_a_map_file_holds_each_partition_as_one_slice():
    rng = np.random.default_rng(1)
    part = rng.integers(0, 5, 300)
    part[part == 3] = 4  # partition 3 stays empty
    table = pa.table({"k": np.arange(300), "s": [f"r{i}" for i in range(300)], sh.PART: part})
    data = sh.encode_map_file(table, 5)
    sh.check_map_file(data, 5)
    with pytest.raises(ValueError, match="not a 6-partition"):
        sh.check_map_file(data, 6)
    tail = data[-sh.trailer_bytes(5):]
    offsets = np.frombuffer(tail[:8 * 6], dtype="<i8")
    assert struct.unpack("<qq", tail[8 * 6:])[0] == 5 and offsets[0] == 0 and offsets[3] == offsets[4]
    for p in range(5):
        blob = data[offsets[p]:offsets[p + 1]]
        got = pa.ipc.open_stream(pa.py_buffer(blob)).read_all() if blob else None
        want = np.flatnonzero(part == p)
        if len(want) == 0:
            assert got is None
        else:  # rows of the partition, in their original order, without the partition column
            assert got.column_names == ["k", "s"] and got.column("k").to_pylist() == want.tolist()
    with pytest.raises(ValueError, match=r"must be in \[0, 5\)"):
        sh.encode_map_file(pa.table({"k": [1], sh.PART: [5]}), 5)


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
    with pytest.raises(storage.StorageError, match=rf"{shuffled.files[0].name}: not a {parts}-partition"):
        sh.read_partition(shuffled, 0)
    shuffled.remove()
    assert not (tmp_path / "s").exists()


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
