"""Real non-English text for development, tests and benchmarks, extracted from Debian packages.

Why: the build pipeline is becoming language-aware (word segmentation for Chinese/Japanese/Thai,
per-language filter thresholds), and calibrating or testing that needs real prose in several
languages and scripts, with a redistributable licence and no network at test time. Two kinds:

* ``prose``: the Debian Reference manual (``debian-reference-<lang>``), one document per section
  of its HTML pages (``/usr/share/debian-reference/*.<lang>.html``, without ``index``): the
  section's heading and its kept paragraphs joined by blank lines.
* ``faq``: the Debian FAQ (``debian-faq-<lang>``: Korean, which the Debian Reference lacks), read
  as ``prose`` is: its pages under ``/usr/share/doc/debian/FAQ/<lang>/`` are the same DocBook HTML.
* ``fortune``: fortune-cookie files (``fortunes-<lang>``), one document per entry (entries are
  separated by a line holding only ``%``); short, so a kind of their own.

Two groups, never mixed: ``dev`` (zh-cn, zh-tw, fr, de, es, pt, ko, zh-fortunes, de-fortunes) is for
calibration and tests; ``heldout`` (ja, it, it-fortunes, ru-fortunes) is for acceptance only and
never goes into test assets. Output: ``OUT/<group>/<lang>.jsonl``, one
``{"text", "source", "kind"}`` per line, in a deterministic order (files sorted by name,
document order inside a file, exact duplicates dropped) with no randomness.

Extracting the HTML (``html.parser``): only the text of ``<p>`` and of the headings ``<h1>``-
``<h4>`` is read; ``<pre>``, ``<table>`` (data tables and the tip/note/warning boxes, which are
tables), and the ``navheader``/``navfooter``/``toc``/``list-of-*`` divs are skipped whole. Inline
``<code>`` inside a sentence is kept (removing it would leave holes in the sentence) but counted.
Whitespace runs become one space, except a line break between two CJK characters, which is
removed (the HTML wraps Chinese lines mid-sentence).

A paragraph is kept (``keep_paragraph``) when it is prose in the target language:

1. at least ``MIN_PARAGRAPH_CHARS`` characters (60; 25 for CJK, whose characters carry more);
2. it ends a sentence (``.!?。！？…``, possibly followed by a closing quote or bracket): list
   items and lines introducing a command block end with ``:`` or nothing, and are dropped;
3. inline ``<code>`` is at most 25% of its characters (no command lines, no lists of files);
4. script: at least 50% of its letters are in the language's script (Han; Han+kana for ja;
   Latin; Cyrillic; Hangul), counted by ``unicodedata.name`` prefixes;
5. Latin-script languages only: untranslated paragraphs are English (the translations are
   partial), so it needs >= 2 hits of the language's function words and at least twice as
   many as English function words (word lists below, minus any word both languages share).
   A stop-word rule rather than py3langid on purpose: the project's language filter *is*
   py3langid, and selecting its calibration data with it would be circular.

A section becomes a document when it keeps at least one paragraph and totals at least
``MIN_PROSE_CHARS`` characters (200; 100 for CJK). Fortune entries lose ANSI colour escapes and
trailing blanks; an entry is kept when it has >= 10 characters, >= 50% of its non-space
characters are letters (drops ASCII art and tables), >= 50% of its letters are in the
language's script (drops English entries in CJK/Cyrillic files), and, for Latin languages,
no more English than native function words (short entries may have none). fortunes-zh's
quotes of the Debian Reference and its Reference Card (attributed "-- Osamu Aoki ..." or
"-- Debian 参考卡片") are dropped: manual text and command lists, overlapping the prose set.

``--write-assets DIR`` also writes the small committed test assets (dev group only): per
language, ``ASSET_DOCS`` documents of 200 characters to ``ASSET_MAX_BYTES`` bytes, every k-th
of those eligible, separated by lines holding only ``%%%``.

    python benchmarks/corpus/language_texts.py [--fetch] [--debs /tmp/deb] [--out bench_out/languages]
        [--write-assets tests/assets/languages] [--show 2]

``--fetch`` is the one networked step: ``apt-get download`` of the packages into ``--debs``,
which needs the Debian archive (an apt source) reachable.
"""
from __future__ import annotations

