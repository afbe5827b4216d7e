"""One compressed or plain byte stream → document rows, for every streamed format.

``stream_rows`` opens the file, reads its first chunk and sniffs it:

* a UTF-16/32 byte-order mark: the stream is transcoded to UTF-8 on the fly
  (``encodings.Transcoder``) and split like any UTF-8 file;
* a ``.json`` file whose first non-space byte is ``[``: a JSON array, split into records by
  ``json_array.elements``; any other ``.json`` file is JSON Lines;
* WARC/WET files go to ``warc.WarcReader``; text and JSON Lines to ``text_stream.LineReader``
  and a splitter (``splitters``).

Every path ends in ``_checked``, which enforces the integrity rule of ``pipelines.integrity``:
a row whose bytes are not entirely inside the verified prefix of a compressed file (computed by
a first, decompress-only pass) becomes ``ingest:corrupt_compression``, whatever it was, and a
decompression error ends the file with one more such row for the partial document. Memory per
file stays ``max_document_bytes`` plus a chunk on every path.
"""
from __future__ import annotations

from typing import Iterator

from common import storage
from pipelines.config import IngestConfig
from pipelines.ingest.encodings import Transcoder, bom_codec
from pipelines.ingest.integrity import Verified
from pipelines.ingest.json_array import elements, starts_array
from pipelines.ingest.splitters import Decoding, JsonlSplitter, Row, TextSplitter, quarantine_text
from pipelines.ingest.text_stream import (CHUNK, CORRUPT_ERRORS, QUARANTINE_BYTES, LineReader, StorageError,
                                   decompressed, first_line_start, previous_line_blank, read_some)
from pipelines.ingest.warc import WarcReader


def stream_rows(path: str, compression: str | None, kind: str, *, cfg: IngestConfig, start: int,
                end: int | None, name: str, verified: Verified) -> Iterator[Row]:
    """Rows of one text/JSONL/JSON/WARC file (or byte range) in file order (``kind``: ``ingest.file_kind``)."""
    # Only a decompressor can find damaged data; on a plain file every error is I/O.
    corrupt = CORRUPT_ERRORS if compression else ()
    with storage.open_input(path) as raw:
        stream = decompressed(raw, compression)
        try:
            head = read_some(stream, CHUNK)
            codec = bom_codec(head)
            if codec is not None:  # UTF-16/32: split its UTF-8 transcoding
                if start > 0:
                    return  # a transcoded file is read whole by its first range
                end, stream = None, Transcoder(stream, codec, head=head, mark=verified.end)
                head = read_some(stream, CHUNK)
        except StorageError:
            raise
        except corrupt as exc:
            yield Row(f"{name}:0", "", "ingest:corrupt_compression",
                      f"{type(exc).__name__}: {exc} (at decompressed byte 0)")
            return
        how = Decoding.of(cfg)._replace(label=codec or "")
        limit = _limit(verified, stream if codec is not None else None)
        if kind == "warc":
            warc = WarcReader(name, max_document_bytes=cfg.max_document_bytes, how=how)
            yield from _checked(name, warc.rows(stream, head), warc, limit, verified, corrupt,
                                lambda: (warc.row_end, b"", warc.row_end))
            return
        if kind == "json" and starts_array(head):
            splitter = JsonlSplitter(name, cfg, unit="record")
            splitter.how = how
            lines = elements(stream, max_bytes=cfg.max_document_bytes, head=head)
            yield from _checked(name, _feed(lines, splitter, None), splitter, limit, verified, corrupt,
                                lambda: (splitter.row_end, b"", splitter.row_end))
            return
        splitter = JsonlSplitter(name, cfg) if kind in ("jsonl", "json") else TextSplitter(name, cfg)
        splitter.how = how
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

        def partial() -> tuple[int, bytes, int]:
            begin, prefix = splitter.partial(reader.consumed)
            return begin, prefix + reader.tail, reader.consumed

        yield from _checked(name, _feed(reader, splitter, end), splitter, limit, verified, corrupt, partial)


def _feed(lines, splitter, end: int | None) -> Iterator[Row]:
    for line in lines:
        if end is not None and line.offset >= end and splitter.idle():
            return  # every later document starts at or past ``end``: the next range's
        row = splitter.feed(line)
        if row is not None:
            yield row
    row = splitter.finish()
    if row is not None:
        yield row


def _limit(verified: Verified, transcoder: Transcoder | None):
    """A function giving the end of the verified prefix in the offsets documents are split in."""
    if verified.end is None:
        return lambda: None
    if transcoder is None:
        return lambda: verified.end
    # Until the transcoder has read past the verified end, all its output came from before it.
    return lambda: transcoder.mark_out if transcoder.mark_out is not None else float("inf")


def _checked(name: str, rows: Iterator[Row], source, limit, verified: Verified,
             corrupt: tuple[type[BaseException], ...], partial) -> Iterator[Row]:
    """``rows``, each document not entirely inside the verified prefix turned into an
    ``ingest:corrupt_compression`` row; a decompression error ends them with one more such row."""
    try:
        for row in rows:
            stop = limit()
            if stop is not None and source.row_end > stop:
                was = f"; it was {row.reason}" if row.reason else ""
                row = Row(row.id, row.text[:QUARANTINE_BYTES], "ingest:corrupt_compression",
                          f"{verified.error}; verified data ends at byte {stop}, this document at "
                          f"byte {source.row_end}{was}", url=row.url)
            yield row
    except StorageError:
        raise
    except corrupt as exc:
        start, prefix, good = partial()
        yield Row(f"{name}:{start}", quarantine_text(prefix), "ingest:corrupt_compression",
                  f"{type(exc).__name__}: {exc} (good data ends at decompressed byte {good})")
