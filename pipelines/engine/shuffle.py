"""The shuffle of build-corpus: map tasks write partitioned files to the store, reduce tasks read
one partition each (what Spark's sort shuffle and datatrove's bucketed files do).

Why not Ray Data's shuffles (``benchmarks/corpus_scale.py --blocks`` runs the four side by side
on cluster-sized block counts; the figures are in the README). Its pull-based sort shuffle (the
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

Reduce side. ``reduce`` runs one task per partition: it reads, from every map file, the trailer
from its partition's record to the end (the magic there says the file is whole), then that
byte range (``storage.read_ranges``: concurrent ranged GETs), checks it, concatenates the
slices and hands them to the reduce function. Reads per shuffle = 2 x map files x partitions,
both sized by the data (``raydata.partitions_for``): a shuffle's cost follows the bytes it
moves, not the blocks that carried them. Over very large shuffles the reads grow as the square
of the bytes (each read getting smaller, ``file_bytes`` / partitions), the shape of Spark's sort
shuffle too; ``file_bytes`` is large so that this stays far below the per-block growth it
replaces (the README works it out for a 25 B-token corpus).
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
wrong. It is a ``StorageError``, not ``StoreUnavailableError``: neither the storage layer nor the
runner retries it (reading a damaged object again gives the same bytes); the build fails with
that line, and running it again recomputes the shuffle from the stage's input.

Why crc32 (``zlib``): the fastest checksum in this interpreter (no crc32c or xxhash wheel is a
dependency; adler32 is slower here and weaker), several times blake2b and twice sha256, and it
catches every burst of up to 32 bits and all but 2**-32 of other damage, the guarantee HDFS and
GCS rely on. It is computed once per slice on each side, over bytes already in memory (the map
task in one pass over its finished buffer): measured on 128 MiB map files of key rows and of
text, it costs a map task less than a quarter of what naming the file by its blake2b already
costs, a small fraction of the encoding, and a reduce task a few per cent of the time the same
bytes take to arrive from an object store (the figures are in the README). The magic is
versioned ("ELECSHV2"): a map file of the unchecked format is refused by name, never misread
(map files never outlive their stage attempt: the runner empties the stage's folder before each
attempt, and the stages' outputs do not depend on the map files' names or order, so cached
stages stay valid and ``CODE_VERSION`` needs no change).
"""
from __future__ import annotations

import hashlib
import io
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


