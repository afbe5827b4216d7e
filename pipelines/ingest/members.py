"""Decompression member by member: gzip members, bz2 streams, zstd frames, each one checked.

A compressed file is a series of *members* (``cat a.gz b.gz`` is a valid gzip file; pbzip2 writes
many bz2 streams; zstd writes frames, and a seekable zstd file many small ones). Each member ends
with its own check: gzip's CRC-32 and length, bz2's block and stream CRCs, zstd's content
checksum when the writer stored one. ``MemberStream`` decompresses with one low-level
decompressor per member (``zlib.decompressobj``, ``bz2.BZ2Decompressor``,
``zstandard``'s ``decompressobj``) instead of ``gzip.GzipFile`` and friends, because those hide
where a member ends, and that is what the reader needs to know:

* ``verified`` is the decompressed offset where the last member that passed its check ends;
  everything before it is trusted (``integrity``: rows are released only up to it);
* a read never returns bytes of two members at once, so a consumer that tracks offsets per read
  (``encodings.Transcoder``) sees every member end;
* a member that fails its check raises ``DamagedStream`` naming the member and why; input that
  ends inside a member raises it with ``truncated`` set. Either way the stream ends there: the
  decompressor cannot find the next member's start in damaged data.

Zero bytes between or after gzip members are padding (as the ``gzip`` module reads them), not a
member. Output comes in steps of at most ``OUT_CHUNK`` for gzip and bz2 (``max_length``), so a
decompression bomb never sits in memory; ``zstandard``'s ``decompressobj`` has no output limit,
so a pathological zstd frame can still expand one ``IN_CHUNK`` of input a lot (transiently). A
read gathers steps up to the size asked for, within one member; when a step fails, what was
gathered is returned first and the error raised by the next read, so the documents decoded
before the damage reach the splitter and are quarantined one by one (``integrity``).

``member_start`` is the compressed offset (from where reading began) of the member being read, or
of the one that failed: a reader of bz2 streams that knows the next one starts after it can look
for it there (``multistream``).

``limit`` bounds the compressed bytes read (a seekable zstd file's frames, not its seek table),
``offset`` is the decompressed offset of the first member read (a frame in the middle), ``first``
its number, and ``ends`` where the members must end by the seek table: a frame that decompresses
to another size fails like a damaged one (its documents' ids would be wrong).
"""
from __future__ import annotations

import bz2
import zlib
from typing import BinaryIO

import zstandard

IN_CHUNK = 1 << 16
# Decompressed bytes per step (gzip, bz2): a bomb never sits in memory, and when a member fails
# its check only the last step's output is lost (zlib raises without returning it).
OUT_CHUNK = 1 << 16
UNITS = {"gzip": "gzip member", "bz2": "bz2 stream", "zstd": "zstd frame"}
# What the decompressors raise on damaged data (bz2: OSError/EOFError; zlib.error; ZstdError).
_DAMAGE = (zlib.error, OSError, EOFError, ValueError, zstandard.ZstdError)


class DamagedStream(ValueError):
    """A member failed its integrity check, or the input ended inside one (``truncated``)."""

    def __init__(self, message: str, *, truncated: bool = False):
        super().__init__(message)
        self.truncated = truncated


