"""WARC and WET files (``.warc``, ``.wet``, ``.warc.wet``, usually gzipped one record per member).

A WARC file (ISO 28500, versions 1.0 and 1.1) is a sequence of records, each a ``WARC/1.x``
line, header lines up to a blank line, a block of exactly ``Content-Length`` bytes and two line
ends. ``WarcReader`` walks the records with a small buffered reader over the decompressed
stream, holding at most one record's headers and a block of at most ``max_document_bytes`` (a
larger block is counted and skipped, keeping a prefix: ``ingest:oversize``).

What a record becomes:

* ``conversion`` (the extracted text of a WET file) and ``resource`` records: the block is the
  payload, typed by the record's ``Content-Type``;
* ``response`` records: the block is an HTTP response; its status line and headers are parsed
  off and the payload typed by the HTTP ``Content-Type``. A payload still under a
  ``Transfer-Encoding``/``Content-Encoding`` is ``ingest:unsupported_payload``;
* a ``text/plain`` payload (or one with no type) is a document, decoded like any text document
  (``encodings``); ``text/html``/``application/xhtml+xml`` is ``ingest:html`` (no HTML text
  extractor ships), any other type ``ingest:unsupported_payload``;
* ``warcinfo``, ``request``, ``metadata``, ``revisit`` and ``continuation`` records are not
  documents: each is one ``ingest:warc_skipped`` row (empty text, the type in ``detail``), so
  they are counted like every other drop.

A record's id is ``"{name}:{offset}"`` with the offset of its ``WARC/`` line in the decompressed
stream, and its ``WARC-Target-URI`` is the row's ``url``. A record that cannot be parsed (no
``WARC/`` line where one must start, a bad ``Content-Length``, headers over ``MAX_HEADER_BYTES``)
is one ``ingest:bad_warc`` row, and reading the file stops there: without a trustworthy length
the next record's start is unknown.
"""
from __future__ import annotations

from typing import BinaryIO, Iterator

from pipelines.ingest.splitters import Decoding, Row, decode_document, quarantine_text
from pipelines.ingest.text_stream import CHUNK, QUARANTINE_BYTES, read_some

WARC_SUFFIXES = (".warc", ".wet", ".warc.wet")
MAX_HEADER_BYTES = 1 << 16
DOCUMENT_RECORDS = ("conversion", "resource", "response")
SKIPPED_RECORDS = ("warcinfo", "request", "metadata", "revisit", "continuation")
HTML_TYPES = ("text/html", "application/xhtml+xml")


class BadWarc(ValueError):
    """A record that cannot be parsed: reading stops there."""


class _Buffered:
    """Buffered reads from a stream, with the stream offset of the next byte."""

    def __init__(self, stream: BinaryIO, head: bytes = b""):
        self._stream, self._buf, self.offset = stream, head, 0

    def _fill(self) -> bool:
        more = read_some(self._stream, CHUNK)
        self._buf += more
        return bool(more)

    def readline(self, limit: int) -> bytes:
        """One line with its ``\\n`` (shorter at end of stream); ``BadWarc`` past ``limit``."""
        while (nl := self._buf.find(b"\n")) < 0:
            if len(self._buf) > limit:
                raise BadWarc(f"a header line longer than {limit} bytes")
            if not self._fill():
                nl = len(self._buf) - 1
                break
        line, self._buf = self._buf[:nl + 1], self._buf[nl + 1:]
        self.offset += len(line)
        return line

    def read(self, n: int, keep: int) -> tuple[bytes, int]:
        """Consume ``n`` bytes; return the first ``keep`` of them and how many there were."""
        out, got = [], 0
        while got < n:
            if not self._buf and not self._fill():
                break
            take = self._buf[:n - got]
            self._buf = self._buf[len(take):]
            if got < keep:
                out.append(take[:keep - got])
            got += len(take)
        self.offset += got
        return b"".join(out), got


def _headers(lines: list[bytes]) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in lines:
        key, sep, value = line.decode("utf-8", "replace").partition(":")
        if sep:
            out[key.strip().lower()] = value.strip()
    return out


