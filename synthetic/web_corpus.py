"""A web-like corpus of any size from real sentences, with planted duplicates and boilerplate.

Every figure of the corpus builder was measured on 53.7 MB of books; nothing showed how cost and
memory grow with the data. This writes a corpus of a requested size (bytes of document text)
that looks, to the pipeline, like extracted web pages, and says what dedup should remove.

Sentences. The books in the folder the caller names (Project Gutenberg: header and licence cut
at the ``*** START``/``*** END`` lines, the first and last tenth skipped, hard-wrapped lines
joined, as ``synthetic.web_junk`` does) are split at ``.!?`` (plus closing quotes) before a
capital; a sentence is kept when it looks like prose: 6-60 words, a capital first, terminal
punctuation last, no markup (``_ [ ] { } * # |``), no ellipsis, few capitals and digits, balanced
quotes. The 58 shared books give 220k sentences (5 s to read, once per process). Without books,
50,000 sentences of ``synthetic.prose``'s grammar stand in.

Documents. A plain article is sentences drawn uniformly at random, in paragraphs of 2-7
sentences separated by blank lines, up to a size drawn log-uniformly from 1-8 KB (mean ~3.4 KB):
new word sequences, so two articles share no 5-gram beyond chance, yet every sentence is real
English, and the default ``web`` filter profile keeps ~100% of them (the test checks >= 90%).
Of all documents:

* 5% exact duplicates: a byte-identical copy of an earlier original;
* 3% near duplicates: an earlier original with small edits (1-4 words replaced, or a sentence
  added or removed); the word-5-gram Jaccard to the original (the pipeline's words) is measured
  and recorded, and an edit below 0.8 is replaced by a one-word change (mean ~0.94), so
  MinHash-LSH at its ~0.72 threshold finds ~all of them;
* 10% boilerplate: a unique article inside the header and footer of one of ``SITES`` (menu,
  masthead, about, membership, cookie banner, copyright: 200-250 words, of which 140-190
  survive C4, which drops the menu and cookie lines as on real pages). NOT duplicates: near
  dedup must keep them. Their bodies are 3-7 KB, so two pages of a site have a Jaccard of at
  most ~0.17; LSH without a Jaccard check still links such a pair with probability ~1e-5, and a
  site's pairs grow quadratically with the corpus (~17 false links per site expected at 2 GB):
  the benchmark's near-dedup precision shows it.

Copies come from a reservoir sample (Algorithm R) of ``RESERVOIR`` earlier originals, so a
source is uniform over all earlier documents and usually in another file; the reservoir (~7 MB)
is the only text held besides the document being written: memory is flat in the size.

Output (``out``): ``data/part-NNNNN.jsonl.zst``, JSON Lines ``{"id", "text"}`` in zstd (level 3,
checksummed), ~``file_bytes`` of text each and at least ``min_files`` files (a compressed file is
one read task; two keep two CPUs busy), written in ~1 MB pieces through one zstd stream, or with
``seekable`` one frame per piece plus the seek table of zstd's seekable format (so the pipeline
can split a file into tasks); ``truth.jsonl``, one line per planted document (``kind``, its
``file`` and decompressed ``offset``, the pipeline's id being ``<folder>/<file>:<offset>``; for
copies the source's ``of``/``of_file``/``of_offset``, for near copies ``jaccard``; for pages the
``site``); ``summary.json``, written last, which ``write_web_corpus`` returns.

Speed (one core of the dev box; numpy draws, joins, JSON and zstd in C): 2 GB of text took 59 s
of CPU (34 MB/s; 110 s wall at load average 6 on 2 cores) and 107 MB peak RSS, the same RSS as
for 100 MB; reading the books adds 5 s. ``python -m synthetic.web_corpus OUT MB`` prints it.
Deterministic given the seed, the books and the zstd version; a smaller corpus of the same seed
is a prefix of a larger one (only the file boundaries differ).
"""
from __future__ import annotations

import functools
import json
import math
import random
import re
import struct
import time
from pathlib import Path
from typing import Any

import numpy as np

from synthetic import prose
from synthetic.web_junk import book_paragraphs

VERSION = 2  # bump when the output for a given seed changes (benchmarks cache on it)
EXACT, NEAR, BOILERPLATE = 0.05, 0.03, 0.10
RESERVOIR = 2048
DOC_BYTES = (1000, 8000)
BODY_BYTES = (3000, 7000)  # of a boilerplate page (see the module docstring)
MIN_JACCARD = 0.8
NGRAM = 5

