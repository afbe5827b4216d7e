"""The shuffle's map file (format v3): R range slices, each one checksummed Arrow IPC stream that
keeps ``_part``, and a trailer; what a reduce task refuses (short, damaged, of another format).

Every expectation here is computed independently of the module: trailers are parsed with
``struct``, checksums recomputed with ``zlib``, ranges and rows derived with numpy and plain
Python from the layout the module's docstring states.
"""
from __future__ import annotations

import re
import struct
import zlib

import numpy as np
import pyarrow as pa
import pytest

from common import storage
from pipelines.engine import map_file as mf
from pipelines.engine import shuffle as sh

MAGIC_V3 = b"ELECSHV3"
MAGIC_V2 = 0x454C4543_53485632  # "ELECSHV2": one slice per partition, no _part column
RERUN = "run the build again (the stage recomputes its shuffle from its input)"


def _bounds(partitions: int, ranges: int) -> list[tuple[int, int]]:
    """Range r = partitions [r*P//R, (r+1)*P//R), written out here rather than asked of the module."""
    return [(r * partitions // ranges, (r + 1) * partitions // ranges) for r in range(ranges)]


def _trailer(data: bytes, ranges: int) -> tuple[list[int], list[int], tuple[int, int, int]]:
    """(slice starts + the end offset, crc32 per slice, (partitions, ranges, magic)), by struct alone:
    R records (<q start, <I crc32; 12 bytes), <q end, then <qqq (P, R, magic)."""
    tail = data[-(12 * ranges + 8 + 24):]
    records = [struct.unpack_from("<qI", tail, 12 * r) for r in range(ranges)]
    (end,) = struct.unpack_from("<q", tail, 12 * ranges)
    return [s for s, _ in records] + [end], [c for _, c in records], struct.unpack("<qqq", tail[-24:])


def _crc(r: int, start: int, end: int, blob: bytes) -> int:
    """crc32 of (r, start, end) as <qqq, then the slice's bytes: zlib alone."""
    return zlib.crc32(blob, zlib.crc32(struct.pack("<qqq", r, start, end)))


def _is_a_data_error(exc: BaseException) -> bool:
    """Neither the storage layer nor the stage runner retries it (a damaged object stays damaged)."""
    from common import retry
    from pipelines.orchestration import checks

    return (isinstance(exc, storage.StorageError) and not isinstance(exc, storage.StoreUnavailableError)
            and not retry.transient(exc) and not checks.transient(exc))


# ---------------------------------------------------------------------------------------------
# Ranges


def test_range_bounds_and_range_of_are_inverses():
    shapes = [(p, r) for p in (1, 2, 3, 7, 10, 12, 64, 97, 100, 4096) for r in (1, 2, 3, 5, 8, 13, 64, p)
              if r <= p]
    assert (7, 3) in shapes and (97, 8) in shapes and (10, 10) in shapes  # P % R != 0, and R == P
    for partitions, ranges in shapes:
        got = [mf.range_bounds(partitions, ranges, r) for r in range(ranges)]
        assert got == _bounds(partitions, ranges)
        # contiguous, every partition once, none empty, as even as integers allow
        assert got[0][0] == 0 and got[-1][1] == partitions
        assert all(a[1] == b[0] for a, b in zip(got, got[1:]))
        sizes = [hi - lo for lo, hi in got]
        assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1
        # range_of: the range holding each partition, found here by search
        want = np.array([next(r for r, (lo, hi) in enumerate(got) if lo <= p < hi) for p in range(partitions)])
        owner = mf.range_of(np.arange(partitions), partitions, ranges)
        assert owner.tolist() == want.tolist()
        assert mf.range_of(np.arange(partitions, dtype=np.int32), partitions, ranges).tolist() == want.tolist()
    assert mf.range_of(np.arange(9), 9, 9).tolist() == list(range(9))  # R == P: the identity
    assert mf.range_of(np.arange(9), 9, 1).tolist() == [0] * 9


# ---------------------------------------------------------------------------------------------
# Layout

# Keys whose 8 bytes occur once in a map file: a flipped byte among them changes one value.
_BASE = 0x1122334455667700
P, R = 10, 4  # ranges [0, 2) [2, 5) [5, 7) [7, 10): 10 % 4 != 0
EMPTY_RANGE = 2


def _parts(rows: int, seed: int = 3) -> np.ndarray:
    part = np.random.default_rng(seed).integers(0, P, rows)
    part[(part == 5) | (part == 6)] = 9  # range 2 (partitions 5 and 6) stays empty
    part[:P] = [0, 1, 2, 3, 4, 7, 8, 9, 0, 1]  # every other partition has rows
    return part


def _table(rows: int = 400, chunks: int = 1, seed: int = 3) -> tuple[pa.Table, np.ndarray]:
    """Rows with a unique 8-byte key, a string and ``_part`` (int64, not the last column), in
    ``chunks`` record batches."""
    part = _parts(rows, seed)
    full = pa.table({"k": _BASE + np.arange(rows, dtype=np.int64), mf.PART: part,
                     "s": [f"row{i}" for i in range(rows)]})
    edges = [i * rows // chunks for i in range(chunks + 1)]
    return pa.Table.from_batches([b for a, z in zip(edges, edges[1:]) for b in full.slice(a, z - a).to_batches()]), part


@pytest.mark.parametrize("chunks", [1, 3])
def test_a_map_file_holds_one_checksummed_slice_per_range(chunks):
    table, part = _table(chunks=chunks)
    assert table.column("k").num_chunks == chunks
    data = mf.encode_map_file(table, P, R)
    mf.check_map_file(data, P, R)
    for shape in [(P + 1, R), (P, R - 1)]:
        with pytest.raises(ValueError, match=rf"\(partitions {P}, ranges {R}, magic 0x454c454353485633; "
                                             rf"want {shape[0]}, {shape[1]}, 0x454c454353485633\)"):
            mf.check_map_file(data, *shape)
    offsets, crcs, (partitions, ranges, magic) = _trailer(data, R)
    assert (partitions, ranges) == (P, R) and magic.to_bytes(8, "big") == MAGIC_V3 and mf.MAGIC == magic
    assert mf.trailer_bytes(R) == 12 * R + 32 and len(data) == offsets[-1] + 12 * R + 32
    assert offsets[0] == 0 and offsets == sorted(offsets)
    assert offsets[EMPTY_RANGE] == offsets[EMPTY_RANGE + 1]  # an empty range: an empty slice
    for r, (lo, hi) in enumerate(_bounds(P, R)):
        blob = data[offsets[r]:offsets[r + 1]]
        assert crcs[r] == _crc(r, offsets[r], offsets[r + 1], blob)
        want = np.concatenate([np.flatnonzero(part == p) for p in range(lo, hi)])  # by partition, stable
        if r == EMPTY_RANGE:
            assert blob == b"" and len(want) == 0
            continue
        source = pa.BufferReader(blob)
        got = pa.ipc.open_stream(source).read_all()
        assert source.tell() == len(blob)  # exactly one stream, which ends with the slice
        # the rows, with their partition kept as int32 (last), sorted by partition, in input order within
        assert got.schema.names == ["k", "s", mf.PART] and got.schema.field(mf.PART).type == pa.int32()
        assert got.column("k").to_numpy().tolist() == (_BASE + want).tolist()
        assert got.column("s").to_pylist() == [f"row{i}" for i in want]
        assert got.column(mf.PART).to_numpy().tolist() == part[want].tolist()


def test_a_map_file_built_by_hand_from_the_documented_layout_is_read(tmp_path):
    """The format is what the docstring says: a file assembled here with pyarrow, struct and zlib
    has the module's trailer shape and slice contents, and read_range reads it; a slice holding a
    row of another range (with a valid checksum) is refused."""
    table, part = _table(rows=120)
    order = np.argsort(part, kind="stable")
    rows = pa.table({"k": table.column("k").take(order), "s": table.column("s").take(order),
                     mf.PART: pa.array(part[order], pa.int32())})
    owner = np.array([r for r, (lo, hi) in enumerate(_bounds(P, R)) for _ in range(lo, hi)])[part[order]]

    def build(rows_of) -> bytes:
        body, starts = b"", []
        for r in range(R):
            starts.append(len(body))
            piece = rows_of(r)
            if piece.num_rows:
                sink = pa.BufferOutputStream()
                with pa.ipc.new_stream(sink, piece.schema) as w:
                    w.write_table(piece)
                body += sink.getvalue().to_pybytes()
        starts.append(len(body))
        records = b"".join(struct.pack("<qI", starts[r], _crc(r, starts[r], starts[r + 1],
                                                               body[starts[r]:starts[r + 1]]))
                           for r in range(R))
        return body + records + struct.pack("<q", starts[-1]) + struct.pack("<qqq", P, R, 0x454C4543_53485633)

    by_hand = build(lambda r: rows.filter(pa.array(owner == r)))
    theirs = mf.encode_map_file(table, P, R)
    # (Arrow may lay out a slice's buffers differently from a filtered copy: compare what they hold)
    mine_offsets, _, mine_tail = _trailer(by_hand, R)
    their_offsets, _, their_tail = _trailer(theirs, R)
    assert mine_tail == their_tail == (P, R, mf.MAGIC) and len(by_hand) == mine_offsets[-1] + 12 * R + 32
    for r in range(R):
        mine = by_hand[mine_offsets[r]:mine_offsets[r + 1]]
        their = theirs[their_offsets[r]:their_offsets[r + 1]]
        assert bool(mine) == bool(their)
        if mine:
            assert pa.ipc.open_stream(pa.py_buffer(mine)).read_all().equals(
                pa.ipc.open_stream(pa.py_buffer(their)).read_all())
    storage.write_bytes(str(tmp_path / "map-h.arrows"), by_hand)
    shuffled = sh.Shuffled(str(tmp_path), P, (sh.MapFile("map-h.arrows", len(by_hand), 120),), R)
    for r, (lo, hi) in enumerate(_bounds(P, R)):
        got = {p: t.column("k").to_pylist() for p, t in sh.read_range(shuffled, r)}
        want = {p: (_BASE + np.flatnonzero(part == p)).tolist() for p in range(lo, hi) if (part == p).any()}
        assert got == want

    # One row of range 0 moved into range 1's slice: checksums valid, the partition check refuses it.
    moved = int(np.flatnonzero(owner == 0)[0])
    wrong = build(lambda r: rows.filter(pa.array((owner == r) & (np.arange(len(owner)) != moved)
                                                 | ((r == 1) & (np.arange(len(owner)) == moved)))))
    storage.write_bytes(str(tmp_path / "map-h.arrows"), wrong)
    shuffled = sh.Shuffled(str(tmp_path), P, (sh.MapFile("map-h.arrows", len(wrong), 120),), R)
    uri = str(tmp_path / "map-h.arrows")
    with pytest.raises(mf.MapFileError) as err:
        list(sh.read_range(shuffled, 1))
    assert str(err.value) == f"{uri}: range 1: rows of partitions outside [2, 5); {RERUN}"
    assert _is_a_data_error(err.value)


def test_partition_numbers_and_range_counts_are_checked():
    with pytest.raises(ValueError, match=r"^shuffle: partition numbers must be in \[0, 5\), got \[0, 5\]$"):
        mf.encode_map_file(pa.table({"k": [1, 2], mf.PART: [0, 5]}), 5, 2)
    with pytest.raises(ValueError, match=r"^shuffle: partition numbers must be in \[0, 5\), got \[-1, 3\]$"):
        mf.encode_map_file(pa.table({"k": [1, 2], mf.PART: [3, -1]}), 5, 2)
    for ranges in (0, -1, 6):
        with pytest.raises(ValueError, match=rf"^shuffle: {ranges} ranges for 5 partitions \(want 1 to 5\)$"):
            mf.encode_map_file(pa.table({"k": [1], mf.PART: [0]}), 5, ranges)
    # the written _part column is int32: 2**31 partitions and more are refused, naming the setting
    # that makes fewer (larger) partitions; 2**31 - 1 is the largest number that is written
    for partitions in (2**31, 2**31 + 5, 2**40):
        for part in ([0, 1], [0, 2**31 - 1]):
            with pytest.raises(ValueError, match=rf"^shuffle: {partitions} partitions; at most 2\*\*31 - 1 "
                                                 r"\(raise shuffle\.partition_mb\)$"):
                mf.encode_map_file(pa.table({"k": [1, 2], mf.PART: pa.array(part, pa.int64())}), partitions, 2)
    top = 2**31 - 1
    data = mf.encode_map_file(pa.table({"k": [1, 2, 3], mf.PART: pa.array([top - 1, 0, 7], pa.int64())}), top, 2)
    offsets, _, tail = _trailer(data, 2)
    assert tail == (top, 2, mf.MAGIC)
    got = [pa.ipc.open_stream(pa.py_buffer(data[offsets[r]:offsets[r + 1]])).read_all() for r in range(2)]
    assert got[0].schema.field(mf.PART).type == pa.int32()
    assert got[0].column(mf.PART).to_pylist() == [0, 7] and got[0].column("k").to_pylist() == [2, 3]
    assert got[1].column(mf.PART).to_pylist() == [top - 1] and got[1].column("k").to_pylist() == [1]
    # R == P and R == 1 are both valid; an empty table gives R empty slices and a trailer
    for ranges in (1, 5):
        data = mf.encode_map_file(pa.table({"k": pa.array([], pa.int64()), mf.PART: pa.array([], pa.int64())}), 5,
                                  ranges)
        offsets, crcs, tail = _trailer(data, ranges)
        assert len(data) == 12 * ranges + 32 and offsets == [0] * (ranges + 1) and tail == (5, ranges, mf.MAGIC)
        assert crcs == [_crc(r, 0, 0, b"") for r in range(ranges)]


def test_index_range_names_a_record_and_the_next_start_or_the_tail():
    size = 1000
    for ranges in (1, 2, 7):
        trailer = 12 * ranges + 32
        for r in range(ranges):
            a, b = mf.index_range(size, ranges, r)
            assert a == size - trailer + 12 * r
            assert b - a == (12 + 8 + 24 if r == ranges - 1 else 20) and (b == size) == (r == ranges - 1)


# ---------------------------------------------------------------------------------------------
# Integrity: what read_range refuses


def _one_file(folder, rows: int = 400) -> tuple[sh.Shuffled, bytes, np.ndarray, str]:
    """A one-map-file shuffle written to ``folder`` without Ray (what a map task writes)."""
    table, part = _table(rows)
    data = mf.encode_map_file(table, P, R)
    uri = storage.join(str(folder), "map-a.arrows")
    storage.write_bytes(uri, data)
    return sh.Shuffled(str(folder), P, (sh.MapFile("map-a.arrows", len(data), rows),), R), data, part, uri


def _expected(part: np.ndarray, r: int) -> dict[int, list[int]]:
    lo, hi = _bounds(P, R)[r]
    return {p: (_BASE + np.flatnonzero(part == p)).tolist() for p in range(lo, hi) if (part == p).any()}


def _read(shuffled: sh.Shuffled, r: int, **kwargs) -> dict[int, list[int]]:
    return {p: t.column("k").to_pylist() for p, t in sh.read_range(shuffled, r, **kwargs)}


def test_an_intact_map_file_reads_back_every_range(tmp_path):
    shuffled, _, part, _ = _one_file(tmp_path)
    seen = {}
    for r in range(R):
        got = _read(shuffled, r)
        assert got == _expected(part, r)
        seen.update(got)
    assert sorted(k for ks in seen.values() for k in ks) == (_BASE + np.arange(400)).tolist()
    assert _read(shuffled, EMPTY_RANGE) == {}
    for bad in (-1, R):
        with pytest.raises(IndexError):
            list(sh.read_range(shuffled, bad))


# Cut points, counted back from the file's end (trailer: ... record R-1 [-44, -32), end [-32, -24),
# P [-24, -16), R [-16, -8), magic [-8, 0)).
@pytest.mark.parametrize("cut_from_end", [1, 5, 20, 30, 33, 37, 40, 50, 12 * R + 32, 12 * R + 33, "half", "all"])
def test_a_truncated_map_file_is_named_with_its_size(tmp_path, cut_from_end):
    shuffled, data, part, uri = _one_file(tmp_path)
    size = len(data)
    cut = {"half": size // 2, "all": 0}.get(cut_from_end, size - cut_from_end if isinstance(cut_from_end, int) else 0)
    (tmp_path / "map-a.arrows").write_bytes(data[:cut])
    # Range r < R-1 reads its record and the next start, [size - 12R - 32 + 12r, +20), then its
    # slice (before the trailer); range R-1 reads from its record to the end (where the magic is).
    for r in range(R):
        index_end = size - (12 * R + 32) + 12 * r + 20
        if r < R - 1 and index_end <= cut:  # its record and slice are whole: its rows, checked
            assert _read(shuffled, r) == _expected(part, r)
            continue
        with pytest.raises(mf.MapFileError) as err:
            list(sh.read_range(shuffled, r))
        assert str(err.value) == (f"{uri}: range {r}: truncated: the map side wrote {size} bytes, "
                                  f"the store holds {cut}; {RERUN}")
        assert _is_a_data_error(err.value)
    # the last range always names the file; a cut in the tail spares the others
    readable = [r for r in range(R - 1) if size - (12 * R + 32) + 12 * r + 20 <= cut]
    assert readable == (list(range(R - 1)) if cut_from_end in (1, 5, 20, 30, 33)
                        else [0, 1] if cut_from_end in (37, 40) else [0] if cut_from_end == 50 else [])


@pytest.mark.parametrize("victim_range", [1, R - 1])
def test_a_flipped_byte_in_a_slice_fails_its_checksum(tmp_path, victim_range):
    shuffled, data, part, uri = _one_file(tmp_path)
    offsets, crcs, _ = _trailer(data, R)
    lo, hi = _bounds(P, R)[victim_range]
    victim = int(np.flatnonzero((part >= lo) & (part < hi))[5])
    key = struct.pack("<q", _BASE + victim)
    at = data.index(key)
    assert data.count(key) == 1 and offsets[victim_range] <= at < offsets[victim_range + 1]
    damaged = bytearray(data)
    damaged[at] ^= 0x10
    (tmp_path / "map-a.arrows").write_bytes(bytes(damaged))
    a, b = offsets[victim_range], offsets[victim_range + 1]
    # Arrow alone reads the damaged slice without complaint: one key silently changed.
    silently = pa.ipc.open_stream(pa.py_buffer(bytes(damaged[a:b]))).read_all()
    keys = silently.column("k").to_pylist()
    assert _BASE + victim not in keys and (_BASE + victim) ^ 0x10 in keys
    assert silently.num_rows == int(((part >= lo) & (part < hi)).sum())
    got_crc = _crc(victim_range, a, b, bytes(damaged[a:b]))
    assert got_crc != crcs[victim_range]
    with pytest.raises(mf.MapFileError) as err:
        list(sh.read_range(shuffled, victim_range))
    assert str(err.value) == (f"{uri}: range {victim_range}: damaged: bytes [{a}, {b}) have crc32 "
                              f"{got_crc:#010x}, the trailer says {crcs[victim_range]:#010x}; {RERUN}")
    assert re.search(r"crc32 0x[0-9a-f]{8}, the trailer says 0x[0-9a-f]{8}", str(err.value))
    assert _is_a_data_error(err.value)
    for r in range(R):  # the other slices are intact and still read
        if r != victim_range:
            assert _read(shuffled, r) == _expected(part, r)


def _damage_trailer(tmp_path, field: str):
    shuffled, data, part, uri = _one_file(tmp_path)
    offsets, crcs, _ = _trailer(data, R)
    records = len(data) - (12 * R + 32)
    at, bit = {"start": (records + 12 * 1, 0x01),  # range 1's start (range 0's end too)
               "crc": (records + 12 * 0 + 8, 0x01),  # range 0's crc32
               "empty": (records + 12 * EMPTY_RANGE + 8, 0x01),  # the empty range's crc32
               "end": (len(data) - 32 + 2, 0x40),  # the end offset, pushed past the data
               "partitions": (len(data) - 24, 0x01),
               "ranges": (len(data) - 16, 0x02),
               "magic": (len(data) - 8, 0x01)}[field]  # "ELECSHV3" -> "ELECSHV2"
    damaged = bytearray(data)
    damaged[at] ^= bit
    (tmp_path / "map-a.arrows").write_bytes(bytes(damaged))
    return shuffled, data, bytes(damaged), part, uri, offsets, crcs


@pytest.mark.parametrize("field", ["start", "crc", "empty", "end", "partitions", "ranges", "magic"])
def test_a_flipped_byte_in_the_trailer_is_caught(tmp_path, field):
    shuffled, data, damaged, part, uri, offsets, crcs = _damage_trailer(tmp_path, field)
    new_offsets, new_crcs, tail = _trailer(damaged, R)
    data_end = len(data) - (12 * R + 32)
    want: dict[int, str] = {}
    if field == "start":  # range 1's slice moved by a byte: both ranges beside the boundary fail
        s = new_offsets[1]
        assert s == offsets[1] ^ 1
        for r, (a, b) in [(0, (0, s)), (1, (s, offsets[2]))]:
            got = _crc(r, a, b, data[a:b])
            want[r] = f"damaged: bytes [{a}, {b}) have crc32 {got:#010x}, the trailer says {crcs[r]:#010x}"
    elif field == "crc":
        want[0] = (f"damaged: bytes [0, {offsets[1]}) have crc32 {crcs[0]:#010x}, "
                   f"the trailer says {new_crcs[0]:#010x}")
    elif field == "empty":  # no data read for an empty slice, its record still checked
        want[EMPTY_RANGE] = (f"damaged trailer: the record of an empty slice at {offsets[EMPTY_RANGE]} "
                             f"fails its crc32")
    elif field == "end":
        assert new_offsets[-1] == offsets[-1] + 0x400000
        want[R - 1] = (f"damaged trailer: slice [{offsets[R - 1]}, {new_offsets[-1]}) is not within the "
                       f"{data_end} data bytes")
    else:  # the tail: only the last range reads it, and refuses the file by name
        p, r_, magic = tail
        assert (p, r_, magic) != (P, R, mf.MAGIC)
        if field == "magic":
            assert magic.to_bytes(8, "big") == b"ELECSHV2"
        want[R - 1] = (f"not a map file of this shuffle's format and shape (partitions {p}, ranges {r_}, "
                       f"magic {magic:#x}; want {P}, {R}, 0x454c454353485633)")
    for r in range(R):
        if r not in want:
            assert _read(shuffled, r) == _expected(part, r)
            continue
        with pytest.raises(mf.MapFileError) as err:
            list(sh.read_range(shuffled, r))
        assert str(err.value) == f"{uri}: range {r}: {want[r]}; {RERUN}"
        assert _is_a_data_error(err.value)


def _encode_v2(table: pa.Table, partitions: int) -> bytes:
    """A version-2 map file: one slice per partition (no _part column), P records (<qI), the end
    offset, then (P, magic "ELECSHV2")."""
    part = table.column(mf.PART).to_numpy()
    rows = table.drop_columns([mf.PART])
    body, starts = b"", []
    for p in range(partitions):
        starts.append(len(body))
        idx = np.flatnonzero(part == p)
        if len(idx):
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, rows.schema) as w:
                w.write_table(rows.take(pa.array(idx)))
            body += sink.getvalue().to_pybytes()
    starts.append(len(body))
    records = b"".join(struct.pack("<qI", starts[p], _crc(p, starts[p], starts[p + 1], body[starts[p]:starts[p + 1]]))
                       for p in range(partitions))
    return body + records + struct.pack("<q", starts[-1]) + struct.pack("<qq", partitions, MAGIC_V2)


def test_a_map_file_of_the_previous_format_is_refused_by_name(tmp_path):
    assert MAGIC_V2.to_bytes(8, "big") == b"ELECSHV2"
    part = np.arange(200) % 4
    old = _encode_v2(pa.table({"k": _BASE + np.arange(200, dtype=np.int64), mf.PART: part}), 4)
    (end, p_, magic) = struct.unpack("<qqq", old[-24:])  # what a v3 reader finds at the tail
    assert (p_, magic) == (4, MAGIC_V2)
    storage.write_bytes(str(tmp_path / "map-old.arrows"), old)
    uri = str(tmp_path / "map-old.arrows")
    shuffled = sh.Shuffled(str(tmp_path), 4, (sh.MapFile("map-old.arrows", len(old), 200),), 4)
    with pytest.raises(mf.MapFileError) as err:
        list(sh.read_range(shuffled, 3))
    assert str(err.value) == (f"{uri}: range 3: not a map file of this shuffle's format and shape (partitions "
                              f"{end}, ranges 4, magic 0x454c454353485632; want 4, 4, 0x454c454353485633); {RERUN}")
    assert _is_a_data_error(err.value)
    # Readers of earlier ranges do not read the magic: the 20 bytes where their record would be
    # do not hold one whose bounds and crc32 agree.
    for r in range(3):
        with pytest.raises(mf.MapFileError) as err:
            list(sh.read_range(shuffled, r))
        assert re.match(rf"{re.escape(uri)}: range {r}: damaged trailer: slice \[-?\d+, -?\d+\) is not within",
                        str(err.value))
        assert _is_a_data_error(err.value)


def test_a_zeroed_map_file_is_refused(tmp_path):
    """Same size, other bytes (a store that returned zeros)."""
    shuffled, data, _, uri = _one_file(tmp_path)
    (tmp_path / "map-a.arrows").write_bytes(b"\0" * len(data))
    with pytest.raises(mf.MapFileError) as err:
        list(sh.read_range(shuffled, R - 1))
    assert str(err.value) == (f"{uri}: range {R - 1}: not a map file of this shuffle's format and shape "
                              f"(partitions 0, ranges 0, magic 0x0; want {P}, {R}, 0x454c454353485633); {RERUN}")
    for r in range(R - 1):  # record (0, 0) and next start 0: an empty slice whose crc32 is not 0
        assert _crc(r, 0, 0, b"") != 0
        with pytest.raises(mf.MapFileError) as err:
            list(sh.read_range(shuffled, r))
        assert str(err.value) == (f"{uri}: range {r}: damaged trailer: the record of an empty slice at 0 "
                                  f"fails its crc32; {RERUN}")
        assert _is_a_data_error(err.value)


def test_map_file_error_is_a_storage_error_not_retried():
    exc = mf.MapFileError("x")
    assert sh.MapFileError is mf.MapFileError
    assert _is_a_data_error(exc)
    wrapped = RuntimeError("reduce failed")
    wrapped.__cause__ = exc
    from pipelines.orchestration import checks

    assert not checks.transient(wrapped)


def test_map_files_keep_every_entry_compactly():
    """MapFiles against the list of MapFile it was made from: indexing, slicing, take, iteration,
    totals, equality, hashing and a pickle round trip give the same entries, held in three arrays
    (a third of the memory of the MapFile objects, by sys.getsizeof)."""
    import pickle
    import sys

    rng = np.random.default_rng(5)
    files = [sh.MapFile(f"{i % 256:02x}/map-{rng.bytes(12).hex()}.arrows", int(rng.integers(20, 1 << 30)),
                        int(rng.integers(0, 1 << 20))) for i in range(3000)]
    compact = sh.MapFiles(files)
    assert len(compact) == 3000 and list(compact) == files
    assert compact[17] == files[17] and compact[-1] == files[-1]
    assert list(compact[100:110]) == files[100:110] and list(compact[::-7]) == files[::-7]
    order = rng.permutation(3000)
    assert list(compact.take(order)) == [files[i] for i in order]
    assert (compact.total_bytes, compact.total_rows) == (sum(f.bytes for f in files), sum(f.rows for f in files))
    back = pickle.loads(pickle.dumps(compact))
    assert back == compact and hash(back) == hash(compact) and list(back) == files
    assert back != compact.take(order)
    held = sum(a.nbytes for a in (compact._names, compact._bytes, compact._rows))  # three arrays, no objects
    as_objects = sum(sys.getsizeof(f) + sys.getsizeof(f.__dict__) + sys.getsizeof(f.name) + sys.getsizeof(f.bytes)
                     + sys.getsizeof(f.rows) for f in files)
    assert held == 3000 * (len(files[0].name) + 16) and held < as_objects / 3
    with pytest.raises(IndexError):
        compact[3000]
    empty = sh.MapFiles(())
    assert len(empty) == 0 and list(empty) == [] and empty.total_bytes == 0
    # Shuffled keeps any sequence of MapFile as MapFiles, equal whichever way it was given
    a, b = sh.Shuffled("f", 8, tuple(files), 2), sh.Shuffled("f", 8, compact, 2)
    assert isinstance(a.files, sh.MapFiles) and a == b and a.rows == compact.total_rows
    assert list(compact.names()) == [f.name for f in files]


def test_joined_map_files_are_every_task_s_list_in_name_order():
    """How the driver gathers the map tasks' lists: the union, sorted by name as str sorts, with
    each file's bytes and rows still beside its name (names of different widths too)."""
    rng = np.random.default_rng(9)
    files = [sh.MapFile(f"{rng.integers(0, 256):02x}/map-{rng.bytes(int(rng.integers(1, 13))).hex()}.arrows",
                        int(rng.integers(1, 1 << 40)), int(rng.integers(0, 1 << 20))) for _ in range(500)]
    cuts = [0, 3, 3, 170, 420, 500]  # an empty task list among them
    lists = [sh.MapFiles(files[a:b]) for a, b in zip(cuts, cuts[1:])]
    joined = sh.MapFiles.joined(lists)
    assert list(joined) == sorted(files, key=lambda f: f.name)
    assert sh.MapFiles.joined([]) == sh.MapFiles() and len(sh.MapFiles.joined([sh.MapFiles()])) == 0
