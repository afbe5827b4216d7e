"""The shuffle of build-corpus: map tasks write partitioned files to the store, reduce tasks read
a contiguous range of partitions each (what Spark's sort shuffle and datatrove's bucketed files do).

Why not Ray Data's shuffles (``benchmarks/corpus_scale.py --blocks`` runs the four side by side
on cluster-sized block counts; the figures are in docs/build-corpus.md). Its pull-based sort shuffle (the
previous engine) makes one reducer per input block: M blocks create M x M objects owned by the
driver, quadratic in time and in the driver's memory. Its hash shuffle takes ``num_partitions``
but starts a pool of aggregator actors for every shuffle and feeds them one actor call per
block piece. Ray 2.60's default (``SHUFFLE_V2``) grows linearly, but still costs seconds per
shuffle (connected components runs a dozen) and keeps the shuffled rows in the object store,
where a lost node takes them with it and a big shuffle spills. Here the rows go to the store
the build writes to anyway: a lost node costs only its running tasks, and a small shuffle costs
a fraction of a second.

Map side. The rows to shuffle are a Ray Dataset with an int64 column ``_part`` in ``[0, P)``.
The driver streams the dataset's blocks (``iter_internal_ref_bundles``: it holds object
references and block sizes, never rows) and groups consecutive blocks until they hold about
``file_bytes``; each group becomes one map task, which concatenates its blocks, orders the rows
by partition (stable) and writes ONE object: the non-empty partitions one after another, each an
Arrow IPC stream, then a trailer (see Integrity). Objects created per shuffle: about (bytes
shuffled) / ``file_bytes``, whatever the number of blocks or partitions. A map file is named by
a hash of its content, so a retried task rewrites the same object; readers open only the files
the driver collected, so an orphan of a failed attempt is never read.

Reduce side. ``reduce`` runs one task per contiguous range of partitions (``reduce_tasks``): as
many tasks as the shuffle's bytes need at ``TASK_BYTES`` each (at least ``MIN_REDUCE_TASKS``, at
most one per partition), so their number follows the data, not the partition count. A task
reading partitions ``[lo, hi)`` makes two ranged reads per map file whatever ``hi - lo``
(``read_partitions``; ``storage.read_ranges``: concurrent ranged GETs): the index, i.e. the
trailer records of its partitions and the next slice's start (12 bytes per partition + 8), then
the byte range ``[start_lo, start_hi)``, where its slices lie one after another; it checks each
slice, concatenates a partition's slices from every file and hands them to the reduce function
one partition at a time. Bytes read per shuffle = the map files' bytes once (each record and
slice read by the one task that owns it) plus 8 bytes per (map file, task boundary): never the
trailer to its end (the earlier design read from the partition's record to the end, about
12 x map files x P**2 / 2 bytes of trailer, more than the data at large P).

How the requests grow. Per shuffle: M PUTs (M map files, about bytes / ``FILE_BYTES``), no LIST,
and 2 x M x R GETs for R reduce tasks (about bytes / ``TASK_BYTES``). M and R both follow the
data, so the GETs grow as the SQUARE of the bytes shuffled (10x the data: ~100x the GETs), each
GET reading less (``FILE_BYTES`` / R). ``FILE_BYTES`` and ``TASK_BYTES`` are large to keep the
constant small (2 / (``FILE_BYTES`` x ``TASK_BYTES``) per byte squared); a reduce task holds up to
``TASK_BYTES`` of slices, or one partition where a partition is larger. Making it linear needs a
step that bounds the files each reduce task reads: push-based merging (Magnet; Ray's
push-based shuffle), where the map outputs are merged per partition range into a few files
before the reduce side, so a reduce task reads O(1) objects (GETs ~ M x merge groups + R); or a
fixed number of partition ranges with streaming merges of sorted runs (datatrove's MinHash
buckets). Neither is built yet. ``benchmarks/corpus_scale.py --simulate`` counts the requests and
bytes at the map-file, partition and task counts of given sizes.

The driver holds the list of map files: O(map files), never O(blocks x partitions).

Every read and write goes through ``common.storage`` (retried on transient store errors); the
files live under the stage's cache folder, which the runner empties before an attempt and
deletes once the stage's outputs are written.

Integrity. The store's own checks (a PUT's stored size, ranged reads of the length asked) say
nothing about the bytes themselves, and an Arrow IPC stream with a changed byte in a value
buffer decodes without complaint: a flipped bit would become a wrong key, and a wrong dedup
decision, silently. So the trailer is ``P`` records ``(start offset int64, crc32 uint32)``, the
end offset of the last slice (int64), ``P`` and a magic number, all little-endian. Partition
``p``'s slice is ``[start_p, start_{p+1})``, and its crc32 covers ``(p, start_p, start_{p+1})``
then the slice's bytes: the reader of ``p`` checks every byte it relies on (the record's bounds
and checksum, the slice), an empty partition included (its checksum covers the bounds alone,
so it costs no data read). The record sits next to the offsets the reader already fetches, so
the requests are unchanged (the trailer grows by half: 12 bytes per partition instead of 8). A
file that ends early, a trailer of another shuffle or format, bounds outside the data, a slice
whose checksum differs: each raises ``MapFileError`` naming the file, the partition and what is
wrong. The magic (and ``P``) is at the trailer's end, which only the task owning the last
partition reads: every shuffle's reduce has that task, so every map file's tail is checked once
per shuffle; the other tasks rely on their records' checksums (a record of another format or
another ``P`` fails its crc32, an empty slice's at once, a non-empty one's with its bytes), and on
the read's length (a file cut before their records is named with its stored size). It is a
``StorageError``, not ``StoreUnavailableError``: neither the storage layer nor the runner retries
it (reading a damaged object again gives the same bytes); the build fails with that line, and
running it again recomputes the shuffle from the stage's input.

Why crc32 (``zlib``): the fastest checksum in this interpreter (no crc32c or xxhash wheel is a
dependency; adler32 is slower here and weaker), several times blake2b and twice sha256, and it
catches every burst of up to 32 bits and all but 2**-32 of other damage, the guarantee HDFS and
GCS rely on. It is computed once per slice on each side, over bytes already in memory (the map
task in one pass over its finished buffer): measured on 128 MiB map files of key rows and of
text, it costs a map task less than a quarter of what naming the file by its blake2b already
costs, a small fraction of the encoding, and a reduce task a few per cent of the time the same
bytes take to arrive from an object store (the figures are in docs/build-corpus.md). The magic is
versioned ("ELECSHV2"): a map file of the unchecked format is refused by name, never misread
(map files never outlive their stage attempt: the runner empties the stage's folder before each
attempt, and the stages' outputs do not depend on the map files' names or order, so cached
stages stay valid and ``CODE_VERSION`` needs no change).
"""
from __future__ import annotations