import argparse
import functools
import glob
import json
import os
import re
import subprocess
import tempfile
import unicodedata
from html.parser import HTMLParser
from pathlib import Path

# lang -> (group, package, kind, script)
SOURCES = {
    "en": ("dev", "debian-reference-en", "prose", "latin"),  # the original: the calibration's anchor
    "zh-cn": ("dev", "debian-reference-zh-cn", "prose", "han"),
    "zh-tw": ("dev", "debian-reference-zh-tw", "prose", "han"),
    "fr": ("dev", "debian-reference-fr", "prose", "latin"),
    "de": ("dev", "debian-reference-de", "prose", "latin"),
    "es": ("dev", "debian-reference-es", "prose", "latin"),
    "pt": ("dev", "debian-reference-pt", "prose", "latin"),
    "zh-fortunes": ("dev", "fortunes-zh", "fortune", "han"),
    "de-fortunes": ("dev", "fortunes-de", "fortune", "latin"),
    "ko": ("dev", "debian-faq-ko", "faq", "hangul"),
    "ja": ("heldout", "debian-reference-ja", "prose", "japanese"),
    "it": ("heldout", "debian-reference-it", "prose", "latin"),
    "it-fortunes": ("heldout", "fortunes-it", "fortune", "latin"),
    "ru-fortunes": ("heldout", "fortunes-ru", "fortune", "cyrillic"),
}
# Unicode character-name prefixes of each script (the first word of unicodedata.name).
SCRIPTS = {"han": ("CJK",), "japanese": ("CJK", "HIRAGANA", "KATAKANA"),
           "latin": ("LATIN",), "cyrillic": ("CYRILLIC",), "hangul": ("HANGUL",)}
CJK_SCRIPTS = {"han", "japanese"}
_FUNCTION_WORDS = {
    "en": "the of and to is in that for are with be this it as on by you can from or not which "
          "an if your these when use used have has should will was",
    "fr": "le la les de des du un une et est en que qui pour dans pas sur par au aux ce cette il "
          "vous ne se sont avec plus ou peut être leur comme mais on",
    "de": "der die das und ist nicht ein eine zu den von mit sich des auf für im dem werden wird "
          "oder auch es sie kann sind einen einer wenn bei durch was will an man in so",
    "es": "el la los las de del y que en un una es por para con no se su al lo como más o "
          "puede sus este esta son pero",
    "pt": "o a os as de do da dos das e que em um uma é para com não no na se por mais ao como "
          "pode seu sua este esta são",
    "it": "il lo la i gli le di del della e è che per non un una in con si sono da al come più "
          "può questo questa nel dei delle",
}
_WORDS = {k: set(v.split()) for k, v in _FUNCTION_WORDS.items()}
# Each language's list minus English's and vice versa ("in", "die", "no", "a" ... are ambiguous).
NATIVE = {k: v - _WORDS["en"] for k, v in _WORDS.items() if k != "en"}
ENGLISH = {k: _WORDS["en"] - v for k, v in _WORDS.items() if k != "en"}

MIN_PARAGRAPH_CHARS = {"cjk": 25, "other": 60}
MIN_PROSE_CHARS = {"cjk": 100, "other": 200}
MAX_CODE_SHARE = 0.25
MIN_SCRIPT_SHARE = 0.5
MIN_FORTUNE_CHARS = 10
MIN_FORTUNE_LETTERS = 0.5
ASSET_DOCS = 30
ASSET_MIN_CHARS = 200
ASSET_MAX_BYTES = 1000
ASSET_SEPARATOR = "%%%"
SKIP_TAGS = {"pre", "table", "script", "style"}
SKIP_DIV_CLASSES = {"navheader", "navfooter", "toc", "list-of-tables", "list-of-figures",
                    "list-of-examples"}
HEADINGS = {"h1", "h2", "h3", "h4", "h5"}
_SENTENCE_END = re.compile(r"[.!?。！？…][\s\"'”’»」』）)\]]*$")
_SECTION_NUMBER = re.compile(r"^(?:[A-Z]|\d+)(?:\.\d+)*\.\s+")
# fortunes-zh's "chinese" file also quotes the Debian Reference and Reference Card (zh): manual
# sections and command lists, not fortunes, and overlapping the prose set; dropped by attribution.
_NOT_FORTUNE = re.compile(r"^\s*--\s*(?:Osamu Aoki|Debian 参考卡片)", re.M)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_WORD = re.compile(r"[^\W\d_]+")


