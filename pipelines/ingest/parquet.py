"""Parquet documents, one row group at a time, optionally only the row groups of a byte range.

``pyarrow.parquet.ParquetFile`` reads the footer, then ``read_row_group`` materialises only the
text column of one row group, so memory is bounded by the largest row group, not the file.
Parquet needs random access: an externally compressed ``.parquet.gz``/``.zst`` is first streamed
to an anonymous temporary file on disk (and is read by one task).

**Byte ranges.** A large file is read by several tasks, each given a byte range ``[start, end)``
by the planner, which knows only the listed size (no metadata call on the driver). Each task
reads the footer itself and takes the row groups whose first byte (the lowest dictionary or data
page offset of their column chunks) lies in its range, as Hadoop-style input splits assign row
groups (Spark uses the midpoint; the start is as good when ranges are larger than row groups, and
a row group larger than a range simply leaves some ranges empty). Row ids stay
``"{name}:row{N}"`` with ``N`` the row's index in the whole file (the row counts of the footer's
earlier row groups), so ids equal those of a whole-file read. File-level rows (an unreadable
footer, a missing column, an empty file) come from the task whose range starts at 0 only.

Rows come out as plain tuples ``(id, text, reason, detail)``. An unreadable file or row group
becomes one ``ingest:bad_parquet`` row (a task reads no row group after a bad one); a missing or
non-text column one ``ingest:missing_field`` row; null or blank values ``ingest:empty_document``;
values over ``max_document_bytes`` ``ingest:oversize``. Reads are held to the listed size
(``listed``): a file shorter than its listing is a storage error, not a bad Parquet file.
"""
from __future__ import annotations

import shutil
import tempfile
from contextlib import ExitStack
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from common import storage
from pipelines.ingest.listed import ListedFile
from pipelines.ingest.members import DamagedStream, MemberStream
from pipelines.ingest.text_stream import QUARANTINE_BYTES, StorageError

PARQUET_ERRORS = (pa.ArrowException, OSError, ValueError, EOFError)


def parquet_rows(path: str, *, compression: str | None, column: str, max_document_bytes: int,
                 name: str | None = None, start: int = 0, end: int | None = None,
                 size: int | None = None) -> Iterator[tuple[str, str, str, str]]:
    """Rows of the Parquet file at ``path`` (of the row groups starting in ``[start, end)``); ids
    are ``"{name}:row{N}"`` (``name`` defaults to ``path``; ingestion passes the path relative
    to the sources' root)."""
    opened, path = path, name or path
    first = start == 0  # the task that reports what concerns the whole file
    with ExitStack() as stack:
        source = ListedFile(stack.enter_context(storage.open_input(opened)), opened, size)
        if compression is not None:
            spool = stack.enter_context(tempfile.TemporaryFile())
            try:
                shutil.copyfileobj(MemberStream(source, compression), spool, 1 << 20)
            except DamagedStream as exc:
                yield (f"{path}:row0", "", "ingest:corrupt_compression", f"{type(exc).__name__}: {exc}")
                return
            spool.seek(0)
            source = spool
        try:
            pf = pq.ParquetFile(source)
            schema = pf.schema_arrow
        except StorageError:
            raise
        except PARQUET_ERRORS as exc:
            if first:
                yield (f"{path}:row0", "", "ingest:bad_parquet", f"{type(exc).__name__}: {exc}")
            return
        if column not in schema.names:
            if first:
                yield (f"{path}:row0", "", "ingest:missing_field",
                       f"no column {column!r}; columns are {schema.names}")
            return
        kind = schema.field(column).type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)):
            if first:
                yield (f"{path}:row0", "", "ingest:missing_field", f"column {column!r} has type {kind}, not string")
            return
        if first and pf.metadata.num_rows == 0:
            yield (f"{path}:row0", "", "ingest:empty_file", "the file holds no document")
            return
        stop = float("inf") if end is None else end
        groups = [(g, row) for g, row, offset in _row_group_starts(pf.metadata) if start <= offset < stop]
        yield from _row_groups(pf, groups, path=path, column=column, max_document_bytes=max_document_bytes)


def _row_group_starts(md: pq.FileMetaData) -> Iterator[tuple[int, int, int]]:
    """``(row group, index of its first row in the file, byte offset of its first page)``."""
    row = 0
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        offsets = []
        for c in range(rg.num_columns):
            chunk = rg.column(c)
            # Some writers leave dictionary_page_offset 0 when there is none: only trust it when set.
            dictionary = chunk.dictionary_page_offset if chunk.has_dictionary_page else None
            offsets.append(dictionary if dictionary else chunk.data_page_offset)
        yield g, row, min(offsets, default=0)
        row += rg.num_rows


def _row_groups(pf: pq.ParquetFile, groups: list[tuple[int, int]], *, path: str, column: str,
                max_document_bytes: int) -> Iterator[tuple[str, str, str, str]]:
    for group, row in groups:
        try:
            values = pf.read_row_group(group, columns=[column]).column(0).to_pylist()
        except StorageError:
            raise
        except PARQUET_ERRORS as exc:
            yield (f"{path}:row{row}", "", "ingest:bad_parquet",
                   f"row group {group} (from row {row}): {type(exc).__name__}: {exc}")
            return
        for value in values:
            yield _value_row(f"{path}:row{row}", value, max_document_bytes)
            row += 1


def _value_row(rid: str, value: str | None, max_document_bytes: int) -> tuple[str, str, str, str]:
    if value is None or not value.strip():
        return (rid, value or "", "ingest:empty_document", "null or blank value")
    size = len(value.encode("utf-8", "surrogatepass"))
    if size > max_document_bytes:
        return (rid, value[:QUARANTINE_BYTES], "ingest:oversize",
                f"document of {size} bytes > max_document_bytes={max_document_bytes}")
    return (rid, value, "", "")
