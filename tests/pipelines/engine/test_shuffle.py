"""The storage shuffle: map files with R range slices, R reduce tasks (one per range) that each
make two ranged reads per map file, starting at their own place in the list of map files, and
spill locally; on disk, through Ray, and on S3.

Expected rows and request sizes are computed here (numpy, struct, hashlib) from the layout
``pipelines.engine.map_file`` documents, not asked of the module under test.
"""
from __future__ import annotations

import collections
import hashlib
import os
import re
import struct
import uuid

import numpy as np
import pyarrow as pa
import pytest

from common import storage
from pipelines.engine import map_file as mf
from pipelines.engine import shuffle as sh


def test_hash_partition_is_a_function_of_the_key():
    keys = np.array([5, -3, 2**62, 5, 0, -3], dtype=np.int64)
    part = sh.hash_partition(keys, 4)
    assert part.dtype == np.int64 and ((0 <= part) & (part < 4)).all()
    assert part[0] == part[3] and part[1] == part[5]
    many = sh.hash_partition(np.arange(10_000), 7)
    assert np.bincount(many, minlength=7).min() > 1200  # spread evenly (10000 / 7 = 1428)


def test_default_ranges(monkeypatch):
    """One per CPU of the cluster, or one per PARTITIONS_PER_RANGE partitions where fewer; at least
    MIN_REDUCE_TASKS, at most one per partition; shuffle.reduce_tasks decides when set."""
    assert (sh.MIN_REDUCE_TASKS, sh.RANGES_PER_CPU, sh.PARTITIONS_PER_RANGE) == (8, 1, 4)
    for cpus, partitions, want in [(0, 4096, 8), (1, 4096, 8), (4, 4096, 8), (10, 4096, 10), (64, 4096, 64),
                                   (512, 4096, 512),  # the cluster's size caps it...
                                   (512, 600, 150), (512, 40, 10), (512, 33, 9),  # ...or the data does
                                   (64, 20, 8), (64, 6, 6), (2, 1, 1)]:
        monkeypatch.setattr(sh, "_cluster_cpus", lambda cpus=cpus: cpus)
        assert sh.default_ranges(partitions) == want, (cpus, partitions)
        assert sh.default_ranges(partitions, reduce_tasks=5) == min(5, partitions)
        assert sh.default_ranges(partitions, reduce_tasks=10_000) == partitions  # never more than P


