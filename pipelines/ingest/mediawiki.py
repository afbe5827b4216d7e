"""MediaWiki export XML (Wikipedia's ``*-pages-articles*.xml.bz2`` dumps): one document per article.

**Format.** ``<mediawiki><siteinfo>…<namespaces>…</siteinfo><page><title/><ns/><id/>
<redirect title=…/>?<revision>…<text xml:space="preserve">WIKITEXT</text></revision></page>…
</mediawiki>`` (schema export-0.10/0.11; older ones read the same). A file is read as this format
(``documents.file_kind``) when its name without the compression suffix contains
``pages-articles`` or ``pages-meta`` and ends in ``.xml`` (or ``.xml-p{first}p{last}``, the parts
of a large wiki's dump); any other ``.xml`` file is read as this format when its first bytes show
a ``<mediawiki`` root (``is_mediawiki``), else as plain text.

**Pages.** ``PageReader`` frames the decompressed stream into pages at the byte level: ``<page>``
and ``</page>`` can only be markup in an export (in XML text a ``<`` is always ``&lt;``; exports
have no CDATA), so each page is cut out and parsed on its own (``xml.etree.ElementTree``), its
tree dropped after its row is made. Memory is one page (at most ``max_document_bytes``; a larger
page is skipped while it is read, keeping a prefix: ``ingest:oversize``) plus a read chunk. What a
page becomes:

* a page of namespace 0 that is not a redirect: a document, its text the title, a blank line and
  the article's prose (``wikitext.to_text``); its ``url`` the article's URL (from the siteinfo's
  ``<base>``). With several revisions (``pages-meta-history``) the last one, the newest, is read
  (but the page with all its revisions is the unit held in memory: a history page larger than
  ``max_document_bytes`` is ``ingest:oversize``);
* ``ingest:mediawiki_redirect`` (a ``<redirect>`` element, or wikitext starting ``#REDIRECT``) and
  ``ingest:mediawiki_namespace`` (namespace ≠ 0: talk, user, template, file, category, project
  pages): one row each, empty text, the reason's details in ``detail``, counted like WARC's
  ``ingest:warc_skipped``;
* ``ingest:empty_document``: a page whose wikitext converts to nothing (the wikitext's start is
  kept for the quarantine); ``ingest:unsupported_payload``: a revision whose content model is
  not wikitext;
* ``ingest:bad_mediawiki``: a page that is not well-formed XML (``ingest:invalid_utf8`` when it
  is not UTF-8), has no page id, or whose wikitext the tokenizer rejects; a ``<page>`` cut off by
  the next ``<page>`` or by the end of an uncompressed file; anything but whitespace between pages;
  a file that does not start with a ``<mediawiki>`` header. Each is one row and reading goes on with
  the next page: one broken page never costs its neighbours.

**Ids.** A page's row is ``"{name}:page{ID}"`` with the page id of the dump (``<page><id>``; like
Parquet's ``"{name}:row{N}"``). Page ids are unique within a wiki and stable across dumps and
compressions, and a byte range of a multistream dump (``multistream``) cannot know the
decompressed offset of its pages, so the page id is what keeps a page's id the same whether the
dump is read whole or split. Rows that are not one page (a fragment between pages, a damaged
stream's partial page with no readable id) use the byte offset in the decompressed stream, as
every other format does: ``"{name}:{offset}"`` for a read from the start of the file, and
``"{name}:{C}+{offset}"`` for one entered at compressed byte ``C`` (a task's range, or the next
bz2 stream after a damaged one), the offset counted from there.
"""
from __future__ import annotations

import re
import urllib.parse
import xml.etree.ElementTree as ET
from typing import BinaryIO, Iterator, NamedTuple

from pipelines.ingest.splitters import Row, quarantine_text
from pipelines.ingest.text_stream import CHUNK, QUARANTINE_BYTES, read_some
from pipelines.ingest.wikinames import CANONICAL_NAMESPACES, NAMESPACE_ALIASES
from pipelines.ingest.wikitext import LinkRules, to_text

