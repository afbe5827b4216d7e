"""Parquet documents, one row group at a time.

``pyarrow.parquet.ParquetFile`` reads the footer, then ``read_row_group`` materialises only the
text column of one row group, so memory is bounded by the largest row group, not the file.
Parquet needs random access: an externally compressed ``.parquet.gz``/``.zst`` is first streamed
to an anonymous temporary file on disk.

Rows come out as plain tuples ``(id, text, reason, detail)`` with ids ``"{name}:row{N}"``. An
unreadable file or row group becomes one ``ingest:bad_parquet`` row (rows before it are kept); a
missing or non-text column one ``ingest:missing_field`` row; null or blank values
``ingest:empty_document``; values over ``max_document_bytes`` ``ingest:oversize``.
"""
from __future__ import annotations

import shutil
import tempfile
from contextlib import ExitStack
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from common import storage
from pipelines.ingest.text_stream import CORRUPT_ERRORS, QUARANTINE_BYTES, StorageError, decompressed

PARQUET_ERRORS = (pa.ArrowException, OSError, ValueError, EOFError)


def parquet_rows(path: str, *, compression: str | None, column: str, max_document_bytes: int,
                 name: str | None = None) -> Iterator[tuple[str, str, str, str]]:
    """Rows of the Parquet file at ``path``; ids are ``"{name}:row{N}"`` (``name`` defaults to
    ``path``; ingestion passes the path relative to the sources' root)."""
    opened, path = path, name or path
    with ExitStack() as stack:
        source = stack.enter_context(storage.open_input(opened))
        if compression is not None:
            spool = stack.enter_context(tempfile.TemporaryFile())
            try:
                shutil.copyfileobj(decompressed(source, compression), spool, 1 << 20)
            except StorageError:
                raise
            except CORRUPT_ERRORS as exc:
                yield (f"{path}:row0", "", "ingest:corrupt_compression", f"{type(exc).__name__}: {exc}")
                return
            spool.seek(0)
            source = spool
        try:
            pf = pq.ParquetFile(source)
            schema = pf.schema_arrow
        except PARQUET_ERRORS as exc:
            yield (f"{path}:row0", "", "ingest:bad_parquet", f"{type(exc).__name__}: {exc}")
            return
        if column not in schema.names:
            yield (f"{path}:row0", "", "ingest:missing_field",
                   f"no column {column!r}; columns are {schema.names}")
            return
        kind = schema.field(column).type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)):
            yield (f"{path}:row0", "", "ingest:missing_field", f"column {column!r} has type {kind}, not string")
            return
        yield from _row_groups(pf, path=path, column=column, max_document_bytes=max_document_bytes)


def _row_groups(pf: pq.ParquetFile, *, path: str, column: str,
                max_document_bytes: int) -> Iterator[tuple[str, str, str, str]]:
    row = 0
    for group in range(pf.num_row_groups):
        try:
            values = pf.read_row_group(group, columns=[column]).column(0).to_pylist()
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
