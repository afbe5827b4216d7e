"""Ingestion: sources → document rows ``{id, uid, text, reason, detail}`` (docs/interfaces.md).

Sources are local files, directories (recursive, sorted, hidden files skipped), globs and fsspec
URLs; ``resolve_sources`` expands them up front and fails with ``SourceError`` naming the source
before any work starts. Formats by extension (after an optional ``.gz``/``.bz2``/``.zst``):

* plain text (``.txt`` and anything unrecognised), split by ``IngestConfig.text_mode``:
  ``file`` (the whole file is one document), ``blank_line`` (documents separated by blank
  lines) or ``line`` (every non-blank line is a document; blank lines are separators, not
  empty documents);
* JSON Lines (``.jsonl``, ``.json``, ``.ndjson``): one document per record, field
  ``IngestConfig.jsonl_field``;
* Parquet (``.parquet``, ``.pq``): column ``IngestConfig.parquet_column``, read one row group at a
  time. Parquet needs random access, so a compressed Parquet file is first decompressed to a
  temporary file (disk, not memory).

Text and JSONL are streamed through ``text_stream.LineReader``: memory per file is bounded by
``max_document_bytes`` plus one read chunk, whatever the file size.

Ids are stable: ``"{source}:{offset}"`` with the byte offset of the document's first byte in the
decompressed stream (Parquet: ``"{source}:row{N}"``); ``uid`` is a 63-bit blake2b of the id.

Bad input is never fatal. It becomes a row with a ``reason`` (and a capped prefix of its text or
bytes for the quarantine): ``ingest:corrupt_compression`` (documents before the damage are kept),
``ingest:binary`` (NUL bytes in the first chunk), ``ingest:invalid_utf8`` (that document only),
``ingest:empty_file`` (a file that yields no document at all), ``ingest:empty_document``,
``ingest:oversize`` (skipped without being held whole), ``ingest:bad_json``,
``ingest:missing_field``, ``ingest:bad_parquet``. Failing storage is not bad input: an I/O
error reading the file (``text_stream.StorageError``, or an ``OSError`` opening it) is raised,
so the orchestrator's retries deal with it instead of a file being quarantined by a hiccup.

Ray Data: ``ingest_dataset`` runs one task per file, a generator UDF yielding batches of
``batch_size`` rows, so a large file streams out as many blocks rather than one huge list. An
uncompressed text/JSONL file larger than ``split_bytes`` is read as several byte ranges in
parallel (compressed streams cannot be entered in the middle). A range owns the documents whose
first byte lies in it: its reader enters at the first line starting at or after ``start`` (in
``blank_line`` mode skipping the tail of a document begun earlier, found by looking at the
previous line), and reads on past ``end`` until the document in progress ends, so a document on
a boundary is read exactly once and ids equal those of a whole-file read.
"""
from __future__ import annotations

import hashlib
from pathlib import PurePosixPath
from typing import Iterator, NamedTuple

import fsspec
import numpy as np
from fsspec.implementations.local import LocalFileSystem

from pipelines.config import IngestConfig
from pipelines.parquet_source import parquet_rows
from pipelines.splitters import JsonlSplitter, Row, TextSplitter, quarantine_text
from pipelines.text_stream import (CHUNK, CORRUPT_ERRORS, LineReader, StorageError, compression_of,
                                   decompressed, first_line_start, previous_line_blank, read_some)

TEXT_MODES = ("file", "blank_line", "line")
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
PARQUET_SUFFIXES = (".parquet", ".pq")
# A file with a NUL byte in its first BINARY_PROBE bytes is not text (UTF-16 included).
BINARY_PROBE = 8192
COLUMNS = ("id", "uid", "text", "reason", "detail")
# A batch is also closed at this many text characters, so a run of large documents cannot make
# a block of batch_size × max_document_bytes.
BATCH_CHARS = 32 << 20
# Uncompressed text/JSONL files above this size are read as several byte ranges in parallel.
SPLIT_BYTES = 64 << 20


class SourceError(FileNotFoundError):
    """A source path that does not exist or matches no file."""


# ---------------------------------------------------------------------------------------------
# Sources
# ---------------------------------------------------------------------------------------------
def resolve_sources(sources: list[str]) -> list[str]:
    """Expand files, directories, globs and fsspec URLs into a sorted, de-duplicated file list."""
    if isinstance(sources, str):
        sources = [sources]
    if not sources:
        raise SourceError("no sources given")
    found: set[str] = set()
    for source in sources:
        found.update(_resolve_one(str(source)))
    return sorted(found)


