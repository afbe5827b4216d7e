"""A first-in first-out queue of rows that holds a bounded amount in memory and spills the rest to
a local temporary file.

Rows of a compressed file wait here until the member they come from has passed its check
(``integrity``). A multi-member file releases them after every member, so the queue stays small;
a single-member gzip of 50 GB releases nothing until its last byte, so its documents must not be
held in memory. ``PendingRows`` keeps rows in a deque until their approximate size
(characters of all fields plus a per-row overhead) reaches ``memory_bytes``; after that every new
row is appended to an anonymous temporary file (``tempfile.TemporaryFile``, deleted when closed,
in ``$TMPDIR``), and rows come back in the same order: the deque first, then the file, read
sequentially. Once the file is drained it is rewound and the deque is used again, so a file with
many medium members reuses one small temporary file.

Records on disk: a header (the row's ``end`` offset and the byte length of each field) and the
fields in UTF-8 (``surrogatepass``: a quarantined row may hold a lone surrogate). Writes and reads
go through 1 MiB buffers. The cost of the spill is one local write and one read of the text;
the alternative, reading the compressed file twice (a verify pass, then the split), costs a
second download and decompression instead, and that is what this replaces.
"""
from __future__ import annotations

import struct
import tempfile
from collections import deque
from typing import Iterator

from pipelines.ingest.splitters import Row

_HEADER = struct.Struct("<q6I")
_IO_BYTES = 1 << 20
_ROW_OVERHEAD = 128  # bytes a row costs in memory beyond its characters (tuple, str headers)


def _weight(row: Row) -> int:
    return _ROW_OVERHEAD + sum(len(field) for field in row)


class PendingRows:
    """Rows waiting for their member's check, in order; ``take(limit)`` releases those that end
    at or before ``limit`` (``None``: all)."""

    def __init__(self, memory_bytes: int):
        self._limit = memory_bytes
        self._memory: deque[tuple[Row, int]] = deque()
        self._memory_bytes = 0
        self._file = None
        self._write: list[bytes] = []  # encoded records not yet written
        self._write_bytes = 0
        self._written = 0  # file offset where the next record is written
        self._read_at = 0  # file offset of the next record to read
        self._buf, self._buf_at = b"", 0  # bytes read from the file; where parsing is in them
        self._on_disk = 0  # rows in the file (or its write buffer) not yet read back
        self._next: tuple[Row, int] | None = None  # a row read back, waiting for its release
        self.spilled = 0  # rows that went through the file
        self.peak_memory = 0  # the most bytes held in the deque at once

    def __len__(self) -> int:
        return len(self._memory) + self._on_disk + (self._next is not None)

    def add(self, row: Row, end: int) -> None:
        if self._on_disk == 0 and self._next is None and self._memory_bytes < self._limit:
            self._memory.append((row, end))
            self._memory_bytes += _weight(row)
            self.peak_memory = max(self.peak_memory, self._memory_bytes)
            return
        self._spill(row, end)

    def take(self, limit: int | None) -> Iterator[tuple[Row, int]]:
        while self._memory and (limit is None or self._memory[0][1] <= limit):
            row, end = self._memory.popleft()
            self._memory_bytes -= _weight(row)
            yield row, end
        if self._memory:
            return
        while self._next is not None or self._on_disk:
            if self._next is None:
                self._next = self._unspill()
            if limit is not None and self._next[1] > limit:
                return
            item, self._next = self._next, None
            yield item
        if self._file is not None:  # drained: start over at the beginning of the file
            self._written = self._read_at = self._buf_at = 0
            self._buf = b""

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    # ----------------------------------------------------------------------------------------
    def _spill(self, row: Row, end: int) -> None:
        fields = [field.encode("utf-8", "surrogatepass") for field in row]
        self._write.append(_HEADER.pack(end, *map(len, fields)))
        self._write.extend(fields)
        self._write_bytes += _HEADER.size + sum(map(len, fields))
        self._on_disk += 1
        self.spilled += 1
        if self._write_bytes >= _IO_BYTES:
            self._flush()

    def _flush(self) -> None:
        if not self._write:
            return
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="ingest-pending-")
        self._file.seek(self._written)
        data = b"".join(self._write)
        self._file.write(data)
        self._written += len(data)
        self._write, self._write_bytes = [], 0

    def _read(self, n: int) -> bytes:
        if len(self._buf) - self._buf_at < n:
            chunks, have = [self._buf[self._buf_at:]], len(self._buf) - self._buf_at
            while have < n:
                if self._read_at >= self._written:
                    self._flush()
                left = self._written - self._read_at
                if left <= 0:
                    raise RuntimeError("spilled rows ended early: the temporary file lost data")
                self._file.seek(self._read_at)
                more = self._file.read(min(left, max(_IO_BYTES, n - have)))
                if not more:
                    raise RuntimeError("spilled rows ended early: the temporary file lost data")
                self._read_at += len(more)
                chunks.append(more)
                have += len(more)
            self._buf, self._buf_at = b"".join(chunks), 0
        out = self._buf[self._buf_at:self._buf_at + n]
        self._buf_at += n
        return out

    def _unspill(self) -> tuple[Row, int]:
        end, *sizes = _HEADER.unpack(self._read(_HEADER.size))
        data = self._read(sum(sizes))
        fields, at = [], 0
        for n in sizes:
            fields.append(data[at:at + n].decode("utf-8", "surrogatepass"))
            at += n
        self._on_disk -= 1
        return Row(*fields), end