def lang_of(lang: str) -> str:
    """The base language code of an output name: ``zh-cn`` -> ``zh``, ``de-fortunes`` -> ``de``."""
    return lang.split("-")[0] if lang.endswith("-fortunes") or lang.startswith("zh") else lang


def is_cjk(ch: str) -> bool:
    """Han, kana, or CJK/fullwidth punctuation (the characters written without spaces)."""
    o = ord(ch)
    return (0x3000 <= o <= 0x9FFF or 0xF900 <= o <= 0xFAFF or 0xFF00 <= o <= 0xFFEF
            or 0x20000 <= o <= 0x2FFFF)


def script_share(text: str, script: str) -> float:
    """Share of the letters (``str.isalpha``) of ``text`` whose Unicode name starts with a
    prefix of ``script``; 0.0 when there are no letters."""
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return 0.0
    prefixes = SCRIPTS[script]
    return sum(unicodedata.name(c, "").startswith(prefixes) for c in letters) / len(letters)


def word_hits(text: str, lang: str) -> tuple[int, int]:
    """(native, English) function-word counts of ``text`` for a Latin-script language."""
    words = [w.lower() for w in _WORD.findall(text)]
    if lang == "en":  # English itself: its own function words, nothing foreign to count
        return sum(w in _WORDS["en"] for w in words), 0
    return sum(w in NATIVE[lang] for w in words), sum(w in ENGLISH[lang] for w in words)


def clean_space(text: str) -> str:
    """Collapse whitespace runs to one space, dropping those between two CJK characters."""
    def repl(m: re.Match) -> str:
        s, e = m.start(), m.end()
        if 0 < s and e < len(text) and is_cjk(text[s - 1]) and is_cjk(text[e]) and "\n" in m[0]:
            return ""
        return " "
    return re.sub(r"\s+", repl, text).strip()


def keep_paragraph(text: str, code_chars: int, lang: str, script: str) -> bool:
    """The paragraph rule of the module docstring (length, sentence end, code, script, words)."""
    cjk = script in CJK_SCRIPTS
    if len(text) < MIN_PARAGRAPH_CHARS["cjk" if cjk else "other"]:
        return False
    if not _SENTENCE_END.search(text) or code_chars > MAX_CODE_SHARE * len(text):
        return False
    if script_share(text, script) < MIN_SCRIPT_SHARE:
        return False
    if script == "latin":
        native, english = word_hits(text, lang_of(lang))
        return native >= 2 and native >= 2 * english
    return True


