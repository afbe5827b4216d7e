"""The quarantine's part lists: which ``rejected/<stage>-<key>/part-*.jsonl.zst`` a corpus holds.

Format 4 (written): one list per document stage, in its quarantine folder
(``rejected/<stage>-<key>/_parts-<sha16>.arrow``), an Arrow IPC file with the columns of ``part_list_schema``
(``name``, ``rows``, ``bytes``, ``row_groups``: the layout of every stage's part list in
build-corpus, ``pipelines.engine.part_list``), named by the manifest's ``rejected_lists`` with its
sha256, size and counts. The build writes a stage's list as that stage finishes and publishing
copies it there as it is, so neither the build's driver nor any file ever holds every quarantine
part at once: a 10 TB build quarantines about a million parts, which as one JSON list assembled
at publish cost the driver ~0.66 KB a part (measured in docs/build-corpus.md) and the build
flow's result as much again.

Format 3: one JSON file beside the manifest (``rejected-<sha16>.json``, named by the manifest's
``rejected_index``); format 2: the list inline in the manifest. Both are still read.
"""
from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from common import storage

if TYPE_CHECKING:
    import pyarrow as pa


@functools.cache
def part_list_schema() -> pa.Schema:
    """The columns of a part list (pyarrow is imported here: the trainer imports this package
    and never reads a list)."""
    import pyarrow as pa

    return pa.schema([("name", pa.string()), ("rows", pa.int64()), ("bytes", pa.int64()),
                      ("row_groups", pa.int64())])




def list_name(sha256: str) -> str:
    """A stage's list's name in its quarantine folder: named by its content, so a publish never
    rewrites a list that a reader of the previous manifest may still be checking."""
    return f"_parts-{sha256[:16]}.arrow"


def is_list_name(name: str) -> bool:
    return name.startswith("_parts-") and name.endswith(".arrow")


@dataclass
class RejectedInfo:
    stage: str
    path: str  # relative to the corpus
    records: int
    bytes: int


@dataclass
class RejectedIndex:
    """Where a format-3 manifest's rejected-part list is: a JSON file beside the manifest."""
    path: str  # relative to the corpus: rejected-<sha256[:16]>.json
    sha256: str
    bytes: int
    parts: int
    records: int


@dataclass
class RejectedList:
    """One document stage's quarantine-part list (format 4), as the manifest names it."""
    stage: str
    path: str  # relative to the corpus: rejected/<stage>-<key>/_parts-<sha256[:16]>.arrow
    sha256: str
    bytes: int  # the list file's size
    parts: int
    records: int

    @property
    def folder(self) -> str:
        return self.path.rsplit("/", 1)[0]


def checked_part_list_schema() -> pa.Schema:
    """``part_list_schema`` plus ``crc32`` (int64, each part's zlib crc32): the layout of a
    build-corpus stage's list of data parts, which the stage reading them checks them against
    (``pipelines.engine.parts``). Lists without it (every quarantine list, which the corpus
    publishes, and data lists written before it) are read as before."""
    import pyarrow as pa

    return part_list_schema().append(pa.field("crc32", pa.int64()))


def _known_schema(schema: pa.Schema) -> bool:
    return schema.equals(part_list_schema()) or schema.equals(checked_part_list_schema())


def part_list_bytes(table: pa.Table) -> bytes:
    """``table`` (the columns of ``part_list_schema``, or of ``checked_part_list_schema``) as a list file."""
    import pyarrow as pa

    schema = checked_part_list_schema() if table.schema.equals(checked_part_list_schema()) else part_list_schema()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def read_part_list(data: bytes, where: str) -> pa.Table:
    import pyarrow as pa

    try:
        table = pa.ipc.open_file(pa.BufferReader(data)).read_all()
    except pa.ArrowInvalid as exc:
        raise ValueError(f"{where}: not a part list ({exc})") from None
    if not _known_schema(table.schema):
        raise ValueError(f"{where}: a part list has the columns {part_list_schema().names} (int64 counts), "
                         f"not {table.schema}")
    return table


