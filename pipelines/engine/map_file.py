"""The storage shuffle's map file: one object per map task's share of rows, cut into R range slices.

Layout. A shuffle of ``P`` partitions read by ``R`` reduce tasks has ``R`` partition ranges;
range ``r`` holds partitions ``[r*P//R, (r+1)*P//R)`` (``range_bounds``). A map file is the
rows ordered by partition (stable: rows of a partition keep their order), cut at the ranges'
boundaries; each non-empty range is ONE Arrow IPC stream that keeps the partition column
(int32, so the reduce task can split its range into partitions without an index per
partition), followed by a trailer: ``R`` records ``(start offset int64, crc32 uint32)``, the end
offset of the last slice (int64), then ``P``, ``R`` and a magic number (int64 each), all
little-endian. Range ``r``'s slice is ``[start_r, start_{r+1})``.

Why ranges and not partitions. The previous format had one slice per partition, and a reduce
task read the slices of its partitions with one index read and one data read per map file.
Partitions follow the data (``shuffle.partition_mb``) and so do map files
(``shuffle.map_file_mb``); slices per file follow the partitions, so the trailers (12 bytes per
partition per file) and the Arrow stream headers (a few hundred bytes per non-empty slice) grew
as the square of the data, and so did the requests once reduce tasks followed the data too.
With ``R`` fixed by the cluster, a map file holds ``R`` slices whatever the data's size: the
trailer is ``12 R + 32`` bytes, the stream headers ``R`` per file, and the reduce side makes
``2 M R`` ranged reads, linear in the data (``M`` map files). The price is the partition column
(4 bytes a row, shuffled and read once) and a reduce task that splits its range locally
(``pipelines.engine.spill``).

Integrity. The store's own checks (a PUT's stored size, a ranged read of the length asked) say
nothing about the bytes, and an Arrow IPC stream with a changed byte in a value buffer decodes
without complaint: a flipped bit would become a wrong key, a wrong dedup decision, silently. So
each record's crc32 covers ``(r, start_r, start_{r+1})`` then the slice's bytes: the reader of
``r`` checks every byte it relies on (its record's bounds and checksum, its slice; an empty
slice's checksum covers its bounds alone, so it costs no data read) and that every row's
partition lies in its range. A file that ends early, a trailer of another shuffle or format,
bounds outside the data, a slice whose checksum differs: each raises ``MapFileError`` naming
the file, the range and what is wrong. The magic (with ``P`` and ``R``) is at the trailer's end,
which only the task reading the last range reads: every shuffle's reduce has that task, so
every map file's tail is checked once per shuffle; the other tasks rely on their record's
checksum (a record of another format or shape fails its crc32) and on the read's length. It is
a ``StorageError``, not ``StoreUnavailableError``: neither the storage layer nor the stage runner
retries it (reading a damaged object again gives the same bytes); the build fails with that
line, and running it again recomputes the shuffle from the stage's input.

Why crc32 (``zlib``): the fastest checksum in this interpreter (no crc32c or xxhash wheel is a
dependency), and it catches every burst of up to 32 bits and all but 2**-32 of other damage, the
guarantee HDFS and GCS rely on; it is computed once per slice on each side over bytes already
in memory (its cost is in docs/build-corpus.md). The magic is versioned ("ELECSHV3"; version 2
had a slice per partition, version 1 no checksums): a map file of another version is refused by
name, never misread. Map files never outlive their stage attempt (the runner empties the
stage's folder before each attempt), so no reader ever meets one.
"""
from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from common import storage

PART = "_part"
MAGIC = 0x454C4543_53485633  # "ELECSHV3"
_RECORD = np.dtype([("start", "<i8"), ("crc", "<u4")])  # one per range, packed: 12 bytes
_END = struct.Struct("<q")  # the end offset of the last slice
_TRAILER_TAIL = struct.Struct("<qqq")  # partitions, ranges, magic
_COVERED = struct.Struct("<qqq")  # what a slice's crc32 covers before its bytes: r, start, end
_RERUN = "run the build again (the stage recomputes its shuffle from its input)"


class MapFileError(storage.StorageError):
    """A shuffle map file that is short, damaged or not of this shuffle (a data error: not retried)."""


def range_bounds(partitions: int, ranges: int, r: int) -> tuple[int, int]:
    """Partitions ``[lo, hi)`` of range ``r`` of ``ranges`` (contiguous, as even as integers allow)."""
    return r * partitions // ranges, (r + 1) * partitions // ranges


def range_of(part: np.ndarray, partitions: int, ranges: int) -> np.ndarray:
    """The range holding each partition number of ``part`` (``range_bounds``' inverse)."""
    # r*P//R <= p < (r+1)*P//R  <=>  r = floor(((p+1)*R - 1) / P)
    return ((np.asarray(part, np.int64) + 1) * ranges - 1) // partitions


def trailer_bytes(ranges: int) -> int:
    return _RECORD.itemsize * ranges + _END.size + _TRAILER_TAIL.size