def _resolve_one(source: str) -> list[str]:
    try:
        fs, path = fsspec.core.url_to_fs(source)
    except (ImportError, ValueError) as exc:  # "Install s3fs to access S3", unknown protocol
        raise SourceError(f"{source}: cannot open this kind of source ({exc})") from exc
    if any(ch in path for ch in "*?["):
        files = []
        for match in sorted(fs.glob(path)):
            if _hidden(PurePosixPath(match).name):
                continue
            files.extend(_walk(fs, match) if fs.isdir(match) else [match])
    elif fs.isdir(path):
        files = _walk(fs, path)
    elif fs.isfile(path):
        files = [path]
    else:
        raise SourceError(f"{source}: no such file or directory")
    if not files:
        raise SourceError(f"{source}: matches no files")
    local = isinstance(fs, LocalFileSystem)
    return [p if local else fs.unstrip_protocol(p) for p in files]


def _walk(fs, root: str) -> list[str]:
    root_parts = len(PurePosixPath(root).parts)
    out = []
    for path in fs.find(root):
        rel = PurePosixPath(path).parts[root_parts:]
        if not any(_hidden(part) for part in rel):
            out.append(path)
    return sorted(out)


def _hidden(name: str) -> bool:
    return name.startswith(".")


def source_bytes(paths: list[str]) -> int:
    """Total size on storage (compressed) of the given files, for MB/s statistics."""
    total = 0
    for path in paths:
        fs, p = fsspec.core.url_to_fs(path)
        total += int(fs.size(p) or 0)
    return total


