"""A stage's list of parts, held as columns and stored beside its completion marker.

Every stage lists the files it wrote (data parts, quarantine parts) with their rows, bytes and
row groups: readers open exactly those (``pipelines.engine.parts``). At 10 TB a stage writes
~300,000 parts. As a Python dict per part such a list costs the driver ~0.3 KB a part, and it
sat in the stage's JSON marker, which the runner kept loaded for every stage to the end of the
build. Here the list is one Arrow table (``name`` string, ``rows``, ``bytes``, ``row_groups``
int64: ~60 bytes a part, most of it the name), built from the writers' summaries as they arrive
(``PartListBuilder`` buffers a few thousand records as Python values, then makes them columns),
and saved as one Arrow IPC file next to the marker. The marker keeps only a ``StoredParts``: the
file's name, size and sha256 and the totals, so loading a marker costs the same at any size,
and a list is loaded only by the stage that reads those parts, for as long as it runs.

A data part's record also holds its crc32 (``write_parquet``), a fifth column of the list
(``CHECKED``) that the stage reading the part checks it against; a list of parts without one (a
document stage's quarantine list, which the corpus publishes as it is) keeps the corpus's four
columns, and a list written before the column existed reads with ``NO_CRC`` for every part.

Trade-off: a reader of a stage's parts makes one more GET (the list file) and checks its
sha256, and a list is still whole on the driver while a stage plans its reads from it; planning
from ranges of the stored list inside the read tasks would remove that too.
"""
from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Any, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)

from common import storage
from pipelines.schema.rejected import checked_part_list_schema, part_list_bytes, part_list_schema, read_part_list

SCHEMA = part_list_schema()  # the file format is the corpus's (a stage's quarantine list is published)
# Data parts' lists also hold each part's crc32 (``pipelines.engine.parts`` checks a part
# against it); a record without one (a quarantine part) leaves the column out of the list.
CHECKED = checked_part_list_schema()
_INTS = ("rows", "bytes", "row_groups")
NO_CRC = -1
# Records a builder keeps as Python values before it makes them a column chunk: small enough
# to be nothing on the driver, big enough that the chunks' own overhead is nothing either.
BUILD_CHUNK = 4096


class PartList:
    """Part records (``name``, ``rows``, ``bytes``, ``row_groups``) as one Arrow table, in a fixed
    order (a part's position is its index for readers). Iterating yields one dict per part."""
    __slots__ = ("table",)

    def __init__(self, table: pa.Table | None = None):
        table = SCHEMA.empty_table() if table is None else table
        if not (table.schema.equals(SCHEMA) or table.schema.equals(CHECKED)):
            raise ValueError(f"a part list has the columns {SCHEMA.names} (int64 counts; crc32 after them "
                             f"optionally), not {table.schema}")
        self.table = table.combine_chunks()

    @classmethod
    def of(cls, records: Iterable[dict[str, Any]] | PartList) -> PartList:
        """``records`` in their order (a ``PartList`` is returned as it is)."""
        if isinstance(records, PartList):
            return records
        builder = PartListBuilder(sort=False)
        builder.add(records)
        return builder.build()

    def __len__(self) -> int:
        return self.table.num_rows

    def __bool__(self) -> bool:
        return self.table.num_rows > 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.table.to_pylist())

    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            if step != 1:
                raise ValueError("a part list slices with step 1 only")
            return PartList(self.table.slice(start, max(0, stop - start)))
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"part {i} of a list of {n}")
        return self.table.slice(i % n, 1).to_pylist()[0]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PartList) and self.table.equals(other.table)

    def __repr__(self) -> str:
        return f"PartList({len(self)} parts, {self.rows} rows, {self.bytes} bytes)"

    def column(self, name: str) -> np.ndarray:
        """``rows``, ``bytes``, ``row_groups`` or ``crc32`` as int64 (``crc32``: ``NO_CRC`` each when
        the list has none), or ``name`` as an object array."""
        if name == "crc32" and "crc32" not in self.table.column_names:
            return np.full(len(self), NO_CRC, np.int64)
        return self.table.column(name).to_numpy(zero_copy_only=False)

    @property
    def names(self) -> pa.Array:
        return self.table.column("name").combine_chunks()

    @property
    def rows(self) -> int:
        return int(np.sum(self.column("rows"), dtype=np.int64)) if len(self) else 0

    @property
    def bytes(self) -> int:
        return int(np.sum(self.column("bytes"), dtype=np.int64)) if len(self) else 0

    def encode(self) -> bytes:
        """The list as one Arrow IPC file (what ``decode`` reads)."""
        return part_list_bytes(self.table)

    @classmethod
    def decode(cls, data: bytes, where: str) -> PartList:
        return cls(read_part_list(data, where))


