"""Document splitters: lines of one file → document rows, by text mode or one JSON record per line.

A splitter is fed ``text_stream.Line``s in order and returns at most one ``Row`` per line (a
finished document or a reject), plus one more from ``finish()`` at end of input. It holds only
the document under construction, and only up to ``max_document_bytes`` of it: past that the
document is known to be oversize and just a prefix is kept for the quarantine record.

For byte-range reading (``ingest.read_documents(start=...)``), ``skip_foreign`` makes the text
splitter ignore the tail of a document that began before the range (its owner reads it), and
``idle()`` says no document is in progress, so a range reader may stop at its end. Line numbers
in ``detail`` count from the start of what was read, so for a range they are relative to it.

Bytes become text through ``encodings.decode`` (strict UTF-8, else a detected charset, counted in
``Row.encoding``) after ``encodings.binary_reason`` (``ingest:binary`` per document). After each
returned row, ``row_end`` is the stream offset just past that row's last byte: ingestion holds the
row until a compressed file is verified that far (``integrity``).
"""
from __future__ import annotations

import json
from typing import NamedTuple

from pipelines.config import IngestConfig
from pipelines.ingest.encodings import binary_reason, decode
from pipelines.ingest.text_stream import QUARANTINE_BYTES, Line


class Row(NamedTuple):
    id: str
    text: str
    reason: str = ""
    detail: str = ""
    url: str = ""  # WARC-Target-URI of a WARC record
    encoding: str = ""  # how a kept document's bytes were decoded ("utf-8", "cp1252", ...)


def quarantine_text(data: bytes) -> str:
    """A capped, lossless-for-humans rendering of raw bytes for the quarantine record."""
    return data[:QUARANTINE_BYTES].decode("utf-8", "backslashreplace")


def line_label(line_no: int, base: int = 0, unit: str = "line") -> str:
    """``line N``; for a byte range not starting at 0, relative to where the range was entered."""
    return f"{unit} {line_no}" if base == 0 else f"{unit} {line_no} after byte {base}"


class Decoding(NamedTuple):
    """How a splitter turns bytes into text (``IngestConfig`` fields; ``detect`` is off for a
    file transcoded from UTF-16/32, whose bytes are UTF-8 by construction)."""
    detect: bool = True
    fallback_encoding: str = "cp1252"
    max_control_ratio: float = 0.05
    label: str = ""  # the encoding to report instead of "utf-8" (a transcoded file's codec)

    @classmethod
    def of(cls, cfg: IngestConfig) -> Decoding:
        return cls(cfg.detect_charset, cfg.fallback_encoding, cfg.max_control_ratio)


def decode_document(path: str, data: bytes, *, offset: int, line_no: int, base: int = 0,
                    how: Decoding = Decoding(), unit: str = "line") -> tuple[str | None, str, Row | None]:
    """``(text, encoding, None)`` of a document, or ``(None, "", reject)`` naming the line of the
    first bad byte (``ingest:binary`` or ``ingest:invalid_utf8``)."""
    rid = f"{path}:{offset}"
    binary = binary_reason(data, how.max_control_ratio)
    if binary is not None:
        return None, "", Row(rid, quarantine_text(data), "ingest:binary",
                             f"{line_label(line_no, base, unit)}: {binary}")
    text, encoding, bad = decode(data, detect=how.detect and not how.label,
                                 fallback_encoding=how.fallback_encoding)
    if text is None:
        bad_line = line_no + data.count(b"\n", 0, bad)
        what = f" (transcoded from {how.label})" if how.label else ""
        return None, "", Row(rid, quarantine_text(data), "ingest:invalid_utf8",
                             f"{line_label(bad_line, base, unit)}: {encoding} at byte {offset + bad}{what}")
    if offset == 0 and text.startswith("\ufeff"):
        text = text[1:]  # a byte-order mark is not content
    return text, how.label or encoding, None


