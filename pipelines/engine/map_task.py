"""A storage shuffle's map task: Ray Data blocks in, map files on the store out.

Why map files grow with the reduce parallelism. The reduce side makes two ranged reads per
(map file, reduce task): ``2 M R`` GETs for ``M`` map files and ``R`` reduce tasks, each reading
a slice of about ``F / R`` bytes of a map file of ``F`` bytes. With ``F`` fixed
(``shuffle.map_file_mb``) and ``R`` following the data up to the cluster's size (what a big
cluster picks: ``shuffle.default_ranges``), ``M`` and ``R`` both grow with the data and the reads
grow as its square; at 10 TB on thousands of CPUs the slices are a few kilobytes, each dear in
requests (S3 serves a few thousand GETs a second per key prefix) and in its Arrow stream's own
header. So a map file holds at least ``R x slice_bytes`` (``shuffle.slice_mb``,
``map_file_bytes``): ``M <= bytes / (R x slice_bytes)``, and the reads are at most
``2 bytes / slice_bytes`` whatever ``R`` is, each slice about ``slice_bytes``: linear in the data
at any reduce parallelism. This is the map side's half of the merge that Spark's push-based
shuffle (Magnet) and Exoshuffle do on the reduce side: the bytes a reduce task needs from one
map task's share of the data arrive in one read.

The price is a bigger map file than a map task can sort in memory. Two ways to write one:

* ``write_map_files`` (the map file fits the task's memory, ``F = shuffle.map_file_mb``): the
  blocks concatenated, sorted by partition (stable) and encoded in memory, cut into pieces of
  about ``F`` (a block larger than that gives several files). About three copies of the rows.
* ``stream_map_file`` (``R x slice_bytes`` is larger than ``F``): the blocks are fetched one at a
  time (passed as a list of references, so Ray does not fetch them all before the task starts;
  the driver pins them until the task ends, which ``node_space`` sizes the tasks in flight for)
  into a ``RangeSpill`` keyed by RANGE, not partition (a run's cost grows with its keys: R, not
  P), with ``F`` as its memory budget (sorted runs on local disk, merged by levels), then
  written range by range into a local file, each range's rows sorted by partition (stable), one
  range's slice in memory at a time, and uploaded in parts (``storage.write_file``). Memory: the
  budget, one block, one range's slice. Local disk: the runs and the file, about twice the map
  file while it is written, in the spill's folder (so a killed task's is removed by the next on
  the node); a run or the file that finds the disk full is one line naming the folder and the
  fix (smaller map files: ``shuffle.slice_mb``). Map tasks are ``bytes / (R x slice_bytes)``:
  fewer, longer tasks than with small files (the map side's parallelism is what the fixed read
  size costs), and a node running several of them needs twice their map files of local disk.

Either way a map file is named by a hash of its content (a retried task rewrites the same
object; readers open only the files the driver collected), under two hex digits of that hash as
a folder (S3 scales its request rate per key prefix). Both write the same layout
(``pipelines.engine.map_file``): a reader cannot tell them apart, and the rows of a partition
reach its reduce call whatever the map files' sizes, so the shuffle's outputs are the same.
"""
from __future__ import annotations

import hashlib
import os
import resource
from typing import Any

import numpy as np
import pyarrow as pa

from common import storage
from pipelines.engine.map_file import (PART, MapFile, MapFiles, encode_map_file, range_of, slice_crc, trailer,
                                       with_part_last)
from pipelines.engine.spill import RangeSpill

# A streamed map task's spill is keyed by range (``PART`` holds it there); the row's partition
# travels in this column until the range's slice is written.
_PARTITION = "__map_partition"


def map_file_bytes(file_bytes: int, ranges: int, slice_bytes: int) -> int:
    """Bytes of rows per map file: ``file_bytes``, or ``ranges x slice_bytes`` where more, so
    that each reduce task's slice of a map file is about ``slice_bytes`` at least."""
    return max(int(file_bytes), int(ranges) * int(slice_bytes))