import hashlib
import io
import math
import struct
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np
import pyarrow as pa

from common import storage

PART = "_part"
# "ELECSHV2": the checksummed format (version 1, "ELECSHUF", had offsets only).
MAGIC = 0x454C4543_53485632
_RECORD = np.dtype([("start", "<i8"), ("crc", "<u4")])  # one per partition, packed: 12 bytes
_END = struct.Struct("<q")  # the end offset of the last slice
_TRAILER_TAIL = struct.Struct("<qq")  # partitions, magic
_COVERED = struct.Struct("<qqq")  # what a slice's crc32 covers before its bytes: p, start, end
# Bytes of rows per map file: large enough that map files x partitions stays small at scale,
# small enough that one task's sort holds little memory.
FILE_BYTES = 128 << 20
# Map tasks the driver keeps in flight before it waits for one (bounds the blocks it references).
MAX_IN_FLIGHT = 16
# Bytes of map-file slices one reduce task reads (its memory, with the decoded rows): the number
# of reduce tasks follows the bytes shuffled, not the partitions.
TASK_BYTES = 256 << 20
# Reduce tasks of even a small shuffle (while it has that many partitions): a small shuffle still
# spreads over a few CPUs; the same on any cluster.
MIN_REDUCE_TASKS = 8


@dataclass(frozen=True)
class MapFile:
    name: str
    bytes: int
    rows: int