def _mime(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


class WarcReader:
    """Rows of the records of one WARC/WET stream; ``row_end`` as for the splitters."""

    def __init__(self, name: str, *, max_document_bytes: int, how: Decoding):
        self.name, self.cap, self.how = name, max_document_bytes, how
        self.row_end = 0
        self.records = 0

    def rows(self, stream: BinaryIO, head: bytes = b"") -> Iterator[Row]:
        buf = _Buffered(stream, head)
        while True:
            start = buf.offset
            try:
                line = buf.readline(MAX_HEADER_BYTES)
                while line in (b"\r\n", b"\n"):  # tolerate extra line ends between records
                    start, line = buf.offset, buf.readline(MAX_HEADER_BYTES)
                if not line:
                    return
                row = self._record(buf, start, line)
            except BadWarc as exc:
                self.row_end = buf.offset
                yield Row(f"{self.name}:{start}", "", "ingest:bad_warc",
                          f"record at byte {start}: {exc}; the rest of the file is not read")
                return
            self.records += 1
            self.row_end = buf.offset
            yield row

    def _record(self, buf: _Buffered, start: int, first: bytes) -> Row:
        if not first.startswith(b"WARC/1."):
            raise BadWarc(f"expected a 'WARC/1.x' line, found {first[:40]!r}")
        lines, size = [], len(first)
        while (line := buf.readline(MAX_HEADER_BYTES)) not in (b"\r\n", b"\n", b""):
            lines.append(line)
            size += len(line)
            if size > MAX_HEADER_BYTES:
                raise BadWarc(f"headers longer than {MAX_HEADER_BYTES} bytes")
        head = _headers(lines)
        try:
            length = int(head.get("content-length", ""))
        except ValueError:
            raise BadWarc(f"Content-Length {head.get('content-length')!r} is not a number") from None
        if length < 0:
            raise BadWarc(f"Content-Length {length} is negative")
        rid, kind = f"{self.name}:{start}", head.get("warc-type", "").lower()
        url = head.get("warc-target-uri", "").strip("<>")
        keep = length if kind in DOCUMENT_RECORDS else 0
        block, got = buf.read(length, keep if length <= self.cap else QUARANTINE_BYTES)
        if got < length:
            raise BadWarc(f"the file ends inside the block ({got} of {length} bytes)")
        if kind not in DOCUMENT_RECORDS:
            return Row(rid, "", "ingest:warc_skipped", f"WARC-Type {kind or '(none)'}", url=url)
        if length > self.cap:
            return Row(rid, quarantine_text(block), "ingest:oversize",
                       f"{kind} record of {length} bytes > max_document_bytes={self.cap}", url=url)
        content_type = head.get("content-type", "")
        if kind == "response" and _mime(content_type) == "application/http":
            http, _, block = block.partition(b"\r\n\r\n")
            http_head = _headers(http.split(b"\r\n")[1:])
            content_type = http_head.get("content-type", "")
            coding = [f"{k}: {http_head[k]}" for k in ("transfer-encoding", "content-encoding")
                      if http_head.get(k, "identity").lower() != "identity"]
            if coding:
                return Row(rid, quarantine_text(block), "ingest:unsupported_payload",
                           f"{kind} record: payload under {', '.join(coding)}", url=url)
        mime = _mime(content_type)
        if mime in HTML_TYPES:
            return Row(rid, quarantine_text(block), "ingest:html",
                       f"{kind} record of type {mime}: no HTML text extractor ships", url=url)
        if mime not in ("", "text/plain"):
            return Row(rid, quarantine_text(block), "ingest:unsupported_payload",
                       f"{kind} record of type {mime}", url=url)
        text, encoding, reject = decode_document(self.name, block, offset=start, line_no=1, how=self.how,
                                                 unit=f"{kind} record")
        if reject is not None:
            return reject._replace(url=url)
        text = text.strip()
        if not text:
            return Row(rid, "", "ingest:empty_document", f"{kind} record with no text", url=url)
        return Row(rid, text, url=url, encoding=encoding)