def slice_crc(r: int, start: int, end: int, data: Any) -> int:
    """The crc32 range ``r``'s record holds: over its number and bounds, then its bytes."""
    return zlib.crc32(data, zlib.crc32(_COVERED.pack(r, start, end)))


def encode_map_file(table: pa.Table, partitions: int, ranges: int) -> bytes:
    """``table`` (with ``_part``) as one map file: ``ranges`` range slices + trailer."""
    part = table.column(PART).to_numpy(zero_copy_only=False).astype(np.int64)
    if len(part) and (part.min() < 0 or part.max() >= partitions):
        raise ValueError(f"shuffle: partition numbers must be in [0, {partitions}), got "
                         f"[{part.min()}, {part.max()}]")
    if partitions >= 2**31:  # the partition column is int32
        raise ValueError(f"shuffle: {partitions} partitions; at most 2**31 - 1 (raise shuffle.partition_mb)")
    if not 1 <= ranges <= max(1, partitions):
        raise ValueError(f"shuffle: {ranges} ranges for {partitions} partitions (want 1 to {partitions})")
    order = np.argsort(part, kind="stable")
    rows = with_part_last(table.drop_columns([PART]).take(pa.array(order)), part[order])
    counts = np.bincount(range_of(part, partitions, ranges), minlength=ranges)
    starts = np.concatenate([[0], np.cumsum(counts)])
    out = pa.BufferOutputStream()
    offsets = np.zeros(ranges + 1, dtype=np.int64)
    for r in range(ranges):
        if counts[r]:
            write_stream(out, rows.slice(int(starts[r]), int(counts[r])))
        offsets[r + 1] = out.tell()
    body = out.getvalue()
    view = memoryview(body)
    crcs = [slice_crc(r, int(offsets[r]), int(offsets[r + 1]), view[offsets[r]:offsets[r + 1]]) for r in range(ranges)]
    return b"".join([view, trailer(offsets, crcs, partitions, ranges)])


def with_part_last(rows: pa.Table, part: np.ndarray) -> pa.Table:
    """``rows`` (without ``_part``) with the partition column appended as int32: a map file's schema."""
    return rows.append_column(PART, pa.array(np.asarray(part).astype(np.int32)))


def write_stream(sink: Any, rows: pa.Table) -> None:
    """One range's slice: ``rows`` as one Arrow IPC stream written to ``sink``."""
    with pa.ipc.new_stream(sink, rows.schema) as writer:
        writer.write_table(rows)


def trailer(offsets: Sequence[int], crcs: Sequence[int], partitions: int, ranges: int) -> bytes:
    """A map file's trailer: each range's (start, crc32), the last slice's end, then ``P``, ``R``
    and the magic."""
    records = np.zeros(ranges, dtype=_RECORD)
    records["start"] = np.asarray(offsets, dtype=np.int64)[:-1]
    records["crc"] = np.asarray(crcs, dtype=np.uint32)
    return b"".join([records.tobytes(), _END.pack(int(offsets[-1])), _TRAILER_TAIL.pack(partitions, ranges, MAGIC)])


def check_map_file(data: bytes, partitions: int, ranges: int) -> None:
    """Raise ``ValueError`` if ``data`` does not end as a map file of this shuffle's shape in this
    format (a whole file, or its trailer's end)."""
    if len(data) < _TRAILER_TAIL.size:
        raise ValueError(f"not a shuffle map file ({len(data)} bytes, shorter than a trailer)")
    p, r, magic = _TRAILER_TAIL.unpack(data[-_TRAILER_TAIL.size:])
    if magic != MAGIC or p != partitions or r != ranges:
        raise ValueError(f"not a map file of this shuffle's format and shape (partitions {p}, ranges {r}, "
                         f"magic {magic & 0xFFFFFFFFFFFFFFFF:#x}; want {partitions}, {ranges}, {MAGIC:#x})")


def index_range(size: int, ranges: int, r: int) -> tuple[int, int]:
    """The bytes of a ``size``-byte map file that range ``r`` needs from its trailer: its record
    and the next slice's start (for the last range the end offset, then the trailer's tail with
    the magic: that read reaches the end of the file)."""
    first = size - trailer_bytes(ranges) + _RECORD.itemsize * r
    return first, (size if r == ranges - 1 else first + _RECORD.itemsize + _END.size)


