"""Integrity of compressed input in one pass: a document's row is released only once every member
it touches has passed its check.

A compressed stream is a series of *members* (gzip members, bz2 streams, zstd frames;
``members.MemberStream``). A member's check (gzip CRC-32 and length, bz2 CRCs, zstd's content
checksum when the writer stored one) runs only at its end, so a member damaged in the middle
decodes plausible garbage for as long as the deflate/bzip2/zstd syntax happens to survive, and
only then fails. Documents split from that garbage must not be kept.

``released`` sits between the splitter and the caller. The file is read once: the splitter
works on the decompressed bytes as they come, and each row it produces waits, with the stream
offset where its document ends, in ``spill.PendingRows`` until the stream's *verified* offset
(the end of the last member that passed its check) reaches that end. A multi-member file
releases its rows member by member; a single-member file holds them all until its last byte, in
memory up to ``PENDING_BYTES`` and on local disk beyond, so a 50 GB single-member gzip never holds
its documents in memory. When the input ends, every member has been checked and the rest is
released; a reader that stops early (a byte range that ended, a WARC record it cannot parse) first
decompresses the rest of its current member so the member's check runs.

When a member fails (``DamagedStream``), every waiting row becomes ``ingest:corrupt_compression``
(one row per document, naming the member, the verified offset and the document's end), followed
by one more such row for the document in progress; the stream ends there, so the documents of
later members are lost with it (the decompressor cannot find the next member's start in damaged
data). A file cut off inside a member (an incomplete download) has no failed check, just none: by
default its waiting rows are quarantined the same way, and ``IngestConfig.keep_truncated_member``
releases them instead (the usual choice when truncation is the only damage expected). The unit
of trust is the member: damage anywhere in a single-member file quarantines every document of
the file (no document of it can be told apart from garbage), while a multi-member file keeps the
members before the damaged one. Zero bytes after the last gzip member are padding, not damage.

Trade-off: the previous design read and decompressed a compressed file twice (a decompress-only
pass for the verified prefix, then the split), which for a remote file is a second download.
Holding rows instead costs local disk for a single-member file (about its kept text) and one
write and read of it; a file of many members, the common case for large corpora (WARC, seekable
zstd, pigz/pbzip2 output), holds only one member's rows at a time.

``verify`` is the decompress-only check on its own, kept as a diagnostic.
"""
from __future__ import annotations

from typing import Callable, Iterator, NamedTuple

from common import storage
from pipelines.ingest.listed import ListedFile
from pipelines.ingest.members import UNITS, DamagedStream, MemberStream
from pipelines.ingest.spill import PendingRows
from pipelines.ingest.splitters import Row, quarantine_text
from pipelines.ingest.text_stream import QUARANTINE_BYTES

__all__ = ["PENDING_BYTES", "UNITS", "Verified", "released", "verify"]

# Approximate bytes of rows held in memory while they wait for their member's check; beyond it
# they go to a temporary file.
PENDING_BYTES = 64 << 20


def released(name: str, rows: Iterator[Row], source, members: MemberStream | None,
             limit: Callable[[], int | None], partial: Callable[[], tuple[int | str, bytes, int]], *,
             keep_truncated: bool) -> Iterator[Row]:
    """``rows`` in order, each released once the stream is verified past ``source.row_end`` (its
    end, read right after the row comes out). ``limit()`` is the verified offset in the offsets
    documents are split in; ``partial()`` the document in progress when the stream fails
    (``(start, prefix, good end)``; ``start`` is the id's suffix: an offset, or ``mediawiki``'s
    page id). ``members`` is None for an uncompressed file: nothing to wait for.
    """
    if members is None:
        yield from rows
        return
    pending = PendingRows(PENDING_BYTES)
    try:
        try:
            for row in rows:
                pending.add(row, source.row_end)
                yield from (r for r, _ in pending.take(limit()))
        except DamagedStream as exc:
            yield from _judged(pending, exc, members, limit(), keep_truncated)
            start, prefix, good = partial()
            yield Row(f"{name}:{start}", quarantine_text(prefix), "ingest:corrupt_compression",
                      f"{type(exc).__name__}: {exc} (good data ends at decompressed byte {good})")
            return
        if len(pending):  # the reader stopped early: let the member holding the last rows finish
            try:
                members.finish_member()
            except DamagedStream as exc:
                yield from _judged(pending, exc, members, limit(), keep_truncated)
                return
        yield from (r for r, _ in pending.take(None))
    finally:
        pending.close()


def _judged(pending: PendingRows, exc: DamagedStream, members: MemberStream, stop: int | None,
            keep_truncated: bool) -> Iterator[Row]:
    """The waiting rows once their member failed: quarantined, or kept when the only fault is a
    truncated last member and ``keep_truncated`` trusts it."""
    trusted = exc.truncated and keep_truncated
    for row, end in pending.take(None):
        yield row if trusted else _quarantined(row, end, members.failure, stop)


def _quarantined(row: Row, end: int, failure: str, stop: int | None) -> Row:
    was = f"; it was {row.reason}" if row.reason else ""
    return Row(row.id, row.text[:QUARANTINE_BYTES], "ingest:corrupt_compression",
               f"{failure}; verified data ends at byte {stop}, this document at byte {end}{was}", url=row.url)


# ---------------------------------------------------------------------------------------------
# The check on its own
# ---------------------------------------------------------------------------------------------
class Verified(NamedTuple):
    end: int | None  # decompressed offset up to which every member passed its check; None: all
    members: int  # members that passed
    error: str  # "" or which member failed and how


def verify(path: str, compression: str | None, *, keep_truncated: bool = False,
           size: int | None = None) -> Verified:
    """Decompress ``path`` keeping nothing; where its verified prefix ends. A member cut off by the
    end of the file counts as verified with ``keep_truncated``. A read failure of the file itself
    (or a size other than the listed ``size``) raises ``StorageError``: that is not damage."""
    if compression is None:
        return Verified(None, 0, "")
    with storage.open_input(path) as f:
        stream = MemberStream(ListedFile(f, path, size), compression)
        try:
            while stream.read(1 << 20):
                pass
        except DamagedStream as exc:
            if exc.truncated and keep_truncated:
                return Verified(None, stream.members, "")
            return Verified(stream.verified, stream.members, stream.failure)
    return Verified(None, stream.members, "")
