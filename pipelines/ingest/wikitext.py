"""Wikitext → plain text: the prose of a Wikipedia article as paragraphs separated by blank lines.

The wikitext is tokenised by ``mwparserfromhell``'s C tokenizer and the flat token list is
rendered here in one pass. ``mwparserfromhell.parse`` would first build a node tree, and that
(pure Python) builder is most of its time: rendering the tokens directly is several times faster
than ``parse(text).strip_code()`` (docs/languages.md). Comments and ``<ref>``s are cut out by a regular
expression before tokenising (``_PRESTRIP``): they are much of a real article's bytes. The tokens
are ``mwparserfromhell.parser.tokens`` of the pinned version (0.7.2; the tests pin the output).

What stays and what goes:

* dropped whole: templates (``{{…}}``: infoboxes, navboxes, citations, hatnotes, parser
  functions, ``{{DEFAULTSORT:…}}``), template arguments, comments, tables (``{| … |}`` and HTML
  ``<table>``), ``<ref>`` (with its content) and ``<ref …/>``, ``<references>``, ``<gallery>``,
  ``<math>``/``<chem>`` (LaTeX source is not prose: a formula leaves a gap in its sentence, as in
  the usual Wikipedia extractors), code and preformatted blocks (``<syntaxhighlight>``,
  ``<source>``, ``<pre>``), ``<timeline>``, ``<score>``, ``<imagemap>``, ``<graph>``,
  ``<mapframe>``, ``<templatestyles>``, ``<includeonly>`` and similar;
  behaviour switches (``__TOC__``, ``__NOTOC__``, localised ones);
* links: ``[[target|label]]`` → label, ``[[target]]`` → target, ``[[:Category:X]]`` (a visible
  link) → ``Category:X``; file, media and category links (``[[File:…]]``, ``[[Datei:…]]``,
  ``[[Category:…]]``, …: the names of namespaces 6, -2 and 14 from the dump's siteinfo plus the
  canonical English names and common aliases, ``wikinames``) and interlanguage links
  (``[[fr:Paris]]``) are dropped with their captions; ``[http://x label]`` → label,
  ``[http://x]`` (a numbered link) → nothing, a bare URL stays;
* markup: bold/italic quotes are removed, HTML tags keep their text (``<b>``, ``<span>``,
  ``<sup>``, ``<nowiki>``, ``<poem>``, …), entities are decoded (``&nbsp;`` → a space), Chinese
  variant markup ``-{zh-hans:…;zh-hant:…}-`` keeps its first variant;
* structure: a heading ``== H ==`` becomes the paragraph ``H``; each list item (``*``, ``#``,
  ``:``, ``;``) a paragraph without its marker; lines of one wikitext paragraph are joined with a
  space; ``<br>`` is a space, ``<p>``/``<div>``/``<blockquote>``/``----`` end a paragraph.
  Then end matter is dropped (a level-1/2 section titled "References", "External links", "See
  also", "Einzelnachweise", "Примечания", "脚注", …: ``wikinames.END_SECTIONS``, with its
  subsections), and so is a heading whose section holds no paragraph. A paragraph with no letter
  or digit left (what remains of a sentence made of templates) is dropped; spaces before ``,``
  and ``.`` and empty brackets (where a template or reference stood) are tidied up.

Every paragraph is one line and paragraphs are separated by one blank line, so the packer (which
appends a document line by line) sees one line per paragraph, heading or list item.
"""
from __future__ import annotations

import html.entities
import re
from typing import Iterable

from mwparserfromhell.parser import tokens as T

from pipelines.ingest.wikinames import (CATEGORY_NS, END_SECTIONS, FILE_NS, LANGUAGE_CODES, MEDIA_NS, name_key,
                                        section_key)

try:
    from mwparserfromhell.parser._tokenizer import CTokenizer as _Tokenizer
except ImportError:  # no compiled wheel for this platform: the pure Python tokenizer, same tokens
    from mwparserfromhell.parser.tokenizer import Tokenizer as _Tokenizer