PAGE_OPEN, PAGE_CLOSE = b"<page>", b"</page>"
# Names of the dump files (without the compression suffix): "enwiki-20240601-pages-articles.xml",
# "dewiki-20240601-pages-articles-multistream3.xml-p1p297012", "…-pages-meta-current.xml".
DUMP_NAME = re.compile(r"pages-(?:articles|meta).*\.xml(?:-p\d+p\d+)?$", re.I)
SNIFF_BYTES = 1 << 16
_ROOT = re.compile(rb"(?:\xef\xbb\xbf)?\s*(?:<\?xml[^>]*\?>\s*)?(?:<!--.*?-->\s*)*<mediawiki[\s>]", re.S)
_PAGE_ID = re.compile(rb"<id>\s*(\d+)\s*</id>")
_REDIRECT = re.compile(r"\s*#\s*redirect\b", re.I)
_BETWEEN = re.compile(rb"\s*(?:</mediawiki>\s*)?")


def is_dump_name(base_name: str) -> bool:
    """Whether a file name (without its compression suffix) is a Wikipedia dump's."""
    return bool(DUMP_NAME.search(base_name))


def is_mediawiki(head: bytes) -> bool:
    """Whether the first bytes of an XML file show a ``<mediawiki`` root element."""
    return bool(_ROOT.match(head[:SNIFF_BYTES]))


class Site(NamedTuple):
    """What a dump's ``<siteinfo>`` says that pages need: namespace names and the article URL."""
    namespaces: dict[int, str]  # number → local name
    base: str  # article URL prefix ("https://en.wikipedia.org/wiki/"), or ""
    rules: LinkRules

    @classmethod
    def parse(cls, header: bytes) -> Site:
        """From the bytes before the first page; the canonical names where the header has none."""
        local: dict[int, str] = {}
        base = ""
        start, end = header.find(b"<siteinfo"), header.find(b"</siteinfo>")
        if 0 <= start < end:
            info = ET.fromstring(header[start:end + len(b"</siteinfo>")])  # ParseError: the caller's
            for ns in info.iter("namespace"):
                try:
                    local[int(ns.get("key", ""))] = (ns.text or "").strip()
                except ValueError:
                    continue
            page = (info.findtext("base") or "").strip()
            base = page[:page.find("/wiki/") + 6] if "/wiki/" in page else ""
        names: dict[int, list[str]] = {}
        for key, canonical in CANONICAL_NAMESPACES.items():
            names[key] = [canonical, *NAMESPACE_ALIASES.get(key, ())]
        for key, name in local.items():
            names.setdefault(key, []).append(name)
        return cls({**CANONICAL_NAMESPACES, **local}, base, LinkRules(names))

    def url(self, title: str) -> str:
        if not self.base:
            return ""
        return self.base + urllib.parse.quote(title.replace(" ", "_"), safe=";:@$!*(),/~'")

    def namespace_of(self, title: str) -> int:
        """A page's namespace from its title (exports older than 0.5 have no ``<ns>``)."""
        prefix, colon, _ = title.partition(":")
        if colon:
            for key, name in self.namespaces.items():
                if key and name and name.casefold() == prefix.strip().casefold():
                    return key
        return 0


