"""A reduce task's rows, partition by partition, in bounded memory: a local external bucket sort.

A reduce task owns a contiguous range of partitions (``pipelines.engine.map_file``) and receives
its range's slice of every map file, in map-file order: rows of all its partitions mixed. It
must hand each partition's rows to the reduce function whole, in the order they were added (so
the output does not depend on the task's memory). The range's bytes grow with the data (a fixed
number of ranges, so that requests stay linear), so they cannot be held:

* Slices are appended to a buffer. When it holds ``budget`` bytes, its rows are written to a
  local *run* file (an Arrow IPC file) partition by partition, each partition's rows taken out of
  the buffer on their own (so the copy held is one partition's, not the buffer's); the run keeps
  one int64 per partition of the range: its row count, from which a partition's record batch is
  found.
* Runs are merged by levels (as an LSM tree compacts): ``MAX_RUNS`` consecutive runs of one level
  become one run of the next, partition by partition, their rows in run order, so the order is
  kept. The runs open at once, and their indexes, stay at ``MAX_RUNS`` per level; each row is
  rewritten about log_MAX_RUNS(range bytes / budget) times.
* ``partitions()`` then yields, for each partition of the range in order, its rows from every
  run in run order followed by its rows still in the buffer: the same rows, in the same order, as
  concatenating the partition's rows slice after slice.

Memory: the buffer (at most ``budget`` bytes, plus the slice that crossed it), one partition's
rows (``shuffle.partition_mb`` of rows: partitions follow the data) while it is written or while
its reduce call runs, and one run's index while a merge adds it up. Runs and their indexes (16
bytes per partition of the range each, up to ``MAX_RUNS`` runs per level open) are read through
memory maps, one partition at a time: their pages are the kernel's page cache, reclaimable, not
the task's heap (held in the heap, the indexes were the part of a reduce task's memory that grew
with partitions x runs). Local disk: the range's bytes (more by one merge's output while it
runs), in ``ELECTRA_SPILL_DIR`` or the system's temp folder, in a folder tagged with the
shuffle, the range and the process: removed when the task ends, even on error, and by the next
attempt of the same range on that node if a kill left it behind (its process is gone).

Room on that disk (``pipelines.engine.node_space``). Given the bytes its range will bring
(``expected_bytes``, from the map files' sizes), a spill checks as it starts that the folder's
file system has room for every reduce task this node may run at once, each at its peak (the
bound is ``node_space.node_spill_bytes``; the driver checks only its own node before the reduce
side, so each worker node checks here); and before each run it writes, that the run fits (a disk
filled by something else meanwhile), and a write that still finds it full is caught. Each raises
``SpillSpaceError``: one line naming the folder, the size needed, the free space and the fixes,
not ENOSPC deep in Arrow, and not retried.

The alternative, a streaming k-way merge of the map files' sorted slices (datatrove's MinHash
buckets), needs one open stream per map file, thousands at scale; one sequential read of each
slice into local runs keeps the store's requests at one per map file and its connections few.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from typing import Iterator

import numpy as np
import pyarrow as pa

from pipelines.engine import node_space
from pipelines.engine.map_file import PART
from pipelines.engine.node_space import SPILL_DIR_ENV, SpillSpaceError, spill_root

__all__ = ["MAX_RUNS", "SPILL_DIR_ENV", "RangeSpill", "SpillSpaceError", "spill_root"]

MAX_RUNS = 64


class _Run:
    """A run file: partitions' rows in partition order, one record batch per non-empty partition.
    Its index (each partition's row count, and its batch number) is written beside it and read
    through memory maps: page cache, not the task's heap, however many partitions the range
    holds and however many runs are open."""

    def __init__(self, path: str, counts: np.ndarray, schema: pa.Schema, level: int):
        self.path, self.schema, self.level = path, schema, level
        nonempty = counts > 0
        np.save(path + ".counts.npy", counts.astype(np.int64, copy=False))
        np.save(path + ".batch.npy", np.where(nonempty, np.cumsum(nonempty) - 1, -1))  # partition -> batch
        self.counts = np.load(path + ".counts.npy", mmap_mode="r")
        self.batch = np.load(path + ".batch.npy", mmap_mode="r")
        self._reader: pa.ipc.RecordBatchFileReader | None = None

    def rows(self, i: int) -> pa.RecordBatch | None:
        b = int(self.batch[i])
        if b < 0:
            return None
        if self._reader is None:
            self._reader = pa.ipc.open_file(pa.memory_map(self.path))
        return self._reader.get_batch(b)

    def remove(self) -> None:
        self._reader = None
        self.counts = self.batch = None  # the maps, before their files go
        for path in (self.path, self.path + ".counts.npy", self.path + ".batch.npy"):
            os.remove(path)


def _joined(batches: list[pa.RecordBatch]) -> pa.Table:
    return pa.concat_tables([pa.Table.from_batches([b]) for b in batches], promote_options="default")


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with ``schema``'s columns, in its order and types (a missing column as nulls):
    blocks of one Dataset may differ (a column all None in one block is of type null)."""
    if table.schema == schema:
        return table
    cols = [table.column(f.name).cast(f.type) if f.name in table.column_names else pa.nulls(table.num_rows, f.type)
            for f in schema]
    return pa.Table.from_arrays(cols, schema=schema)


class RangeSpill:
    """Rows of partitions ``[lo, hi)`` added in order; read back one partition at a time.

    ``name`` (a shuffle's folder and range) tags the local folder (``<tag>.<pid>.<random>``), so
    that a later attempt of the same range removes what a killed one left there.

    ``expected_bytes`` (the range's bytes in the map files; 0: unknown, not checked) and
    ``ranges`` (the shuffle's reduce tasks; 0: unknown) size the check at the start: raises
    ``SpillSpaceError`` if this node's spill folder has no room for ``min(ranges, its CPUs)``
    tasks at their peak, naming the fewest reduce tasks that would fit when ``ranges`` is known."""

    def __init__(self, lo: int, hi: int, *, budget: int, name: str = "", expected_bytes: int = 0, ranges: int = 0,
                 map_side: bool = False):
        self.lo, self.hi, self.budget = lo, hi, max(1, int(budget))
        self.name = name
        self.expected_bytes, self.ranges = max(0, int(expected_bytes)), max(0, int(ranges))
        self.map_side = map_side  # a map task's spill: its fix is smaller map files, not more reduce tasks
        self._buffer: list[pa.Table] = []
        self._buffered = 0
        self._runs: list[_Run] = []
        self.schema: pa.Schema | None = None  # of every row added (blocks may differ: a null-typed column)
        self._dir: str | None = None
        self._tag = hashlib.blake2b(name.encode(), digest_size=8).hexdigest() if name else ""
        if self._tag:
            self._remove_stale()  # before the check: what a killed attempt left is room
        if self.expected_bytes:
            self._check_room()
        self._made = 0
        self.peak_buffered = 0  # the most bytes the buffer held (a task's share of memory)
        self.spilled_bytes = 0
        self.merges = 0

    def add(self, table: pa.Table) -> None:
        if not table.num_rows:
            return
        if self.schema is None:
            self.schema = table.schema
        elif table.schema != self.schema:
            self.schema = pa.unify_schemas([self.schema, table.schema], promote_options="default")
        self._buffer.append(table)
        self._buffered += table.nbytes
        self.peak_buffered = max(self.peak_buffered, self._buffered)
        if self._buffered >= self.budget:
            self._spill()

    def _take_buffer(self) -> tuple[pa.Table, np.ndarray, np.ndarray]:
        """The buffer as one table (chunks, not copied), the order of its rows by partition
        (stable) and each partition's row count."""
        table = pa.concat_tables(self._buffer, promote_options="default") if len(self._buffer) > 1 else self._buffer[0]
        self._buffer, self._buffered = [], 0
        part = table.column(PART).to_numpy(zero_copy_only=False).astype(np.int64)
        order = np.argsort(part, kind="stable")
        return table, order, np.bincount(part - self.lo, minlength=self.hi - self.lo)

    def _folder(self) -> str:
        if self._dir is None:
            root = spill_root()
            os.makedirs(root, exist_ok=True)
            prefix = f"{self._tag}." if self._tag else "range-"
            self._dir = tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}.", dir=root)
        return self._dir

    def _fix(self, room: int) -> int | None:
        """The fewest reduce tasks whose spills fit ``room`` on this node (None if unknown)."""
        if not (self.expected_bytes and self.ranges):
            return None
        return node_space.reduce_tasks_needed(self.expected_bytes * self.ranges, node_space.node_cpus(), room,
                                              self.budget, MAX_RUNS, at_least=self.ranges + 1)

    def _check_room(self) -> None:
        """Room for this node's reduce tasks at once (``node_space``'s bound), each spilling about
        ``expected_bytes``: other tasks' live spills count in the bound, so they are added to the
        free space rather than taken from it."""
        cpus = node_space.node_cpus()
        tasks = min(self.ranges, cpus) if self.ranges else cpus
        task = node_space.task_spill_bytes(self.expected_bytes, self.budget, MAX_RUNS)
        root = spill_root()
        room = node_space.spill_room(root)
        if tasks * task > room:
            raise node_space.no_room(root, need=tasks * task, why=node_space.at_once(tasks, task), room=room,
                                     reduce_tasks=self._fix(room))

    def _run_does_not_fit(self, folder: str, size: int, free: int, why: str = "") -> SpillSpaceError:
        if self.map_side:
            return node_space.no_room(folder, need=size, why=why or "a map task's next run", room=free,
                                      reduce_tasks=None, fix=node_space.MAP_SIDE_FIX)
        return node_space.no_room(folder, need=size, why=why or "a reduce task's next run", room=free,
                                  reduce_tasks=self._fix(node_space.spill_room(spill_root())))

    def local_file(self, name: str) -> str:
        """A path for a file of the task's own in this spill's folder (removed with it, and with
        a killed task's folder by the next attempt on the node)."""
        return os.path.join(self._folder(), name)

    def out_of_room(self, exc: OSError, size: int, why: str) -> Exception:
        """``exc`` (a write into this spill's folder) as the one-line error if the disk is full."""
        if not node_space.is_disk_full(exc):
            return exc
        folder = self._dir or spill_root()
        return self._run_does_not_fit(folder, size, node_space.free_bytes(folder), why)

    def _remove_stale(self) -> None:
        """Remove this range's folders left by processes no longer alive (a killed attempt): they
        are named ``<tag>.<pid>.<random>``; a live one (another read of the same range, in this
        process or another) is never touched."""
        root = spill_root()
        try:
            names = os.listdir(root)
        except FileNotFoundError:
            return
        for entry in names:
            tag, _, rest = entry.partition(".")
            pid = rest.partition(".")[0]
            if tag != self._tag or not pid.isdigit():
                continue
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                shutil.rmtree(os.path.join(root, entry), ignore_errors=True)
            except PermissionError:  # alive, another user's
                pass

    def _write_run(self, schema: pa.Schema, counts: np.ndarray, rows_of, size: int, level: int = 0) -> None:
        """Write a run of about ``size`` bytes: refused before it starts if the disk has not that
        much free, and a write that still finds the disk full (another process filled it) raises
        the same error; the partial file goes with the folder when the spill closes."""
        free = node_space.free_bytes(self._dir or spill_root())
        if size > free:
            raise self._run_does_not_fit(self._dir or spill_root(), size, free)
        try:
            path = os.path.join(self._folder(), f"run-{self._made:06d}.arrow")
            self._made += 1
            with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
                for i in np.flatnonzero(counts):
                    writer.write_batch(rows_of(int(i)).combine_chunks().to_batches()[0])
            self._runs.append(_Run(path, counts, schema, level))
        except OSError as exc:
            if not node_space.is_disk_full(exc):
                raise
            folder = self._dir or spill_root()
            raise self._run_does_not_fit(folder, size, node_space.free_bytes(folder)) from exc
        self.spilled_bytes += os.path.getsize(path)

    def _spill(self) -> None:
        size = self._buffered
        table, order, counts = self._take_buffer()
        starts = np.concatenate([[0], np.cumsum(counts)])
        self._write_run(table.schema, counts,
                        lambda i: table.take(pa.array(order[starts[i]:starts[i + 1]])), size)
        del table
        while len(self._runs) >= MAX_RUNS and len({r.level for r in self._runs[-MAX_RUNS:]}) == 1:
            self._merge()

    def _merge(self) -> None:
        """The last ``MAX_RUNS`` runs (all of one level, consecutive) as one run of the next level,
        partition by partition, in run order: the runs stay in the order their rows came."""
        old = self._runs[-MAX_RUNS:]
        del self._runs[-MAX_RUNS:]
        counts = np.zeros(self.hi - self.lo, dtype=np.int64)
        for r in old:  # one run's index at a time, not MAX_RUNS of them stacked
            counts += r.counts
        schema = pa.unify_schemas([r.schema for r in old], promote_options="default")

        def rows_of(i: int) -> pa.Table:
            return conform(_joined([b for b in (r.rows(i) for r in old) if b is not None]), schema)

        self._write_run(schema, counts, rows_of, sum(os.path.getsize(r.path) for r in old),
                        level=old[0].level + 1)
        for r in old:
            self.spilled_bytes -= os.path.getsize(r.path)
            r.remove()
        self.merges += 1

    def partitions(self) -> Iterator[tuple[int, pa.Table]]:
        """``(partition, rows without the partition column)`` for each non-empty partition, in order."""
        tail = order = tail_counts = tail_starts = None
        if self._buffer:
            tail, order, tail_counts = self._take_buffer()
            tail_starts = np.concatenate([[0], np.cumsum(tail_counts)])
        for i in range(self.hi - self.lo):
            pieces = [pa.Table.from_batches([b]) for b in (r.rows(i) for r in self._runs) if b is not None]
            if tail is not None and tail_counts[i]:
                pieces.append(tail.take(pa.array(order[tail_starts[i]:tail_starts[i + 1]])))
            if not pieces:
                continue
            rows = conform(pa.concat_tables(pieces, promote_options="default") if len(pieces) > 1 else pieces[0],
                           self.schema)
            yield self.lo + i, rows.drop_columns([PART])
            del rows, pieces

    def close(self) -> None:
        self._runs, self._buffer = [], []
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> "RangeSpill":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
