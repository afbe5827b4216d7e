"""bz2 MediaWiki dumps read stream by stream: multistream splitting, and damage that costs one stream.

Wikipedia's ``*-pages-articles-multistream.xml.bz2`` is a concatenation of independent bz2
streams: the first holds the ``<mediawiki>`` header and ``<siteinfo>``, each of the others about
100 whole ``<page>`` elements, the last the closing tag. Beside it,
``*-pages-articles-multistream-index.txt.bz2`` has one line ``OFFSET:PAGE_ID:TITLE`` per page,
OFFSET being the compressed byte offset of the stream holding the page (the parts of a large
wiki's dump, ``…-multistream3.xml-p1p297012.bz2``, have ``…-multistream-index3.txt-p1p297012.bz2``).

**Planning** (``dataset.plan_reads``). When a dump's index is among the sources (same folder,
``index_name``), a dump larger than ``split_bytes`` is read as several tasks: the planner reads
the index once (``stream_offsets``: streamed, only the distinct offsets kept: 8 bytes per
stream of a hundred pages) and cuts the file at stream starts, each task holding
consecutive streams of about ``split_bytes`` compressed bytes (``plan_ranges``). The index itself
is then not ingested. Without the index (or one that cannot be read or does not fit the file: not
increasing, past the end), a dump is one task, as any bz2 file is: where a bz2 stream starts cannot
be known without decoding what precedes it.

**A task** ``[start, end)`` (stream starts from the index) decompresses exactly its bytes
(``members.MemberStream`` with ``limit``, every stream checked) and frames their pages
(``mediawiki.PageReader``); a task not at byte 0 first reads the header stream (a ranged read of
its first ``HEADER_READ`` bytes, more only for a larger header) for the namespace names and the
site's URL. So every compressed byte is read once, plus the small header stream once per task. Page
ids do not depend on the split (``mediawiki``): the tasks give exactly the rows of a whole-file
read.

**Damage** (whole-file reads too). A bz2 stream that fails its check quarantines the pages
waiting for it (``integrity.released``: those decoded from it, each a row, plus one for the page in
progress); then reading goes on at the next stream: the first ``BZh[1-9]1AY&SY`` (a stream header
and the magic of its first block) after the failed stream's start, before the task's end, which
is verified by decoding it (a false match fails like damage, and the search goes on after it).
Finding it re-reads the damaged stream's bytes, once. So in a multistream dump a damaged stream
costs only its own pages. A stream cut off by the end of the file (or of a task's range) ends the
read there (``keep_truncated_member`` as for any member). When the header stream itself is damaged
or is no ``<mediawiki>`` export, namespace names are unknown: a whole-file read stops after its
row, a task reports its whole range as one row (like a seekable zstd task whose look-back frame is
damaged) and reads nothing. In a row's detail, "bz2 stream N" counts from where that read began:
the file's start, the task's range or the stream found after a damaged one (the ``C`` of the
row ids, ``mediawiki``).

Only files named as dumps are read here (``mediawiki.DUMP_NAME``); an ``.xml.bz2`` recognised by
its content is read by ``streams`` as one series of members, where damage ends the file.
"""
from __future__ import annotations

import bz2
import re
from typing import Iterator

from common import storage
from pipelines.config import IngestConfig
from pipelines.ingest.integrity import released
from pipelines.ingest.listed import ListedFile, read_exact
from pipelines.ingest.mediawiki import PAGE_OPEN, PageReader, Site, is_mediawiki
from pipelines.ingest.members import DamagedStream, MemberStream
from pipelines.ingest.splitters import Row
from pipelines.ingest.text_stream import CHUNK

STREAM_START = re.compile(rb"BZh[1-9]1AY&SY")
MAGIC_BYTES = 10
# First ranged read of the header stream (English Wikipedia's is under 1 KB compressed); doubled
# while the stream is longer, up to HEADER_MAX.
HEADER_READ = 8 << 10
HEADER_MAX = 8 << 20
_DUMP = re.compile(r"^(?P<stem>.*pages-articles-multistream)(?P<part>\d*)\.xml(?P<pages>-p\d+p\d+)?\.bz2$")
_OFFSET = re.compile(rb"^(\d+):", re.M)


class HeaderError(ValueError):
    """The header stream cannot be read (``damaged``) or is not an export header."""

    def __init__(self, message: str, *, damaged: bool):
        super().__init__(message)
        self.damaged = damaged


def index_name(dump: str) -> str | None:
    """The file name of a multistream dump's index, or None for another name."""
    found = _DUMP.match(dump.rsplit("/", 1)[-1])
    if found is None:
        return None
    return f"{found['stem']}-index{found['part']}.txt{found['pages'] or ''}.bz2"


