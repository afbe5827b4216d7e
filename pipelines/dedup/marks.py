"""Marks: applying "document u duplicates kept document v" to the documents, as a join in tasks.

Dedup finds its removals as pairs ``(u, v, file)``: the removed document's uid, the uid of the one
it duplicates, and ``file``, the index of the input part that holds ``u`` (every key row carries
the ``_file`` of the task that read its document, ``parts.Parts.read(with_file=True)``). The
pairs go through one more storage shuffle whose partition is that index, so partition ``f``
holds exactly the marks of part ``f``. The marking pass reads the parts again with the same read
tasks; each task reads its part's partition (two small ranged reads per map file of the marks
shuffle), sorts it by uid and marks its rows with a binary search. Text never moves, the driver
never sees a mark (it holds the shuffle's file list), and a task's memory is its own part's marks.

The previous design gathered every pair on the driver (16 bytes per removed document, ~4 copies
while sorting: 0.3-1 GB at 5-15 M duplicates) and broadcast the whole table to every task.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from pipelines.engine.parts import Parts
from pipelines.engine.shuffle import PART, Shuffled, read_partition, shuffle


@dataclass(frozen=True)
class Marks:
    """Removed documents per input part: a shuffle partitioned by part index (None: none)."""
    shuffled: Shuffled | None
    count: int
    stats: dict[str, Any] = field(default_factory=dict, compare=False)  # the shuffle's

    def remove(self) -> None:
        if self.shuffled is not None:
            self.shuffled.remove()


def _by_file(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {"u": np.asarray(batch["u"], np.int64), "v": np.asarray(batch["v"], np.int64),
            PART: np.asarray(batch["file"], np.int64)}


def build_marks(pairs: Any, *, num_files: int, folder: str, name: str) -> Marks:
    """Shuffle the ``(u, v, file)`` rows of ``pairs`` (a Dataset) by ``file`` into ``folder``."""
    sh = shuffle(pairs.map_batches(_by_file, batch_format="numpy"), partitions=max(1, num_files),
                 folder=folder, name=name)
    if not sh.rows:
        sh.remove()
    return Marks(shuffled=sh if sh.rows else None, count=sh.rows, stats=sh.stats)


def apply_marks(table: pa.Table, index: int, *, marks: Marks, reason: str) -> pa.Table:
    """Rows of part ``index`` with every active row whose uid has a mark set to ``reason``."""
    found = read_partition(marks.shuffled, index) if marks.shuffled is not None else None
    if found is None or table.num_rows == 0:
        return table
    member = found.column("u").to_numpy()
    root = found.column("v").to_numpy()
    order = np.argsort(member, kind="stable")
    member, root = member[order], root[order]
    uid = table.column("uid").to_numpy(zero_copy_only=False).astype(np.int64)
    reasons = np.asarray(table.column("reason").to_pylist(), dtype=object)
    details = np.asarray(table.column("detail").to_pylist(), dtype=object)
    pos = np.minimum(np.searchsorted(member, uid), len(member) - 1)
    hit = np.flatnonzero((member[pos] == uid) & (reasons == ""))
    reasons[hit] = reason
    details[hit] = [f"duplicate of uid {k}" for k in root[pos[hit]]]
    i, j = table.column_names.index("reason"), table.column_names.index("detail")
    table = table.set_column(i, "reason", pa.array(reasons.tolist(), pa.string()))
    return table.set_column(j, "detail", pa.array(details.tolist(), pa.string()))


def mark_parts(parts: Parts, marks: Marks, reason: str) -> Any:
    """The documents of ``parts`` with the marked ones set to ``reason`` (lazy; the marks'
    files must stay until it has run)."""
    if marks.shuffled is None:
        return parts.read()
    return parts.read(transform=apply_marks, transform_kwargs={"marks": marks, "reason": reason})
