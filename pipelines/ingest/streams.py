"""One compressed or plain byte stream → document rows, for every streamed format.

``stream_rows`` opens a file (the whole file, or a byte range of an uncompressed one) and hands
the stream to ``split_stream``, which ``seekable`` also uses for the frames of a seekable zstd
file. ``split_stream`` reads the first chunk and sniffs it:

* a UTF-16/32 byte-order mark: the stream is transcoded to UTF-8 on the fly
  (``encodings.Transcoder``) and split like any UTF-8 file;
* a ``.json`` file whose first non-space byte is ``[``: a JSON array, split into records by
  ``json_array.elements``; any other ``.json`` file is JSON Lines;
* WARC/WET files go to ``warc.WarcReader``, MediaWiki exports to ``mediawiki.PageReader`` (an
  ``.xml`` file is one when its first bytes show a ``<mediawiki`` root, else plain text); text and
  JSON Lines to ``text_stream.LineReader`` and a splitter (``splitters``). A bz2 MediaWiki dump
  is read by ``multistream`` instead (stream by stream).

A range reader enters the stream at an ``Entry``: its first line is skipped when the entry point
falls inside a line (that line belongs to the document before), and in ``blank_line`` mode a line
right after a non-blank one continues a document begun before the range, which its owner reads to
the end (``splitter.skip_foreign``).

Every path ends in ``integrity.released``: the file is read once, and a row of a compressed file
is released only once every member it touches has passed its check (rows wait, spilling to disk
past a bound); a damaged member quarantines them as ``ingest:corrupt_compression`` and ends the
file with one more such row for the partial document. Memory per file stays
``max_document_bytes`` plus a chunk on every path, plus the bounded wait of ``integrity``.
"""
from __future__ import annotations

from typing import Iterator, NamedTuple

from common import storage
from pipelines.config import IngestConfig
from pipelines.ingest.encodings import Transcoder, bom_codec
from pipelines.ingest.integrity import released
from pipelines.ingest.json_array import elements, starts_array
from pipelines.ingest.listed import ListedFile, read_exact
from pipelines.ingest.mediawiki import PageReader, is_mediawiki
from pipelines.ingest.members import DamagedStream, MemberStream
from pipelines.ingest.splitters import Decoding, JsonlSplitter, Row, TextSplitter
from pipelines.ingest.text_stream import CHUNK, LineReader, first_line_start, previous_line_blank, read_some
from pipelines.ingest.warc import WarcReader


class Entry(NamedTuple):
    """Where a range reader enters a stream and what lies just before (``text_stream.line_before``)."""
    base: int  # stream offset of the first byte read
    last: int | None  # the byte before ``base`` (a line end: ``base`` starts a line)
    blank: bool  # the line holding that byte is blank up to ``base``
    length: int  # that line's bytes before ``base``


def stream_rows(path: str, compression: str | None, kind: str, *, cfg: IngestConfig, start: int,
                end: int | None, name: str, size: int | None = None) -> Iterator[Row]:
    """Rows of one text/JSONL/JSON/WARC file (or byte range of an uncompressed one) in file order
    (``kind``: ``documents.file_kind``); ``size``: the listed size its reads are held to."""
    with storage.open_input(path) as f:
        raw = ListedFile(f, path, size)
        entry = None
        if start > 0:
            # The byte-order mark decides whether ranges can be read at all; 4 bytes in one ranged
            # read, not a buffered read of a whole block at the start of the file.
            if bom_codec(read_exact(path, 0, 4, size)):
                return  # a transcoded file is read whole by its first range
            base = first_line_start(raw, start)
            entry = Entry(base, 0x0A, previous_line_blank(raw, base, max_line=cfg.max_document_bytes), 0)
            raw.seek(base)
        members = MemberStream(raw, compression) if compression else None
        stream = members or (raw if end is None else _Tapered(raw, end))
        yield from split_stream(stream, kind, cfg=cfg, name=name, end=end, entry=entry, members=members)


class _Tapered:
    """A byte range's reads: whole chunks up to ``end``, then ``step`` at a time, since past ``end``
    the reader only finishes its last document (a 1 MiB chunk there would mostly be the next
    range's bytes, read twice)."""

    def __init__(self, raw: ListedFile, end: int, step: int = 1 << 16):
        self._raw, self._end, self._step = raw, end, step

    def read(self, n: int = -1) -> bytes:
        left = self._end - self._raw.position
        n = min(n, left) if left > 0 else min(n, self._step)
        return self._raw.read(n)

    read1 = read