@dataclass(frozen=True)
class Shuffled:
    """A finished map side: ``files`` in ``folder``, each holding up to ``partitions`` slices."""
    folder: str
    partitions: int
    files: tuple[MapFile, ...]
    stats: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)

    def remove(self) -> None:
        storage.remove(self.folder, recursive=True)


class MapFileError(storage.StorageError):
    """A shuffle map file that is short, damaged or not of this shuffle (a data error: not retried)."""


_RERUN = "run the build again (the stage recomputes its shuffle from its input)"


def trailer_bytes(partitions: int) -> int:
    return _RECORD.itemsize * partitions + _END.size + _TRAILER_TAIL.size


def slice_crc(p: int, start: int, end: int, data: Any) -> int:
    """The crc32 partition ``p``'s record holds: over its number and bounds, then its bytes."""
    return zlib.crc32(data, zlib.crc32(_COVERED.pack(p, start, end)))


def encode_map_file(table: pa.Table, partitions: int) -> bytes:
    """``table`` (with ``_part``) as one map file: partition slices as IPC streams + trailer."""
    part = table.column(PART).to_numpy(zero_copy_only=False).astype(np.int64)
    if len(part) and (part.min() < 0 or part.max() >= partitions):
        raise ValueError(f"shuffle: partition numbers must be in [0, {partitions}), got "
                         f"[{part.min()}, {part.max()}]")
    order = np.argsort(part, kind="stable")
    rows = table.drop_columns([PART]).take(pa.array(order))
    counts = np.bincount(part, minlength=partitions)
    starts = np.concatenate([[0], np.cumsum(counts)])
    out = io.BytesIO()
    offsets = np.zeros(partitions + 1, dtype=np.int64)
    for p in range(partitions):
        if counts[p]:
            with pa.ipc.new_stream(out, rows.schema) as writer:
                writer.write_table(rows.slice(int(starts[p]), int(counts[p])))
        offsets[p + 1] = out.tell()
    records = np.zeros(partitions, dtype=_RECORD)
    records["start"] = offsets[:-1]
    with out.getbuffer() as view:  # one view of the slices, released before the trailer is written
        records["crc"] = [slice_crc(p, int(offsets[p]), int(offsets[p + 1]), view[offsets[p]:offsets[p + 1]])
                          for p in range(partitions)]
    out.write(records.tobytes())
    out.write(_END.pack(int(offsets[-1])))
    out.write(_TRAILER_TAIL.pack(partitions, MAGIC))
    return out.getvalue()


def _write_map_file(folder: str, partitions: int, *blocks: Any) -> dict[str, Any]:
    from ray.data.block import BlockAccessor

    tables = [BlockAccessor.for_block(b).to_arrow() for b in blocks]
    table = pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]
    data = encode_map_file(table, partitions)
    name = f"map-{hashlib.blake2b(data, digest_size=12).hexdigest()}.arrows"
    storage.write_bytes(storage.join(folder, name), data)
    return {"name": name, "bytes": len(data), "rows": table.num_rows}