class _SectionParser(HTMLParser):
    """Collects ``[anchor, heading, [(paragraph, code_chars), ...]]`` per heading of a page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.sections: list[list] = []
        self.stack: list[tuple[str, bool]] = []  # (tag, starts a skipped subtree)
        self.skipping = 0
        self.buf: list[str] | None = None  # text of the open <p> or heading
        self.code = 0
        self.in_code = 0
        self.target = ""  # "p" or "h"
        self.anchor = ""

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        skip = tag in SKIP_TAGS or (tag == "div" and bool(
            set((a.get("class") or "").split()) & SKIP_DIV_CLASSES))
        self.stack.append((tag, skip))
        self.skipping += skip
        if self.skipping:
            return
        if tag in HEADINGS:
            self.buf, self.target, self.anchor = [], "h", ""
        elif tag == "p" and self.buf is None:
            self.buf, self.target, self.code = [], "p", 0
        elif tag == "a" and self.target == "h" and a.get("id") and not self.anchor:
            self.anchor = a["id"]
        elif tag == "code":
            self.in_code += 1
        elif tag == "br" and self.buf is not None:
            self.buf.append(" ")

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        self.handle_endtag(tag)

    def handle_endtag(self, tag):
        while self.stack:  # XHTML is well formed; tolerate stray tags anyway
            top, skip = self.stack.pop()
            self.skipping -= skip
            if top == tag:
                break
        if self.skipping:
            return
        if tag == "code":
            self.in_code = max(0, self.in_code - 1)
        elif tag in HEADINGS and self.target == "h":
            heading = _SECTION_NUMBER.sub("", clean_space("".join(self.buf)))
            self.sections.append([self.anchor, heading, []])
            self.buf, self.target = None, ""
        elif tag == "p" and self.target == "p":
            if self.sections:
                text = clean_space("".join(self.buf))
                self.sections[-1][2].append((text, self.code))
            self.buf, self.target = None, ""

    def handle_data(self, data):
        if self.skipping or self.buf is None:
            return
        self.buf.append(data)
        if self.in_code:
            self.code += len(data.strip())


# Where each kind of manual keeps a language's HTML pages (DocBook output, one parser for both).
PAGES = {"prose": "usr/share/debian-reference", "faq": "usr/share/doc/debian/FAQ/{lang}"}


def prose_documents(root: Path, lang: str, script: str, label: str, kind: str = "prose") -> list[dict]:
    """One document per section of the language's HTML pages under ``root``."""
    cjk = script in CJK_SCRIPTS
    pages = sorted(p for p in (root / PAGES[kind].format(lang=lang)).glob(f"*.{lang}.html")
                   if not p.name.startswith("index."))
    docs = []
    for page in pages:
        parser = _SectionParser()
        parser.feed(page.read_text(encoding="utf-8"))
        parser.close()
        for anchor, heading, paragraphs in parser.sections:
            kept = [t for t, code in paragraphs if keep_paragraph(t, code, lang, script)]
            if not kept:
                continue
            if cjk and script_share(heading, script) < MIN_SCRIPT_SHARE:
                heading = ""  # an untranslated (English) heading above translated paragraphs
            text = "\n\n".join(([heading] if heading else []) + kept)
            if len(text) >= MIN_PROSE_CHARS["cjk" if cjk else "other"]:
                docs.append({"text": text, "source": f"{label}:{page.name}#{anchor}",
                             "kind": kind})
    return docs


def keep_fortune(text: str, lang: str, script: str) -> bool:
    """The fortune rule of the module docstring (length, letters in script, English words)."""
    if len(text) < MIN_FORTUNE_CHARS or _NOT_FORTUNE.search(text):
        return False
    chars = [c for c in text if not c.isspace()]
    letters = sum(c.isalpha() for c in chars)
    if letters < MIN_FORTUNE_LETTERS * len(chars) or script_share(text, script) < MIN_SCRIPT_SHARE:
        return False
    if script == "latin":
        native, english = word_hits(text, lang_of(lang))
        return english <= native
    return True


def fortune_documents(root: Path, lang: str, script: str, label: str) -> list[dict]:
    """One document per entry of the fortune files (not ``.dat`` indexes, not symlinks)."""
    files = sorted(p for p in (root / "usr/share/games/fortunes").rglob("*")
                   if p.is_file() and not p.is_symlink() and p.suffix not in {".dat", ".u8"})
    docs = []
    for path in files:
        raw = _ANSI.sub("", path.read_text(encoding="utf-8", errors="replace"))
        for i, entry in enumerate(re.split(r"^%[ \t]*$", raw, flags=re.M)):
            text = "\n".join(line.rstrip() for line in entry.strip("\n").splitlines()).strip()
            if keep_fortune(text, lang, script):
                rel = path.relative_to(root / "usr/share/games/fortunes")
                docs.append({"text": text, "source": f"{label}:{rel}#{i}", "kind": "fortune"})
    return docs


def newest_deb(debs: Path, package: str) -> Path:
    """The highest version of ``package`` among ``debs/<package>_*.deb`` (dpkg's ordering)."""
    found = sorted(debs.glob(f"{glob.escape(package)}_*.deb"))
    if not found:
        raise SystemExit(f"no {package}_*.deb in {debs}: run with --fetch "
                         f"(or cd {debs} && apt-get download {package})")

    def cmp(a: Path, b: Path) -> int:
        va, vb = (p.name.split("_")[1] for p in (a, b))
        if va == vb:
            return 0
        lt = subprocess.run(["dpkg", "--compare-versions", va, "lt", vb]).returncode == 0
        return -1 if lt else 1
    return max(found, key=functools.cmp_to_key(cmp))