class PageReader:
    """Rows of the pages of one decompressed stream (module docstring); ``row_end`` as for the
    splitters (the stream offset just past the last row's bytes) and ``partial`` for
    ``integrity.released``."""

    def __init__(self, name: str, *, max_document_bytes: int, site: Site | None = None, origin: int = 0):
        self.name, self.cap = name, max_document_bytes
        self.site = site  # None: the stream starts with the <mediawiki> header, which sets it
        self.origin = origin  # the compressed offset this stream was entered at (0: the file's start)
        self.row_end = 0
        self._buf, self._base, self._at = b"", 0, 0  # unread bytes, stream offset of _buf[0], cursor
        self._page_start: int | None = None  # stream offset of the page being read

    def loose_id(self, offset: int) -> str:
        """The id of a row that is not one page."""
        return f"{self.name}:{self._suffix(offset)}"

    def _suffix(self, offset: int) -> str:
        return str(offset) if self.origin == 0 else f"{self.origin}+{offset}"

    def partial(self) -> tuple[str, bytes, int]:
        """``(id suffix, prefix, good end)`` of what was in progress when the stream failed: the
        page being read (its page id when its start shows one), else the bytes after the last row."""
        consumed = self._base + self._at
        if self._page_start is None:
            return self._suffix(consumed), self._buf[self._at:self._at + QUARANTINE_BYTES], self._base + len(self._buf)
        data = self._buf[self._page_start - self._base:][:QUARANTINE_BYTES]
        found = _PAGE_ID.search(data)
        return (f"page{int(found.group(1))}" if found else self._suffix(self._page_start)), data, \
            self._base + len(self._buf)

    # ----------------------------------------------------------------------------------------
    def _fill(self, stream: BinaryIO) -> bool:
        more = read_some(stream, CHUNK)
        if not more:
            return False
        self._buf, self._base = self._buf[self._at:] + more, self._base + self._at
        self._at = 0
        return True

    def rows(self, stream: BinaryIO, head: bytes = b"") -> Iterator[Row]:
        self._buf = head
        if self.site is None:
            row = self._header(stream)
            if row is not None:
                self.row_end = self._base + len(self._buf)
                yield row
                return
        while True:
            start = self._buf.find(PAGE_OPEN, self._at)
            if start >= 0:
                yield from self._between(self._at, start)
                self._at = start
                yield from self._page(stream)
                continue
            # No page starts in the buffer: what is there stays until it is judged (it may be a
            # "<pa" cut by the chunk, or the closing tag), unless it grows past a page's limit.
            if len(self._buf) - self._at > self.cap:
                keep = len(self._buf) - len(PAGE_OPEN) + 1
                yield from self._between(self._at, keep)
                self._at = keep
            if not self._fill(stream):
                yield from self._between(self._at, len(self._buf))
                return

    def _header(self, stream: BinaryIO) -> Row | None:
        """Read the header (up to ``</siteinfo>``, or to the first page when there is no siteinfo)
        and parse it; a row when this is no export. The header is parsed as soon as it is whole,
        so damage in the stream right after it (a multistream dump's first page stream) leaves
        the namespace names known and the reader can go on after the damaged stream."""
        close = b"</siteinfo>"
        while True:
            end = self._buf.find(close)
            at = self._buf.find(PAGE_OPEN, 0, end if end >= 0 else len(self._buf))
            if at >= 0 or end >= 0 or len(self._buf) > self.cap or not self._fill(stream):
                break
        size = at if at >= 0 else (end + len(close) if end >= 0 else len(self._buf))
        header = self._buf[:size]
        if not is_mediawiki(header):
            return Row(self.loose_id(0), quarantine_text(header), "ingest:bad_mediawiki",
                       "no <mediawiki> export header at the start of the file; the file is not read")
        if at < 0 and end < 0 and len(self._buf) > self.cap:
            return Row(self.loose_id(0), quarantine_text(header), "ingest:bad_mediawiki",
                       f"no <page> within the first {self.cap} bytes (max_document_bytes); the file is not read")
        try:
            self.site = Site.parse(header)
        except ET.ParseError as exc:
            return Row(self.loose_id(0), quarantine_text(header), "ingest:bad_mediawiki",
                       f"<siteinfo> is not well-formed XML ({exc}); the file is not read")
        self._at = size
        return None

    def _between(self, lo: int, hi: int) -> Iterator[Row]:
        """Bytes between pages: whitespace and the closing tag; anything else is one row."""
        gap = self._buf[lo:hi]
        if not gap or _BETWEEN.fullmatch(gap):
            return
        self.row_end = self._base + hi
        yield Row(self.loose_id(self._base + lo), quarantine_text(gap.strip()), "ingest:bad_mediawiki",
                  f"{hi - lo} bytes between pages that are not a <page>")

    def _page(self, stream: BinaryIO) -> Iterator[Row]:
        """The page starting at the cursor: its row, the cursor moved past it."""
        start = self._page_start = self._base + self._at
        scanned = len(PAGE_OPEN)  # bytes of the page searched for its end (or the next start)
        while True:
            at = self._at
            end = self._buf.find(PAGE_CLOSE, at + scanned)
            cut = self._buf.find(PAGE_OPEN, at + scanned, end if end >= 0 else len(self._buf))
            if cut >= 0:  # a new page before this one closed: this one is broken
                self._at, self._page_start = cut, None
                self.row_end = self._base + cut
                yield self._broken(self._buf[at:cut], start, "a <page> without </page> before the next <page>")
                return
            if end >= 0:
                self._at, self._page_start = end + len(PAGE_CLOSE), None
                self.row_end = self._base + self._at
                if self._at - at > self.cap:
                    yield self._oversize_row(self._buf[at:at + QUARANTINE_BYTES], start)
                else:
                    yield self.page_row(self._buf[at:self._at], start)
                return
            if len(self._buf) - at > self.cap:
                yield self._oversize(stream, start)
                return
            scanned = max(scanned, len(self._buf) - at - len(PAGE_CLOSE) + 1)
            if not self._fill(stream):
                self._at, self._page_start = len(self._buf), None
                self.row_end = self._base + self._at
                yield self._broken(self._buf[at:], start, "the stream ends inside this page")
                return

    def _oversize(self, stream: BinaryIO, start: int) -> Row:
        """Skip a page larger than ``cap`` without holding it; its row keeps a prefix."""
        prefix = self._buf[self._at:self._at + QUARANTINE_BYTES]
        while True:
            end = self._buf.find(PAGE_CLOSE, self._at)
            if end >= 0:
                self._at = end + len(PAGE_CLOSE)
                break
            self._at = max(self._at, len(self._buf) - len(PAGE_CLOSE) + 1)
            if not self._fill(stream):
                self._at = len(self._buf)
                break
        self._page_start = None
        self.row_end = self._base + self._at
        return self._oversize_row(prefix, start)

    def _oversize_row(self, prefix: bytes, start: int) -> Row:
        found = _PAGE_ID.search(prefix)
        rid = f"{self.name}:page{int(found.group(1))}" if found else self.loose_id(start)
        return Row(rid, quarantine_text(prefix), "ingest:oversize",
                   f"page of {self.row_end - start} bytes > max_document_bytes={self.cap}")

    def _broken(self, data: bytes, start: int, why: str) -> Row:
        found = _PAGE_ID.search(data[:QUARANTINE_BYTES])
        rid = f"{self.name}:page{int(found.group(1))}" if found else self.loose_id(start)
        return Row(rid, quarantine_text(data), "ingest:bad_mediawiki", f"page at byte {start}: {why}")

    def page_row(self, data: bytes, start: int) -> Row:
        """One ``<page>…</page>`` → its row."""
        try:
            page = ET.fromstring(data)
        except ET.ParseError as exc:
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as bad:
                found = _PAGE_ID.search(data[:QUARANTINE_BYTES])
                rid = f"{self.name}:page{int(found.group(1))}" if found else self.loose_id(start)
                return Row(rid, quarantine_text(data), "ingest:invalid_utf8",
                           f"page at byte {start}: {bad.reason} at byte {start + bad.start}")
            return self._broken(data, start, f"not well-formed XML ({exc})")
        page_id = (page.findtext("id") or "").strip()
        if not page_id.isdigit():
            return Row(self.loose_id(start), quarantine_text(data), "ingest:bad_mediawiki",
                       f"page at byte {start}: no page id")
        rid, title = f"{self.name}:page{int(page_id)}", (page.findtext("title") or "").strip()
        site = self.site
        url = site.url(title)
        redirect = page.find("redirect")
        if redirect is not None:
            return Row(rid, "", "ingest:mediawiki_redirect", f"{title!r} redirects to {redirect.get('title', '')!r}",
                       url=url)
        ns_text = (page.findtext("ns") or "").strip()
        ns = int(ns_text) if ns_text.lstrip("-").isdigit() else site.namespace_of(title)
        if ns != 0:
            return Row(rid, "", "ingest:mediawiki_namespace",
                       f"namespace {ns} ({site.namespaces.get(ns, '?')}): {title!r}", url=url)
        revisions = page.findall("revision")
        revision = revisions[-1] if revisions else None
        model = (revision.findtext("model") or "wikitext").strip() if revision is not None else "wikitext"
        if model != "wikitext":
            return Row(rid, "", "ingest:unsupported_payload", f"{title!r}: content model {model}", url=url)
        wikitext = (revision.findtext("text") or "") if revision is not None else ""
        if _REDIRECT.match(wikitext):
            return Row(rid, "", "ingest:mediawiki_redirect", f"{title!r} is a #REDIRECT without <redirect>", url=url)
        try:
            body = to_text(wikitext, site.rules)
        except Exception as exc:  # noqa: BLE001 (a tokenizer failure is bad input, never fatal)
            return Row(rid, wikitext[:QUARANTINE_BYTES], "ingest:bad_mediawiki",
                       f"{title!r}: the wikitext could not be converted ({type(exc).__name__}: {exc})", url=url)
        if not body:
            return Row(rid, wikitext[:QUARANTINE_BYTES], "ingest:empty_document",
                       f"{title!r}: its wikitext converts to no text", url=url)
        return Row(rid, f"{title}\n\n{body}", url=url, encoding="utf-8")
