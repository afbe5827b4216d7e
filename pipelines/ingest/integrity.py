"""Integrity of a compressed file: how much of its decompressed stream is verified good.

A compressed stream is a series of *members*: gzip members, bz2 streams, zstd frames. A member's
check (gzip CRC-32 and length, bz2 block and stream CRCs, zstd's content checksum when the
writer stored one) runs only at its end, so a member damaged in the middle decodes plausible
garbage for as long as the deflate/bzip2/zstd syntax happens to survive, and only then fails.
Documents split from that garbage must not be kept.

``verify`` is a first, decompress-only pass over the file: each member is decompressed into
nothing but a byte count; when its check passes, the decompressed offset reached becomes the
*verified prefix*. The first member that fails (or a stream that ends inside a member) stops the
pass. Ingestion then splits documents in a second pass as before and quarantines every document
that is not entirely inside the verified prefix as ``ingest:corrupt_compression`` (one row per
document, each bounded by ``max_document_bytes``), naming the member and the offset.

Trade-off: the file is read and decompressed twice (decompression is cheap next to splitting,
decoding and filtering; for a remote file it is a second download). The alternative, holding
each member's documents until its check passes, needs memory or disk for a whole member, and a
single-member gzip of many GB is the common case; two passes keep memory at one chunk.
A file cut off inside a member (an incomplete download) has no failed check, just none:
by default that member's documents are not trusted either (``IngestConfig.keep_truncated_member``
keeps them, the usual choice when truncation is the only damage expected). The unit
of trust is the member: damage anywhere in a single-member file quarantines every document of
the file (no document of it can be told apart from garbage), while a multi-member file keeps the
members before the damaged one. Members after a damaged one are lost with it: the decompressor
cannot find the next member's start in damaged data. Zero bytes after the last gzip member are
padding (as the ``gzip`` module reads them), not damage.
"""
from __future__ import annotations

import bz2
import zlib
from typing import Callable, NamedTuple

import zstandard

from common import storage
from pipelines.ingest.text_stream import GuardedRaw

IN_CHUNK = 1 << 16
OUT_CHUNK = 1 << 20  # decompressed bytes per step, so a "bomb" never sits in memory
UNITS = {"gzip": "gzip member", "bz2": "bz2 stream", "zstd": "zstd frame"}


class Verified(NamedTuple):
    end: int | None  # decompressed offset up to which every member passed its check; None: all
    members: int  # members that passed
    error: str  # "" or which member failed and how

    def covers(self, stop: int) -> bool:
        """Whether decompressed bytes ``[..., stop)`` all lie in the verified prefix."""
        return self.end is None or stop <= self.end

    def describe(self) -> str:
        return f"{self.error}; verified data ends at decompressed byte {self.end}"


ALL_GOOD = Verified(None, 0, "")


def verify(path: str, compression: str | None, *, keep_truncated: bool = False) -> Verified:
    """Decompress ``path`` without keeping anything; where its verified prefix ends.

    A member cut off by the end of the file cannot run its check: with ``keep_truncated`` its
    data counts as verified (the second pass still stops at the cut), else it does not.
    A read failure of the file itself raises ``text_stream.StorageError`` (not damage).
    """
    if compression is None:
        return ALL_GOOD
    new, errors = _DECOMPRESSORS[compression]
    unit = UNITS[compression]
    good = total = members = 0
    d = None
    with storage.open_input(path) as f:
        raw = GuardedRaw(f)
        while data := raw.read(IN_CHUNK):
            while data:
                if d is None:
                    if compression == "gzip":
                        data = data.lstrip(b"\x00")  # padding between or after members
                        if not data:
                            break
                    d = new()
                try:
                    total += _drain(d, data, compression)
                except errors as exc:
                    return Verified(good, members, f"{unit} {members + 1} failed its check "
                                    f"({type(exc).__name__}: {exc})")
                if not d.eof:
                    break
                members += 1
                good = total
                data, d = d.unused_data, None
    if d is not None and not keep_truncated:
        return Verified(good, members, f"{unit} {members + 1} is truncated (the file ends inside it)")
    return Verified(None, members, "")


def _drain(d, data: bytes, compression: str) -> int:
    """Feed ``data`` to decompressor ``d``; the number of bytes it produced."""
    if compression == "zstd":
        return len(d.decompress(data))
    n = len(d.decompress(data, OUT_CHUNK))
    if compression == "gzip":
        while d.unconsumed_tail and not d.eof:
            n += len(d.decompress(d.unconsumed_tail, OUT_CHUNK))
    else:
        while not d.eof and not d.needs_input:
            n += len(d.decompress(b"", OUT_CHUNK))
    return n


_DECOMPRESSORS: dict[str, tuple[Callable, tuple[type[BaseException], ...]]] = {
    "gzip": (lambda: zlib.decompressobj(31), (zlib.error,)),
    "bz2": (bz2.BZ2Decompressor, (OSError, EOFError, ValueError)),
    "zstd": (lambda: zstandard.ZstdDecompressor().decompressobj(), (zstandard.ZstdError,)),
}
