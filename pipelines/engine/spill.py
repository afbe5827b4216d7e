"""A reduce task's rows, partition by partition, in bounded memory: a local external bucket sort.

A reduce task owns a contiguous range of partitions (``pipelines.engine.map_file``) and receives
its range's slice of every map file, in map-file order: rows of all its partitions mixed. It
must hand each partition's rows to the reduce function whole, in the order the map files and
their rows give (so the output does not depend on the task's memory). The range's bytes grow
with the data (a fixed number of ranges, so that requests stay linear), so they cannot be held:

* Slices are appended to a buffer. When it holds ``budget`` bytes it is sorted by partition
  (stable) and written to a local *run* file, an Arrow IPC file with one record batch per
  non-empty partition, and a small index ``partition -> batch`` is kept (``R_p`` ints per run).
* ``partitions()`` then yields, for each partition of the range in order, its batches from every
  run in run order followed by its rows still in the buffer (sorted once, at the end): the same
  rows, in the same order, as concatenating the partition's rows slice after slice.

Memory: the buffer (at most ``budget`` bytes, plus the slice that crossed it), one partition's
rows while its reduce call runs (``shuffle.partition_mb`` of rows: partitions follow the data),
and the run indexes (a few ints per partition per run). Runs are read through memory maps, one
partition at a time: their pages are the kernel's page cache, reclaimable, not the task's heap.
Local disk: the range's bytes once, in the system's temp folder (``ELECTRA_SPILL_DIR`` or
``TMPDIR``), removed when the task ends, even on error. The alternative, a streaming k-way merge
of the map files' sorted slices (datatrove's MinHash buckets), needs one open stream per map
file, thousands at scale; one sequential read of each slice into local runs keeps the store's
requests at one per map file and its connections few.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import Iterator

import numpy as np
import pyarrow as pa

from pipelines.engine.map_file import PART

SPILL_DIR_ENV = "ELECTRA_SPILL_DIR"


class RangeSpill:
    """Rows of partitions ``[lo, hi)`` added in order; read back one partition at a time."""

    def __init__(self, lo: int, hi: int, *, budget: int):
        self.lo, self.hi, self.budget = lo, hi, max(1, int(budget))
        self._buffer: list[pa.Table] = []
        self._buffered = 0
        self._runs: list[tuple[str, dict[int, tuple[int, ...]]]] = []
        self._dir: str | None = None
        self.peak_buffered = 0  # the most bytes the buffer held (a task's share of memory)
        self.spilled_bytes = 0

    def add(self, table: pa.Table) -> None:
        if not table.num_rows:
            return
        self._buffer.append(table)
        self._buffered += table.nbytes
        self.peak_buffered = max(self.peak_buffered, self._buffered)
        if self._buffered >= self.budget:
            self._spill()

    def _sorted_buffer(self) -> tuple[pa.Table, np.ndarray, np.ndarray]:
        table = pa.concat_tables(self._buffer) if len(self._buffer) > 1 else self._buffer[0]
        self._buffer, self._buffered = [], 0
        part = table.column(PART).to_numpy(zero_copy_only=False).astype(np.int64)
        order = np.argsort(part, kind="stable")
        table = table.take(pa.array(order))
        counts = np.bincount(part - self.lo, minlength=self.hi - self.lo)
        return table, counts, np.concatenate([[0], np.cumsum(counts)])

    def _spill(self) -> None:
        if self._dir is None:
            base = os.environ.get(SPILL_DIR_ENV) or None
            if base:
                os.makedirs(base, exist_ok=True)
            self._dir = tempfile.mkdtemp(prefix="electra-spill-", dir=base)
        table, counts, starts = self._sorted_buffer()
        path = os.path.join(self._dir, f"run-{len(self._runs):06d}.arrow")
        index: dict[int, tuple[int, ...]] = {}
        written = 0
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            for i in np.flatnonzero(counts):
                # a slice of a concatenated table may span several chunks: one batch per chunk
                batches = table.slice(int(starts[i]), int(counts[i])).to_batches()
                for batch in batches:
                    writer.write_batch(batch)
                index[self.lo + int(i)] = tuple(range(written, written + len(batches)))
                written += len(batches)
        self._runs.append((path, index))
        self.spilled_bytes += os.path.getsize(path)
        del table

    def partitions(self) -> Iterator[tuple[int, pa.Table]]:
        """``(partition, rows without the partition column)`` for each non-empty partition, in order."""
        tail = tail_starts = tail_counts = None
        if self._buffer:
            tail, tail_counts, tail_starts = self._sorted_buffer()
        readers = [(pa.ipc.open_file(pa.memory_map(path)), index) for path, index in self._runs]
        for p in range(self.lo, self.hi):
            pieces: list[pa.RecordBatch] = []
            for reader, index in readers:
                for b in index.get(p, ()):
                    pieces.append(reader.get_batch(b))
            rows = pa.Table.from_batches(pieces) if pieces else None
            if tail is not None and tail_counts[p - self.lo]:
                more = tail.slice(int(tail_starts[p - self.lo]), int(tail_counts[p - self.lo]))
                rows = more if rows is None else pa.concat_tables([rows, more])
            if rows is None:
                continue
            yield p, rows.drop_columns([PART])
            del rows, pieces

    def close(self) -> None:
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        self._buffer, self._runs = [], []

    def __enter__(self) -> "RangeSpill":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
