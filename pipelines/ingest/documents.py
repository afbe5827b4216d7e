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
* MediaWiki export XML, i.e. Wikipedia dumps (``mediawiki``): a name with ``pages-articles`` or
  ``pages-meta`` ending in ``.xml`` (``enwiki-…-pages-articles-multistream.xml.bz2``), or any
  ``.xml`` whose first bytes show a ``<mediawiki`` root (other ``.xml`` files are plain text). One
  document per article (namespace 0, not a redirect): the title, a blank line, and the prose of its
  wikitext (``wikitext``: templates, tables, references, files, categories and end matter dropped;
  one paragraph, heading or list item per line, blank lines between), ``url`` the article's URL,
  id ``"{name}:page{ID}"`` (the page id, whatever the split). Redirects and other namespaces are one
  row each (``ingest:mediawiki_redirect``, ``ingest:mediawiki_namespace``), a page that is not
  well-formed is ``ingest:bad_mediawiki`` and reading goes on. A bz2 dump is read stream by stream:
  a damaged stream costs only its pages, and a multistream dump listed with its
  ``-index.txt.bz2`` is split at its streams (``mediawiki``, ``multistream``).

Everything but Parquet is streamed (``streams.stream_rows``): memory per file is bounded by
``max_document_bytes`` plus one read chunk, whatever the file size. Lines end at ``\\n``,
``\\r\\n`` or a lone ``\\r``. Bytes become text per document (``encodings``): strict UTF-8, else
a detected charset (``detect_charset``, ``fallback_encoding``); a file with a UTF-16/32 BOM is
transcoded to UTF-8 while streaming. Each kept row says in ``encoding`` how it was decoded; the
ingest stage counts that column into its statistics (``"encodings": {"utf-8": n, ...}``) and
does not write it.

Every file is read once. A compressed file is decompressed member by member (gzip members, bz2
streams, zstd frames), and a document's row is released only once every member it touches has
passed its integrity check; rows waiting for a check are held in a bounded buffer that spills to a
local temporary file (``integrity``), so garbage decoded from a damaged member before its
checksum fails is never kept, and a 50 GB single-member gzip never sits in memory.

Reads are held to the size the sources' listing gave (``listed``): a file that delivers fewer
bytes (a wrong Content-Length, a file cut after it was listed) is a storage error naming the file,
the listed size and the bytes read, never an empty or short document.

Bad input is never fatal. It becomes a row with a ``reason`` (and a capped prefix of its text or
bytes for the quarantine): ``ingest:corrupt_compression`` (every document touching a member
that failed its check, each a row, then one row for the rest; a member cut off by the end of the
file counts as unverified unless ``keep_truncated_member``), ``ingest:binary`` (a document with NUL bytes or more than
``max_control_ratio`` control bytes, wherever it is), ``ingest:invalid_utf8`` (that document
only: not UTF-8 and no charset fits, or damaged UTF-8, or ``detect_charset`` off),
``ingest:empty_file`` (a file that yields no document at all), ``ingest:empty_document``,
``ingest:oversize`` (skipped without being held whole), ``ingest:bad_json``,
``ingest:missing_field``, ``ingest:bad_parquet``, and for WARC: ``ingest:warc_skipped`` (a
``warcinfo``/``request``/``metadata``/``revisit``/``continuation`` record, counted, not a
document), ``ingest:html`` (an HTML payload: no HTML text extractor ships),
``ingest:unsupported_payload`` (another type, or a payload under a transfer/content encoding),
``ingest:bad_warc`` (an unparseable record; reading the file stops there). With
``strip_boilerplate`` (the books profile), a kept document loses its Project Gutenberg licence
header and footer, each quarantined as a row of its own (``boilerplate``). Failing storage is not
bad input: an I/O error reading the file, or a read shorter than the listing
(``common.storage.StorageError``), is raised, so the orchestrator's retries deal with it instead
of a file being quarantined by a hiccup.

Ids (``sources``): ``"{name}:{offset}"``, offset = the byte offset of the document's first byte
in the decompressed stream; ``uid`` is a 63-bit blake2b of the id.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from common.hashing import stable_uid
from pipelines.config import IngestConfig
from pipelines.ingest.boilerplate import strip_rows
from pipelines.ingest.mediawiki import is_dump_name
from pipelines.ingest.multistream import bz2_rows
from pipelines.ingest.parquet import parquet_rows
from pipelines.ingest.seekable import seekable_rows
from pipelines.ingest.splitters import Row
from pipelines.ingest.streams import stream_rows
from pipelines.ingest.text_stream import compression_of
from pipelines.ingest.warc import WARC_SUFFIXES