def shuffle(ds: Any, *, partitions: int, folder: str, file_bytes: int = FILE_BYTES,
            name: str = "") -> Shuffled:
    """Run ``ds`` (rows with ``_part``) to the end and write its map files into ``folder``."""
    import ray

    writer = ray.remote(_write_map_file).options(max_retries=3, retry_exceptions=[storage.StorageError])
    start = time.perf_counter()
    done: list[dict[str, Any]] = []
    in_flight: list[Any] = []
    pending: list[Any] = []
    pending_bytes = blocks = 0

    def submit() -> None:
        nonlocal pending, pending_bytes
        if pending:
            in_flight.append(writer.remote(folder, partitions, *pending))
            pending, pending_bytes = [], 0
        while len(in_flight) > MAX_IN_FLIGHT:
            ready, rest = ray.wait(in_flight, num_returns=1)
            done.extend(ray.get(ready))
            in_flight[:] = rest

    for bundle in ds.iter_internal_ref_bundles():
        for entry in bundle.blocks:
            blocks += 1
            if not entry.metadata.num_rows:
                continue
            pending.append(entry.ref)
            pending_bytes += int(entry.metadata.size_bytes or 0)
            if pending_bytes >= file_bytes:
                submit()
    submit()
    done.extend(ray.get(in_flight))
    files = tuple(sorted((MapFile(**d) for d in done), key=lambda f: f.name))
    stats = {"name": name, "partitions": partitions, "blocks_in": blocks, "map_files": len(files),
             "rows": sum(f.rows for f in files), "bytes": sum(f.bytes for f in files),
             "map_seconds": round(time.perf_counter() - start, 3)}
    return Shuffled(folder=folder, partitions=partitions, files=files, stats=stats)