# ---------------------------------------------------------------------------------------------
# Rows and batches
# ---------------------------------------------------------------------------------------------
def stable_uid(id: str) -> int:  # noqa: A002 - the column is called id
    """Deterministic 63-bit hash of a document id (fits int64, never negative)."""
    digest = hashlib.blake2b(id.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def rows_to_batch(rows: list[Row]) -> dict[str, np.ndarray]:
    """Document rows as a numpy batch (object arrays of ``str``, ``uid`` as int64)."""
    batch = {name: np.empty(len(rows), dtype=object) for name in ("id", "text", "reason", "detail")}
    for i, row in enumerate(rows):
        batch["id"][i], batch["text"][i], batch["reason"][i], batch["detail"][i] = row
    batch["uid"] = np.fromiter((stable_uid(r.id) for r in rows), dtype=np.int64, count=len(rows))
    return {name: batch[name] for name in COLUMNS}


# ---------------------------------------------------------------------------------------------
# Reading one file (or one byte range of it)
# ---------------------------------------------------------------------------------------------
def read_documents(path: str, cfg: IngestConfig, *, start: int = 0,
                   end: int | None = None) -> Iterator[dict[str, np.ndarray]]:
    """Stream the documents of one file as batches of at most ``cfg.batch_size`` rows
    (fewer when they reach ``BATCH_CHARS`` characters of text).

    With ``start``/``end`` (uncompressed text or JSONL only), only the documents whose first
    byte lies in ``[start, end)`` are read: the ranges of a partition yield every document once.
    """
    _check_config(cfg)
    rows: list[Row] = []
    chars = 0
    for row in iter_rows(path, cfg, start=start, end=end):
        rows.append(row)
        chars += len(row.text)
        if len(rows) >= cfg.batch_size or chars >= BATCH_CHARS:
            yield rows_to_batch(rows)
            rows, chars = [], 0
    if rows:
        yield rows_to_batch(rows)


def iter_rows(path: str, cfg: IngestConfig, *, start: int = 0, end: int | None = None) -> Iterator[Row]:
    """Every row of one file (or byte range), documents and rejects, in file order."""
    compression, name = compression_of(path)
    kind = file_kind(name)
    whole = start == 0 and end is None
    if not whole and not splittable(path, cfg):
        raise ValueError(f"{path}: byte ranges need uncompressed text or JSONL (not {kind}, "
                         f"compression {compression}, text_mode {cfg.text_mode})")
    if kind == "parquet":
        rows = (Row(*r) for r in parquet_rows(path, compression=compression, column=cfg.parquet_column,
                                              max_document_bytes=cfg.max_document_bytes))
    else:
        splitter = JsonlSplitter(path, cfg) if kind == "jsonl" else TextSplitter(path, cfg)
        rows = _stream_rows(path, compression, splitter, cfg=cfg, start=start, end=end)
    n = 0
    for row in rows:
        n += 1
        yield row
    if n == 0 and whole:  # a range may legitimately hold no document start
        suffix = "row0" if kind == "parquet" else "0"
        yield Row(f"{path}:{suffix}", "", "ingest:empty_file", "the file holds no document")


def file_kind(name: str) -> str:
    """``text``, ``jsonl`` or ``parquet`` from a file name without its compression suffix."""
    lower = name.lower()
    if lower.endswith(PARQUET_SUFFIXES):
        return "parquet"
    return "jsonl" if lower.endswith(JSONL_SUFFIXES) else "text"


def splittable(path: str, cfg: IngestConfig) -> bool:
    """Whether a file can be read as independent byte ranges."""
    compression, name = compression_of(path)
    kind = file_kind(name)
    return compression is None and (kind == "jsonl" or (kind == "text" and cfg.text_mode != "file"))


def _check_config(cfg: IngestConfig) -> None:
    if cfg.text_mode not in TEXT_MODES:
        raise ValueError(f"ingest.text_mode={cfg.text_mode!r}; expected one of {TEXT_MODES}")
    if cfg.batch_size < 1 or cfg.max_document_bytes < 1:
        raise ValueError("ingest.batch_size and ingest.max_document_bytes must be positive")


def _stream_rows(path: str, compression: str | None, splitter, *, cfg: IngestConfig,
                 start: int, end: int | None) -> Iterator[Row]:
    with fsspec.open(path, "rb") as raw:
        stream = decompressed(raw, compression)
        try:
            head = read_some(stream, CHUNK)
        except StorageError:
            raise
        except CORRUPT_ERRORS if compression else () as exc:
            yield Row(f"{path}:0", "", "ingest:corrupt_compression",
                      f"{type(exc).__name__}: {exc} (at decompressed byte 0)")
            return
        if b"\x00" in head[:BINARY_PROBE]:
            if start == 0:  # every range sniffs the file head; the first one reports it
                yield Row(f"{path}:0", repr(head[:256]), "ingest:binary",
                          "NUL bytes in the first bytes: not a text file")
            return
        base = 0
        if start > 0:
            base = first_line_start(raw, start)
            # In blank_line mode a line right after a non-blank one continues a document that
            # began before the range: its owner (an earlier range) reads it to the end.
            splitter.skip_foreign = cfg.text_mode == "blank_line" and not previous_line_blank(raw, base)
            splitter.base = base
            raw.seek(base)
            head = b""
        reader = LineReader(stream, max_line=cfg.max_document_bytes, head=head, base=base)
        # Only a decompressor can find damaged data; on a plain file every error is I/O.
        corrupt = CORRUPT_ERRORS if compression else ()
        yield from _split_lines(path, reader, splitter, end=end, corrupt=corrupt)


def _split_lines(path: str, reader: LineReader, splitter, *, end: int | None,
                 corrupt: tuple[type[BaseException], ...]) -> Iterator[Row]:
    try:
        for line in reader:
            if end is not None and line.offset >= end and splitter.idle():
                return  # every later document starts at or past ``end``: the next range's
            row = splitter.feed(line)
            if row is not None:
                yield row
    except StorageError:
        raise
    except corrupt as exc:
        start, prefix = splitter.partial(reader.consumed)
        yield Row(f"{path}:{start}", quarantine_text(prefix + reader.tail), "ingest:corrupt_compression",
                  f"{type(exc).__name__}: {exc} (good data ends at decompressed byte {reader.consumed})")
        return
    row = splitter.finish()
    if row is not None:
        yield row


# ---------------------------------------------------------------------------------------------
# Ray Data
# ---------------------------------------------------------------------------------------------
class ReadTask(NamedTuple):
    path: str
    start: int = 0
    end: int = -1  # -1: to the end of the file


def plan_reads(paths: list[str], cfg: IngestConfig, *, split_bytes: int | None = SPLIT_BYTES) -> list[ReadTask]:
    """One task per file, or per ``split_bytes`` range of a large splittable file."""
    tasks = []
    for path in paths:
        size = 0
        if split_bytes and splittable(path, cfg):
            fs, p = fsspec.core.url_to_fs(path)
            size = int(fs.size(p) or 0)
        if size <= (split_bytes or 0):
            tasks.append(ReadTask(path))
            continue
        tasks.extend(ReadTask(path, lo, lo + split_bytes if lo + split_bytes < size else -1)
                     for lo in range(0, size, split_bytes))
    return tasks


def _read_tasks(batch: dict[str, np.ndarray], cfg: IngestConfig) -> Iterator[dict[str, np.ndarray]]:
    for path, start, end in zip(batch["path"], batch["start"], batch["end"]):
        end = None if int(end) < 0 else int(end)
        yield from read_documents(str(path), cfg, start=int(start), end=end)


def ingest_dataset(paths: list[str], cfg: IngestConfig, *, split_bytes: int | None = SPLIT_BYTES):
    """A Ray Data dataset of the document rows of ``paths``.

    One read task per file; uncompressed text/JSONL files larger than ``split_bytes`` are read as
    several byte ranges in parallel (``None`` or 0 disables splitting).
    """
    import ray.data

    if not paths:
        raise SourceError("no input files to ingest")
    _check_config(cfg)
    tasks = plan_reads(list(paths), cfg, split_bytes=split_bytes)
    ds = ray.data.from_items([t._asdict() for t in tasks], override_num_blocks=len(tasks))
    return ds.map_batches(_read_tasks, fn_kwargs={"cfg": cfg}, batch_size=1, batch_format="numpy")