# ------------------------------------------------------------------------------ sentences
_SPLIT = re.compile(r"(?<=[.!?])([\"'\u201d\u2019)]*)\s+(?=[\"'\u201c\u2018(]?[A-Z])")
_BAD = re.compile(r"[_\[\]{}*#|<>@\\~^=+]|\.\.|\u2026|https?:|www\.")
_OPEN = "\"'\u201c\u2018("
_END = re.compile(r"[.!?][\"'\u201d\u2019)]*$")
# The pipeline's MinHash words: runs of bytes that are not ASCII whitespace or punctuation.
_WORD = re.compile(r"[^\t\n\x0b\x0c\r !-/:-@\[-`{-~]+")


def split_sentences(paragraph: str) -> list[str]:
    parts = _SPLIT.split(paragraph)  # text, closers, text, closers, ...
    return [parts[i] + (parts[i + 1] if i + 1 < len(parts) else "") for i in range(0, len(parts), 2)]


def sentence_like(s: str) -> bool:
    """Prose, not a heading, a footnote, a list item or a fragment of markup."""
    if not 6 <= s.count(" ") + 1 <= 60 or _BAD.search(s) or not _END.search(s) or not s.lstrip(_OPEN)[:1].isupper():
        return False
    letters = sum(c.isalpha() for c in s)
    return (letters >= 0.7 * len(s) and sum(c.isupper() for c in s) <= 0.15 * letters
            and sum(c.isdigit() for c in s) <= 4 and s.count('"') % 2 == 0 and s.count("\u201c") == s.count("\u201d"))


def book_sentences(path: Path) -> list[str]:
    paragraphs = book_paragraphs(path)
    lo, hi = len(paragraphs) // 10, len(paragraphs) * 9 // 10
    return [s for p in paragraphs[lo:hi] for s in split_sentences(p) if sentence_like(s)]


@functools.lru_cache(maxsize=2)
def sentence_pool(books: str | None) -> tuple[str, ...]:
    """The sentences of every book in folder ``books`` (sorted by file), or generated prose (the
    same for every seed: the seed decides the draws from the pool)."""
    if books is not None and Path(books).is_dir() and any(Path(books).glob("*.txt")):
        return tuple(s for path in sorted(Path(books).glob("*.txt")) for s in book_sentences(path))
    rng = random.Random(0)
    return tuple(prose.sentence(rng) for _ in range(50_000))


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def jaccard(a: str, b: str, n: int = NGRAM) -> float:
    """Word-``n``-gram Jaccard similarity (the pipeline's MinHash estimates this)."""
    def grams(text: str) -> set:
        w = words(text)
        return set(zip(*(w[i:] for i in range(n)))) if len(w) >= n else {tuple(w)}
    x, y = grams(a), grams(b)
    return len(x & y) / max(len(x | y), 1)


# ------------------------------------------------------------------------------ sites
SITES = (("The Harbour Gazette", "maritime trade", "Port Ellis", 1998),
         ("Northfield Review", "books and ideas", "Northfield", 2004),
         ("Meridian Daily", "science and health", "Meridian", 1987),
         ("The Quiet Reader", "rural life", "Ashby Vale", 2011),
         ("Lantern Post", "city politics", "Lantern Bay", 1992),
         ("Oakridge Chronicle", "education", "Oakridge", 2001))
_MAST = ["Welcome to {site}, independent reporting on {topic} since {year}.",
         "Our reporters cover {topic}, local politics and the arts across {city} and the surrounding "
         "region every day of the week.",
         "Read the latest stories from our newsroom, browse the archive of past issues, and tell us "
         "what you would like us to look into next.",
         "Sign in to save articles to your reading list and to follow the writers whose work you enjoy most."]
_ABOUT = ["{site} is published by the {site} Media Group, an independent company owned by its "
          "journalists and readers.",
          "We believe that careful and honest reporting about {topic} is a public service, and we never "
          "let advertisers decide what we write about.",
          "Our editorial standards, our corrections process and the names of our editors are published "
          "on the about page of this website.",
          "If you spot a mistake in one of our stories, please write to the editors and we will correct "
          "it as quickly as we can."]
_SUPPORT = ["Support our work with a monthly contribution of any size, and you will receive our weekly "
            "newsletter with the best of {site} in your inbox every Sunday morning.",
            "Members also get early access to our long reads, invitations to events in {city}, and a "
            "printed annual review at the end of each year.",
            "You can change or cancel your membership at any time from your account page."]