TEXT_MODES = ("file", "blank_line", "line")
JSONL_SUFFIXES = (".jsonl", ".ndjson")
JSON_SUFFIXES = (".json",)
PARQUET_SUFFIXES = (".parquet", ".pq")
XML_SUFFIXES = (".xml",)
# Document row columns; ``encoding`` (how a kept document was decoded) is counted into the ingest
# stage's statistics and not written (``parts.write_documents``).
COLUMNS = ("id", "uid", "text", "reason", "detail", "url", "encoding")
STR_COLUMNS = ("id", "text", "reason", "detail", "url", "encoding")
# A batch is also closed at this many text characters, so a run of large documents cannot make
# a block of batch_size × max_document_bytes.
BATCH_CHARS = 32 << 20


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
                   name: str | None = None, size: int | None = None) -> Iterator[dict[str, np.ndarray]]:
    """Stream the documents of one file as batches of at most ``cfg.batch_size`` rows
    (fewer when they reach ``BATCH_CHARS`` characters of text).

    With ``start``/``end`` (``splittable`` files only), only the documents owned by the byte
    range ``[start, end)`` are read: for uncompressed text/JSONL those whose first byte lies in
    it, for Parquet the row groups starting in it, for a seekable zstd file the documents starting
    in the frames that start in it. The ranges of a partition yield every document once, with the
    ids of a whole-file read. ``size`` is the file's size from the listing: reads that end short of
    it raise ``StorageError`` (None: not checked).
    """
    _check_config(cfg)
    rows: list[Row] = []
    chars = 0
    for row in iter_rows(path, cfg, start=start, end=end, name=name, size=size):
        rows.append(row)
        chars += len(row.text)
        if len(rows) >= cfg.batch_size or chars >= BATCH_CHARS:
            yield rows_to_batch(rows)
            rows, chars = [], 0
    if rows:
        yield rows_to_batch(rows)


def iter_rows(path: str, cfg: IngestConfig, *, start: int = 0, end: int | None = None,
              name: str | None = None, size: int | None = None) -> Iterator[Row]:
    """Every row of one file (or byte range), documents and rejects, in file order.

    Ids are ``"{name}:{offset}"``; ``name`` defaults to ``path`` (``ingest_dataset`` passes the
    path relative to the sources' root, so ids do not depend on where the corpus is mounted).
    """
    name = name or path
    compression, base_name = compression_of(path)
    kind = file_kind(base_name)
    whole = start == 0 and end is None
    dump = kind == "mediawiki" and compression == "bz2"  # ranges: bz2 streams (``multistream``)
    if not whole and not (dump or splittable(path, cfg)):
        raise ValueError(f"{path}: byte ranges need uncompressed Parquet, text or JSONL uncompressed or "
                         f"zstd, or a bz2 MediaWiki dump (not {kind}, compression {compression}, "
                         f"text_mode {cfg.text_mode})")
    if dump:
        rows = bz2_rows(path, cfg=cfg, start=start, end=end, name=name, size=size)
    elif kind == "parquet":
        rows = (Row(*r, encoding="utf-8" if not r[2] else "")  # Parquet strings are UTF-8
                for r in parquet_rows(path, compression=compression, column=cfg.parquet_column,
                                      max_document_bytes=cfg.max_document_bytes, name=name, start=start,
                                      end=end, size=size))
    elif compression == "zstd" and not whole:
        rows = seekable_rows(path, kind, cfg=cfg, start=start, end=end, name=name, size=size)
    else:
        rows = stream_rows(path, compression, kind, cfg=cfg, start=start, end=end, name=name, size=size)
    if cfg.strip_boilerplate:  # the books profile: licence header and footer cut, quarantined
        rows = strip_rows(rows)
    n = 0
    for row in rows:
        n += 1
        yield row
    if n == 0 and whole:  # a range may legitimately hold no document start
        suffix = "row0" if kind == "parquet" else "0"
        yield Row(f"{name}:{suffix}", "", "ingest:empty_file", "the file holds no document")


def file_kind(name: str) -> str:
    """``text``, ``jsonl``, ``json``, ``warc``, ``parquet``, ``mediawiki`` (a Wikipedia dump's
    name) or ``xml`` (MediaWiki or text by its first bytes) from a file name without its
    compression suffix."""
    lower = name.lower()
    if is_dump_name(name):
        return "mediawiki"
    if lower.endswith(XML_SUFFIXES):
        return "xml"
    for kind, suffixes in (("parquet", PARQUET_SUFFIXES), ("jsonl", JSONL_SUFFIXES), ("json", JSON_SUFFIXES),
                           ("warc", WARC_SUFFIXES)):
        if lower.endswith(suffixes):
            return kind
    return "text"


def splittable(path: str, cfg: IngestConfig) -> bool:
    """Whether a file can be read as several byte-range tasks of any size: uncompressed Parquet (by
    row group), and text (not ``text_mode=file``) or JSONL uncompressed (by line) or zstd (by
    frame, when the file has a seek table; without one the range at 0 reads it all). gzip and bz2
    members cannot be found without decompressing what comes before them (a multistream MediaWiki
    dump is split at the stream starts its index gives: ``multistream``, ``dataset.plan_reads``)."""
    compression, name = compression_of(path)
    kind = file_kind(name)
    if kind == "parquet":
        return compression is None
    by_line = kind == "jsonl" or (kind == "text" and cfg.text_mode != "file")
    return by_line and compression in (None, "zstd")


def _check_config(cfg: IngestConfig) -> None:
    if cfg.text_mode not in TEXT_MODES:
        raise ValueError(f"ingest.text_mode={cfg.text_mode!r}; expected one of {TEXT_MODES}")
    if cfg.batch_size < 1 or cfg.max_document_bytes < 1:
        raise ValueError("ingest.batch_size and ingest.max_document_bytes must be positive")
