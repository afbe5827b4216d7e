"""Ingestion: sources → document rows ``{id, uid, text, reason, detail, url}`` (docs/interfaces.md).

Sources are local files, directories (recursive, sorted, hidden files skipped), globs and URIs
(``s3://``, ``gs://``, ``https://``, read through ``common.storage``); ``resolve_sources`` expands
them up front and fails with ``SourceError`` naming the source
before any work starts. Formats by extension (after an optional ``.gz``/``.bz2``/``.zst``):

* plain text (``.txt`` and anything unrecognised), split by ``IngestConfig.text_mode``:
  ``file`` (the whole file is one document), ``blank_line`` (documents separated by blank
  lines) or ``line`` (every non-blank line is a document; blank lines are separators, not
  empty documents);
* JSON Lines (``.jsonl``, ``.ndjson``): one document per record, field
  ``IngestConfig.jsonl_field``;
* ``.json``: a JSON array of records when its first non-space byte is ``[`` (streamed element by
  element, ``json_array``), else JSON Lines;
* WARC/WET (``.warc``, ``.wet``, ``.warc.wet``, usually ``.gz`` per record): text payloads of
  ``conversion``/``resource``/``response`` records, the ``WARC-Target-URI`` in ``url`` (``warc``);
* Parquet (``.parquet``, ``.pq``): column ``IngestConfig.parquet_column``, read one row group at a
  time. Parquet needs random access, so a compressed Parquet file is first decompressed to a
  temporary file (disk, not memory).

Everything but Parquet is streamed (``streams.stream_rows``): memory per file is bounded by
``max_document_bytes`` plus one read chunk, whatever the file size. Lines end at ``\\n``,
``\\r\\n`` or a lone ``\\r``. Bytes become text per document (``encodings``): strict UTF-8, else
a detected charset (``detect_charset``, ``fallback_encoding``); a file with a UTF-16/32 BOM is
transcoded to UTF-8 while streaming. Each kept row says in ``encoding`` how it was decoded; the
ingest stage counts that column into its statistics (``"encodings": {"utf-8": n, ...}``) and
does not write it.

Compressed files are read twice: a decompress-only pass finds the *verified prefix* (the end of
the last gzip member / bz2 stream / zstd frame that passed its integrity check,
``integrity.verify``), and every document not entirely inside it is quarantined, so garbage
decoded from a damaged member before its checksum fails is never kept.

Ids are stable and location-independent: ``"{name}:{offset}"`` where ``name`` is the file's
path from its source folder (``resolve_sources``: e.g. ``raw/a.txt``) and ``offset``
the byte offset of the document's first byte in the decompressed stream (Parquet:
``"{name}:row{N}"``; WARC: the offset of the record; UTF-16/32: the offset in the file's UTF-8
transcoding); ``uid`` is a 63-bit blake2b of the id. The same corpus read from another
mount, bucket or URL therefore keeps the same uids, hence the same dedup survivors (smallest
uid) and the same validation split (a hash of the uid).

Bad input is never fatal. It becomes a row with a ``reason`` (and a capped prefix of its text or
bytes for the quarantine): ``ingest:corrupt_compression`` (every document not inside the
verified prefix, each a row; a member cut off by the end of the file counts as unverified unless
``keep_truncated_member``), ``ingest:binary`` (a document with NUL bytes or more than
``max_control_ratio`` control bytes, wherever it is), ``ingest:invalid_utf8`` (that document
only: not UTF-8 and no charset fits, or damaged UTF-8, or ``detect_charset`` off),
``ingest:empty_file`` (a file that yields no document at all), ``ingest:empty_document``,
``ingest:oversize`` (skipped without being held whole), ``ingest:bad_json``,
``ingest:missing_field``, ``ingest:bad_parquet``, and for WARC: ``ingest:warc_skipped`` (a
``warcinfo``/``request``/``metadata``/``revisit``/``continuation`` record, counted, not a
document), ``ingest:html`` (an HTML payload: no HTML text extractor ships),
``ingest:unsupported_payload`` (another type, or a payload under a transfer/content encoding),
``ingest:bad_warc`` (an unparseable record; reading the file stops there). Failing storage is not bad input: an I/O
error reading the file (``text_stream.StorageError``, or an ``OSError`` opening it) is raised,
so the orchestrator's retries deal with it instead of a file being quarantined by a hiccup.

Ray Data: ``ingest_dataset`` runs one task per file, a generator UDF yielding batches of
``batch_size`` rows, so a large file streams out as many blocks rather than one huge list. An
uncompressed text/JSON Lines file larger than ``split_bytes`` is read as several byte ranges in
parallel (compressed streams cannot be entered in the middle; ``.json``, WARC and a file with a
UTF-16/32 BOM are read whole by one task). A range owns the documents whose
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
from pipelines.integrity import ALL_GOOD, verify
from pipelines.parquet_source import parquet_rows
from pipelines.splitters import Row
from pipelines.streams import stream_rows
from pipelines.text_stream import compression_of
from pipelines.warc import WARC_SUFFIXES

TEXT_MODES = ("file", "blank_line", "line")
JSONL_SUFFIXES = (".jsonl", ".ndjson")
JSON_SUFFIXES = (".json",)
PARQUET_SUFFIXES = (".parquet", ".pq")
# Document row columns; ``encoding`` (how a kept document was decoded) is counted into the ingest
# stage's statistics and not written (``parts.write_documents``).
COLUMNS = ("id", "uid", "text", "reason", "detail", "url", "encoding")
STR_COLUMNS = ("id", "text", "reason", "detail", "url", "encoding")
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
    batch = {name: np.empty(len(rows), dtype=object) for name in STR_COLUMNS}
    for i, row in enumerate(rows):
        (batch["id"][i], batch["text"][i], batch["reason"][i], batch["detail"][i], batch["url"][i],
         batch["encoding"][i]) = row
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
        rows = (Row(*r, encoding="utf-8" if not r[2] else "")  # Parquet strings are UTF-8
                for r in parquet_rows(path, compression=compression, column=cfg.parquet_column,
                                      max_document_bytes=cfg.max_document_bytes, name=name))
    else:
        verified = verify(path, compression, keep_truncated=cfg.keep_truncated_member) if whole else ALL_GOOD
        rows = stream_rows(path, compression, kind, cfg=cfg, start=start, end=end, name=name,
                           verified=verified)
    n = 0
    for row in rows:
        n += 1
        yield row
    if n == 0 and whole:  # a range may legitimately hold no document start
        suffix = "row0" if kind == "parquet" else "0"
        yield Row(f"{name}:{suffix}", "", "ingest:empty_file", "the file holds no document")


def file_kind(name: str) -> str:
    """``text``, ``jsonl``, ``json``, ``warc`` or ``parquet`` from a file name without its
    compression suffix."""
    lower = name.lower()
    for kind, suffixes in (("parquet", PARQUET_SUFFIXES), ("jsonl", JSONL_SUFFIXES), ("json", JSON_SUFFIXES),
                           ("warc", WARC_SUFFIXES)):
        if lower.endswith(suffixes):
            return kind
    return "text"


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