def extract(deb: Path, lang: str, kind: str, script: str) -> list[dict]:
    """Unpack ``deb`` with ``dpkg-deb -x`` into a temporary directory and read its documents."""
    fields = subprocess.run(["dpkg-deb", "-f", str(deb), "Package", "Version"], check=True,
                            capture_output=True, text=True).stdout
    meta = dict(line.split(": ", 1) for line in fields.splitlines() if ": " in line)
    label = f"{meta['Package']}_{meta['Version']}"
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["dpkg-deb", "-x", str(deb), tmp], check=True)
        if kind == "fortune":
            docs = fortune_documents(Path(tmp), lang_of(lang), script, label)
        else:
            docs = prose_documents(Path(tmp), lang, script, label, kind)
    seen, unique = set(), []
    for doc in docs:
        if doc["text"] not in seen:
            seen.add(doc["text"])
            unique.append(doc)
    return unique


def asset_documents(docs: list[dict]) -> list[str]:
    """Every k-th of the documents of ASSET_MIN_CHARS characters to ASSET_MAX_BYTES bytes."""
    ok = [d["text"] for d in docs
          if len(d["text"]) >= ASSET_MIN_CHARS and len(d["text"].encode()) <= ASSET_MAX_BYTES
          and ASSET_SEPARATOR not in d["text"]]
    step = max(1, len(ok) // ASSET_DOCS)
    return ok[::step][:ASSET_DOCS]


def stats(docs: list[dict]) -> tuple[int, int, int, float]:
    """(documents, characters, UTF-8 bytes, mean characters per document)."""
    chars = sum(len(d["text"]) for d in docs)
    nbytes = sum(len(d["text"].encode()) for d in docs)
    return len(docs), chars, nbytes, chars / max(1, len(docs))


def main(argv: list[str] | None = None) -> None:
    """Parse flags, optionally fetch, extract every language, print counts and samples."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--debs", type=Path, default=Path("/tmp/deb"))
    ap.add_argument("--out", type=Path, default=Path("bench_out/languages"))
    ap.add_argument("--fetch", action="store_true",
                    help="apt-get download the packages into --debs first (needs the network)")
    ap.add_argument("--write-assets", type=Path, default=None,
                    help="also write the dev test assets (<lang>.txt) into this directory")
    ap.add_argument("--show", type=int, default=0, help="print the start of N documents per lang")
    ap.add_argument("--langs", nargs="*", default=sorted(SOURCES), choices=sorted(SOURCES))
    args = ap.parse_args(argv)
    if args.fetch:
        args.debs.mkdir(parents=True, exist_ok=True)
        packages = sorted({SOURCES[lang][1] for lang in args.langs})
        subprocess.run(["apt-get", "download", *packages], cwd=args.debs, check=True)
    print(f"{'group':8} {'lang':12} {'docs':>6} {'chars':>9} {'bytes':>9} {'mean':>7}  package")
    for lang in args.langs:
        group, package, kind, script = SOURCES[lang]
        deb = newest_deb(args.debs, package)
        docs = extract(deb, lang, kind, script)
        out = args.out / group / f"{lang}.jsonl"
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "w", encoding="utf-8") as f:
            for doc in docs:
                f.write(json.dumps(doc, ensure_ascii=False) + "\n")
        n, chars, nbytes, mean = stats(docs)
        print(f"{group:8} {lang:12} {n:6d} {chars:9d} {nbytes:9d} {mean:7.0f}  {deb.name}")
        for doc in docs[:: max(1, len(docs) // args.show)][: args.show] if args.show else []:
            shown = doc["text"][:300].replace("\n", "\n    | ")
            print(f"    | {doc['source']}\n    | {shown}")
        if args.write_assets and group == "dev":
            picked = asset_documents(docs)
            args.write_assets.mkdir(parents=True, exist_ok=True)
            body = f"\n{ASSET_SEPARATOR}\n".join(picked) + "\n"
            (args.write_assets / f"{lang}.txt").write_text(body, encoding="utf-8")
            print(f"    asset: {len(picked)} documents, {len(body.encode())} bytes")


if __name__ == "__main__":
    main()
