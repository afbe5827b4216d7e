"""Streaming byte input for ingestion: decompression by file extension and a bounded line splitter.

Raw corpora arrive as multi-GB files, often compressed, sometimes damaged. Two rules shape this
module:

* **Never hold more than a bounded amount of one file in memory.** Input is read in fixed chunks
  (``CHUNK``) and split into lines at ``\\n``, ``\\r\\n`` or a lone ``\\r`` (old Mac files), as
  Python's universal newlines do; a chunk ending in ``\\r`` is joined with the next one so a
  ``\\r\\n`` across chunks stays one line end. A line longer than ``max_line`` is not accumulated: the
  splitter keeps a short prefix (for the quarantine record), counts the rest while discarding it,
  and reports the line as oversize with its true length and offset.
* **Damage is data, not a crash.** A truncated or corrupt gzip/bz2/zstd stream raises
  ``members.DamagedStream`` (one of ``CORRUPT_ERRORS``) out of ``read``; the splitter's
  ``consumed``/``tail`` attributes then say how far the good bytes went, so the caller can
  quarantine the document in progress with its offset (``integrity`` decides about the documents
  before it). A failure to read the file itself (disk, network, fewer bytes than listed) is not
  damage: it surfaces as ``StorageError`` and fails the read, so the caller can retry.

Offsets are positions in the *decompressed* stream, which is what document ids are made of.
Decompression is ``members.MemberStream`` (member by member, each checked).
"""
from __future__ import annotations

import zlib
from typing import BinaryIO, Iterator, NamedTuple

import zstandard

from common import storage
from pipelines.ingest.listed import ListedFile
from pipelines.ingest.members import DamagedStream, MemberStream

CHUNK = 1 << 20
# Bytes of a rejected document or line kept for the quarantine record.
QUARANTINE_BYTES = 10 * 1024
COMPRESSION_SUFFIXES = {".gz": "gzip", ".gzip": "gzip", ".bz2": "bz2", ".zst": "zstd", ".zstd": "zstd"}
# What a damaged compressed stream raises: ``MemberStream`` reports every decompressor error and a
# truncated member as ``DamagedStream``; the others are what the decompressors themselves raise.
CORRUPT_ERRORS = (DamagedStream, OSError, EOFError, zlib.error, zstandard.ZstdError)


def compression_of(path: str) -> tuple[str | None, str]:
    """``(compression or None, name without the compression suffix)`` from the file name."""
    name = path.rsplit("/", 1)[-1]
    lower = name.lower()
    for suffix, kind in COMPRESSION_SUFFIXES.items():
        if lower.endswith(suffix):
            return kind, name[: -len(suffix)]
    return None, name


# Reading the file itself failed (disk, network) or delivered other than its listed size: an I/O
# failure, not damaged data (``listed``). The same class as ``common.storage``'s.
StorageError = storage.StorageError


def decompressed(raw: BinaryIO, compression: str | None, *, size: int | None = None):
    """A readable binary stream of the decompressed content of ``raw``, member by member
    (``members.MemberStream``); ``raw``'s own failures surface as ``StorageError``."""
    if compression is None:
        return raw
    return MemberStream(ListedFile(raw, str(getattr(raw, "path", raw)), size), compression)


def read_some(stream: BinaryIO, n: int) -> bytes:
    """Up to ``n`` bytes, b"" at end of stream.

    ``read1`` returns what one underlying read decoded, so the bytes before a corrupt spot in a
    compressed stream reach the caller before the error does (``read(n)`` would discard them).
    """
    read1 = getattr(stream, "read1", None)
    return read1(n) if read1 is not None else stream.read(n)


class Line(NamedTuple):
    offset: int  # byte offset of the line's first byte in the decompressed stream
    data: bytes  # the line including its b"\n"; only a prefix when ``oversize``
    length: int  # true length in bytes (== len(data) unless oversize)
    oversize: bool