def rejected_list(stage: str, folder: str, data: bytes) -> RejectedList:
    """The manifest's entry for ``data`` (a stage's list file) saved in quarantine folder ``folder``."""
    sha = hashlib.sha256(data).hexdigest()
    table = read_part_list(data, f"{folder}/{list_name(sha)}")
    return RejectedList(stage=stage, path=f"{folder}/{list_name(sha)}", sha256=sha,
                        bytes=len(data), parts=table.num_rows,
                        records=int(table.column("rows").to_numpy().sum()) if table.num_rows else 0)


def write_rejected_lists(corpus: str, rejected: list[RejectedInfo]) -> list[RejectedList]:
    """``rejected`` (parts in memory, e.g. a tool's) written as one list per quarantine folder."""
    import pyarrow as pa

    by_folder: dict[str, list[RejectedInfo]] = {}
    for r in rejected:
        by_folder.setdefault(r.path.rsplit("/", 1)[0], []).append(r)
    out = []
    for folder, parts in by_folder.items():
        stage = parts[0].stage
        other = next((r.stage for r in parts if r.stage != stage), None)
        if other is not None:  # the folder's one list names one stage
            raise ValueError(f"{folder}: parts of the stages {stage} and {other}; a quarantine folder holds "
                             "one stage's parts (rejected/<stage>-<key>/)")
        data = part_list_bytes(pa.table({"name": [r.path.rsplit("/", 1)[1] for r in parts],
                                         "rows": [r.records for r in parts], "bytes": [r.bytes for r in parts],
                                         "row_groups": [0] * len(parts)}, schema=part_list_schema()))
        ref = rejected_list(stage, folder, data)
        storage.write_bytes(storage.join(str(corpus), ref.path), data)
        out.append(ref)
    return out


def _checked(corpus: str, path: str, sha256: str, what: str) -> bytes:
    uri = storage.join(str(corpus), path)
    try:
        data = storage.read_bytes(uri)
    except storage.StorageError as exc:
        raise ValueError(f"{uri}: the {what} the manifest names is unreadable ({exc})") from exc
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ValueError(f"{uri}: sha256 differs from the manifest's entry (altered after the build)")
    return data


class Listing(Protocol):
    """What ``read_rejected`` reads of a ``pipelines.schema.Manifest`` (declared here: the
    manifest module imports this one)."""
    rejected: list[RejectedInfo]
    rejected_lists: list[RejectedList]
    rejected_index: RejectedIndex | None


def read_rejected(corpus: str, manifest: Listing, folder: str | None = None) -> list[RejectedInfo]:
    """The manifest's rejected parts (those in quarantine folder ``folder`` only, when given):
    from its lists (format 4, each file's sha256 checked; only ``folder``'s is read), the file its
    ``rejected_index`` names (format 3) or inline (format 2). A missing or altered list is an
    error naming it."""
    if manifest.rejected:
        parts = list(manifest.rejected)
    elif manifest.rejected_lists:
        parts = []
        for ref in manifest.rejected_lists:
            if folder is not None and ref.folder != folder:
                continue
            table = read_part_list(_checked(corpus, ref.path, ref.sha256, "rejected-part list"),
                                   storage.join(str(corpus), ref.path))
            parts += [RejectedInfo(ref.stage, f"{ref.folder}/{name}", rows, size) for name, rows, size in zip(
                table.column("name").to_pylist(), table.column("rows").to_pylist(), table.column("bytes").to_pylist())]
    elif manifest.rejected_index is not None:
        index = manifest.rejected_index
        data = _checked(corpus, index.path, index.sha256, "rejected-part list")
        parts = [RejectedInfo(**r) for r in json.loads(data)["rejected"]]
    else:
        parts = []
    return [r for r in parts if folder is None or r.path.rsplit("/", 1)[0] == folder]
