"""A join of two storage shuffles partitioned alike: partition p of one meets partition p of the other.

Why. Some rows are needed in two places keyed two ways. Near dedup groups band rows by LSH bucket
but verifies a candidate with the document's MinHash sketch, which is keyed by document: sending
the sketch with every band row (the previous design) shuffled it ``num_bands`` times per
document. A sort-merge join over co-partitioned inputs (Spark's, when both sides share a
partitioner) sends it once: the sketches are shuffled by document id, the few candidate
memberships by the same id into the same partition numbers, and a reduce task reads range ``r``
of both, partition by partition, and gets every membership of a document next to its sketch.

Both shuffles must have the same partitions and ranges (``Shuffled.partitions``,
``Shuffled.ranges``): range ``r`` then covers the same partition numbers in both, and each side is
read as any reduce side is (``shuffle.read_range``: two ranged reads per map file, a spill of its
own, half the task's memory each). ``ranges`` picks which of the ranges join: one shuffle can
carry two kinds of rows in two halves of its partition space (near dedup's band rows in the
first half, its sketches in the second) and each half be read by its own pass, every byte once.
Output batches are coalesced as ``shuffle.reduce``'s are.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from pipelines.engine.shuffle import TASK_MEMORY_BYTES, Coalesced, Shuffled, check_spill_room, range_tasks, read_range


def _aligned(left: Shuffled, right: Shuffled) -> None:
    if (left.partitions, left.ranges) != (right.partitions, right.ranges):
        raise ValueError(f"join of {left.folder} ({left.partitions} partitions, {left.ranges} ranges) and "
                         f"{right.folder} ({right.partitions}, {right.ranges}): partitioned differently")


def join_range(left: Shuffled, right: Shuffled, r: int, *,
               memory_bytes: int = TASK_MEMORY_BYTES) -> Iterator[tuple[int, pa.Table | None, pa.Table | None]]:
    """``(partition, left rows or None, right rows or None)`` for every partition of range ``r``
    that is non-empty on either side, in order."""
    _aligned(left, right)
    a = read_range(left, r, memory_bytes=max(1, memory_bytes // 2))
    b = read_range(right, r, memory_bytes=max(1, memory_bytes // 2))
    pa_, rows_a = next(a, (None, None))
    pb, rows_b = next(b, (None, None))
    while pa_ is not None or pb is not None:
        p = min(q for q in (pa_, pb) if q is not None)
        yield p, rows_a if pa_ == p else None, rows_b if pb == p else None
        if pa_ == p:
            pa_, rows_a = next(a, (None, None))
        if pb == p:
            pb, rows_b = next(b, (None, None))


def _join_batch(batch: dict[str, np.ndarray], *, left: Shuffled, right: Shuffled, fn: Callable, fn_kwargs: dict,
                memory_bytes: int) -> Iterator[Any]:
    for r in batch["r"]:
        outputs = Coalesced()
        for _, rows_a, rows_b in join_range(left, right, int(r), memory_bytes=memory_bytes):
            out = fn(rows_a, rows_b, **fn_kwargs)
            del rows_a, rows_b
            if out is not None:
                yield from outputs.add(out)
        yield from outputs.flush()


def join(left: Shuffled, right: Shuffled, fn: Callable, *, ranges: Sequence[int] | None = None,
         fn_kwargs: dict | None = None, memory_bytes: int = TASK_MEMORY_BYTES) -> Any:
    """A Dataset of ``fn(left rows, right rows)`` (pyarrow tables, None for a side without rows)
    over every partition of ``ranges`` (all by default) non-empty on either side (lazy); one Ray
    task per range. Raises ``ValueError`` at once if the two are partitioned differently."""
    _aligned(left, right)
    for side in (left, right):
        check_spill_room(side, max(1, memory_bytes // 2))
    return range_tasks(left, ranges).map_batches(
        _join_batch, batch_size=1, batch_format="numpy",
        fn_kwargs={"left": left, "right": right, "fn": fn, "fn_kwargs": fn_kwargs or {},
                   "memory_bytes": memory_bytes})