def split_stream(stream, kind: str, *, cfg: IngestConfig, name: str, end: int | None, entry: Entry | None,
                 members: MemberStream | None) -> Iterator[Row]:
    """Rows of a (decompressed) stream: from its start (``entry`` None), or from ``entry`` on;
    reading stops after the documents that start before ``end``. ``members``: the compressed
    stream whose checks gate the rows (None: a plain file)."""
    transcoder = None
    try:
        head = b"" if entry is not None else read_some(stream, CHUNK)
        codec = bom_codec(head)
        if codec is not None:  # UTF-16/32: split its UTF-8 transcoding, all of it
            end = None
            stream = transcoder = Transcoder(stream, codec, head=head)
            head = read_some(stream, CHUNK)
    except DamagedStream as exc:
        yield Row(f"{name}:0", "", "ingest:corrupt_compression",
                  f"{type(exc).__name__}: {exc} (at decompressed byte 0)")
        return
    how = Decoding.of(cfg)._replace(label=codec or "")
    limit = _limit(members, transcoder)
    keep = cfg.keep_truncated_member
    if kind == "xml":
        kind = "mediawiki" if is_mediawiki(head) else "text"
    if kind == "mediawiki":
        pages = PageReader(name, max_document_bytes=cfg.max_document_bytes)
        yield from released(name, pages.rows(stream, head), pages, members, limit, pages.partial, keep_truncated=keep)
        return
    if kind == "warc":
        warc = WarcReader(name, max_document_bytes=cfg.max_document_bytes, how=how)
        yield from released(name, warc.rows(stream, head), warc, members, limit,
                            lambda: (warc.row_end, b"", warc.row_end), keep_truncated=keep)
        return
    if kind == "json" and starts_array(head):
        splitter = JsonlSplitter(name, cfg, unit="record")
        splitter.how = how
        lines = elements(stream, max_bytes=cfg.max_document_bytes, head=head)
        yield from released(name, _feed(lines, splitter, None), splitter, members, limit,
                            lambda: (splitter.row_end, b"", splitter.row_end), keep_truncated=keep)
        return
    splitter = JsonlSplitter(name, cfg) if kind in ("jsonl", "json") else TextSplitter(name, cfg)
    splitter.how = how
    reader = LineReader(stream, max_line=cfg.max_document_bytes, head=head, base=entry.base if entry else 0)

    def partial() -> tuple[int, bytes, int]:
        begin, prefix = splitter.partial(reader.consumed)
        return begin, prefix + reader.tail, reader.consumed

    lines = reader if entry is None else _entered(reader, splitter, entry, cfg)
    yield from released(name, _feed(lines, splitter, end), splitter, members, limit, partial, keep_truncated=keep)


def _entered(lines, splitter, entry: Entry, cfg: IngestConfig):
    """The lines of a range from its first own line on, the splitter set up for them.

    The first line is not ours when the entry point falls inside a line, or right between the
    ``\\r`` and ``\\n`` of one line end; the line before our first is then that line, whole."""
    lines = iter(lines)
    first = next(lines, None)
    if first is None:
        return
    blank = entry.blank
    if entry.last is not None and (entry.last not in (0x0A, 0x0D) or (entry.last == 0x0D and first.data[:1] == b"\n")):
        blank = (blank and not first.oversize and not first.data.strip()
                 and entry.length + first.length <= cfg.max_document_bytes)
        first = next(lines, None)
        if first is None:
            return
    # In blank_line mode a line right after a non-blank one continues a document that began
    # before the range: its owner (an earlier range) reads it to the end.
    splitter.skip_foreign = cfg.text_mode == "blank_line" and not blank
    splitter.base = first.offset
    yield first
    yield from lines


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


def _limit(members: MemberStream | None, transcoder: Transcoder | None):
    """A function giving the verified offset in the offsets documents are split in."""
    if members is None:
        return lambda: None
    if transcoder is None:
        return lambda: members.verified
    return lambda: transcoder.out_offset(members.verified)