def read_partition(shuffled: Shuffled, p: int) -> pa.Table | None:
    """Every row of partition ``p`` (map files in name order, rows in map order); None if empty.
    Raises ``MapFileError`` for a map file that is short, damaged or not of this shuffle."""
    if not 0 <= p < shuffled.partitions:
        raise IndexError(f"partition {p} of a {shuffled.partitions}-partition shuffle")
    if not shuffled.files:
        return None
    uris = [storage.join(shuffled.folder, f.name) for f in shuffled.files]
    # From the partition's record to the end of the trailer (at most 12 * P + 24 bytes): one
    # ranged read gives its bounds, its checksum and the magic that says the file is a whole map file.
    reads = [(u, f.bytes - trailer_bytes(shuffled.partitions) + _RECORD.itemsize * p, f.bytes)
             for u, f in zip(uris, shuffled.files)]
    tails = storage.read_ranges(reads)
    bounds = [slice_bounds(tail, shuffled.partitions, p, uri=uri, size=f.bytes)
              for (uri, _, _), f, tail in zip(reads, shuffled.files, tails)]
    wanted = [(u, f.bytes, lo, hi, crc) for u, f, (lo, hi, crc) in zip(uris, shuffled.files, bounds) if hi > lo]
    if not wanted:
        return None
    tables = []
    blobs = storage.read_ranges([(u, lo, hi) for u, _, lo, hi, _ in wanted])
    for (uri, size, lo, hi, crc), blob in zip(wanted, blobs):
        if len(blob) != hi - lo:  # the trailer was whole a moment ago: the object changed since
            raise MapFileError(f"{uri}: partition {p}: truncated: the map side wrote {size} bytes, the store "
                               f"holds {storage.size(uri)}; {_RERUN}")
        got = slice_crc(p, lo, hi, blob)
        if got != crc:
            raise MapFileError(f"{uri}: partition {p}: damaged: bytes [{lo}, {hi}) have crc32 {got:#010x}, "
                               f"the trailer says {crc:#010x}; {_RERUN}")
        tables.append(pa.ipc.open_stream(pa.py_buffer(blob)).read_all())
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def slice_bounds(tail: bytes, partitions: int, p: int, *, uri: str, size: int) -> tuple[int, int, int]:
    """``(start, end, crc32)`` of partition ``p`` from ``tail``, a ``size``-byte map file's bytes
    from ``p``'s trailer record to its end; ``MapFileError`` if they cannot be trusted."""
    want = trailer_bytes(partitions) - _RECORD.itemsize * p
    if len(tail) != want:
        raise MapFileError(f"{uri}: partition {p}: truncated: the map side wrote {size} bytes, the store "
                           f"holds {storage.size(uri)}; {_RERUN}")
    try:
        check_map_file(tail, partitions)
    except ValueError as exc:
        raise MapFileError(f"{uri}: partition {p}: {exc}; {_RERUN}") from exc
    lo, crc = (int(v) for v in np.frombuffer(tail, dtype=_RECORD, count=1)[0].tolist())
    (hi,) = _END.unpack_from(tail, _RECORD.itemsize)  # the next record's start, or the end offset
    data_end = size - trailer_bytes(partitions)
    if not 0 <= lo <= hi <= data_end:
        raise MapFileError(f"{uri}: partition {p}: damaged trailer: slice [{lo}, {hi}) is not within the "
                           f"{data_end} data bytes; {_RERUN}")
    if hi == lo and slice_crc(p, lo, hi, b"") != crc:  # an empty slice: its checksum covers its bounds
        raise MapFileError(f"{uri}: partition {p}: damaged trailer: the record of an empty slice at {lo} "
                           f"fails its crc32; {_RERUN}")
    return lo, hi, crc


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
    for p in batch["part"]:
        table = read_partition(shuffled, int(p))
        if table is None:
            continue
        rows = table if batch_format == "pyarrow" else {c: table.column(c).to_numpy(zero_copy_only=False)
                                                        for c in table.column_names}
        out = fn(rows, partition=int(p), **fn_kwargs) if with_partition else fn(rows, **fn_kwargs)
        if out is not None:
            yield out


def reduce(shuffled: Shuffled, fn: Callable, *, fn_kwargs: dict | None = None,
           batch_format: str = "numpy", with_partition: bool = False) -> Any:
    """A Dataset of ``fn(rows of one partition)`` over every non-empty partition (lazy).

    ``fn`` gets a numpy batch (or a pyarrow table with ``batch_format="pyarrow"``) holding every
    row of its partition (and ``partition=p`` with ``with_partition``) and returns a batch (or
    None). One Ray task per partition.
    """
    import ray

    parts = [{"part": p} for p in range(shuffled.partitions)]
    return ray.data.from_items(parts, override_num_blocks=max(1, len(parts))).map_batches(
        _reduce_batch, batch_size=1, batch_format="numpy",
        fn_kwargs={"shuffled": shuffled, "fn": fn, "fn_kwargs": fn_kwargs or {}, "batch_format": batch_format,
                   "with_partition": with_partition})


def _keyed(batch: pa.Table, *, key: str, partitions: int) -> pa.Table:
    keys = batch.column(key).to_numpy(zero_copy_only=False)
    return batch.append_column(PART, pa.array(hash_partition(keys, partitions)))


def group_apply(ds: Any, fn: Callable, *, key: str, partitions: int, folder: str, name: str = "",
                fn_kwargs: dict | None = None, batch_format: str = "numpy") -> tuple[Any, Shuffled]:
    """Apply ``fn`` to whole hash partitions of ``ds`` by the int64 column ``key``: every row with
    a given key reaches the same call. Runs the map side now; returns the reduce side (lazy)
    and the shuffle (its files stay until ``Shuffled.remove``)."""
    keyed = ds.map_batches(_keyed, batch_format="pyarrow", fn_kwargs={"key": key, "partitions": partitions})
    shuffled = shuffle(keyed, partitions=partitions, folder=folder, name=name)
    return reduce(shuffled, fn, fn_kwargs=fn_kwargs, batch_format=batch_format), shuffled


def hash_partition(keys: np.ndarray, partitions: int) -> np.ndarray:
    """Partition of each int64 key: a hash, so equal keys meet and partitions fill evenly."""
    from common.hashing import fmix64

    mixed = fmix64(np.asarray(keys).astype(np.uint64))
    return (mixed % np.uint64(partitions)).astype(np.int64)