class PartListBuilder:
    """Collects part records as they arrive (``add``) and builds the ``PartList``, sorted by name
    unless ``sort=False`` (then in the order added)."""

    def __init__(self, *, sort: bool = True):
        self.sort = sort
        self._chunks: list[pa.RecordBatch] = []
        self._buffer: list[dict[str, Any]] = []

    def add(self, records: Iterable[dict[str, Any]]) -> None:
        for r in records:
            self._buffer.append(r)
            if len(self._buffer) >= BUILD_CHUNK:
                self._flush()

    def _flush(self) -> None:
        if not self._buffer:
            return
        buf, self._buffer = self._buffer, []
        columns = [pa.array([r["name"] for r in buf], pa.string())]
        columns += [pa.array([int(r.get(c, 0)) for r in buf], pa.int64()) for c in _INTS]
        columns.append(pa.array([int(r.get("crc32", NO_CRC)) for r in buf], pa.int64()))
        self._chunks.append(pa.RecordBatch.from_arrays(columns, schema=CHECKED))

    def build(self) -> PartList:
        self._flush()
        table = pa.Table.from_batches(self._chunks, schema=CHECKED)
        self._chunks = []
        crc = table.column("crc32")
        if not table.num_rows or pa.compute.all(pa.compute.equal(crc, NO_CRC)).as_py():
            table = table.drop_columns(["crc32"])  # no part has one: the corpus's list format
        if self.sort and table.num_rows:
            table = table.sort_by("name")
        return PartList(table)


@dataclass(frozen=True)
class StoredParts:
    """A part list saved beside a stage's marker, as the marker records it: the list's file
    (relative to the stage's folder; ``""`` when the list is empty), its size and sha256, and the
    list's totals. ``load`` reads the file back and checks it."""
    file: str = ""
    parts: int = 0
    rows: int = 0
    bytes: int = 0
    size: int = 0
    sha256: str = ""

    @classmethod
    def save(cls, folder: str, file: str, parts: PartList) -> StoredParts:
        """Write ``parts`` to ``folder/file`` (nothing when it is empty)."""
        if not parts:
            return cls()
        data = parts.encode()
        storage.write_bytes(storage.join(folder, file), data)
        return cls(file=file, parts=len(parts), rows=parts.rows, bytes=parts.bytes, size=len(data),
                   sha256=hashlib.sha256(data).hexdigest())

    def load(self, folder: str) -> PartList:
        """The list; a missing, resized or altered file is an error naming it."""
        if not self.file:
            return PartList()
        uri = storage.join(folder, self.file)
        parts = PartList.decode(self.read_checked(folder), uri)
        if len(parts) != self.parts:
            fix = f"remove {storage.join(folder, '_SUCCESS')} to build that stage again"
            raise storage.StorageError(f"{uri}: {len(parts)} parts, the stage's marker says {self.parts}; {fix}")
        return parts

    def read_checked(self, folder: str) -> bytes:
        """The list file's bytes, checked against the marker (size, sha256)."""
        uri = storage.join(folder, self.file)
        fix = f"remove {storage.join(folder, '_SUCCESS')} to build that stage again"
        try:
            data = storage.read_bytes(uri)
        except storage.MissingObject:
            raise storage.StorageError(f"{uri}: the part list the stage's marker names is missing; {fix}") from None
        if len(data) != self.size or hashlib.sha256(data).hexdigest() != self.sha256:
            raise storage.StorageError(f"{uri}: {len(data)} bytes whose sha256 differs from the stage's marker "
                                       f"({self.size} bytes): the part list was altered; {fix}")
        return data

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
