"""The shuffle of build-corpus: map tasks write range-partitioned files to the store, a fixed
number of reduce tasks each read one range of every file (Spark's sort shuffle with a fixed
reducer count; the spill of Hadoop's and Spark's reducers), partitions come out whole.

Why not Ray Data's shuffles (``benchmarks/corpus/scale.py --blocks`` runs the four side by side
on cluster-sized block counts; the figures are in docs/build-corpus.md). Its pull-based sort
shuffle makes one reducer per input block: M blocks create M x M objects owned by the driver.
Its hash shuffle starts a pool of aggregator actors for every shuffle and feeds them one actor
call per block piece. Ray 2.60's default (``SHUFFLE_V2``) grows linearly but costs seconds per
shuffle (connected components runs a dozen) and keeps the rows in the object store, where a lost
node takes them and a big shuffle spills. Here the rows go to the store the build writes to
anyway: a lost node costs only its running tasks, and a small shuffle a fraction of a second.

Map side. The rows to shuffle are a Ray Dataset with an int64 column ``_part`` in ``[0, P)``.
The driver streams the dataset's blocks (``iter_internal_ref_bundles``: object references and
sizes, never rows) and groups consecutive blocks until they hold a map file's bytes,
``max(file_bytes, R x slice_bytes)`` (``shuffle.map_file_mb``, ``shuffle.slice_mb``; why R:
below); each group becomes one map task (``pipelines.engine.map_task``: sorted in memory when a
map file is ``file_bytes``, streamed through a local spill when it is larger), which writes
map files (``pipelines.engine.map_file``: R range slices, checksummed, plus a trailer). A map
file is named by a hash of its content, so a retried task rewrites the same object; readers
open only the files the driver collected, so an orphan of a failed attempt is never read. The
names start with two hex digits of that hash as a folder: S3 scales its request rate per key
prefix (about 5,500 GETs/s each), and 256 prefixes spread the reduce side's reads. Map tasks in
flight: two per CPU of the cluster (at least ``MIN_IN_FLIGHT``), fewer where their blocks would
pin more than half of a node's object store (``node_space.map_tasks_in_flight``).

Reduce side. ``R`` reduce tasks (``ranges``: ``shuffle.reduce_tasks``, or one per CPU of the
cluster, fewer for a small shuffle (one per ``PARTITIONS_PER_RANGE`` partitions), at least
``MIN_REDUCE_TASKS``; never more than ``P``) own contiguous partition ranges; before they start,
the driver checks that its node's spill folder has room for its share (``check_spill_room``),
and each task checks its own node as it starts (``RangeSpill(expected_bytes=)``).
Task ``r`` makes two ranged reads per map file: its trailer record (20 bytes; the trailer's tail
too for the last range), then its slice. The slices go through a ``RangeSpill``
(``pipelines.engine.spill``): buffered up to ``memory_bytes``, then sorted by partition into
local run files; the reduce function then gets one partition at a time, its rows in map-file
order (each range starts reading at its own place in the name-ordered list of files, so that
the tasks' reads spread over the key prefixes; the reduce functions do not depend on the order
of rows within a partition). Map files are read in batches (``READ_BATCH`` files, data reads of
at most a quarter of the budget in flight), so a task's memory is its buffer, one batch, one
partition and the spill's small indexes (``pipelines.engine.spill``), whatever the data's size.

How the requests grow. Per shuffle: M map files (each one PUT, or a multipart upload of
s3fs's parts when streamed, checked with a HEAD), one LIST when the folder is removed, and
2 x M x R GETs. M is bytes / max(file_bytes, R x slice_bytes), so once R x slice_bytes exceeds
``file_bytes`` the GETs are 2 x bytes / slice_bytes whatever R is: linear in the data at any
reduce parallelism, each slice about ``slice_bytes``. Below that (R < file_bytes / slice_bytes:
8 at the defaults, the floor of R) they are 2 x bytes x R / file_bytes with R fixed: linear too.
A cluster that picks R from the data (one task per 256 MiB up to its CPUs) therefore pays the
requests of the data, not data x cluster; the previous design (map files of ``file_bytes``
whatever R) paid 2 x M x R, which at R = 12,288 meant slices of a few KB and billions of GETs
(``benchmarks/corpus/scale.py --simulate SIZES --cluster NODESxCPUS`` prints both). The price is
the map side's: fewer, larger map tasks, each spilling its map file to local disk twice over
(``map_task``). Bytes read = the map files' bytes once plus 8 bytes per (map file, boundary
between two ranges): 8 (R - 1) M. A reduce task's share grows with the data once R is the
cluster's: its memory does not (the spill), its local disk does (bytes / R), and a retried task
redoes its whole range. This is the map side's version of the merge that Magnet and Exoshuffle
do on the reduce side: each reduce task finds its bytes of one map task's share in one read.

The driver holds the list of map files (about a hundred bytes each), never rows or blocks x
partitions. Every read and write goes through ``common.storage`` (retried on transient store
errors, per request and renewed by progress); the files live under the stage's cache folder,
which the runner empties before an attempt and deletes once the stage's outputs are written.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from common import storage
from pipelines.engine import written
from pipelines.engine.map_file import (PART, MapFile, MapFileError, MapFiles, decode_slice, index_range, range_bounds,
                                       slice_bounds)
from pipelines.engine.map_task import map_file_bytes, stream_map_file, write_map_files
from pipelines.engine import node_space
from pipelines.engine.spill import MAX_RUNS, RangeSpill

__all__ = ["PART", "Coalesced", "MapFile", "MapFileError", "MapFiles", "Shuffled", "default_ranges", "group_apply", "hash_partition",
           "read_partition", "read_range", "reduce", "shuffle"]

# Bytes of rows per map file (``shuffle.map_file_mb``): the map task sorts this much in memory
# (about three copies: the blocks, the sorted rows, the encoded file).
FILE_BYTES = 128 << 20
# Map tasks in flight per CPU of the cluster, and at least this many.
IN_FLIGHT_PER_CPU = 2
MIN_IN_FLIGHT = 16
# Bytes a reduce task reads from one map file, at least (``shuffle.slice_mb``): map files hold
# R x this (``map_task.map_file_bytes``), so the reads stay this large at any R. Each read of a
# slice comes with a read of its index record (20 bytes): the mean read is about half of this.
SLICE_BYTES = 16 << 20
# Reduce tasks (ranges) per CPU of the cluster, and at least this many while there are that many
# partitions: a small shuffle still spreads over a few CPUs. One per CPU fills the cluster; more
# would only make the map files (R x SLICE_BYTES) larger and the map side's tasks fewer.
RANGES_PER_CPU = 1
MIN_REDUCE_TASKS = 8
# ... and no more ranges than one per this many partitions (about 256 MB of rows at the default
# partition size): a small shuffle on a big cluster does not cut every map file a thousand ways.
PARTITIONS_PER_RANGE = 4
# Bytes of slices a reduce task buffers before it spills a sorted run to local disk.
TASK_MEMORY_BYTES = 256 << 20
# Map files whose index records one reduce task asks for in one batch of concurrent reads. Each
# request in flight costs the task's heap tens of kilobytes in the S3 client (measured: 1,024 in
# flight held ~20 MB more than 64; docs/build-corpus.md), and the store's rate is shared by the
# tasks anyway: 128 per task is 4,096 in flight from a 16-CPU node.
READ_BATCH = 128
# A reduce task's outputs are passed on to Ray Data in batches of this many calls' outputs (or
# about this many bytes), concatenated (``Coalesced``).
COALESCE_OUTPUTS = 512
COALESCE_BYTES = 8 << 20


@dataclass(frozen=True)
class Shuffled:
    """A finished map side: ``files`` in ``folder`` (any sequence of ``MapFile``, kept as a
    compact ``MapFiles``), each holding ``ranges`` slices of ``partitions``."""
    folder: str
    partitions: int
    files: MapFiles
    ranges: int = 1
    stats: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.files, MapFiles):
            object.__setattr__(self, "files", MapFiles(self.files))

    @property
    def rows(self) -> int:
        return self.files.total_rows

    def bounds(self, r: int) -> tuple[int, int]:
        return range_bounds(self.partitions, self.ranges, r)

    def remove(self) -> None:
        """Delete the map files by name, a thousand per request (no listing of them: at 80,000
        files a listing held ~100 MB of the driver's memory), then whatever the folder still holds
        (orphans of failed map attempts, found by one listing)."""
        storage.remove_files(storage.join(self.folder, n) for n in self.files.names())
        storage.remove(self.folder, recursive=True)


def _cluster_cpus() -> int:
    import ray

    try:
        return int(ray.cluster_resources().get("CPU", 0))
    except Exception:  # noqa: BLE001 (no Ray here: the floor applies)
        return 0


def _nodes() -> list[node_space.Node]:
    try:
        return node_space.cluster_nodes()
    except Exception:  # noqa: BLE001 (no Ray here: the floor applies)
        return []


def check_spill_room(shuffled: Shuffled, memory_bytes: int = TASK_MEMORY_BYTES) -> None:
    """Before a reduce side: ``node_space.SpillSpaceError`` (one line naming the folder, the room it
    needs and the fix) if this node's spill folder cannot hold its reduce tasks' spills."""
    node_space.check_spill_room(shuffled.files.total_bytes, shuffled.ranges, _nodes(), budget=memory_bytes,
                                fan_in=MAX_RUNS)


def default_ranges(partitions: int, reduce_tasks: int = 0, *, cpus: int | None = None) -> int:
    """Reduce tasks of a shuffle of ``partitions``: ``reduce_tasks`` if set, else one per CPU of
    the cluster (``cpus``, or the running cluster's), or one per ``PARTITIONS_PER_RANGE``
    partitions where that is fewer (at least ``MIN_REDUCE_TASKS`` either way); at most one per
    partition. So the number follows the data up to the cluster's size and stays there; the
    requests grow with the data either way (map files of ``R x slice_bytes``: ``map_task``)."""
    if not reduce_tasks:
        by_cluster = max(MIN_REDUCE_TASKS, RANGES_PER_CPU * (_cluster_cpus() if cpus is None else cpus))
        by_data = max(MIN_REDUCE_TASKS, math.ceil(partitions / PARTITIONS_PER_RANGE))
        reduce_tasks = min(by_cluster, by_data)
    return max(1, min(partitions, reduce_tasks))


def shuffle(ds: Any, *, partitions: int, folder: str, file_bytes: int = FILE_BYTES, ranges: int | None = None,
            name: str = "", slice_bytes: int = SLICE_BYTES) -> Shuffled:
    """Run ``ds`` (rows with ``_part``) to the end and write its map files into ``folder``, cut
    into ``ranges`` reduce ranges (``default_ranges`` if None), each map file holding at least
    ``ranges x slice_bytes`` of rows (``map_task.map_file_bytes``)."""
    import ray

    ranges = default_ranges(partitions) if ranges is None else max(1, min(partitions, int(ranges)))
    target = map_file_bytes(file_bytes, ranges, slice_bytes)
    streamed = target > file_bytes  # larger than a map task sorts in memory
    task = stream_map_file if streamed else write_map_files
    # A plain count (common.retry, "Counts above this layer"): a task fails with a StorageError only
    # after a whole retry budget without progress, and one map file keeps nothing from a failed try.
    writer = ray.remote(task).options(max_retries=3, retry_exceptions=[storage.StorageError])
    # each task in flight pins up to a map file's blocks in some node's object store
    max_in_flight = node_space.map_tasks_in_flight(_nodes(), target, per_cpu=IN_FLIGHT_PER_CPU, at_least=MIN_IN_FLIGHT)
    start = time.perf_counter()
    done: list[MapFiles] = []
    in_flight: list[Any] = []
    pending: list[Any] = []
    pending_bytes = blocks = 0
    peak_rss = 0

    def collect(results: list[dict[str, Any]]) -> None:
        nonlocal peak_rss
        for res in results:
            done.append(res["files"])
            written.add(files=len(res["files"]), nbytes=res["files"].total_bytes)
            peak_rss = max(peak_rss, res["peak_rss"])

    def submit() -> None:
        nonlocal pending, pending_bytes
        if pending:
            if streamed:  # a list of references: fetched one at a time by the task
                in_flight.append(writer.remote(folder, partitions, ranges, file_bytes, pending))
            else:
                in_flight.append(writer.remote(folder, partitions, ranges, file_bytes, *pending))
            pending, pending_bytes = [], 0
        while len(in_flight) > max_in_flight:
            ready, rest = ray.wait(in_flight, num_returns=1)
            collect(ray.get(ready))
            in_flight[:] = rest

    for bundle in ds.iter_internal_ref_bundles():
        for entry in bundle.blocks:
            blocks += 1
            if entry.metadata.num_rows == 0:
                continue
            pending.append(entry.ref)
            pending_bytes += int(entry.metadata.size_bytes or 0)
            if pending_bytes >= target:
                submit()
    submit()
    collect(ray.get(in_flight))
    files = MapFiles.joined(done)
    del done
    stats = {"name": name, "partitions": partitions, "ranges": ranges, "blocks_in": blocks,
             "map_files": len(files), "map_file_target": target, "streamed": streamed, "rows": files.total_rows,
             "bytes": files.total_bytes, "map_task_peak_rss": peak_rss,
             "map_seconds": round(time.perf_counter() - start, 3)}
    return Shuffled(folder=folder, partitions=partitions, files=files, ranges=ranges, stats=stats)


def read_range(shuffled: Shuffled, r: int, *, memory_bytes: int = TASK_MEMORY_BYTES) -> Iterator[tuple[int, pa.Table]]:
    """``(partition, rows)`` of each non-empty partition of range ``r``, in order (rows in the order
    of the map files as this range reads them, without ``_part``: the reduce functions must not
    depend on it), read with two ranged reads per map file and at most about ``memory_bytes`` of
    slices in memory (the rest spilled to local disk). Raises
    ``MapFileError`` for a map file that is short, damaged or not of this shuffle."""
    if not 0 <= r < shuffled.ranges:
        raise IndexError(f"range {r} of a {shuffled.ranges}-range shuffle")
    lo, hi = shuffled.bounds(r)
    # Each range starts at its own place in the (name-ordered) list, so the tasks' concurrent
    # reads fall on different key prefixes rather than all on the first few.
    n = len(shuffled.files)
    start = r * n // shuffled.ranges
    with RangeSpill(lo, hi, budget=memory_bytes, name=f"{shuffled.folder}#{r}", ranges=shuffled.ranges,
                    expected_bytes=-(-shuffled.files.total_bytes // shuffled.ranges)) as spill:
        for first in range(0, n, READ_BATCH):
            # one batch's entries at a time: no second copy of the whole list in the task
            batch = shuffled.files.take((start + np.arange(first, min(n, first + READ_BATCH))) % n)
            uris = [storage.join(shuffled.folder, f.name) for f in batch]
            indexes = storage.read_ranges([(u, *index_range(f.bytes, shuffled.ranges, r))
                                           for u, f in zip(uris, batch)])
            wanted = []
            for u, f, ix in zip(uris, batch, indexes):
                a, b, crc = slice_bounds(ix, shuffled.partitions, shuffled.ranges, r, uri=u, size=f.bytes)
                if b > a:
                    wanted.append((u, f.bytes, a, b, crc))
            del indexes
            for group in _by_bytes(wanted, max(1, memory_bytes // 4)):
                blobs = storage.read_ranges([(u, a, b) for u, _, a, b, _ in group])
                for (u, size, a, b, crc), blob in zip(group, blobs):
                    spill.add(decode_slice(blob, r, a, b, crc, uri=u, size=size, lo=lo, hi=hi))
                del blobs
        yield from spill.partitions()


def _by_bytes(items: list[tuple], limit: int) -> Iterator[list[tuple]]:
    """``items`` (``(uri, size, start, end, crc)``) in consecutive groups of at most ``limit``
    bytes of slices (a larger slice alone)."""
    group: list[tuple] = []
    held = 0
    for item in items:
        n = item[3] - item[2]
        if group and held + n > limit:
            yield group
            group, held = [], 0
        group.append(item)
        held += n
    if group:
        yield group


def read_partition(shuffled: Shuffled, p: int) -> pa.Table | None:
    """Every row of partition ``p`` (from its range; None if empty). Reads the whole range: meant
    for shuffles with one partition per range (``ranges=partitions``)."""
    if not 0 <= p < shuffled.partitions:
        raise IndexError(f"partition {p} of a {shuffled.partitions}-partition shuffle")
    if not shuffled.files:
        return None
    from pipelines.engine.map_file import range_of

    r = int(range_of(np.array([p]), shuffled.partitions, shuffled.ranges)[0])
    for q, rows in read_range(shuffled, r):
        if q == p:
            return rows
    return None


def _reduce_batch(batch: dict[str, np.ndarray], *, shuffled: Shuffled, fn: Callable, fn_kwargs: dict,
                  batch_format: str, with_partition: bool, memory_bytes: int) -> Iterator[Any]:
    for r in batch["r"]:
        outputs = Coalesced()
        for p, table in read_range(shuffled, int(r), memory_bytes=memory_bytes):
            rows = table if batch_format == "pyarrow" else {c: table.column(c).to_numpy(zero_copy_only=False)
                                                            for c in table.column_names}
            del table  # the call's rows are the only copy left: freed once it returns
            out = fn(rows, partition=p, **fn_kwargs) if with_partition else fn(rows, **fn_kwargs)
            del rows
            if out is not None:
                yield from outputs.add(out)
        yield from outputs.flush()


class Coalesced:
    """The reduce function's outputs gathered into batches of ``COALESCE_OUTPUTS`` (or about
    ``COALESCE_BYTES``), their columns concatenated, in order.

    Why: Ray Data keeps a task's outputs until they fill a block (``target_max_block_size``,
    counted in column bytes), and most reduce functions return a row or a few per partition. A
    task's partitions grow with the data (a fixed number of ranges), and each small output held
    costs kilobytes of Arrow and Python objects for a few bytes of columns: thousands held at
    once were one of the parts of a reduce task's memory that grew with the data (measured in
    docs/build-corpus.md). Concatenated, the held outputs cost their bytes."""

    def __init__(self) -> None:
        self._held: list[Any] = []
        self._bytes = 0

    def add(self, out: Any) -> Iterator[Any]:
        if self._held and not _same_columns(self._held[0], out):
            yield from self.flush()
        self._held.append(out)
        self._bytes += _output_bytes(out)
        if len(self._held) >= COALESCE_OUTPUTS or self._bytes >= COALESCE_BYTES:
            yield from self.flush()

    def flush(self) -> Iterator[Any]:
        held, self._held, self._bytes = self._held, [], 0
        if len(held) == 1:
            yield held[0]
        elif held and isinstance(held[0], pa.Table):
            yield pa.concat_tables(held).combine_chunks()
        elif held:
            yield {k: np.concatenate([np.asarray(h[k]) for h in held]) for k in held[0]}


def _same_columns(a: Any, b: Any) -> bool:
    if isinstance(a, pa.Table) and isinstance(b, pa.Table):
        return a.schema == b.schema
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(np.asarray(a[k]).dtype == np.asarray(b[k]).dtype for k in a)
    return False


def _output_bytes(out: Any) -> int:
    if isinstance(out, pa.Table):
        return out.nbytes
    if isinstance(out, dict):
        return sum(np.asarray(v).nbytes for v in out.values())
    return COALESCE_BYTES  # another kind (a DataFrame): passed on as it is


def reduce(shuffled: Shuffled, fn: Callable, *, fn_kwargs: dict | None = None, batch_format: str = "numpy",
           with_partition: bool = False, memory_bytes: int = TASK_MEMORY_BYTES,
           ranges: Sequence[int] | None = None) -> Any:
    """A Dataset of ``fn(rows of one partition)`` over every non-empty partition (lazy).

    ``fn`` gets a numpy batch (or a pyarrow table with ``batch_format="pyarrow"``) holding every
    row of its partition (and ``partition=p`` with ``with_partition``) and returns a batch (or
    None). One Ray task per range of the shuffle (of ``ranges`` only, if given), one call per
    partition. Checks first that this node's spill folder has room (``check_spill_room``).
    """
    check_spill_room(shuffled, memory_bytes)
    return range_tasks(shuffled, ranges).map_batches(
        _reduce_batch, batch_size=1, batch_format="numpy",
        fn_kwargs={"shuffled": shuffled, "fn": fn, "fn_kwargs": fn_kwargs or {}, "batch_format": batch_format,
                   "with_partition": with_partition, "memory_bytes": memory_bytes})


def range_tasks(shuffled: Shuffled, ranges: Sequence[int] | None = None) -> Any:
    """A Dataset of one row ``{"r": range}`` per range of ``shuffled`` (of ``ranges`` only, if
    given), one block each: what a reduce side runs over. Raises ``IndexError`` naming the ranges
    when any is outside the shuffle."""
    import ray

    ranges = list(range(shuffled.ranges)) if ranges is None else [int(r) for r in ranges]
    bad = [r for r in ranges if not 0 <= r < shuffled.ranges]
    if bad:
        raise IndexError(f"ranges {bad} of a {shuffled.ranges}-range shuffle")
    return ray.data.from_items([{"r": r} for r in ranges], override_num_blocks=max(1, len(ranges)))


def _keyed(batch: pa.Table, *, key: str, partitions: int) -> pa.Table:
    keys = batch.column(key).to_numpy(zero_copy_only=False)
    return batch.append_column(PART, pa.array(hash_partition(keys, partitions)))


def group_apply(ds: Any, fn: Callable, *, key: str, partitions: int, folder: str, name: str = "",
                fn_kwargs: dict | None = None, batch_format: str = "numpy", file_bytes: int = FILE_BYTES,
                ranges: int | None = None, memory_bytes: int = TASK_MEMORY_BYTES,
                slice_bytes: int = SLICE_BYTES) -> tuple[Any, Shuffled]:
    """Apply ``fn`` to whole hash partitions of ``ds`` by the int64 column ``key``: every row with
    a given key reaches the same call. Runs the map side now; returns the reduce side (lazy)
    and the shuffle (its files stay until ``Shuffled.remove``)."""
    keyed = ds.map_batches(_keyed, batch_format="pyarrow", fn_kwargs={"key": key, "partitions": partitions})
    shuffled = shuffle(keyed, partitions=partitions, folder=folder, name=name, file_bytes=file_bytes, ranges=ranges,
                       slice_bytes=slice_bytes)
    return (reduce(shuffled, fn, fn_kwargs=fn_kwargs, batch_format=batch_format, memory_bytes=memory_bytes),
            shuffled)


def hash_partition(keys: np.ndarray, partitions: int) -> np.ndarray:
    """Partition of each int64 key: a hash, so equal keys meet and partitions fill evenly."""
    from common.hashing import fmix64

    mixed = fmix64(np.asarray(keys).astype(np.uint64))
    return (mixed % np.uint64(partitions)).astype(np.int64)