def _bounds(partitions: int, ranges: int) -> list[tuple[int, int]]:
    return [(r * partitions // ranges, (r + 1) * partitions // ranges) for r in range(ranges)]


def _starts(data: bytes, ranges: int) -> list[int]:
    """Slice starts and the end offset, from the trailer by struct alone."""
    tail = data[-(12 * ranges + 32):]
    return [struct.unpack_from("<q", tail, 12 * r)[0] for r in range(ranges)] + [
        struct.unpack_from("<q", tail, 12 * ranges)[0]]


# ---------------------------------------------------------------------------------------------
# The reduce side's requests (map files written here without Ray, as a map task writes them)

P, R, M = 12, 5, 4  # ranges [0, 2) [2, 4) [4, 7) [7, 9) [9, 12)


def _write_files(folder, m: int = M, ranges: int = R) -> tuple[sh.Shuffled, list[np.ndarray], list[bytes]]:
    """``m`` map files of P partitions in ``ranges`` ranges, named in the order written (file i is
    the i-th by name), keys ``1000 i + row``."""
    rng = np.random.default_rng(7)
    files, parts, blobs = [], [], []
    for i in range(m):
        part = rng.integers(0, P, 500)
        part[part == 5] = 6  # partition 5 is empty everywhere
        if i == 3:
            part[(part >= 4) & (part < 7)] = 0  # map file 3 holds nothing of partitions 4-6 (range 2 of 5)
        table = pa.table({"k": np.arange(500, dtype=np.int64) + 1000 * i, "s": [f"{i}.{j}" for j in range(500)],
                          mf.PART: part})
        data = mf.encode_map_file(table, P, ranges)
        name = f"{i:02x}/map-{i}.arrows"
        storage.write_bytes(storage.join(str(folder), name), data)
        files.append(sh.MapFile(name, len(data), 500))
        parts.append(part)
        blobs.append(data)
    assert [f.name for f in files] == sorted(f.name for f in files)  # the order Shuffled.files has
    return sh.Shuffled(str(folder), P, tuple(files), ranges), parts, blobs


def _order(r: int, m: int = M, ranges: int = R) -> list[int]:
    """The map files range ``r`` reads, in order: the name-ordered list turned so that it starts
    at file ``r m // R`` (each range at its own place), wrapping round to the ones before it."""
    start = r * m // ranges
    return sorted(range(m), key=lambda i: (i - start) % m)


def _range_of(p: int, ranges: int = R) -> int:
    return next(r for r, (lo, hi) in enumerate(_bounds(P, ranges)) if lo <= p < hi)


def _want(parts: list[np.ndarray], lo: int, hi: int, order: list[int]) -> dict[int, list[int]]:
    """Each non-empty partition's keys: map files in ``order`` (the range's), rows in order within each."""
    out = {p: [1000 * i + j for i in order for j in np.flatnonzero(parts[i] == p).tolist()]
           for p in range(lo, hi)}
    return {p: ks for p, ks in out.items() if ks}


def test_the_expected_orders_of_this_file():
    """_order spelled out for the file's shapes: starts r M // R, each file once."""
    assert [_order(r) for r in range(R)] == [[0, 1, 2, 3], [0, 1, 2, 3], [1, 2, 3, 0], [2, 3, 0, 1], [3, 0, 1, 2]]
    assert [_order(r, 7, 3) for r in range(3)] == [[0, 1, 2, 3, 4, 5, 6], [2, 3, 4, 5, 6, 0, 1],
                                                   [4, 5, 6, 0, 1, 2, 3]]
    assert [_order(r, 2, 5) for r in range(5)] == [[0, 1], [0, 1], [0, 1], [1, 0], [1, 0]]


def _got(shuffled: sh.Shuffled, r: int, **kwargs) -> dict[int, list[int]]:
    out = {}
    for p, table in sh.read_range(shuffled, r, **kwargs):
        assert table.column_names == ["k", "s"]  # no _part
        assert table.column("s").to_pylist() == [f"{k // 1000}.{k % 1000}" for k in table.column("k").to_pylist()]
        out[p] = table.column("k").to_pylist()
    return out


@pytest.fixture
def counted(monkeypatch):
    """Every storage.read_ranges call of the reduce side, as its list of (uri, start, end)."""
    calls: list[list[tuple[str, int, int]]] = []
    real = storage.read_ranges

    def counting(requests):
        calls.append([(u, int(a), int(b)) for u, a, b in requests])
        return real(requests)

    monkeypatch.setattr(storage, "read_ranges", counting)
    return calls


def test_a_reduce_task_makes_two_reads_per_map_file(tmp_path, counted):
    shuffled, parts, blobs = _write_files(tmp_path)
    written = sum(f.bytes for f in shuffled.files)
    read = 0
    for r, (lo, hi) in enumerate(_bounds(P, R)):
        counted.clear()
        order = _order(r)
        assert _got(shuffled, r) == _want(parts, lo, hi, order)
        index, slices = counted  # one batch of index reads, one group of data reads
        assert len(index) == M  # one index read per map file, in the range's order
        for (uri, a, b), f in zip(index, [shuffled.files[i] for i in order], strict=True):
            assert uri == storage.join(str(tmp_path), f.name)
            assert a == f.bytes - (12 * R + 32) + 12 * r  # its record...
            if r < R - 1:
                assert b - a == 20  # ...and the next record's start
            else:
                assert (b - a, b) == (12 + 8 + 24, f.bytes)  # ...the end offset and the tail, to the end
        # one data read per map file whose slice of the range is not empty: exactly its slice
        holding = [i for i in order if ((parts[i] >= lo) & (parts[i] < hi)).any()]
        assert sorted(holding) == (list(range(M)) if r != 2 else [0, 1, 2])
        want_slices = [(storage.join(str(tmp_path), shuffled.files[i].name), _starts(blobs[i], R)[r],
                        _starts(blobs[i], R)[r + 1]) for i in holding]
        assert slices == want_slices
        read += sum(b - a for _, a, b in index + slices)
    # Per map file: every slice once (the file less its trailer, 12 R + 8 + 24 bytes); task r < R-1
    # reads record r and the next start (12 + 8), task R-1 its record, the end offset and the tail
    # (12 + 8 + 24): 20 (R-1) + 44 = (12 R + 32) + 8 (R-1). So all R tasks read the files' bytes
    # plus 8 bytes per (map file, range boundary).
    assert read == written + 8 * (R - 1) * M


@pytest.mark.parametrize("r", [1, 3])
def test_index_reads_go_in_batches_of_read_batch_files(tmp_path, counted, monkeypatch, r):
    shuffled, parts, _ = _write_files(tmp_path)
    monkeypatch.setattr(sh, "READ_BATCH", 3)
    lo, hi = _bounds(P, R)[r]
    assert _got(shuffled, r) == _want(parts, lo, hi, _order(r))
    # batch 1: 3 index reads, then its 3 slices; batch 2: 1 index read, then its slice
    assert [len(c) for c in counted] == [3, 3, 1, 1]
    assert [c[0] for c in counted[0]] == [c[0] for c in counted[1]]
    # the batches cut the range's order (range 3 starts at file 2: 2 3 0 | 1), not the name order
    uris = [storage.join(str(tmp_path), shuffled.files[i].name) for i in _order(r)]
    assert [c[0] for c in counted[0] + counted[2]] == uris


@pytest.mark.parametrize("m,ranges", [(M, R), (7, 3), (10, 4), (12, 12), (2, 5), (1, 3)])
@pytest.mark.parametrize("read_batch", [sh.READ_BATCH, 3])
def test_each_range_starts_at_its_own_map_file_and_reads_each_once(tmp_path, counted, monkeypatch, m, ranges,
                                                                    read_batch):
    """Range r's first read is of file r M // R (the list wrapping round after it), every file's
    trailer and slice read once per range; the ranges' first files spread over the list."""
    shuffled, parts, blobs = _write_files(tmp_path, m, ranges)
    monkeypatch.setattr(sh, "READ_BATCH", read_batch)
    names = [storage.join(str(tmp_path), f.name) for f in shuffled.files]
    firsts = []
    for r, (lo, hi) in enumerate(_bounds(P, ranges)):
        counted.clear()
        assert _got(shuffled, r) == _want(parts, lo, hi, _order(r, m, ranges))
        trailer = mf.trailer_bytes(ranges)
        index = [c for c in counted for u, a, b in c[:1] if a >= shuffled.files[names.index(u)].bytes - trailer]
        data = [c for c in counted if c not in index]
        index_uris = [u for c in index for u, _, _ in c]
        data_uris = [u for c in data for u, _, _ in c]
        firsts.append(names.index(index_uris[0]))
        assert firsts[-1] == r * m // ranges  # its first read is of file r M // R
        assert collections.Counter(index_uris) == collections.Counter(names)  # each file once, none left out
        assert index_uris == names[r * m // ranges:] + names[:r * m // ranges]  # then the rest, wrapping round
        # one read of each file holding rows of the range, in the same order, exactly its slice
        holding = [u for u in index_uris if ((parts[names.index(u)] >= lo) & (parts[names.index(u)] < hi)).any()]
        assert data_uris == holding and len(set(data_uris)) == len(data_uris)
        for u, a, b in (req for c in data for req in c):
            starts = _starts(blobs[names.index(u)], ranges)
            assert (a, b) == (starts[r], starts[r + 1])
    if m >= ranges:  # concurrent ranges start on different files, spread evenly over the list
        assert len(set(firsts)) == ranges
        gaps = [b - a for a, b in zip(firsts, firsts[1:] + [firsts[0] + m])]
        assert set(gaps) <= {m // ranges, -(-m // ranges)}


class _Recording(sh.RangeSpill):
    """A RangeSpill that records itself and, after each add, the folders under the spill root."""
    made: list["_Recording"] = []
    root = ""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.folders_seen: set[str] = set()
        _Recording.made.append(self)

    def add(self, table):
        super().add(table)
        if os.path.isdir(self.root):
            self.folders_seen.update(os.listdir(self.root))


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped): what a killed attempt leaves."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _tag(name: str) -> str:
    return hashlib.blake2b(name.encode(), digest_size=8).hexdigest()


def test_a_small_memory_budget_spills_and_reads_the_same_rows(tmp_path, counted, monkeypatch):
    shuffled, parts, _ = _write_files(tmp_path / "s")
    monkeypatch.setenv("ELECTRA_SPILL_DIR", str(tmp_path / "spill"))
    monkeypatch.setattr(sh, "RangeSpill", _Recording)
    monkeypatch.setattr(_Recording, "root", str(tmp_path / "spill" / "electra-spill"))
    for r, (lo, hi) in enumerate(_bounds(P, R)):
        for memory in (64, 1 << 40):
            _Recording.made.clear()
            counted.clear()
            assert _got(shuffled, r, memory_bytes=memory) == _want(parts, lo, hi, _order(r))
            (spill,) = _Recording.made
            assert spill.name == f"{shuffled.folder}#{r}"  # the shuffle's folder and the range
            data_calls = counted[1:]
            if memory == 64:  # data reads of at most 16 bytes at a time: every slice alone, each spilled
                assert spill.spilled_bytes > 0 and all(len(c) == 1 for c in data_calls)
                assert len(data_calls) == (M if r != 2 else M - 1)
                # its runs in <ELECTRA_SPILL_DIR>/electra-spill/<blake2b of the name>.<pid>.<random>,
                # and nowhere else
                (seen,) = spill.folders_seen
                assert seen.startswith(f"{_tag(f'{shuffled.folder}#{r}')}.{os.getpid()}.")
            else:
                assert spill.spilled_bytes == 0 and len(data_calls) == 1 and spill.folders_seen == set()
    assert os.listdir(tmp_path / "spill") == ["electra-spill"]
    assert os.listdir(tmp_path / "spill" / "electra-spill") == []  # every task's runs removed


def test_a_killed_reduce_tasks_spill_is_removed_by_the_next_attempt(tmp_path, monkeypatch):
    """A reduce task killed mid-spill leaves its folder; the range's next attempt (same shuffle,
    same range) removes it and reads the right rows; another range's folder stays."""
    shuffled, parts, _ = _write_files(tmp_path / "s")
    monkeypatch.setenv("ELECTRA_SPILL_DIR", str(tmp_path / "spill"))
    root = tmp_path / "spill" / "electra-spill"
    dead = _dead_pid()
    left = {r: f"{_tag(f'{shuffled.folder}#{r}')}.{dead}.x" for r in (1, 4)}
    live = f"{_tag(f'{shuffled.folder}#4')}.{os.getpid()}.y"  # another read of range 4, still running
    for name in (*left.values(), live):
        (root / name).mkdir(parents=True)
        (root / name / "run-000000.arrow").write_bytes(b"killed attempt")
    lo, hi = _bounds(P, R)[4]
    assert _got(shuffled, 4, memory_bytes=64) == _want(parts, lo, hi, _order(4))
    # range 4's leftover gone; range 1's and the live one kept
    assert sorted(os.listdir(root)) == sorted([left[1], live])


@pytest.mark.parametrize("batch_format", ["numpy", "pyarrow"])
def test_a_reduce_tasks_small_outputs_reach_ray_data_concatenated_in_order(tmp_path, monkeypatch, batch_format):
    """One small output per partition is passed on in batches of COALESCE_OUTPUTS outputs (a
    new batch where the columns change), rows in partition order; a None output is skipped."""
    shuffled, parts, _ = _write_files(tmp_path, ranges=1)
    monkeypatch.setattr(sh, "COALESCE_OUTPUTS", 3)

    def one_row(rows, *, partition):
        keys = rows["k"] if batch_format == "numpy" else rows.column("k").to_numpy()
        if partition == 8:
            return None
        if partition >= 10:  # another column set from here on: a batch of its own
            out = {"p": np.array([partition]), "first": np.array([keys[0]]), "extra": np.array([1.5])}
        else:
            out = {"p": np.array([partition]), "first": np.array([keys[0]])}
        return pa.table(out) if batch_format == "pyarrow" else out

    got = list(sh._reduce_batch({"r": np.array([0])}, shuffled=shuffled, fn=one_row, fn_kwargs={},
                                batch_format=batch_format, with_partition=True, memory_bytes=1 << 20))
    want = _want(parts, 0, P, _order(0, ranges=1))  # non-empty partitions: all but 5
    kept = [q for q in sorted(want) if q != 8]
    cols = [({c: t.column(c).to_numpy() for c in t.column_names} if batch_format == "pyarrow" else t) for t in got]
    assert [len(c["p"]) for c in cols] == [3, 3, 2, 2]  # 0-2; 3, 4, 6 (5 empty); 7, 9 (8 None); 10, 11
    assert np.concatenate([c["p"] for c in cols]).tolist() == kept
    assert np.concatenate([c["first"] for c in cols]).tolist() == [want[q][0] for q in kept]
    assert "extra" not in cols[2] and cols[3]["extra"].tolist() == [1.5, 1.5]


def test_read_partition_and_bad_numbers(tmp_path):
    shuffled, parts, _ = _write_files(tmp_path)
    for p in range(P):
        got = sh.read_partition(shuffled, p)
        want = _want(parts, p, p + 1, _order(_range_of(p))).get(p)  # in the order its range reads
        assert (got.column("k").to_pylist() if got is not None else None) == want
    assert sh.read_partition(shuffled, 5) is None  # empty everywhere
    for bad in (-1, P):
        with pytest.raises(IndexError):
            sh.read_partition(shuffled, bad)
    for bad in (-1, R):
        with pytest.raises(IndexError):
            list(sh.read_range(shuffled, bad))


# ---------------------------------------------------------------------------------------------
# Through Ray

N, PARTS = 12_000, 10


def _keyed(batch: dict, *, partitions: int) -> dict:
    k = batch["id"].astype(np.int64) * 7919 % 10_007
    return {"k": k, "v": batch["id"].astype(np.int64), mf.PART: k % partitions}


def _calls(rows: dict, *, partition: int) -> dict:
    """One output row per key, all tagged with a token of this call."""
    keys, counts = np.unique(rows["k"], return_counts=True)
    return {"part": np.full(len(keys), partition), "k": keys, "n": counts,
            "call": np.full(len(keys), uuid.uuid4().hex),
            "ok": np.full(len(keys), bool((rows["k"] % PARTS == partition).all()))}


def _check_files(shuffled: sh.Shuffled, folder: str, ranges: int) -> None:
    """Map files under two-hex-digit prefixes, named by a blake2b of their content, each of this
    shuffle's shape, their rows adding up."""
    names = [f.name for f in shuffled.files]
    assert storage.find(folder) == sorted(names) == names
    assert storage.listdir(folder) == sorted({n[:2] for n in names})
    rows = 0
    for f in shuffled.files:
        data = storage.read_bytes(storage.join(folder, f.name))
        m = re.fullmatch(r"([0-9a-f]{2})/map-([0-9a-f]{24})\.arrows", f.name)
        assert m and m.group(2) == hashlib.blake2b(data, digest_size=12).hexdigest() and m.group(1) == m.group(2)[:2]
        assert len(data) == f.bytes and struct.unpack("<qqq", data[-24:]) == (PARTS, ranges, mf.MAGIC)
        starts = _starts(data, ranges)
        n = 0
        for r, (lo, hi) in enumerate(_bounds(PARTS, ranges)):
            if starts[r + 1] > starts[r]:
                t = pa.ipc.open_stream(pa.py_buffer(data[starts[r]:starts[r + 1]])).read_all()
                part = t.column(mf.PART).to_numpy()
                assert ((part >= lo) & (part < hi)).all() and (part == t.column("k").to_numpy() % PARTS).all()
                n += t.num_rows
        assert n == f.rows
        rows += n
    assert rows == shuffled.rows == N


@pytest.mark.parametrize("blocks,file_bytes,ranges,want_ranges", [
    (1, sh.FILE_BYTES, None, 8),  # one map file; a range per CPU of a 2-CPU cluster, at least 8
    (1, 24 << 10, 3, 3),  # one large block cut into several map files
    (12, 8 << 10, 1, 1),  # several map files per block
    (12, sh.FILE_BYTES, PARTS, PARTS),  # a range per partition (and no more: 2 P asks too many)
    (3, 48 << 10, 2 * PARTS, PARTS),
])
def test_every_key_reaches_exactly_one_reduce_call(ray_local, tmp_path, blocks, file_bytes, ranges, want_ranges):
    ds = ray_local.data.range(N, override_num_blocks=blocks).map_batches(
        _keyed, batch_format="numpy", fn_kwargs={"partitions": PARTS})
    folder = str(tmp_path / "s")
    shuffled = sh.shuffle(ds, partitions=PARTS, folder=folder, file_bytes=file_bytes, ranges=ranges, name="t",
                          slice_bytes=1)  # map files of file_bytes, sorted in memory (test_map_task: larger ones)
    assert shuffled.ranges == want_ranges and shuffled.stats["ranges"] == want_ranges
    assert shuffled.stats["blocks_in"] == blocks and shuffled.stats["rows"] == N
    assert shuffled.stats["map_files"] == len(shuffled.files)
    assert shuffled.stats["bytes"] == sum(f.bytes for f in shuffled.files)
    if file_bytes == sh.FILE_BYTES:
        assert len(shuffled.files) == 1  # all blocks in one map task, one file
    else:  # map files follow the bytes, not the blocks; a block larger than file_bytes is cut
        assert len(shuffled.files) > blocks
        assert all(f.rows * 24 <= 2 * file_bytes for f in shuffled.files)  # k, v, _part: 24 bytes a row
    _check_files(shuffled, folder, want_ranges)

    out = sh.reduce(shuffled, _calls, with_partition=True).take_all()
    counts = collections.Counter((np.arange(N) * 7919 % 10_007).tolist())
    assert {r["k"]: r["n"] for r in out} == counts and len(out) == len(counts)  # each key once, all its rows
    assert all(r["ok"] and r["k"] % PARTS == r["part"] for r in out)  # a call gets its partition's rows only
    calls = collections.defaultdict(set)
    for r in out:
        calls[r["part"]].add(r["call"])
    assert sorted(calls) == list(range(PARTS)) and all(len(c) == 1 for c in calls.values())  # one call each

    shuffled.remove()
    assert not storage.exists(folder)


def test_a_damaged_map_file_fails_the_reduce_with_its_name(ray_local, tmp_path):
    from pipelines.orchestration import checks

    ds = ray_local.data.range(2000, override_num_blocks=2).map_batches(
        _keyed, batch_format="numpy", fn_kwargs={"partitions": PARTS})
    folder = str(tmp_path / "s")
    shuffled = sh.shuffle(ds, partitions=PARTS, folder=folder, file_bytes=8 << 10, ranges=2, slice_bytes=1)
    victim = shuffled.files[1]
    path = tmp_path / "s" / victim.name
    path.write_bytes(b"\0" * path.stat().st_size)
    with pytest.raises(mf.MapFileError) as err:  # Ray's wrapper is one too
        sh.reduce(shuffled, _calls, with_partition=True).take_all()
    assert not checks.transient(err.value)  # the stage runner does not retry it
    inner = checks.unwrapped(err.value)  # the error raised in the reduce task
    assert type(inner) is mf.MapFileError
    uri = storage.join(folder, victim.name)
    assert re.match(rf"{re.escape(uri)}: range (1: not a map file|0: damaged trailer: the record of an empty slice)",
                    str(inner))


def test_group_apply_spilling_inside_ray(ray_local, tmp_path):
    ds = ray_local.data.range(N, override_num_blocks=4).map_batches(
        lambda b: {"key": b["id"] % 997, "v": b["id"]}, batch_format="numpy")

    def sizes(rows: dict) -> dict:
        keys, counts = np.unique(rows["key"], return_counts=True)
        return {"key": keys, "n": counts, "call": np.full(len(keys), uuid.uuid4().hex)}

    out_ds, shuffled = sh.group_apply(ds, sizes, key="key", partitions=PARTS, folder=str(tmp_path / "g"),
                                      file_bytes=16 << 10, ranges=3, memory_bytes=4 << 10, slice_bytes=1)
    out = out_ds.take_all()
    assert shuffled.ranges == 3 and len(shuffled.files) > 4
    want = collections.Counter((np.arange(N) % 997).tolist())
    assert {r["key"]: r["n"] for r in out} == want and len(out) == len(want)
    by_part = collections.defaultdict(set)  # the partition of a key: hash_partition's
    for r in out:
        by_part[int(sh.hash_partition(np.array([r["key"]]), PARTS)[0])].add(r["call"])
    assert len(by_part) == PARTS and all(len(c) == 1 for c in by_part.values())
    shuffled.remove()


def test_reduce_of_an_empty_shuffle(ray_local, tmp_path):
    from ray.data.expressions import col

    ds = ray_local.data.range(10).map_batches(_keyed, batch_format="numpy", fn_kwargs={"partitions": 3})
    shuffled = sh.shuffle(ds.filter(expr=col("v") < 0), partitions=3, folder=str(tmp_path / "e"))
    assert len(shuffled.files) == 0 and shuffled.rows == 0 and shuffled.stats["map_files"] == 0
    assert shuffled.ranges == 3  # at most one per partition
    assert storage.find(str(tmp_path / "e")) == []
    assert sh.reduce(shuffled, _calls, with_partition=True).take_all() == []
    assert sh.read_partition(shuffled, 2) is None
    assert all(list(sh.read_range(shuffled, r)) == [] for r in range(3))
    shuffled.remove()  # nothing to remove: no error


def test_shuffle_on_s3_reads_ranges(ray_s3):
    ray, s3 = ray_s3
    folder = s3.bucket("shuffle") + "/work/x"
    parts = 4
    ds = ray.data.range(5000, override_num_blocks=8).map_batches(_keyed, batch_format="numpy",
                                                                fn_kwargs={"partitions": parts})
    shuffled = sh.shuffle(ds, partitions=parts, folder=folder, file_bytes=20 << 10, ranges=3, slice_bytes=1)
    names = [f.name for f in shuffled.files]
    assert len(names) > 1 and storage.find(folder) == names
    assert all(re.fullmatch(r"[0-9a-f]{2}/map-[0-9a-f]{24}\.arrows", n) for n in names)
    assert storage.listdir(folder) == sorted({n[:2] for n in names})
    seen = []
    for r, (lo, hi) in enumerate(_bounds(parts, 3)):
        got = list(sh.read_range(shuffled, r, memory_bytes=8 << 10))
        assert [p for p, _ in got] == list(range(lo, hi))
        for p, rows in got:
            assert (rows.column("k").to_numpy() % parts == p).all()
            seen.extend(rows.column("v").to_pylist())
    assert sorted(seen) == list(range(5000))
    whole = sh.read_partition(shuffled, 3)
    assert (whole.column("k").to_numpy() % parts == 3).all()
    with pytest.raises(IndexError):
        sh.read_partition(shuffled, parts)
    # what a failed map attempt may leave: removed with the files it lists, by the one listing
    storage.write_bytes(storage.join(folder, "ab", "map-orphan.arrows"), b"x")
    storage.write_bytes(storage.join(folder, "map-stray.arrows"), b"y")
    shuffled.remove()
    assert storage.find(folder) == []