class LineReader:
    """Iterates the lines of a binary stream, never holding a line longer than ``max_line``.

    ``head`` is data the caller already read from the stream (to sniff it). After an exception
    from the stream, ``consumed`` is the offset of the first byte not yielded as part of a line
    and ``tail`` a prefix of the buffered bytes from there (the damaged remainder).
    """

    def __init__(self, stream: BinaryIO, *, max_line: int, head: bytes = b"", chunk: int = CHUNK,
                 base: int = 0):
        self._stream = stream
        self._max_line = max(1, int(max_line))
        self._head = head
        self._chunk = chunk
        self.base = base  # stream offset of the first byte read (a byte range's first line)
        self.consumed = base
        self.tail = b""
        self.position = base  # stream offset just past the last byte read

    @property
    def bytes_read(self) -> int:
        return self.position - self.base

    def _chunks(self) -> Iterator[bytes]:
        block, self._head = self._head, b""
        while block or (block := read_some(self._stream, self._chunk)):
            while block.endswith(b"\r") and (more := read_some(self._stream, self._chunk)):
                block += more  # a "\r\n" split across chunks is one line end
            self.position += len(block)
            yield block
            block = b""

    def __iter__(self) -> Iterator[Line]:
        pending: list[bytes] = []  # pieces of the current unfinished line (joined once, at its end)
        pending_len = 0
        skip_prefix: bytes | None = None  # set while discarding the rest of an oversize line
        for block in self._chunks():
            cr = b"\r" in block
            stop = line_end(block, 0, cr)
            if stop < 0:
                if skip_prefix is None:
                    pending.append(block)
                    pending_len += len(block)
                    if pending_len > self._max_line:
                        skip_prefix = b"".join(pending)[:QUARANTINE_BYTES]
                        pending, pending_len = [], 0
                elif len(skip_prefix) < QUARANTINE_BYTES:  # the same prefix whatever the chunk sizes
                    skip_prefix += block[:QUARANTINE_BYTES - len(skip_prefix)]
                self.tail = (pending[0] if pending else b"")[:QUARANTINE_BYTES]
                continue
            if skip_prefix is not None:
                end = self.position - len(block) + stop
                skip_prefix += block[:max(0, min(stop, QUARANTINE_BYTES - len(skip_prefix)))]
                yield Line(self.consumed, skip_prefix, end - self.consumed, True)
                self.consumed, skip_prefix = end, None
            else:
                pending.append(block[:stop])
                yield self._line(b"".join(pending))
            start = stop
            while (stop := line_end(block, start, cr)) >= 0:
                yield self._line(block[start:stop])
                start = stop
            pending = [block[start:]] if start < len(block) else []
            pending_len = len(block) - start
            self.tail = block[start:start + QUARANTINE_BYTES]
            if pending_len > self._max_line:
                skip_prefix, pending, pending_len, self.tail = pending[0][:QUARANTINE_BYTES], [], 0, b""
        if skip_prefix is not None:
            yield Line(self.consumed, skip_prefix, self.position - self.consumed, True)
            self.consumed = self.position
        elif pending:
            yield self._line(b"".join(pending))
        self.tail = b""

    def _line(self, data: bytes) -> Line:
        offset, n = self.consumed, len(data)
        self.consumed += n
        if n > self._max_line:
            return Line(offset, data[:QUARANTINE_BYTES], n, True)
        return Line(offset, data, n, False)


def line_end(block: bytes, start: int, cr: bool) -> int:
    """Index just past the first line end (``\\n``, ``\\r\\n``, ``\\r``) at or after ``start``; -1 if none.

    ``cr`` says whether ``block`` holds any ``\\r`` (one scan per block keeps ``\\n`` files fast).
    """
    nl = block.find(b"\n", start)
    if not cr:
        return nl + 1 if nl >= 0 else -1
    r = block.find(b"\r", start, nl if nl >= 0 else len(block))
    if r < 0:
        return nl + 1 if nl >= 0 else -1
    return r + 2 if block[r + 1:r + 2] == b"\n" else r + 1


# ---------------------------------------------------------------------------------------------
# Byte ranges of an uncompressed file
# ---------------------------------------------------------------------------------------------
_WHITESPACE = frozenset(b" \t\x0b\x0c")


def first_line_start(raw: BinaryIO, start: int, *, block: int = 1 << 16) -> int:
    """Offset of the first line that begins at or after ``start`` (EOF offset if none)."""
    if start <= 0:
        return 0
    raw.seek(start - 1)
    pos = start - 1
    while data := raw.read(block):
        stop = line_end(data, 0, b"\r" in data)
        if stop >= 0:
            if stop == len(data) and data.endswith(b"\r") and raw.read(1) == b"\n":
                stop += 1  # the "\r" ended this read; its "\n" is the next byte
            return pos + stop
        pos += len(data)
    return pos


def previous_line_blank(raw: BinaryIO, line_start: int, *, block: int = 4096, max_line: int | None = None) -> bool:
    """Whether the line ending just before ``line_start`` is blank (whitespace only, and not
    longer than ``max_line``: the splitters treat a longer line as oversize, never as blank).

    Scans backwards from just before that line's end (``\\n``, ``\\r\\n`` or ``\\r``); it usually
    stops at the first byte. The start of the file counts as a blank line.
    """
    return line_before(_backwards(raw, line_start, block), max_line=max_line)[1]


def line_before(back: Iterator[int], *, max_line: int | None = None) -> tuple[int | None, bool, int]:
    """What lies just before a position, from the bytes before it, last first (``back``):
    ``(the last byte, or None at the start of the stream; whether the line holding it is blank up
    to the position; how many of that line's bytes lie before the position)``. The scan stops at
    the first non-whitespace byte, at the line's start, or past ``max_line`` bytes (not blank)."""
    last = next(back, None)
    if last is None:
        return None, True, 0
    if last == 0x0A:
        length, byte = 1, next(back, None)
        if byte == 0x0D:  # "\r\n" is one line end
            length, byte = 2, next(back, None)
    elif last == 0x0D:
        length, byte = 1, next(back, None)
    else:
        length, byte = 0, last  # the position is inside a line: ``last`` is content
    while byte is not None and byte not in (0x0A, 0x0D):
        length += 1
        if byte not in _WHITESPACE or (max_line is not None and length > max_line):
            return last, False, length
        byte = next(back, None)
    return last, max_line is None or length <= max_line, length


def _backwards(raw: BinaryIO, end: int, block: int) -> Iterator[int]:
    """The bytes before ``end``, last first."""
    while end > 0:
        begin = max(0, end - block)
        raw.seek(begin)
        data = raw.read(end - begin)
        yield from reversed(data)
        end = begin
