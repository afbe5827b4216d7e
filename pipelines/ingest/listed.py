"""Reads held to the listed size: a file that delivers less than its listing promised is a storage
failure, never an empty or short document.

``resolve_sources`` lists each source once and keeps every file's size from that listing; the
planner splits files by it and the readers never ask the store for metadata again (no HEAD per
file). The same size is then checked against what the reads actually deliver:

* ``ListedFile`` wraps the stream of one file. A read that reaches the end of the data (``b""``)
  anywhere but at the listed size, or that delivers bytes past it, raises
  ``common.storage.StorageError`` naming the file, the listed size and the bytes read. Seeking
  to the end (``whence=2``) lands on the listed size, so a reader that starts from the end
  (Parquet's footer) also reads where the listing said the file ends.
* ``read_exact`` is a ranged read (``storage.read_range``) that must return every byte of its
  range inside the listed size.

Why: a store whose GET disagrees with its listing (a wrong Content-Length, a file truncated or
replaced after it was listed) used to make a file look empty or cut. A decompressor then reports
a truncated member, a splitter an empty file, and the build quietly ingests nothing. A mismatch is
now an error, so the runner retries the task, and a persistent one fails the build naming the
file. Only the end of the data is checked: a reader that stops early (a damaged member, a byte
range that ended) has nothing to compare.

``ListedFile`` also turns any ``OSError`` of the underlying file into ``StorageError``: the
decompressors report damaged data as ``OSError`` too, and a network failure must never be
quarantined as corrupt input.
"""
from __future__ import annotations

from typing import BinaryIO

from common import storage
from common.storage import StorageError

_WHY = "the store's listing and its reads disagree, or the file changed after it was listed"


class ListedFile:
    """A file object whose reads are checked against the size the listing gave (``None``: not checked)."""

    def __init__(self, raw: BinaryIO, uri: str, size: int | None):
        self._raw, self.uri, self.size = raw, uri, size
        self.position = raw.tell() if hasattr(raw, "tell") else 0
        self.delivered = 0  # bytes read through this object (all reads, wherever they were)

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (all that is left for -1); fewer only at the end of the data, which is
        then checked against the listed size."""
        begin = self.position
        data = self._read(n)
        if n is not None and 0 < len(data) < n:  # a short answer is not the end of the data
            pieces, got = [data], len(data)
            while got < n and (more := self._read(n - got)):
                pieces.append(more)
                got += len(more)
            data = b"".join(pieces)
        self.position += len(data)
        self.delivered += len(data)
        if self.size is not None:
            if self.position > self.size:
                raise StorageError(f"{self.uri}: listed as {self.size} bytes, but a read from byte {begin} went "
                                   f"on to byte {self.position} ({self.delivered} bytes read in all); {_WHY}")
            if (n is None or n < 0 or len(data) < n) and self.position != self.size:
                raise StorageError(f"{self.uri}: listed as {self.size} bytes, but a read from byte {begin} ended "
                                   f"at byte {self.position} ({self.delivered} bytes read in all); {_WHY}")
        return data

    read1 = read

    def _read(self, n: int) -> bytes:
        try:
            return self._raw.read(n)
        except StorageError:
            raise
        except OSError as exc:
            raise StorageError(f"{self.uri}: reading at byte {self.position} failed ({exc})") from exc

    def seek(self, offset: int, whence: int = 0) -> int:
        if whence == 2 and self.size is not None:
            offset, whence = self.size + offset, 0
        elif whence == 1:
            offset, whence = self.position + offset, 0
        try:
            self.position = int(self._raw.seek(offset, whence))
        except OSError as exc:
            raise StorageError(f"{self.uri}: seeking to byte {offset} failed ({exc})") from exc
        return self.position

    def tell(self) -> int:
        return self.position

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def __getattr__(self, name: str):
        return getattr(self._raw, name)


def read_exact(uri: str, start: int, end: int, size: int | None) -> bytes:
    """Bytes ``[start, end)`` (``end`` clipped to the listed ``size``) in one ranged read; a
    ``StorageError`` when the store returns fewer (without a listed size, a short read is the end
    of the file)."""
    if size is not None:
        end = min(end, size)
    if end <= start:
        return b""
    try:
        data = storage.read_range(uri, start, end)
    except StorageError:
        raise
    except OSError as exc:
        raise StorageError(f"{uri}: reading bytes {start}..{end} failed ({exc})") from exc
    if size is not None and len(data) != end - start:
        raise StorageError(f"{uri}: listed as {size} bytes, but a ranged read of bytes {start}..{end} returned "
                           f"{len(data)} bytes; {_WHY}")
    return data
