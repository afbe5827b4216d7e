"""A ``.json`` file holding one JSON array of records, split into its elements while streaming.

``json.load`` would hold the whole file (and its parsed form) in memory. ``elements`` instead
scans the bytes once, chunk by chunk, tracking only what decides where an element ends: string
state (inside quotes, after a backslash) and bracket depth. A regular expression jumps straight
to the next byte that can change that state, so long strings cost one C-level search each. Each
top-level element comes out as a ``text_stream.Line`` (offset of its first byte, its bytes), to
be parsed by ``JsonlSplitter`` exactly like a JSON Lines record: memory is bounded by
``max_document_bytes`` plus a chunk, and an element over the cap is counted and skipped with a
prefix kept (``oversize``), never held whole.

The scanner does not validate JSON: a malformed element comes out as it is and fails to parse
(``ingest:bad_json``); an unclosed array ends at end of file; bytes after the closing ``]``
other than whitespace come out as one more "element" (so they too become a ``bad_json`` row).
"""
from __future__ import annotations

import re
from typing import BinaryIO, Iterator

from pipelines.ingest.text_stream import CHUNK, QUARANTINE_BYTES, Line, read_some

_OUTSIDE = re.compile(rb'[\[\]{}",]|[^\s\[\]{}",]+')  # outside strings: structure or a scalar
_INSIDE = re.compile(rb'["\\]')  # inside a string: its end or an escape
_WS = b" \t\r\n"


def starts_array(head: bytes) -> bool:
    """Whether the first non-space byte (after a UTF-8 BOM) is ``[``."""
    return head.lstrip(b"\xef\xbb\xbf").lstrip(_WS)[:1] == b"["


class _Element:
    def __init__(self, offset: int, cap: int):
        self.offset, self.cap = offset, cap
        self.parts: list[bytes] = []
        self.length = 0
        self.prefix: bytes | None = None

    def add(self, data: bytes) -> None:
        self.length += len(data)
        if self.prefix is not None:
            return
        self.parts.append(data)
        if self.length > self.cap:
            self.prefix = b"".join(self.parts)[:QUARANTINE_BYTES]
            self.parts = []

    def line(self) -> Line:
        if self.prefix is not None:
            return Line(self.offset, self.prefix, self.length, True)
        return Line(self.offset, b"".join(self.parts), self.length, False)


def elements(stream: BinaryIO, *, max_bytes: int, head: bytes = b"", chunk: int = CHUNK) -> Iterator[Line]:
    """The top-level elements of the JSON array in ``stream`` (``head``: bytes already read)."""
    pos = 0  # stream offset of the current block's first byte
    depth = 0  # 0: before the array; 1: between elements; >1 inside an element's brackets
    in_string = escape = closed = False
    elem: _Element | None = None
    block = head
    while block or (block := read_some(stream, chunk)):
        i, n = 0, len(block)
        if pos == 0 and block.startswith(b"\xef\xbb\xbf"):
            i = 3
        piece_start = i  # where the current element's bytes in this block begin
        while i < n:
            if escape:
                escape, i = False, i + 1
                continue
            if in_string:
                m = _INSIDE.search(block, i)
                if m is None:
                    i = n
                    break
                i = m.end()
                if m.group() == b"\\":
                    escape = True
                else:
                    in_string = False
                continue
            m = _OUTSIDE.search(block, i)
            if m is None:
                i = n
                break
            j, c = m.start(), block[m.start()]
            if closed:  # something after the array: one last bad "element"
                elem = elem or _Element(pos + j, max_bytes)
                piece_start, i = (j if elem.length == 0 and not elem.parts else piece_start), n
                break
            if depth == 0:
                if c == 0x5B:  # "[": the array opens
                    depth, i = 1, j + 1
                    continue
                closed, i = True, j  # not an array after all: reported as one bad element
                continue
            if depth == 1 and elem is None:
                if c == 0x5D:  # "]"
                    depth, closed, i = 0, True, j + 1
                    continue
                if c == 0x2C:  # ",": between elements
                    i = j + 1
                    continue
                elem, piece_start = _Element(pos + j, max_bytes), j
            if c == 0x22:
                in_string = True
            elif c in (0x5B, 0x7B):
                depth += 1
            elif c in (0x5D, 0x7D):
                if depth == 1:  # "]" ends the array and the element before it
                    elem.add(block[piece_start:j])
                    yield elem.line()
                    elem, depth, closed = None, 0, True
                    i = j + 1
                    continue
                depth -= 1
            elif c == 0x2C and depth == 1:
                elem.add(block[piece_start:j])
                yield elem.line()
                elem, i = None, j + 1
                continue
            i = m.end()
        if elem is not None:
            elem.add(block[piece_start:n])
        pos += n
        block = b""
    if elem is not None:
        yield elem.line()