def reduce_tasks(shuffled: Shuffled, task_bytes: int = TASK_BYTES) -> list[tuple[int, int]]:
    """The reduce tasks of ``shuffled``: contiguous partition ranges ``[lo, hi)``, as many as its
    bytes need at ``task_bytes`` each (at least ``MIN_REDUCE_TASKS``, at most one per partition)."""
    p = shuffled.partitions
    wanted = max(MIN_REDUCE_TASKS, math.ceil(sum(f.bytes for f in shuffled.files) / max(1, task_bytes)))
    n = max(1, min(p, wanted))
    return [(i * p // n, (i + 1) * p // n) for i in range(n)]


def index_range(size: int, partitions: int, lo: int, hi: int) -> tuple[int, int]:
    """The bytes of a ``size``-byte map file that partitions ``[lo, hi)`` need from its trailer:
    their records and the next slice's start (the end offset for the last partition, then the
    trailer's tail with the magic: that read reaches the end of the file)."""
    first = size - trailer_bytes(partitions) + _RECORD.itemsize * lo
    return first, (size if hi == partitions else first + _RECORD.itemsize * (hi - lo) + _END.size)


def index_bounds(index: bytes, partitions: int, lo: int, hi: int, *, uri: str,
                 size: int) -> tuple[np.ndarray, np.ndarray]:
    """``(starts, crcs)`` of partitions ``[lo, hi)`` from ``index`` (the bytes ``index_range``
    names): ``hi - lo + 1`` slice bounds and ``hi - lo`` crc32s; ``MapFileError`` if they cannot
    be trusted (a short read, another format, bounds out of the data, an empty slice's record
    failing its checksum; a non-empty slice's checksum is checked with its bytes)."""
    begin, end = index_range(size, partitions, lo, hi)
    k = hi - lo
    if len(index) != end - begin:
        raise MapFileError(f"{uri}: partition {lo}: truncated: the map side wrote {size} bytes, the store "
                           f"holds {storage.size(uri)}; {_RERUN}")
    if hi == partitions:
        try:
            check_map_file(index, partitions)
        except ValueError as exc:
            raise MapFileError(f"{uri}: partition {lo}: {exc}; {_RERUN}") from exc
    records = np.frombuffer(index, dtype=_RECORD, count=k)
    starts = np.empty(k + 1, dtype=np.int64)
    starts[:k] = records["start"]
    (starts[k],) = _END.unpack_from(index, _RECORD.itemsize * k)  # the next record's start, or the end
    crcs = records["crc"].astype(np.int64)
    data_end = size - trailer_bytes(partitions)
    for i in range(k):
        p, a, b = lo + i, int(starts[i]), int(starts[i + 1])
        if not 0 <= a <= b <= data_end:
            raise MapFileError(f"{uri}: partition {p}: damaged trailer: slice [{a}, {b}) is not within the "
                               f"{data_end} data bytes; {_RERUN}")
        if a == b and slice_crc(p, a, b, b"") != crcs[i]:  # an empty slice: its checksum covers its bounds
            raise MapFileError(f"{uri}: partition {p}: damaged trailer: the record of an empty slice at {a} "
                               f"fails its crc32; {_RERUN}")
    return starts, crcs


def read_partitions(shuffled: Shuffled, lo: int, hi: int) -> list[pa.Table | None]:
    """The rows of each partition in ``[lo, hi)`` (map files in name order, rows in map order;
    None for an empty one), with two ranged reads per map file whatever ``hi - lo``: its index
    records for the range, then the range's slices, which lie one after another. Raises
    ``MapFileError`` for a map file that is short, damaged or not of this shuffle."""
    if not 0 <= lo < hi <= shuffled.partitions:
        raise IndexError(f"partitions [{lo}, {hi}) of a {shuffled.partitions}-partition shuffle")
    if not shuffled.files:
        return [None] * (hi - lo)
    uris = [storage.join(shuffled.folder, f.name) for f in shuffled.files]
    indexes = storage.read_ranges([(u, *index_range(f.bytes, shuffled.partitions, lo, hi))
                                   for u, f in zip(uris, shuffled.files)])
    bounds = [index_bounds(ix, shuffled.partitions, lo, hi, uri=u, size=f.bytes)
              for u, f, ix in zip(uris, shuffled.files, indexes)]
    wanted = [(u, f.bytes, s, c) for u, f, (s, c) in zip(uris, shuffled.files, bounds) if s[-1] > s[0]]
    blobs = storage.read_ranges([(u, int(s[0]), int(s[-1])) for u, _, s, _ in wanted])
    pieces: list[list[pa.Table]] = [[] for _ in range(hi - lo)]
    for (uri, size, starts, crcs), blob in zip(wanted, blobs):
        base = int(starts[0])
        if len(blob) != int(starts[-1]) - base:  # the index was whole a moment ago: the object changed since
            raise MapFileError(f"{uri}: partition {lo}: truncated: the map side wrote {size} bytes, the store "
                               f"holds {storage.size(uri)}; {_RERUN}")
        view = memoryview(blob)
        for i in range(hi - lo):
            a, b = int(starts[i]), int(starts[i + 1])
            if a == b:
                continue
            got = slice_crc(lo + i, a, b, view[a - base:b - base])
            if got != crcs[i]:
                raise MapFileError(f"{uri}: partition {lo + i}: damaged: bytes [{a}, {b}) have crc32 {got:#010x}, "
                                   f"the trailer says {int(crcs[i]):#010x}; {_RERUN}")
            pieces[i].append(pa.ipc.open_stream(pa.py_buffer(blob)[a - base:b - base]).read_all())
    return [None if not t else pa.concat_tables(t) if len(t) > 1 else t[0] for t in pieces]


def read_partition(shuffled: Shuffled, p: int) -> pa.Table | None:
    """Every row of partition ``p`` (``read_partitions`` of one); None if empty."""
    if not 0 <= p < shuffled.partitions:
        raise IndexError(f"partition {p} of a {shuffled.partitions}-partition shuffle")
    return read_partitions(shuffled, p, p + 1)[0]


def check_map_file(data: bytes, partitions: int) -> None:
    """Raise ``ValueError`` if ``data`` does not end as a map file of ``partitions`` partitions in
    this format (a whole file, or its trailer's end)."""
    if len(data) < _TRAILER_TAIL.size:
        raise ValueError(f"not a {partitions}-partition shuffle map file ({len(data)} bytes, shorter than "
                         "a trailer)")
    p, magic = _TRAILER_TAIL.unpack(data[-_TRAILER_TAIL.size:])
    if magic != MAGIC or p != partitions:
        raise ValueError(f"not a {partitions}-partition shuffle map file of this format (partitions {p}, "
                         f"magic {magic & 0xFFFFFFFFFFFFFFFF:#x}, want {MAGIC:#x})")


def _reduce_batch(batch: dict[str, np.ndarray], *, shuffled: Shuffled, fn: Callable, fn_kwargs: dict,
                  batch_format: str, with_partition: bool) -> Iterator[Any]:
    for lo, hi in zip(batch["lo"], batch["hi"]):
        tables = read_partitions(shuffled, int(lo), int(hi))
        for p, table in enumerate(tables, start=int(lo)):
            if table is None:
                continue
            tables[p - int(lo)] = None  # the call's rows are the only copy left: freed once it returns
            rows = table if batch_format == "pyarrow" else {c: table.column(c).to_numpy(zero_copy_only=False)
                                                            for c in table.column_names}
            del table
            out = fn(rows, partition=p, **fn_kwargs) if with_partition else fn(rows, **fn_kwargs)
            if out is not None:
                yield out


def reduce(shuffled: Shuffled, fn: Callable, *, fn_kwargs: dict | None = None,
           batch_format: str = "numpy", with_partition: bool = False, task_bytes: int = TASK_BYTES) -> Any:
    """A Dataset of ``fn(rows of one partition)`` over every non-empty partition (lazy).

    ``fn`` gets a numpy batch (or a pyarrow table with ``batch_format="pyarrow"``) holding every
    row of its partition (and ``partition=p`` with ``with_partition``) and returns a batch (or
    None). One Ray task per contiguous range of partitions (``reduce_tasks``), one call per partition.
    """
    import ray

    tasks = [{"lo": lo, "hi": hi} for lo, hi in reduce_tasks(shuffled, task_bytes)]
    return ray.data.from_items(tasks, override_num_blocks=max(1, len(tasks))).map_batches(
        _reduce_batch, batch_size=1, batch_format="numpy",
        fn_kwargs={"shuffled": shuffled, "fn": fn, "fn_kwargs": fn_kwargs or {}, "batch_format": batch_format,
                   "with_partition": with_partition})


def _keyed(batch: pa.Table, *, key: str, partitions: int) -> pa.Table:
    keys = batch.column(key).to_numpy(zero_copy_only=False)
    return batch.append_column(PART, pa.array(hash_partition(keys, partitions)))


def group_apply(ds: Any, fn: Callable, *, key: str, partitions: int, folder: str, name: str = "",
                fn_kwargs: dict | None = None, batch_format: str = "numpy", file_bytes: int = FILE_BYTES,
                task_bytes: int = TASK_BYTES) -> tuple[Any, Shuffled]:
    """Apply ``fn`` to whole hash partitions of ``ds`` by the int64 column ``key``: every row with
    a given key reaches the same call. Runs the map side now; returns the reduce side (lazy)
    and the shuffle (its files stay until ``Shuffled.remove``)."""
    keyed = ds.map_batches(_keyed, batch_format="pyarrow", fn_kwargs={"key": key, "partitions": partitions})
    shuffled = shuffle(keyed, partitions=partitions, folder=folder, name=name, file_bytes=file_bytes)
    return reduce(shuffled, fn, fn_kwargs=fn_kwargs, batch_format=batch_format, task_bytes=task_bytes), shuffled


def hash_partition(keys: np.ndarray, partitions: int) -> np.ndarray:
    """Partition of each int64 key: a hash, so equal keys meet and partitions fill evenly."""
    from common.hashing import fmix64

    mixed = fmix64(np.asarray(keys).astype(np.uint64))
    return (mixed % np.uint64(partitions)).astype(np.int64)