class MemberStream:
    """A readable stream of the decompressed content of ``raw``, member by member (module docstring)."""

    def __init__(self, raw: BinaryIO, compression: str, *, offset: int = 0, limit: int | None = None,
                 first: int = 1, ends: list[int] | None = None, read_size: int = IN_CHUNK):
        if compression not in UNITS:
            raise ValueError(f"unknown compression {compression!r}")
        self._raw, self.compression, self.unit = raw, compression, UNITS[compression]
        self._read_size, self._left = read_size, limit
        self._zstd = zstandard.ZstdDecompressor() if compression == "zstd" else None
        self.position = offset  # decompressed offset just past the last byte produced
        self.verified = offset  # decompressed offset where the last checked member ends
        self.members = 0  # members that passed their check
        self._first = first  # the number of the first member read, for messages (1: the file's first)
        self._ends = ends  # where each member must end (a seek table's promise), if known
        self.failure = ""  # why the stream ended early ("" while it has not)
        self.truncated = False  # it ended early because the input ended inside a member
        self.member_start = 0  # compressed offset (from where reading began) of the current member's first byte
        self._taken = 0  # compressed bytes read from ``raw``
        self._d = None  # the current member's decompressor; None between members
        self._pending = b""  # compressed input read but not yet fed
        self._more = False  # the decompressor may hold output without more input
        self._eof = False  # the raw input is exhausted
        self._out, self._at = b"", 0
        self._error: DamagedStream | None = None  # raised by the next read (after the output before it)
        self.ended = False

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (-1: what one step gives) of the current member, ``b""`` at the end.
        When a member fails after some output was gathered, that output comes first and the
        error on the next call, so the bytes before the damage reach the reader."""
        pieces, have = [], 0
        want = OUT_CHUNK if n is None or n < 0 else n
        while have < want:
            if self._at < len(self._out):
                piece = self._out[self._at:self._at + want - have]
                self._at += len(piece)
                pieces.append(piece)
                have += len(piece)
            elif self._error is not None:
                if have:
                    break
                error, self._error = self._error, None
                raise error
            elif self.ended or (have and self._d is None) or (have and n is not None and n < 0):
                break  # the end, a member end (never two members in one read), or one step asked
            else:
                try:
                    self._step()
                except DamagedStream as exc:
                    self._error = exc
        return b"".join(pieces)

    read1 = read

    @property
    def number(self) -> int:
        """The number of the member being read (1: the file's first)."""
        return self._first + self.members

    def finish_member(self) -> None:
        """Decompress the rest of the current member, output discarded, so that its check runs
        (a reader that stops early still has its last rows verified)."""
        self._out, self._at = b"", 0
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        while self._d is not None and not self.ended:
            self._step()
        self._out, self._at = b"", 0

    def close(self) -> None:
        self._out, self._at = b"", 0

    # ----------------------------------------------------------------------------------------
    def _input(self) -> bytes:
        if self._pending:
            data, self._pending = self._pending, b""
            return data
        if self._eof:
            return b""
        n = self._read_size if self._left is None else min(self._read_size, self._left)
        data = self._raw.read(n) if n > 0 else b""  # raw errors propagate: they are not damage
        self._taken += len(data)
        if self._left is not None:
            self._left -= len(data)
        if not data:
            self._eof = True
        return data

    def _step(self) -> None:
        """Produce the next piece of output (possibly empty), or end the stream."""
        self._out, self._at = b"", 0
        if self._d is None:
            data = self._input()
            if self.compression == "gzip":
                data = data.lstrip(b"\x00")  # padding between or after members
            if not data:
                self.ended = self._eof
                return
            self.member_start = self._taken - len(data)
            self._d = zlib.decompressobj(31) if self.compression == "gzip" else (
                bz2.BZ2Decompressor() if self.compression == "bz2" else self._zstd.decompressobj())
        elif self._more:
            data = b""
        else:
            data = self._input()
            if not data:
                self._fail(f"{self.unit} {self.number} is truncated (the file ends inside it)", truncated=True)
        try:
            out = self._feed(data)
        except _DAMAGE as exc:
            self._fail(f"{self.unit} {self.number} failed its check ({type(exc).__name__}: {exc})", cause=exc)
        self.position += len(out)
        self._out = out
        if self._d.eof:
            if self._ends is not None and self.members < len(self._ends) and self.position != self._ends[self.members]:
                self._fail(f"{self.unit} {self.number} ends at decompressed byte {self.position}, but the "
                           f"seek table says {self._ends[self.members]}")
            self.members += 1
            self.verified = self.position
            self._pending, self._d, self._more = self._d.unused_data + self._pending, None, False

    def _feed(self, data: bytes) -> bytes:
        d = self._d
        if self.compression == "zstd":
            return d.decompress(data)
        if self.compression == "gzip":
            out = d.decompress(d.unconsumed_tail if self._more else data, OUT_CHUNK)
            self._more = not d.eof and (bool(d.unconsumed_tail) or len(out) == OUT_CHUNK)
            return out
        out = d.decompress(data, OUT_CHUNK)
        self._more = not d.eof and not d.needs_input
        return out

    def _fail(self, message: str, *, truncated: bool = False, cause: BaseException | None = None):
        self.failure, self.ended, self._d, self.truncated = message, True, None, truncated
        raise DamagedStream(message, truncated=truncated) from cause