class TextSplitter:
    """Groups lines into documents by text mode; tracks the document under construction."""

    def __init__(self, path: str, cfg: IngestConfig):
        self.path, self.mode, self.cap = path, cfg.text_mode, cfg.max_document_bytes
        self.how = Decoding.of(cfg)
        self.line_no = 0
        self.row_end = 0
        self.skip_foreign = False  # inside a document that began before our byte range
        self.base = 0  # byte offset where reading started (line numbers count from there)
        self._reset()

    def idle(self) -> bool:
        return self.start is None

    def _reset(self) -> None:
        self.start: int | None = None
        self.start_line = 0
        self.parts: list[bytes] = []
        self.size = 0
        self.end = 0  # stream offset just past the document's last line so far
        self.prefix: bytes | None = None  # set once the document is known to be oversize

    def feed(self, line: Line) -> Row | None:
        self.line_no += 1
        blank = not line.oversize and not line.data.strip()
        if self.skip_foreign:
            self.skip_foreign = not blank
            return None
        if blank and self.mode != "file":
            return self.finish()
        if self.start is None:
            self.start = 0 if self.mode == "file" else line.offset
            self.start_line = 1 if self.mode == "file" else self.line_no
        self.size += line.length
        self.end = line.offset + line.length
        if self.prefix is None and (line.oversize or self.size > self.cap):
            self.prefix = (b"".join(self.parts) + line.data)[:QUARANTINE_BYTES]
            self.parts = []
        elif self.prefix is None:
            self.parts.append(line.data)
        return self.finish() if self.mode == "line" else None

    def partial(self, consumed: int) -> tuple[int, bytes]:
        if self.start is None:
            return consumed, b""
        return self.start, self.prefix if self.prefix is not None else b"".join(self.parts)

    def finish(self) -> Row | None:
        if self.start is None:
            return None
        start, start_line, parts, size, prefix = self.start, self.start_line, self.parts, self.size, self.prefix
        self.row_end = self.end
        self._reset()
        if prefix is not None:
            return Row(f"{self.path}:{start}", quarantine_text(prefix), "ingest:oversize",
                       f"{line_label(start_line, self.base)}: document of {size} bytes"
                       f" > max_document_bytes={self.cap}")
        text, encoding, reject = decode_document(self.path, b"".join(parts), offset=start,
                                                 line_no=start_line, base=self.base, how=self.how)
        if reject is not None:
            return reject
        text = text.rstrip("\r\n")
        if not text.strip():
            return Row(f"{self.path}:{start}", text[:QUARANTINE_BYTES], "ingest:empty_document",
                       f"{line_label(start_line, self.base)}: only whitespace")
        return Row(f"{self.path}:{start}", text, encoding=encoding)


class JsonlSplitter:
    """One JSON object per line (or per element of a JSON array: ``unit="record"``, fed by
    ``json_array``); the configured field is the document."""

    def __init__(self, path: str, cfg: IngestConfig, unit: str = "line"):
        self.path, self.field, self.cap = path, cfg.jsonl_field, cfg.max_document_bytes
        self.how, self.unit = Decoding.of(cfg), unit
        self.row_end = 0
        self.line_no = 0
        self.skip_foreign = False  # unused: every JSONL line starts a record
        self.base = 0

    def feed(self, line: Line) -> Row | None:
        self.line_no += 1
        self.row_end = line.offset + line.length
        rid, where = f"{self.path}:{line.offset}", line_label(self.line_no, self.base, self.unit)
        if line.oversize:
            return Row(rid, quarantine_text(line.data), "ingest:oversize",
                       f"{where}: record of {line.length} bytes > max_document_bytes={self.cap}")
        if not line.data.strip():
            return None  # blank lines separate nothing in JSONL; a trailing one is common
        text, encoding, reject = decode_document(self.path, line.data, offset=line.offset, line_no=self.line_no,
                                                 base=self.base, how=self.how, unit=self.unit)
        if reject is not None:
            return reject
        try:
            record = json.loads(text)
        except (ValueError, RecursionError) as exc:  # also: absurd nesting, 5000-digit integers
            where += f", column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
            return Row(rid, text[:QUARANTINE_BYTES], "ingest:bad_json",
                       f"{where}: {getattr(exc, 'msg', None) or type(exc).__name__ + ': ' + str(exc)}")
        if not isinstance(record, dict) or self.field not in record:
            return Row(rid, text[:QUARANTINE_BYTES], "ingest:missing_field", f"{where}: no field {self.field!r}")
        value = record[self.field]
        if not isinstance(value, str):
            return Row(rid, text[:QUARANTINE_BYTES], "ingest:missing_field",
                       f"{where}: field {self.field!r} is {type(value).__name__}, not a string")
        if not value.strip():
            return Row(rid, value[:QUARANTINE_BYTES], "ingest:empty_document", f"{where}: empty text")
        try:
            data = value.encode("utf-8")
        except UnicodeEncodeError as exc:  # a "\ud800" escape: valid JSON, not valid text
            return Row(rid, text[:QUARANTINE_BYTES], "ingest:invalid_utf8", f"{where}: {exc.reason} in the text")
        binary = binary_reason(data, self.how.max_control_ratio)  # "\u0000" escapes and the like
        if binary is not None:
            return Row(rid, value[:QUARANTINE_BYTES], "ingest:binary", f"{where}: {binary} in the text")
        return Row(rid, value, encoding=encoding)

    def partial(self, consumed: int) -> tuple[int, bytes]:
        return consumed, b""

    def idle(self) -> bool:
        return True

    def finish(self) -> None:
        return None