# Tags dropped with everything inside them.
DROP_TAGS = frozenset("""ref references gallery math chem ce score timeline imagemap templatestyles mapframe
maplink graph syntaxhighlight source pre hiero inputbox categorytree includeonly indicator charinsert section
table caption tr td th""".split())
# Tags whose text stays but that begin and end a paragraph.
BLOCK_TAGS = frozenset("p div blockquote center poem ul ol dl li dt dd h1 h2 h3 h4 h5 h6 figure".split())
LIST_MARKUP = frozenset("*#:;")

_OPENS = frozenset({T.TemplateOpen, T.ArgumentOpen, T.WikilinkOpen, T.ExternalLinkOpen, T.HeadingStart,
                    T.CommentStart, T.TagOpenOpen, T.HTMLEntityStart})
_CLOSES = frozenset({T.TemplateClose, T.ArgumentClose, T.WikilinkClose, T.ExternalLinkClose, T.HeadingEnd,
                     T.CommentEnd, T.TagCloseSelfclose, T.TagCloseClose, T.HTMLEntityEnd})
_SKIPPED = frozenset({T.TemplateOpen, T.ArgumentOpen, T.CommentStart})
_SPACES = frozenset("\xa0\u2002\u2003\u2009\u202f")

_PARAGRAPH_BREAK = re.compile(r"\n[ \t\r\f\v]*\n")
_WHITESPACE = re.compile(r"\s+")
_QUOTES = re.compile(r"'{2,}")
# Behaviour switches: upper case (``__NOTOC__``, ``__KEIN_INHALTSVERZEICHNIS__``) or a script
# without case (``__目次__``); ``__init__`` in a programming article stays.
_MAGIC = re.compile(r"__(?:[^\W_a-z]|_(?!_))+__")
_SPACE_BEFORE = re.compile(r"\s+([,.])(?!\w)")
_EMPTY_BRACKETS = re.compile(r"\s*(?:\(\s*[,;:]?\s*\)|（\s*[,;:、，；]?\s*）)")
# Comments and references, removed before tokenising (on real articles they are a large share of
# the bytes, and the tokenizer would only build structures to drop): ``<!-- … -->``, ``<ref …/>``
# and ``<ref …>…</ref>``. A comment is matched first where it starts earlier, so a reference inside
# a comment goes with the comment. An unclosed ``<ref>`` is left to the tokenizer.
_PRESTRIP = re.compile(r"<!--.*?-->|<ref(?:\s[^>]*?)?/>|<ref(?:\s[^>]*)?>.*?</ref\s*>", re.S | re.I)
_VARIANTS = re.compile(r"-\{(.*?)\}-", re.S)
_VARIANT = re.compile(r"(?:^|;)\s*(?:zh|zh-[a-z]+)\s*:\s*([^;]*)")


class LinkRules:
    """Which ``[[prefix:…]]`` links are not text: the file, media and category namespaces under
    every name the wiki gives them, and the interlanguage prefixes."""

    def __init__(self, names: dict[int, Iterable[str]]):
        self.dropped = frozenset(name_key(n) for ns in (FILE_NS, MEDIA_NS, CATEGORY_NS) for n in names.get(ns, ()) if n)

    def drops(self, target: str) -> bool:
        prefix, colon, _ = target.partition(":")
        if not colon:
            return False
        key = name_key(prefix)
        return key in self.dropped or key in LANGUAGE_CODES


def to_text(wikitext: str, rules: LinkRules) -> str:
    """The prose of ``wikitext`` (module docstring): paragraphs joined by blank lines, "" if none."""
    wikitext = _PRESTRIP.sub("", wikitext)
    if "-{" in wikitext:
        wikitext = _VARIANTS.sub(_variant, wikitext)
    tokens = _Tokenizer().tokenize(wikitext, 0, True)  # skip_style_tags: quotes are removed as text
    renderer = _Renderer(tokens, rules)
    renderer.run(0, ())
    renderer.flush()
    return "\n\n".join(text for _, text in _outline(renderer.blocks))


