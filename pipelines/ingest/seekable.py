"""Seekable zstd: one large ``.zst`` text/JSONL file read as several tasks, split by its frames.

A zstd file is a series of independent frames, but where each one starts is only known by
decoding everything before it. The seekable format (facebook/zstd ``contrib/seekable_format``,
v0.1.0; written by ``t2sz``, ``zstd-seekable``, pyzstd's ``SeekableZstdFile``) adds the index: a
final skippable frame (magic ``0x184D2A5E``, ``Frame_Size``) holding one entry per frame
(``Compressed_Size``, ``Decompressed_Size``, an optional checksum) and a 9-byte footer
(``Number_Of_Frames``, ``Seek_Table_Descriptor``, magic ``0x8F92EAB1``) that ends the file.
``seek_table`` reads it in one ranged read of the last ``TAIL_BYTES`` (a second one only for a
table larger than that, about 5,000 frames) and trusts it only when it is consistent, as
pyzstd's reader does: reserved descriptor bits clear, ``Frame_Size`` matching the entries, and
the frames exactly filling the file before the table. Anything else reads as "no seek table".

**What a task owns.** The planner knows only the compressed size from the listing, so a task is a
byte range ``[start, end)`` of the compressed file (as a Parquet task is, ``parquet``). It owns
the frames whose first byte lies in its range and, in the decompressed stream, the documents whose
first byte lies in those frames' span ``[D_start, D_end)``. It reads the seek table itself (no
metadata call on the driver), then streams from its first frame (``members.MemberStream``,
every frame checked, its size held to the table's), and reads on into later frames until its
last document ends, like a byte range of a plain file reads on past ``end``. Ids are the
decompressed offsets a whole-file read gives.

**Entering in the middle.** Whether the first bytes of a task's frames start a line, and in
``blank_line`` mode whether that line starts a document, depends on the bytes just before
``D_start``: the task decompresses the frame before its first one (one ranged read; further back
only while those bytes are whitespace without a line end) and looks at the line there
(``text_stream.line_before``). A UTF-16/32 file (a byte-order mark at decompressed byte 0,
looked up by decoding the first block of the first frame) is transcoded whole by the task
owning that frame, as for a plain file. A frame over ``MAX_FRAME_BYTES`` decompressed is never
held whole: such a file is read as one stream instead.

**Cost.** Bytes read twice, per task boundary: the table's tail and the first frame's start (64
KiB each), the look-back frame, and the rest of the frame in which the previous task's last
document ends (it must finish that frame for its check). With 1 MiB frames (about 200 KB
compressed) that is about 0.5 MB a boundary: under 1% of a 64 MiB task, but 1.4x the file for a
4 MB file cut in 4 (measured), so the planner's ``split_bytes`` should stay well above the
frame size. A whole-file read reads every byte once, the table included.

**Without a seek table** (a plain one-frame file, or frames from ``zstd -B``/pzstd without an
index), gzip and bz2: one task per file. Their members cannot be found without decompressing
everything before them (a deflate stream cannot be entered at an arbitrary bit; a bz2 block
magic can occur inside data, so block-scanning readers such as ``lbzip2`` verify by decoding;
indexed_gzip and rapidgzip build an index by a full pass first). For a ``.zst`` the planner cannot
tell beforehand, so every task of a large ``.zst`` reads the table; without one, the task at byte
0 reads the whole file and the others yield nothing (their cost: one tail read each).

**Damage.** A task trusts its own frames: a damaged frame quarantines its documents and the rest
of that task's documents (``integrity``), while later tasks, which find their frames through the
seek table, read theirs. A task whose look-back frame is damaged cannot tell where its first
document starts; it reads nothing and reports its whole span as one
``ingest:corrupt_compression`` row. So a damaged seekable file split into tasks keeps more than a
whole-file read, which stops at the first damaged frame. The table's optional per-frame checksums
(XXH64) are not checked: the frames carry their own zstd checksums, and no XXH64 ships here.
"""
from __future__ import annotations

import io
import struct
from typing import Iterator, NamedTuple

import zstandard

from common import storage
from pipelines.config import IngestConfig
from pipelines.ingest.encodings import bom_codec
from pipelines.ingest.listed import ListedFile, read_exact
from pipelines.ingest.members import DamagedStream, MemberStream
from pipelines.ingest.splitters import Row
from pipelines.ingest.streams import Entry, split_stream, stream_rows
from pipelines.ingest.text_stream import StorageError, line_before

SKIPPABLE_MAGIC = 0x184D2A5E
SEEKABLE_MAGIC = 0x8F92EAB1
_FOOTER = struct.Struct("<IBI")  # Number_Of_Frames, Seek_Table_Descriptor, Seekable_Magic_Number
_CHECKSUM_FLAG, _RESERVED = 0x80, 0x7C
TAIL_BYTES = 1 << 16
# Compressed bytes read to decode the first block of the first frame (for the byte-order mark).
HEAD_BYTES = 1 << 16
MAX_FRAME_BYTES = 64 << 20