def slice_bounds(index: bytes, partitions: int, ranges: int, r: int, *, uri: str,
                 size: int) -> tuple[int, int, int]:
    """``(start, end, crc32)`` of range ``r``'s slice from ``index`` (the bytes ``index_range``
    names); ``MapFileError`` if they cannot be trusted (a short read, another format or shape,
    bounds out of the data, an empty slice's record failing its checksum; a non-empty slice's
    checksum is checked with its bytes, ``check_slice``)."""
    begin, end = index_range(size, ranges, r)
    if len(index) != end - begin:
        raise MapFileError(f"{uri}: range {r}: truncated: the map side wrote {size} bytes, the store "
                           f"holds {storage.size(uri)}; {_RERUN}")
    if r == ranges - 1:
        try:
            check_map_file(index, partitions, ranges)
        except ValueError as exc:
            raise MapFileError(f"{uri}: range {r}: {exc}; {_RERUN}") from exc
    record = np.frombuffer(index, dtype=_RECORD, count=1)[0]
    a, crc = int(record["start"]), int(record["crc"])
    (b,) = _END.unpack_from(index, _RECORD.itemsize)  # the next record's start, or the end
    data_end = size - trailer_bytes(ranges)
    if not 0 <= a <= b <= data_end:
        raise MapFileError(f"{uri}: range {r}: damaged trailer: slice [{a}, {b}) is not within the "
                           f"{data_end} data bytes; {_RERUN}")
    if a == b and slice_crc(r, a, b, b"") != crc:  # an empty slice: its checksum covers its bounds
        raise MapFileError(f"{uri}: range {r}: damaged trailer: the record of an empty slice at {a} "
                           f"fails its crc32; {_RERUN}")
    return a, b, crc


def decode_slice(blob: Any, r: int, a: int, b: int, crc: int, *, uri: str, size: int,
                 lo: int, hi: int) -> pa.Table:
    """The rows of range ``r``'s slice ``blob`` (bytes ``[a, b)`` of the file), checked: its
    length, its crc32 and its rows' partitions (all in ``[lo, hi)``)."""
    if len(blob) != b - a:  # the index was whole a moment ago: the object changed since
        raise MapFileError(f"{uri}: range {r}: truncated: the map side wrote {size} bytes, the store "
                           f"holds {storage.size(uri)}; {_RERUN}")
    got = slice_crc(r, a, b, blob)
    if got != crc:
        raise MapFileError(f"{uri}: range {r}: damaged: bytes [{a}, {b}) have crc32 {got:#010x}, "
                           f"the trailer says {crc:#010x}; {_RERUN}")
    table = pa.ipc.open_stream(pa.py_buffer(blob)).read_all()
    part = table.column(PART).to_numpy(zero_copy_only=False)
    if len(part) and (part.min() < lo or part.max() >= hi):
        raise MapFileError(f"{uri}: range {r}: rows of partitions outside [{lo}, {hi}); {_RERUN}")
    return table


@dataclass(frozen=True)
class MapFile:
    """One map file of a shuffle: its name under the shuffle's folder, its bytes and rows."""
    name: str
    bytes: int
    rows: int


class MapFiles(Sequence):
    """The map files of a shuffle, in order, held compactly: the names as one fixed-width bytes
    array, sizes and row counts as int64 arrays (about 54 bytes a file, against about 220 as
    ``MapFile`` objects). Every reduce task receives the list with its arguments, so at 80,000
    map files (10 TB) a task unpickles ~4 MB instead of ~43 MB (measured; docs/build-corpus.md):
    as objects, the list was what still grew with the data in a reduce task's memory. Indexing
    gives a ``MapFile``; slicing and ``take`` a ``MapFiles``."""

    def __init__(self, files: Iterable[MapFile] = (), *, _arrays: tuple[np.ndarray, ...] | None = None):
        if _arrays is not None:
            self._names, self._bytes, self._rows = _arrays
            return
        files = list(files)
        self._names = np.array([f.name.encode() for f in files], dtype=np.bytes_) if files else np.zeros(0, "S1")
        self._bytes = np.array([f.bytes for f in files], dtype=np.int64)
        self._rows = np.array([f.rows for f in files], dtype=np.int64)

    def __len__(self) -> int:
        return len(self._bytes)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.take(np.arange(len(self))[i])
        return MapFile(self._names[i].decode(), int(self._bytes[i]), int(self._rows[i]))

    def take(self, order: np.ndarray) -> "MapFiles":
        return MapFiles(_arrays=(self._names[order], self._bytes[order], self._rows[order]))

    @staticmethod
    def joined(parts: Sequence["MapFiles"]) -> "MapFiles":
        """The files of ``parts`` in one list ordered by name (how the driver gathers the map
        tasks' lists without a Python object per file)."""
        parts = [p for p in parts if len(p)]
        if not parts:
            return MapFiles()
        width = max(p._names.dtype.itemsize for p in parts)
        names = np.concatenate([p._names.astype(f"S{width}") for p in parts])
        order = np.argsort(names, kind="stable")
        return MapFiles(_arrays=(names[order], np.concatenate([p._bytes for p in parts])[order],
                                 np.concatenate([p._rows for p in parts])[order]))

    def names(self) -> Iterator[str]:
        return (n.decode() for n in self._names)

    @property
    def total_bytes(self) -> int:
        return int(self._bytes.sum())

    @property
    def total_rows(self) -> int:
        return int(self._rows.sum())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MapFiles):
            return NotImplemented
        return all(np.array_equal(a, b) for a, b in zip((self._names, self._bytes, self._rows),
                                                        (other._names, other._bytes, other._rows)))

    def __hash__(self) -> int:
        return hash((self._names.tobytes(), self._bytes.tobytes(), self._rows.tobytes()))

    def __repr__(self) -> str:
        return f"MapFiles({len(self)} files, {self.total_bytes} bytes)"