_MENU = ["Home", "News", "{Topic}", "Culture", "Opinion", "Travel", "Podcasts", "Newsletters", "Events",
         "Obituaries", "Puzzles", "About Us", "Contact"]


@functools.lru_cache(maxsize=None)
def site_boilerplate(site: int) -> tuple[str, str]:
    """(header, footer) of site ``site``: fixed per site; the menu and cookie lines are the ones
    C4 drops (no terminal punctuation; cookie wording), the paragraphs survive."""
    name, topic, city, year = SITES[site]
    rng = random.Random(site)
    fill = {"site": name, "topic": topic, "city": city, "year": year, "Topic": topic.title()}
    menu = " | ".join(m.format(**fill) for m in rng.sample(_MENU, 10))
    header = [name, menu, " ".join(s.format(**fill) for s in _MAST[:rng.randint(2, 3)])]
    about = " ".join(s.format(**fill) for s in rng.sample(_ABOUT, 3))
    footer = [about, " ".join(s.format(**fill) for s in _SUPPORT[:rng.randint(1, 2)]),
              f"This website uses cookies to remember your settings and to count visits. Accept all "
              f"cookies or choose which ones {name} may use.",
              "Terms of Use | Privacy Policy | Cookie Settings | Accessibility | Sitemap",
              f"Copyright \u00a9 {year}-2024 {name}. All rights reserved."]
    return "\n\n".join(header), "\n\n".join(footer)


# ------------------------------------------------------------------------------ documents
class Writer:
    """Draws articles from a sentence pool (numpy for the random draws, C for the joins)."""

    def __init__(self, pool: tuple[str, ...], seed: int):
        self.pool = pool
        self.lens = np.fromiter((len(s.encode()) + 1 for s in pool), np.int64, len(pool))
        self.mean = float(self.lens.mean())
        self.rng = np.random.Generator(np.random.PCG64(seed))
        self.py = random.Random(seed)

    def size(self, lo_hi: tuple[int, int]) -> int:
        lo, hi = lo_hi
        return int(math.exp(self.rng.uniform(math.log(lo), math.log(hi))))

    def sentences(self, target: int) -> list[str]:
        """Random sentences whose byte lengths (plus spaces) first reach ``target``."""
        k = int(target / self.mean * 1.5) + 8
        idx = self.rng.integers(0, len(self.pool), k)
        ends = np.cumsum(self.lens[idx])
        while ends[-1] < target:  # rare: a run of short sentences
            more = self.rng.integers(0, len(self.pool), k)
            idx, ends = np.concatenate([idx, more]), np.concatenate([ends, ends[-1] + np.cumsum(self.lens[more])])
        k = int(np.searchsorted(ends, target)) + 1
        return [self.pool[i] for i in idx[:k].tolist()]

    def article(self, target: int) -> str:
        sents = self.sentences(target)
        cuts = np.cumsum(self.rng.integers(2, 8, len(sents))).tolist()
        paragraphs, a = [], 0
        for b in cuts:
            paragraphs.append(" ".join(sents[a:b]))
            if b >= len(sents):
                break
            a = b
        return "\n\n".join(paragraphs)

    def boilerplate(self, site: int) -> str:
        header, footer = site_boilerplate(site)
        body = self.article(self.size(BODY_BYTES))
        title = " ".join(body.split(" ", 7)[:6]).strip(",;:").title()  # no full stop: C4 drops it
        return f"{header}\n\n{title}\n\n{body}\n\n{footer}"

    def near_copy(self, text: str, site: int = -1) -> tuple[str, float]:
        """``text`` with small edits, and its word-5-gram Jaccard to ``text`` (>= MIN_JACCARD).

        A page of ``site`` is edited in its article only: an edit in a line that C4 drops (menu,
        cookie banner, title) would make the filtered copy an exact duplicate."""
        head = tail = ""
        if site >= 0:
            header, footer = site_boilerplate(site)
            title_end = text.index("\n\n", len(header) + 2) + 2
            head, tail, text = text[:title_end], text[len(text) - len(footer) - 2:], text[title_end:-len(footer) - 2]
        op = self.py.random()
        if op < 0.5:
            edited = self._replace_words(text, self.py.randint(1, 4))
        else:
            paragraphs = text.split("\n\n")
            i = self.py.randrange(len(paragraphs))
            sents = split_sentences(paragraphs[i])
            if op < 0.75 or len(sents) < 2:  # add a sentence
                sents.insert(self.py.randint(0, len(sents)), self.pool[self.py.randrange(len(self.pool))])
            else:  # remove one
                del sents[self.py.randrange(len(sents))]
            paragraphs[i] = " ".join(sents)
            edited = "\n\n".join(paragraphs)
        text, edited = head + text + tail, head + edited + tail
        sim = jaccard(text, edited)
        if sim < MIN_JACCARD or sim == 1.0:
            edited = head + self._replace_words(text[len(head):len(text) - len(tail)], 1) + tail
            sim = jaccard(text, edited)
        return edited, sim

    def _replace_words(self, text: str, n: int) -> str:
        tokens = text.split(" ")
        for _ in range(n):
            for _ in range(100):  # a purely alphabetic token, replaced by another word
                i = self.py.randrange(len(tokens))
                if tokens[i].isalpha():
                    break
            else:
                continue
            old = tokens[i].lower()
            for _ in range(100):
                cand = [w for w in self.pool[self.py.randrange(len(self.pool))].split(" ") if w.isalpha()]
                if cand:
                    new = self.py.choice(cand).lower()
                    if new != old:
                        tokens[i] = new
                        break
        return " ".join(tokens)


