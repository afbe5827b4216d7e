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
Arrow IPC stream, then a trailer of ``P + 1`` little-endian int64 byte offsets, ``P`` and a magic
number. Objects created per shuffle: about (bytes shuffled) / ``file_bytes``, whatever the
number of blocks or partitions. A map file is named by a hash of its content, so a retried task
rewrites the same object; readers open only the files the driver collected, so an orphan of a
failed attempt is never read.

Reduce side. ``reduce`` runs one task per partition: it reads, from every map file, the trailer
from its partition's two offsets to the end (the magic there says the file is whole), then that
byte range (``storage.read_ranges``:
concurrent ranged GETs), concatenates the slices and hands them to the reduce function. Reads per
shuffle = 2 x map files x partitions, both sized by the data (``raydata.partitions_for``): a
shuffle's cost follows the bytes it moves, not the blocks that carried them. Over very large
shuffles the reads grow as the square of the bytes (each read getting smaller, ``file_bytes`` /
partitions), the shape of Spark's sort shuffle too; ``file_bytes`` is large so that this stays
far below the per-block growth it replaces (the README works it out for a 25 B-token corpus).
The driver holds the list of map files: O(map files), never O(blocks x partitions).

Every read and write goes through ``common.storage`` (retried on transient store errors); the
files live under the stage's cache folder, which the runner empties before an attempt and
deletes once the stage's outputs are written.
"""
from __future__ import annotations

import hashlib
import io
import struct
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np
import pyarrow as pa

from common import storage

PART = "_part"
MAGIC = 0x454C4543_53485546  # "ELECSHUF"
_TRAILER_TAIL = struct.Struct("<qq")  # partitions, magic
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


def trailer_bytes(partitions: int) -> int:
    return 8 * (partitions + 1) + _TRAILER_TAIL.size


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
    offsets = np.zeros(partitions + 1, dtype="<i8")
    for p in range(partitions):
        if counts[p]:
            with pa.ipc.new_stream(out, rows.schema) as writer:
                writer.write_table(rows.slice(int(starts[p]), int(counts[p])))
        offsets[p + 1] = out.tell()
    out.write(offsets.tobytes())
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
    """Every row of partition ``p`` (map files in name order, rows in map order); None if empty."""
    if not 0 <= p < shuffled.partitions:
        raise IndexError(f"partition {p} of a {shuffled.partitions}-partition shuffle")
    if not shuffled.files:
        return None
    uris = [storage.join(shuffled.folder, f.name) for f in shuffled.files]
    # From the partition's two offsets to the end of the trailer (at most 8 * P + 16 bytes): one
    # ranged read gives its bounds and the magic that says the file is a whole map file.
    tails = storage.read_ranges([(u, f.bytes - trailer_bytes(shuffled.partitions) + 8 * p, f.bytes)
                                 for u, f in zip(uris, shuffled.files)])
    bounds = []
    for uri, tail in zip(uris, tails):
        try:
            check_map_file(tail, shuffled.partitions)
        except ValueError as exc:
            raise storage.StorageError(f"{uri}: {exc}") from exc
        bounds.append(struct.unpack("<qq", tail[:16]))
    wanted = [(u, lo, hi) for u, (lo, hi) in zip(uris, bounds) if hi > lo]
    if not wanted:
        return None
    tables = [pa.ipc.open_stream(pa.py_buffer(b)).read_all() for b in storage.read_ranges(wanted)]
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def check_map_file(data: bytes, partitions: int) -> None:
    """Raise if ``data`` is not a complete map file of ``partitions`` partitions."""
    p, magic = _TRAILER_TAIL.unpack(data[-_TRAILER_TAIL.size:])
    if magic != MAGIC or p != partitions:
        raise ValueError(f"not a {partitions}-partition shuffle map file (partitions {p}, magic {magic:#x})")


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