def companions(files: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``{dump: its index}`` for the multistream dumps among ``files`` whose index is also listed."""
    listed = set(files)
    out = {}
    for path in files:
        name = index_name(path)
        if name is not None:
            folder = path.rsplit("/", 1)[0] + "/" if "/" in path else ""
            if folder + name in listed:
                out[path] = folder + name
    return out


def stream_offsets(index: str, size: int | None) -> list[int] | None:
    """The distinct stream offsets of an index file, increasing; None when it is damaged or they
    are not increasing (a storage failure raises ``StorageError`` as any read does)."""
    offsets: list[int] = []
    last, tail = b"", b""
    with storage.open_input(index) as f:
        stream = MemberStream(ListedFile(f, index, size), "bz2")
        try:
            while chunk := stream.read(CHUNK):
                data = tail + chunk
                cut = data.rfind(b"\n") + 1
                data, tail = data[:cut], data[cut:]
                for found in _OFFSET.findall(data):
                    if found != last:
                        offsets.append(int(found))
                        last = found
        except DamagedStream:
            return None
    for found in _OFFSET.findall(tail):
        if found != last:
            offsets.append(int(found))
    if any(b <= a for a, b in zip(offsets, offsets[1:])) or (offsets and offsets[0] <= 0):
        return None
    return offsets


def plan_ranges(offsets: list[int] | None, size: int, split_bytes: int) -> list[tuple[int, int]]:
    """Byte ranges ``[start, end)`` (``end`` -1: the end of the file) of about ``split_bytes``
    compressed bytes, cut at stream starts; one range without usable offsets."""
    if not offsets or offsets[-1] >= size:
        return [(0, -1)]
    bounds = [0]
    for offset in offsets:
        if offset - bounds[-1] >= split_bytes:
            bounds.append(offset)
    return [(a, b) for a, b in zip(bounds, bounds[1:])] + [(bounds[-1], -1)]


def read_header(path: str, size: int | None) -> Site:
    """The site of a dump from its first bz2 stream, read on its own (``HeaderError`` if it cannot be)."""
    d, out, got, want = bz2.BZ2Decompressor(), [], 0, HEADER_READ
    while not d.eof:
        if got >= HEADER_MAX or (size is not None and got >= size):
            raise HeaderError(f"the first bz2 stream does not end within {got} bytes", damaged=True)
        data = read_exact(path, got, got + want, size)
        if not data:
            raise HeaderError("the file ends inside the first bz2 stream", damaged=True)
        got += len(data)
        want *= 2
        try:
            out.append(d.decompress(data))
        except (OSError, EOFError, ValueError) as exc:
            raise HeaderError(f"bz2 stream 1 failed its check ({type(exc).__name__}: {exc})", damaged=True) from None
    header = b"".join(out)
    at = header.find(PAGE_OPEN)
    header = header if at < 0 else header[:at]
    if not is_mediawiki(header):
        raise HeaderError("the first bz2 stream holds no <mediawiki> export header", damaged=False)
    try:
        return Site.parse(header)
    except Exception as exc:  # noqa: BLE001 (ParseError: the header is not well-formed)
        raise HeaderError(f"<siteinfo> is not well-formed XML ({exc})", damaged=False) from None


def next_stream(raw: ListedFile, pos: int, stop: int | None) -> int | None:
    """The offset of the first bz2 stream header at or after ``pos`` (and before ``stop``)."""
    raw.seek(pos)
    tail, base = b"", pos
    while stop is None or base < stop:
        data = raw.read(CHUNK if stop is None else min(CHUNK, stop - base))
        if not data:
            return None
        buf = tail + data
        found = STREAM_START.search(buf)
        if found is not None and (stop is None or base - len(tail) + found.start() < stop):
            return base - len(tail) + found.start()
        tail, base = buf[-(MAGIC_BYTES - 1):], base + len(data)
    return None


def bz2_rows(path: str, *, cfg: IngestConfig, start: int, end: int | None, name: str,
             size: int | None) -> Iterator[Row]:
    """Rows of the pages of a bz2 MediaWiki dump, or of the streams in ``[start, end)`` (module
    docstring)."""
    site = None
    with storage.open_input(path) as f:
        raw = ListedFile(f, path, size)
        if start > 0:
            try:
                site = read_header(path, size)
            except HeaderError as exc:
                span = f"bytes {start}..{end if end is not None else 'the end'}"
                reason = "ingest:corrupt_compression" if exc.damaged else "ingest:bad_mediawiki"
                yield Row(f"{name}:{start}+0", "", reason,
                          f"{exc}: the namespace names are unknown, so the pages of compressed {span} are not read")
                return
            raw.seek(start)
        pos = start
        while True:
            members = MemberStream(raw, "bz2", limit=None if end is None else end - pos)
            reader = PageReader(name, max_document_bytes=cfg.max_document_bytes, site=site, origin=pos)
            yield from released(name, reader.rows(members), reader, members, lambda: members.verified,
                                reader.partial, keep_truncated=cfg.keep_truncated_member)
            if not members.failure or members.truncated or reader.site is None:
                return  # read to the end, cut off (nothing follows), or no header to read pages with
            site = reader.site
            following = next_stream(raw, pos + members.member_start + 1, end)
            if following is None:
                return
            raw.seek(following)
            pos = following