# ------------------------------------------------------------------------------ the corpus
FRAME_BYTES = 1 << 20  # JSON Lines bytes per write (and per frame of a seekable file)
SEEKABLE_MAGIC, SKIPPABLE_MAGIC = 0x8F92EAB1, 0x184D2A5E


def seek_table(frames: list[tuple[int, int]]) -> bytes:
    """The seekable-format index (skippable frame) for ``(compressed, decompressed)`` frame sizes."""
    body = b"".join(struct.pack("<II", c, d) for c, d in frames) + struct.pack("<IBI", len(frames), 0, SEEKABLE_MAGIC)
    return struct.pack("<II", SKIPPABLE_MAGIC, len(body)) + body


class _Part:
    """One output file: one zstd stream, or (``seekable``) one frame per ~1 MB plus a seek table."""

    def __init__(self, path: Path, cctx: Any, seekable: bool):
        self.raw, self.cctx, self.seekable = open(path, "wb"), cctx, seekable
        self.z = None if seekable else cctx.stream_writer(self.raw, closefd=False)
        self.frames: list[tuple[int, int]] = []
        self.buf: list[bytes] = []
        self.buffered = self.offset = 0  # offset: decompressed bytes so far (the next line's id)

    def write(self, line: bytes) -> None:
        self.buf.append(line)
        self.buffered += len(line)
        self.offset += len(line)
        if self.buffered >= FRAME_BYTES:
            self._flush()

    def _flush(self) -> None:
        if not self.buf:
            return
        chunk = b"".join(self.buf)
        self.buf, self.buffered = [], 0
        if self.seekable:
            frame = self.cctx.compress(chunk)
            self.raw.write(frame)
            self.frames.append((len(frame), len(chunk)))
        else:
            self.z.write(chunk)

    def close(self) -> int:
        self._flush()
        if self.seekable:
            self.raw.write(seek_table(self.frames))
        else:
            self.z.close()  # ends the frame; closefd=False leaves ``raw`` open
        size = self.raw.tell()
        self.raw.close()
        return size


class _Planter:
    """Decides each document: a plain article, a boilerplate page or a copy of an earlier one."""

    def __init__(self, w: Writer):
        self.w = w
        self.reservoir: list[tuple[str, str, int, str, int]] = []  # (id, file, offset, text, site) of originals
        self.originals = 0
        self.counts = {"plain": 0, "exact": 0, "near": 0, "boilerplate": 0}
        self.sim_n, self.sim_sum, self.sim_min = 0, 0.0, 1.0

    def next(self, doc_id: str, file: str, offset: int) -> tuple[str, dict[str, Any] | None]:
        """The document's text and its truth record (None for a plain article)."""
        w = self.w
        u = w.rng.random()
        where = {"id": doc_id, "file": file, "offset": offset}
        if self.reservoir and u < EXACT + NEAR:
            src_id, src_file, src_off, text, site = self.reservoir[int(w.rng.integers(len(self.reservoir)))]
            kind = "exact" if u < EXACT else "near"
            record = {**where, "kind": kind, "of": src_id, "of_file": src_file, "of_offset": src_off}
            if kind == "near":
                text, sim = w.near_copy(text, site)
                record["jaccard"] = round(sim, 4)
                self.sim_n, self.sim_sum, self.sim_min = self.sim_n + 1, self.sim_sum + sim, min(self.sim_min, sim)
            self.counts[kind] += 1
            return text, record
        record, site = None, -1
        if u < EXACT + NEAR + BOILERPLATE:
            site = int(w.rng.integers(len(SITES)))
            text, record = w.boilerplate(site), {**where, "kind": "boilerplate", "site": site}
        else:
            text = w.article(w.size(DOC_BYTES))
        self.counts["boilerplate" if record else "plain"] += 1
        entry = (doc_id, file, offset, text, site)  # Algorithm R: uniform over all originals so far
        if len(self.reservoir) < RESERVOIR:
            self.reservoir.append(entry)
        else:
            j = int(w.rng.integers(self.originals + 1))
            if j < RESERVOIR:
                self.reservoir[j] = entry
        self.originals += 1
        return text, record