def _pieces(table: pa.Table, file_bytes: int) -> list[pa.Table]:
    """``table`` cut into row runs of about ``file_bytes`` each (one if it is not much larger)."""
    n = max(1, round(table.nbytes / max(1, file_bytes)))
    if n == 1 or table.num_rows < 2:
        return [table]
    edges = [i * table.num_rows // n for i in range(n + 1)]
    return [table.slice(a, b - a) for a, b in zip(edges, edges[1:]) if b > a]


def _name(digest: str) -> str:
    return f"{digest[:2]}/map-{digest}.arrows"


def _done(files: list[MapFile]) -> dict[str, Any]:
    # As ``MapFiles`` (arrays), not a dict per file: the driver gathers every task's list.
    return {"files": MapFiles(files), "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10}


def write_map_files(folder: str, partitions: int, ranges: int, file_bytes: int, *blocks: Any) -> dict[str, Any]:
    """The in-memory map task: ``blocks`` (Ray resolves them) as map files of about ``file_bytes``."""
    from ray.data.block import BlockAccessor

    tables = [BlockAccessor.for_block(b).to_arrow() for b in blocks]
    table = pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]
    del tables
    files = []
    for piece in _pieces(table, file_bytes):
        data = encode_map_file(piece, partitions, ranges)
        name = _name(hashlib.blake2b(data, digest_size=12).hexdigest())
        storage.write_bytes(storage.join(folder, name), data)
        files.append(MapFile(name, len(data), piece.num_rows))
        del data
    return _done(files)


def stream_map_file(folder: str, partitions: int, ranges: int, memory_bytes: int, refs: list[Any]) -> dict[str, Any]:
    """The streaming map task: the blocks of ``refs`` (object references, fetched one at a time)
    as ONE map file, sorted through a local spill of ``memory_bytes`` keyed by RANGE (its runs'
    cost per run follows the ranges, not the partitions: ``RangeSpill`` handles each key of a
    run on its own) and written to a local file in the spill's folder, then uploaded."""
    import ray
    from ray.data.block import BlockAccessor

    rows = 0
    with RangeSpill(0, ranges, budget=memory_bytes, name=f"{folder}#map", map_side=True) as spill:
        for i in range(len(refs)):
            block = ray.get(refs[i])
            refs[i] = None  # the driver still pins the block until this task ends (node_space sizes for that)
            table = BlockAccessor.for_block(block).to_arrow()
            del block
            rows += table.num_rows
            part = table.column(PART).to_numpy(zero_copy_only=False).astype(np.int64)
            spill.add(table.drop_columns([PART]).append_column(_PARTITION, pa.array(part))
                      .append_column(PART, pa.array(range_of(part, partitions, ranges))))
            del table, part
        local = spill.local_file("map-file.arrows")
        try:
            with open(local, "wb") as out:
                digest = _write_ranges(out, spill, partitions, ranges)
        except OSError as exc:
            raise spill.out_of_room(exc, spill.spilled_bytes, "a map task's local map file") from exc
        name = _name(digest)
        size = os.path.getsize(local)
        storage.write_file(storage.join(folder, name), local)
    return _done([MapFile(name, size, rows)])


def _write_ranges(out: Any, spill: RangeSpill, partitions: int, ranges: int) -> str:
    """Write ``spill``'s rows (keyed by range, their partition in ``_PARTITION``) to ``out`` as a
    map file (range slices, each sorted by partition, stable; then the trailer), one range's
    slice in memory at a time; returns the hex digest ``write_map_files`` names by."""
    digest = hashlib.blake2b(digest_size=12)
    offsets = np.zeros(ranges + 1, dtype=np.int64)
    crcs = np.zeros(ranges, dtype=np.uint32)
    slices = spill.partitions()
    pending = next(slices, None)
    for r in range(ranges):
        data = b""
        if pending is not None and pending[0] == r:
            rows = pending[1]
            part = rows.column(_PARTITION).to_numpy(zero_copy_only=False)
            order = np.argsort(part, kind="stable")  # a partition's rows keep the order they came in
            rows = with_part_last(rows.drop_columns([_PARTITION]).take(pa.array(order)), part[order])
            buf = pa.BufferOutputStream()
            with pa.ipc.new_stream(buf, rows.schema) as writer:
                writer.write_table(rows)
            data = buf.getvalue()
            del rows, part, order, buf
            pending = next(slices, None)
        end = int(offsets[r]) + len(data)
        crcs[r] = slice_crc(r, int(offsets[r]), end, data)
        offsets[r + 1] = end
        out.write(data)
        digest.update(data)
        del data
    tail = trailer(offsets, crcs, partitions, ranges)
    out.write(tail)
    digest.update(tail)
    return digest.hexdigest()
