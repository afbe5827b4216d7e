"""Ingestion: sources → document rows ``{id, uid, text, reason, detail}`` (docs/interfaces.md).

Sources are local files, directories (recursive, sorted, hidden files skipped), globs and URIs
(``s3://``, ``gs://``, ``https://``, read through ``common.storage``); ``resolve_sources`` expands
them up front and fails with ``SourceError`` naming the source
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

Ids are stable and location-independent: ``"{name}:{offset}"`` where ``name`` is the file's
path from its source folder (``resolve_sources``: e.g. ``raw/a.txt``) and ``offset``
the byte offset of the document's first byte in the decompressed stream (Parquet:
``"{name}:row{N}"``); ``uid`` is a 63-bit blake2b of the id. The same corpus read from another
mount, bucket or URL therefore keeps the same uids, hence the same dedup survivors (smallest
uid) and the same validation split (a hash of the uid).

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

import functools
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Iterator, NamedTuple

import numpy as np

from common import storage
from common.hashing import digest, stable_uid

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


@dataclass(frozen=True)
class Sources:
    """The resolved input files, their stable names, and their identity for the cache key."""
    files: tuple[str, ...]  # full paths or URIs, sorted
    names: tuple[str, ...]  # per file: its path from its source's folder, that folder's name first
    fingerprint: str  # hash of (name, size, mtime or ETag) of every file

    @functools.cached_property
    def _by_file(self) -> dict[str, str]:
        return dict(zip(self.files, self.names))

    def name(self, path: str) -> str:
        """The stable, location-independent name of a file (the prefix of its documents' ids)."""
        return self._by_file[path]


# ---------------------------------------------------------------------------------------------
# Sources
# ---------------------------------------------------------------------------------------------
def resolve_sources(sources: list[str] | str) -> Sources:
    """Expand files, directories, globs and URIs into a sorted file list with stable names.

    A file's name is its path from its *source folder*, starting with that folder's own name:
    the folder itself for a directory source, the part before the first wildcard for a glob,
    the parent folder for a single file. So ``/data/raw``, ``/data/raw/*.txt`` and
    ``s3://b/x/raw`` all name ``.../raw/a.txt`` ``raw/a.txt``, and adding files or other sources
    never renames a file (ids, and with them dedup survivors and the validation split, stay).
    Two different files with the same name are an error naming both.

    Fails with ``SourceError`` naming the source before any work starts. One listing per source
    (``find``/``glob`` with details) gives every file's size and modification stamp for the
    fingerprint, so a bucket of many files costs a few LIST calls, not one HEAD per file.
    """
    if isinstance(sources, str):
        sources = [sources]
    if not sources:
        raise SourceError("no sources given")
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    owner: dict[str, str] = {}
    for source in sources:
        for uri, (name, info) in _resolve_one(str(source)).items():
            if owner.setdefault(name, uri) != uri:
                raise SourceError(f"{source}: {uri} and {owner[name]} would both be named {name!r}; "
                                  "give their folders different names or one common parent source")
            found[uri] = (name, info)
    files = sorted(found)
    names = tuple(found[f][0] for f in files)
    items = []
    for f, name in zip(files, names):
        info = found[f][1]
        stamp = info.get("ETag") or info.get("etag") or info.get("mtime") or info.get("LastModified") or ""
        items.append([name, info.get("size"), str(stamp)])
    return Sources(tuple(files), names, digest(items))


def _resolve_one(source: str) -> dict[str, tuple[str, dict[str, Any]]]:
    try:
        fs, path = storage.url_to_fs(source)
    except storage.StorageError as exc:
        raise SourceError(str(exc)) from exc
    try:
        if any(ch in path for ch in "*?["):
            folder = path[:min(path.find(ch) for ch in "*?[" if ch in path)].rsplit("/", 1)[0]
            found = {}
            for match, info in sorted(fs.glob(path, detail=True).items()):
                if _hidden(PurePosixPath(match).name):
                    continue
                found.update(_walk(fs, match) if info.get("type") == "directory" else {match: info})
        elif fs.isdir(path):
            folder, found = path.rstrip("/"), _walk(fs, path)
        elif fs.isfile(path):
            folder, found = path.rsplit("/", 1)[0], {path: fs.info(path)}
        else:
            raise SourceError(f"{source}: no such file or directory")
    except (FileNotFoundError, PermissionError) as exc:
        if isinstance(exc, SourceError):
            raise
        raise SourceError(f"{source}: cannot list ({exc})") from exc
    if not found:
        raise SourceError(f"{source}: matches no files")
    base = folder.rsplit("/", 1)[0] + "/" if "/" in folder else ""
    return {storage.full_uri(fs, p): (p[len(base):], info) for p, info in found.items()}


def _walk(fs, root: str) -> dict[str, dict[str, Any]]:
    root_parts = len(PurePosixPath(root).parts)
    out = {}
    for path, info in fs.find(root, detail=True).items():
        rel = PurePosixPath(path).parts[root_parts:]
        if not any(_hidden(part) for part in rel):
            out[path] = info
    return out


def _hidden(name: str) -> bool:
    return name.startswith(".")


# ---------------------------------------------------------------------------------------------
# Rows and batches
# ---------------------------------------------------------------------------------------------
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
def read_documents(path: str, cfg: IngestConfig, *, start: int = 0, end: int | None = None,
                   name: str | None = None) -> Iterator[dict[str, np.ndarray]]:
    """Stream the documents of one file as batches of at most ``cfg.batch_size`` rows
    (fewer when they reach ``BATCH_CHARS`` characters of text).

    With ``start``/``end`` (uncompressed text or JSONL only), only the documents whose first
    byte lies in ``[start, end)`` are read: the ranges of a partition yield every document once.
    """
    _check_config(cfg)
    rows: list[Row] = []
    chars = 0
    for row in iter_rows(path, cfg, start=start, end=end, name=name):
        rows.append(row)
        chars += len(row.text)
        if len(rows) >= cfg.batch_size or chars >= BATCH_CHARS:
            yield rows_to_batch(rows)
            rows, chars = [], 0
    if rows:
        yield rows_to_batch(rows)


def iter_rows(path: str, cfg: IngestConfig, *, start: int = 0, end: int | None = None,
              name: str | None = None) -> Iterator[Row]:
    """Every row of one file (or byte range), documents and rejects, in file order.

    Ids are ``"{name}:{offset}"``; ``name`` defaults to ``path`` (``ingest_dataset`` passes the
    path relative to the sources' root, so ids do not depend on where the corpus is mounted).
    """
    name = name or path
    compression, base_name = compression_of(path)
    kind = file_kind(base_name)
    whole = start == 0 and end is None
    if not whole and not splittable(path, cfg):
        raise ValueError(f"{path}: byte ranges need uncompressed text or JSONL (not {kind}, "
                         f"compression {compression}, text_mode {cfg.text_mode})")
    if kind == "parquet":
        rows = (Row(*r) for r in parquet_rows(path, compression=compression, column=cfg.parquet_column,
                                              max_document_bytes=cfg.max_document_bytes, name=name))
    else:
        splitter = JsonlSplitter(name, cfg) if kind == "jsonl" else TextSplitter(name, cfg)
        rows = _stream_rows(path, compression, splitter, cfg=cfg, start=start, end=end, name=name)
    n = 0
    for row in rows:
        n += 1
        yield row
    if n == 0 and whole:  # a range may legitimately hold no document start
        suffix = "row0" if kind == "parquet" else "0"
        yield Row(f"{name}:{suffix}", "", "ingest:empty_file", "the file holds no document")


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
                 start: int, end: int | None, name: str) -> Iterator[Row]:
    with storage.open_input(path) as raw:
        stream = decompressed(raw, compression)
        try:
            head = read_some(stream, CHUNK)
        except StorageError:
            raise
        except CORRUPT_ERRORS if compression else () as exc:
            yield Row(f"{name}:0", "", "ingest:corrupt_compression",
                      f"{type(exc).__name__}: {exc} (at decompressed byte 0)")
            return
        if b"\x00" in head[:BINARY_PROBE]:
            if start == 0:  # every range sniffs the file head; the first one reports it
                yield Row(f"{name}:0", repr(head[:256]), "ingest:binary",
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
        yield from _split_lines(name, reader, splitter, end=end, corrupt=corrupt)


def _split_lines(name: str, reader: LineReader, splitter, *, end: int | None,
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
        yield Row(f"{name}:{start}", quarantine_text(prefix + reader.tail), "ingest:corrupt_compression",
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
    name: str  # the id prefix: the path relative to the sources' root
    start: int = 0
    end: int = -1  # -1: to the end of the file


def plan_reads(sources: Sources, cfg: IngestConfig, *, split_bytes: int | None = SPLIT_BYTES) -> list[ReadTask]:
    """One task per file, or per ``split_bytes`` range of a large splittable file."""
    tasks = []
    for path in sources.files:
        size = 0
        if split_bytes and splittable(path, cfg):
            size = storage.size(path) or 0
        name = sources.name(path)
        if size <= (split_bytes or 0):
            tasks.append(ReadTask(path, name))
            continue
        tasks.extend(ReadTask(path, name, lo, lo + split_bytes if lo + split_bytes < size else -1)
                     for lo in range(0, size, split_bytes))
    return tasks


def _read_tasks(batch: dict[str, np.ndarray], cfg: IngestConfig) -> Iterator[dict[str, np.ndarray]]:
    for path, name, start, end in zip(batch["path"], batch["name"], batch["start"], batch["end"]):
        end = None if int(end) < 0 else int(end)
        yield from read_documents(str(path), cfg, start=int(start), end=end, name=str(name))


def ingest_dataset(sources: Sources, cfg: IngestConfig, *, split_bytes: int | None = SPLIT_BYTES):
    """A Ray Data dataset of the document rows of ``sources``.

    One read task per file; uncompressed text/JSONL files larger than ``split_bytes`` are read as
    several byte ranges in parallel (``None`` or 0 disables splitting). Workers open the files
    by their full URI; ids use the root-relative names.
    """
    import ray.data

    if not sources.files:
        raise SourceError("no input files to ingest")
    _check_config(cfg)
    tasks = plan_reads(sources, cfg, split_bytes=split_bytes)
    ds = ray.data.from_items([t._asdict() for t in tasks], override_num_blocks=len(tasks))
    return ds.map_batches(_read_tasks, fn_kwargs={"cfg": cfg}, batch_size=1, batch_format="numpy")