def write_web_corpus(out: str | Path, total_bytes: int, *, seed: int = 0, books: str | Path | None = None,
                     file_bytes: int = 64 << 20, min_files: int = 2, level: int = 3,
                     seekable: bool = False) -> dict[str, Any]:
    """Write ``total_bytes`` of document text under ``out`` (see the module docstring); returns
    the summary (also ``out/summary.json``, written last)."""
    import zstandard

    start = time.perf_counter()
    out = Path(out)
    data = out / "data"
    data.mkdir(parents=True, exist_ok=True)
    for old in list(data.glob("part-*.jsonl.zst")) + [out / "summary.json"]:
        old.unlink(missing_ok=True)
    pool = sentence_pool(None if books is None else str(books))
    pool_seconds, start = time.perf_counter() - start, time.perf_counter()
    planter = _Planter(Writer(pool, seed))
    num_files = max(min_files, math.ceil(total_bytes / file_bytes))
    cctx = zstandard.ZstdCompressor(level=level, write_checksum=True)
    docs = text_bytes = jsonl_bytes = compressed = 0
    files = []
    with open(out / "truth.jsonl", "w") as truth:
        for f in range(num_files):
            name = f"part-{f:05d}.jsonl.zst"
            files.append(name)
            part = _Part(data / name, cctx, seekable)
            while text_bytes < total_bytes * (f + 1) // num_files:
                doc_id = f"web-{seed}-{docs:09d}"
                text, record = planter.next(doc_id, name, part.offset)
                if record is not None:
                    truth.write(json.dumps(record) + "\n")
                part.write((json.dumps({"id": doc_id, "text": text}, ensure_ascii=False) + "\n").encode())
                text_bytes += len(text.encode())
                docs += 1
            jsonl_bytes += part.offset
            compressed += part.close()
    seconds = time.perf_counter() - start
    p = planter
    summary = {"version": VERSION, "seed": seed, "target_bytes": int(total_bytes), "text_bytes": text_bytes,
               "jsonl_bytes": jsonl_bytes, "compressed_bytes": compressed, "documents": docs,
               "files": files, "seekable": seekable, "planted": p.counts, "sentences": len(pool),
               "source": "books" if books is not None and Path(books).is_dir() else "synthetic.prose",
               "near_jaccard": {"min": round(p.sim_min, 4), "mean": round(p.sim_sum / p.sim_n, 4)} if p.sim_n else {},
               "pool_seconds": round(pool_seconds, 3),  # reading the books: once per process
               "seconds": round(seconds, 3), "mb_per_sec": round(text_bytes / 1e6 / max(seconds, 1e-9), 2)}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def read_truth(out: str | Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (Path(out) / "truth.jsonl").read_text().splitlines() if line]


def read_documents(out: str | Path) -> list[dict[str, Any]]:
    """Every record of the corpus at ``out``, in file order (small corpora: tests)."""
    import zstandard

    rows = []
    for path in sorted((Path(out) / "data").glob("part-*.jsonl.zst")):
        with open(path, "rb") as f:
            data = zstandard.ZstdDecompressor().stream_reader(f).read()
        rows.extend(json.loads(line) for line in data.splitlines())
    return rows


if __name__ == "__main__":  # python -m synthetic.web_corpus OUT [MB] [SEED]: writes one, prints the summary
    import sys

    t = time.perf_counter()
    sentence_pool("/work/shared/data/corpus/gutenberg")
    print(f"sentence pool: {time.perf_counter() - t:.1f} s")
    mb, seed = float(sys.argv[2]) if len(sys.argv) > 2 else 10.0, int(sys.argv[3]) if len(sys.argv) > 3 else 0
    print(json.dumps(write_web_corpus(sys.argv[1], int(mb * 1e6), seed=seed, books="/work/shared/data/corpus/gutenberg"),
                     indent=2))