def _variant(match: re.Match) -> str:
    """``-{…}-``: hidden rules (``H``, ``T``, ``-``) → nothing; variants → the first; else the text."""
    body = match.group(1)
    flags, bar, rest = body.partition("|")
    if bar and re.fullmatch(r"[A-Za-z;\s-]{1,40}", flags):  # flags, or the variants it is shown in
        if set(flags.replace(";", "").split()) & {"H", "T", "-"}:
            return ""
        body = rest
    found = _VARIANT.search(body)
    return found.group(1) if found else body


def _outline(blocks: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Drop end-matter sections and headings whose section holds no paragraph (level 0: paragraph)."""
    kept: list[tuple[int, str]] = []
    skip_to = 0  # while > 0: inside a dropped section of this level
    for level, text in blocks:
        if skip_to and (level == 0 or level > skip_to):
            continue
        skip_to = 0
        if 0 < level <= 2 and section_key(text) in END_SECTIONS:
            skip_to = level
            continue
        kept.append((level, text))
    # A heading stays when the next paragraph-or-heading of its level or above is a paragraph;
    # walking backwards, ``para[L]`` says that for level L.
    out: list[tuple[int, str]] = []
    para = [False] * 8
    for level, text in reversed(kept):
        if level == 0:
            para = [True] * 8
        else:
            level = min(level, 7)
            if not para[level]:
                continue
            para[level:] = [False] * (8 - level)
        out.append((level, text))
    out.reverse()
    return out


def _clean(text: str) -> str:
    """One paragraph: markup leftovers removed, whitespace collapsed; "" when nothing is left."""
    if "''" in text:
        text = _QUOTES.sub("", text)
    if "__" in text:
        text = _MAGIC.sub("", text)
    text = _WHITESPACE.sub(" ", text)
    if "(" in text or "（" in text:
        text = _EMPTY_BRACKETS.sub("", text)
    text = _SPACE_BEFORE.sub(r"\1", text).strip()
    return text if any(ch.isalnum() for ch in text) else ""


def _skip(tokens: list, i: int) -> int:
    """The index just past the structure opened at ``tokens[i]`` (the token list is well nested)."""
    depth, n = 0, len(tokens)
    while i < n:
        kind = type(tokens[i])
        if kind in _OPENS:
            depth += 1
        elif kind in _CLOSES:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return n


class _Renderer:
    """Renders the tokens into ``blocks``: ``(0, paragraph)`` and ``(level, heading)``."""

    def __init__(self, tokens: list, rules: LinkRules):
        self.tokens, self.rules = tokens, rules
        self.blocks: list[tuple[int, str]] = []
        self.buf: list[str] = []  # inline text since the last paragraph break
        self.item = False  # inside a list item: the next line end ends its paragraph
        self.poem = 0  # inside <poem>: every line is a paragraph

    def flush(self) -> None:
        if not self.buf:
            return
        text = "".join(self.buf)
        self.buf.clear()
        for part in _PARAGRAPH_BREAK.split(text):
            part = _clean(part)
            if part:
                self.blocks.append((0, part))

    def text(self, s: str) -> None:
        if self.poem:
            s = s.replace("\n", "\n\n")
        if self.item and "\n" in s:
            head, _, tail = s.partition("\n")
            self.buf.append(head)
            self.flush()
            self.item = False
            s = tail
        self.buf.append(s)

    def run(self, i: int, stop: tuple) -> int:
        """Render from ``tokens[i]`` up to the first token of a type in ``stop`` (at this level);
        its index (or the end)."""
        tokens, n = self.tokens, len(self.tokens)
        while i < n:
            tok = tokens[i]
            kind = type(tok)
            if kind is T.Text:
                self.text(tok["text"])
                i += 1
            elif kind in stop:
                return i
            elif kind in _SKIPPED:
                i = _skip(tokens, i)
            elif kind is T.WikilinkOpen:
                i = self.wikilink(i)
            elif kind is T.TagOpenOpen:
                i = self.tag(i)
            elif kind is T.ExternalLinkOpen:
                i = self.external_link(i)
            elif kind is T.HTMLEntityStart:
                i = self.entity(i)
            elif kind is T.HeadingStart:
                i = self.heading(i)
            else:  # a stray separator or close: nothing to show
                i += 1
        return n

    def _plain(self, i: int, stop: tuple) -> tuple[str, int]:
        """The literal text from ``tokens[i]`` to a ``stop`` token (a link target or URL; nested
        structures skipped), and that token's index."""
        tokens, n, parts = self.tokens, len(self.tokens), []
        while i < n:
            kind = type(tokens[i])
            if kind in stop:
                return "".join(parts), i
            if kind is T.Text:
                parts.append(tokens[i]["text"])
                i += 1
            elif kind in _OPENS:
                i = _skip(tokens, i)
            else:
                i += 1
        return "".join(parts), n

    def wikilink(self, i: int) -> int:
        target, j = self._plain(i + 1, (T.WikilinkSeparator, T.WikilinkClose))
        target = target.strip()
        if not target.startswith(":") and self.rules.drops(target):
            return _skip(self.tokens, i)
        shown = target.lstrip(":").strip()
        if j < len(self.tokens) and type(self.tokens[j]) is T.WikilinkSeparator:
            mark = len(self.buf)
            j = self.run(j + 1, (T.WikilinkClose,))
            if mark <= len(self.buf) and not "".join(self.buf[mark:]).strip():
                self.buf.append(shown)  # an empty label shows the target
        else:
            self.buf.append(shown)
        return j + 1

    def external_link(self, i: int) -> int:
        url, j = self._plain(i + 1, (T.ExternalLinkSeparator, T.ExternalLinkClose))
        if not self.tokens[i].get("brackets"):
            self.buf.append(url)  # a bare URL is shown as it is
            return _skip(self.tokens, i)
        if j < len(self.tokens) and type(self.tokens[j]) is T.ExternalLinkSeparator:
            j = self.run(j + 1, (T.ExternalLinkClose,))
        return j + 1

    def entity(self, i: int) -> int:
        end = _skip(self.tokens, i)
        numeric = hexadecimal = False
        name = ""
        for tok in self.tokens[i + 1:end - 1]:
            kind = type(tok)
            numeric |= kind is T.HTMLEntityNumeric
            hexadecimal |= kind is T.HTMLEntityHex
            if kind is T.Text:
                name += tok["text"]
        try:
            char = chr(int(name, 16 if hexadecimal else 10)) if numeric else html.entities.html5.get(name + ";", "")
        except (ValueError, OverflowError):
            char = ""
        self.buf.append(" " if char in _SPACES else char)
        return end

    def heading(self, i: int) -> int:
        self.flush()
        self.item = False
        outer, self.buf = self.buf, []
        j = self.run(i + 1, (T.HeadingEnd,))
        title = _clean("".join(self.buf).replace("\n", " "))
        self.buf = outer
        if title:
            self.blocks.append((int(self.tokens[i].get("level") or 1), title))
        return j + 1

    def tag(self, i: int) -> int:
        tokens, n = self.tokens, len(self.tokens)
        markup = tokens[i].get("wiki_markup")
        name = tokens[i + 1]["text"].strip().lower() if i + 1 < n and type(tokens[i + 1]) is T.Text else ""
        j = i + 2
        while j < n and type(tokens[j]) not in (T.TagCloseOpen, T.TagCloseSelfclose):
            j = _skip(tokens, j) if type(tokens[j]) in _OPENS else j + 1  # the attributes
        if j >= n:
            return n
        if type(tokens[j]) is T.TagCloseSelfclose:
            if markup in LIST_MARKUP or (markup and name in ("li", "dt", "dd")):
                self.flush()
                self.item = True
            elif name == "hr":
                self.flush()
            elif name == "br":
                self.buf.append("\n")
            return j + 1
        if name in DROP_TAGS or markup == "{|":
            return _skip(tokens, i)
        block = name in BLOCK_TAGS
        if block:
            self.flush()
        self.poem += name == "poem"
        j = self.run(j + 1, (T.TagOpenClose,))
        self.poem -= name == "poem"
        while j < n and type(tokens[j]) is not T.TagCloseClose:
            j += 1
        if block:
            self.flush()
        return j + 1