class Frame(NamedTuple):
    index: int
    start: int  # compressed offset
    size: int  # compressed bytes
    d_start: int  # decompressed offset
    d_size: int  # decompressed bytes

    @property
    def d_end(self) -> int:
        return self.d_start + self.d_size


def seek_table(uri: str, size: int) -> list[Frame] | None:
    """The frames of a seekable zstd file of ``size`` bytes, or None without a valid seek table."""
    if size < _FOOTER.size + 8:
        return None
    tail = read_exact(uri, max(0, size - TAIL_BYTES), size, size)
    count, descriptor, magic = _FOOTER.unpack(tail[-_FOOTER.size:])
    if magic != SEEKABLE_MAGIC or descriptor & _RESERVED:
        return None
    entry = 12 if descriptor & _CHECKSUM_FLAG else 8
    table = 8 + count * entry + _FOOTER.size
    if table > size:
        return None
    if table > len(tail):
        tail = read_exact(uri, size - table, size - len(tail), size) + tail
    frame = tail[len(tail) - table:]
    skippable, frame_size = struct.unpack_from("<II", frame)
    if skippable != SKIPPABLE_MAGIC or frame_size != table - 8:
        return None
    frames, c, d = [], 0, 0
    for i, fields in enumerate(struct.iter_unpack("<III" if entry == 12 else "<II", frame[8:table - _FOOTER.size])):
        frames.append(Frame(i, c, fields[0], d, fields[1]))
        c, d = c + fields[0], d + fields[1]
    return frames if c == size - table else None


def seekable_rows(path: str, kind: str, *, cfg: IngestConfig, start: int, end: int | None, name: str,
                  size: int | None) -> Iterator[Row]:
    """Rows of the documents owned by the compressed byte range ``[start, end)`` of a ``.zst``
    file (module docstring); without a seek table the range at 0 reads the whole file."""
    if size is None:  # a direct call without the listing's size (the planner always passes it)
        size = storage.size(path)
        if size is None:
            raise StorageError(f"{path}: no such file")
    frames = seek_table(path, size)
    if frames is None or any(f.d_size > MAX_FRAME_BYTES for f in frames):
        if start == 0:
            yield from stream_rows(path, "zstd", kind, cfg=cfg, start=0, end=None, name=name, size=size)
        return
    stop = size if end is None else end
    owned = [f for f in frames if start <= f.start < stop]
    if not owned or owned[0].d_start == owned[-1].d_end:
        return
    first, d_end = owned[0], owned[-1].d_end
    entry = None
    if first.d_start > 0:
        if bom_codec(_head(path, frames, size)):
            return  # a UTF-16/32 file is transcoded whole by the task owning its first frame
        try:
            entry = _look_back(path, frames, first, size, max_line=cfg.max_document_bytes)
        except DamagedStream as exc:
            yield Row(f"{name}:{first.d_start}", "", "ingest:corrupt_compression",
                      f"{exc}; it lies before zstd frames {first.index + 1}..{owned[-1].index + 1} (decompressed "
                      f"bytes {first.d_start}..{d_end}), whose first document cannot be found: none of them is read")
            return
    data_end = frames[-1].start + frames[-1].size
    with storage.open_input(path) as f:
        raw = ListedFile(f, path, size)
        raw.seek(first.start)
        stream = MemberStream(raw, "zstd", offset=first.d_start, limit=data_end - first.start,
                              first=first.index + 1, ends=[f.d_end for f in frames[first.index:]])
        yield from split_stream(stream, kind, cfg=cfg, name=name, end=d_end, entry=entry, members=stream)


def _decoded(path: str, frame: Frame, size: int) -> bytes:
    """One whole frame, decompressed and checked (its size held to the seek table's)."""
    data = read_exact(path, frame.start, frame.start + frame.size, size)
    stream = MemberStream(io.BytesIO(data), "zstd", offset=frame.d_start, first=frame.index + 1,
                          ends=[frame.d_end])
    return b"".join(iter(lambda: stream.read(1 << 20), b""))


def _look_back(path: str, frames: list[Frame], first: Frame, size: int, *, max_line: int) -> Entry:
    """What lies just before ``first``: the last byte and the line holding it."""
    def back() -> Iterator[int]:
        for frame in reversed(frames[:first.index]):
            if frame.d_size:
                yield from reversed(_decoded(path, frame, size))

    last, blank, length = line_before(back(), max_line=max_line)
    return Entry(first.d_start, last, blank, length)


def _head(path: str, frames: list[Frame], size: int, n: int = 4) -> bytes:
    """The first ``n`` decompressed bytes of the file (b"" when they cannot be decoded: the task
    owning the first frame reports the damage): the start of the first frame, in one ranged read
    that holds its first block in all but odd cases (then the whole frame)."""
    frame = next((f for f in frames if f.d_size), None)
    if frame is None:
        return b""
    for want in (min(frame.size, HEAD_BYTES), frame.size):
        data = read_exact(path, frame.start, frame.start + want, size)
        try:
            out = zstandard.ZstdDecompressor().decompressobj().decompress(data)
        except zstandard.ZstdError:
            return b""
        if len(out) >= n:
            break
    return out[:n]
