"""Marks: applying "document u duplicates kept document v" to the documents, as a join in tasks.

Dedup finds its removals as pairs ``(u, v, file)``: the removed document's uid, the uid of the one
it duplicates, and ``file``, the index of the input part that holds ``u`` (every key row carries
the ``_file`` of the task that read its document, ``parts.Parts.read(with_file=True)``). The
pairs go through one more storage shuffle whose partition is that index, so partition ``f``
holds exactly the marks of part ``f``; its reduce tasks (a fixed number, like every shuffle's)
write each non-empty partition as one small object, ``by-part/part-<f>.arrow``, and return its
part number, row count and crc32. The marking pass reads the parts again with the same read
tasks; a task reading a part with marks reads that one object (one GET), checks its crc32, sorts it
by uid and marks its rows with a binary search. Text never moves, the driver holds one
``(part, rows, crc32)`` triple per part with marks (never a mark), and a task's memory is its own
part's marks.

Requests: the shuffle's ``M`` PUTs and ``2 M R`` GETs (``R`` fixed by the cluster), then one PUT
and one GET per read task of a part with marks: linear in the data. The previous design read each part's
partition straight from the map files, two ranged GETs per (map file, part): their product.
The one before gathered every pair on the driver and broadcast the whole table to every task.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from common import storage
from pipelines.engine import written
from pipelines.engine.parts import Parts
from pipelines.engine.shuffle import FILE_BYTES, PART, SLICE_BYTES, TASK_MEMORY_BYTES, MapFileError, reduce, shuffle

READ_BATCH_ROWS = 4096  # the marking tasks' results taken this many at a time


@dataclass(frozen=True)
class Marks:
    """Removed documents per input part: one object per part with marks under ``folder``."""
    folder: str | None
    parts: np.ndarray  # part numbers with marks, ascending
    crcs: np.ndarray  # the crc32 of each one's object
    count: int
    stats: dict[str, Any] = field(default_factory=dict, compare=False)  # the shuffle's

    def uri(self, part: int) -> str:
        return storage.join(self.folder, "by-part", f"part-{part:06d}.arrow")

    def remove(self) -> None:
        if self.folder is not None:
            storage.remove(self.folder, recursive=True)


def _by_file(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {"u": np.asarray(batch["u"], np.int64), "v": np.asarray(batch["v"], np.int64),
            PART: np.asarray(batch["file"], np.int64)}


def _write_part(table: pa.Table, *, partition: int, folder: str) -> dict[str, np.ndarray]:
    # sorted, so the object's bytes (and crc32) do not depend on the order the rows arrived in
    table = table.take(pa.array(np.lexsort((table.column("v").to_numpy(), table.column("u").to_numpy()))))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    data = sink.getvalue().to_pybytes()
    storage.write_bytes(storage.join(folder, "by-part", f"part-{partition:06d}.arrow"), data)
    return {"part": np.array([partition]), "rows": np.array([table.num_rows]),
            "crc": np.array([zlib.crc32(data)], dtype=np.int64), "bytes": np.array([len(data)])}


def build_marks(pairs: Any, *, num_files: int, folder: str, name: str, file_bytes: int = FILE_BYTES,
                ranges: int | None = None, memory_bytes: int = TASK_MEMORY_BYTES, slice_bytes: int = SLICE_BYTES) -> Marks:
    """Shuffle the ``(u, v, file)`` rows of ``pairs`` (a Dataset) by ``file`` into ``folder`` and
    write each part's marks as one object there."""
    sh = shuffle(pairs.map_batches(_by_file, batch_format="numpy"), partitions=max(1, num_files),
                 folder=storage.join(folder, "map"), name=name, file_bytes=file_bytes, ranges=ranges,
                 slice_bytes=slice_bytes)
    if not sh.rows:
        sh.remove()
        return Marks(folder=None, parts=np.zeros(0, np.int64), crcs=np.zeros(0, np.int64), count=0, stats=sh.stats)
    # One row per input part with marks (~300,000 at 10 TB): taken as arrays, batch by batch.
    results = reduce(sh, _write_part, batch_format="pyarrow", with_partition=True, memory_bytes=memory_bytes,
                     fn_kwargs={"folder": folder})
    got: dict[str, list[np.ndarray]] = {"part": [], "crc": [], "rows": []}
    for batch in results.iter_batches(batch_size=READ_BATCH_ROWS, batch_format="numpy"):
        for k in got:
            got[k].append(np.asarray(batch[k], dtype=np.int64))
        written.add(files=len(batch["part"]), nbytes=int(np.sum(batch["bytes"])))
    sh.remove()
    parts, crcs = (np.concatenate(got[k] or [np.zeros(0, np.int64)]) for k in ("part", "crc"))
    order = np.argsort(parts, kind="stable")
    parts, crcs = parts[order], crcs[order]
    count = int(sum(int(r.sum()) for r in got["rows"]))
    if count != sh.rows:  # every shuffled row reaches one part's object
        raise RuntimeError(f"{name}: {sh.rows} marks shuffled but {count} written")
    return Marks(folder=folder, parts=parts, crcs=crcs, count=count, stats=sh.stats)


def read_marks(marks: Marks, index: int) -> pa.Table | None:
    """The marks of part ``index`` (``u``, ``v``), checked against their crc32; None if it has none."""
    at = int(np.searchsorted(marks.parts, index))
    if at == len(marks.parts) or marks.parts[at] != index:
        return None
    uri = marks.uri(index)
    data = storage.read_bytes(uri)
    if zlib.crc32(data) != int(marks.crcs[at]):
        raise MapFileError(f"{uri}: damaged: crc32 {zlib.crc32(data):#010x}, written as {int(marks.crcs[at]):#010x}; "
                           "run the build again (the stage recomputes its marks from its input)")
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def apply_marks(table: pa.Table, index: int, *, marks: Marks, reason: str) -> pa.Table:
    """Rows of part ``index`` with every active row whose uid has a mark set to ``reason``."""
    found = read_marks(marks, index)
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
    if not len(marks.parts):
        return parts.read()
    return parts.read(transform=apply_marks, transform_kwargs={"marks": marks, "reason": reason})
