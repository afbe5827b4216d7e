"""Deterministic English-like text for the demo, tests and benchmarks.

Nothing may be downloaded at run time, so the embedded demo corpus is generated: documents made
of paragraphs of sentences drawn from a small grammar over a Zipf-weighted vocabulary of real
English words. The text passes the default filter blocks (datatrove's Gopher, C4 and FineWeb
rules, English language ID) the way ordinary prose does: ten or more sentences (over 50 words)
per document, every paragraph ending in punctuation, several of Gopher's stop words. It has
enough lexical variety for a tokenizer to learn sub-words, and a tiny model can learn its
regularities in minutes. ``write_bad_files`` writes the kinds of bad
input a real crawl contains, so the demo shows quarantine at work.

The demo's fine-tuning task, and the class sentences its corpus needs so that pre-training has
something to teach, live in ``synthetic.class_task``; ``document(sentence_fn=...)`` and
``write_corpus(docs=...)`` are the hooks it uses. Without them the output is unchanged.
"""
from __future__ import annotations

import bz2
import gzip
import json
import random
from collections.abc import Callable
from pathlib import Path

_NOUNS = (
    "river city garden teacher student engine market village window mountain library history "
    "scientist painter harbour forest machine language theory island museum bridge kitchen "
    "farmer doctor letter journey morning evening winter summer council station factory "
    "village road castle planet signal network question answer number pattern season "
    "lighthouse orchard valley pilgrim merchant sailor soldier musician architect chemist "
    "manuscript telescope railway cathedral meadow canyon glacier volcano desert republic"
).split()
_VERBS = (
    "watched built crossed visited described studied remembered carried opened followed "
    "discovered painted measured repaired explained imagined protected counted collected "
    "observed translated questioned defended designed celebrated abandoned restored"
).split()
_ADJS = (
    "old quiet bright narrow ancient careful distant small famous northern gentle heavy "
    "curious patient silent golden broken modern rural crowded forgotten remarkable "
    "elegant fragile stubborn generous peculiar"
).split()
_ADJS_SET = frozenset(_ADJS)
_ADVS = "slowly quickly often rarely carefully suddenly finally quietly eagerly patiently".split()
_PREPS = "near across behind beyond under above through beside toward within with into".split()
_CONJ = ("and then", "but", "because", "while", "although", "so", "after", "before")
_SAID = ("said", "wrote", "believed", "heard", "knew", "had to admit")
_NAMES = "Ada Boris Clara Dmitri Elena Farid Greta Hiro Ines Jonas Kaori Luis Mira Nils Olga".split()


def _zipf_choice(rng: random.Random, words: tuple[str, ...] | list[str]) -> str:
    # Zipf-like: rank r drawn with weight 1/(r+1), so a few words dominate as in real text.
    n = len(words)
    weights = getattr(_zipf_choice, "_cache", {}).get(n)
    if weights is None:
        weights = [1.0 / (r + 1) for r in range(n)]
        _zipf_choice.__dict__.setdefault("_cache", {})[n] = weights
    return rng.choices(words, weights=weights, k=1)[0]


def sentence(rng: random.Random) -> str:
    subj = rng.choice(_NAMES) if rng.random() < 0.3 else f"the {_zipf_choice(rng, _ADJS)} {_zipf_choice(rng, _NOUNS)}"
    obj = f"the {_zipf_choice(rng, _NOUNS)}"
    if rng.random() < 0.35:
        obj += f" of the {_zipf_choice(rng, _NOUNS)}"
    parts = [subj, _zipf_choice(rng, _VERBS), obj]
    if rng.random() < 0.5:
        parts += [_zipf_choice(rng, _PREPS), "the", _zipf_choice(rng, _ADJS), _zipf_choice(rng, _NOUNS)]
    if rng.random() < 0.3:
        parts.insert(1, _zipf_choice(rng, _ADVS))
    if rng.random() < 0.35:
        parts += [rng.choice(_CONJ), rng.choice(_NAMES), _zipf_choice(rng, _VERBS), "it"]
    if rng.random() < 0.15:
        parts = [rng.choice(_NAMES), rng.choice(_SAID), "that", parts[0].lower() if parts[0][0] == "T" else parts[0]] + parts[1:]
    text = " ".join(parts)
    return text[0].upper() + text[1:] + rng.choice((".", ".", ".", "!", "?"))


def document(rng: random.Random, *, paragraphs: tuple[int, int] = (2, 5), sentences: tuple[int, int] = (5, 9),
             sentence_fn: Callable[[random.Random], str] = sentence) -> str:
    """One document: paragraphs (one per line, as sentence-per-line corpora are) of sentences.

    ``sentence_fn`` draws each sentence (``synthetic.class_task`` mixes in class sentences).
    """
    lines = []
    for _ in range(rng.randint(*paragraphs)):
        lines.append(" ".join(sentence_fn(rng) for _ in range(rng.randint(*sentences))))
    return "\n".join(lines)


def documents(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [document(rng) for _ in range(n)]


def write_corpus(out_dir: str | Path, *, num_docs: int = 400, seed: int = 0, num_files: int = 4,
                 near_duplicates: float = 0.05, exact_duplicates: float = 0.05,
                 bad_files: bool = True, docs: list[str] | None = None) -> Path:
    """A small raw corpus in mixed formats, with planted duplicates and (optionally) bad files.

    Text files hold blank-line-separated documents; one file is gzip, one bz2, one JSON Lines.
    ``docs`` replaces the generated documents (``num_docs`` is then ignored), e.g. the class-bearing
    documents of ``synthetic.class_task``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    docs = documents(num_docs, seed) if docs is None else list(docs)
    num_docs = len(docs)
    extra = []
    for d in rng.sample(docs, int(num_docs * exact_duplicates)):
        extra.append(d)
    for d in rng.sample(docs, int(num_docs * near_duplicates)):
        words = d.split(" ")
        for _ in range(max(1, len(words) // 60)):  # edit ~1.5% of the words
            words[rng.randrange(len(words))] = _zipf_choice(rng, _NOUNS)
        extra.append(" ".join(words))
    docs = docs + extra
    rng.shuffle(docs)
    chunks = [docs[i::num_files] for i in range(num_files)]
    for i, chunk in enumerate(chunks):
        kind = i % 4
        if kind == 0:
            (out / f"part-{i:03d}.txt").write_text("\n\n".join(chunk) + "\n")
        elif kind == 1:
            with gzip.open(out / f"part-{i:03d}.txt.gz", "wt") as f:
                f.write("\n\n".join(chunk) + "\n")
        elif kind == 2:
            with bz2.open(out / f"part-{i:03d}.txt.bz2", "wt") as f:
                f.write("\n\n".join(chunk) + "\n")
        else:
            with open(out / f"part-{i:03d}.jsonl", "w") as f:
                for d in chunk:
                    f.write(json.dumps({"text": d, "meta": {"source": "synthetic"}}) + "\n")
    if bad_files:
        write_bad_files(out, rng)
    return out


def write_bad_files(out: Path, rng: random.Random) -> None:
    """The usual debris of a crawl: every one must be quarantined with a reason, never fatal."""
    good = document(rng)
    blob = gzip.compress(("\n\n".join(document(rng) for _ in range(5))).encode())
    (out / "bad-truncated.txt.gz").write_bytes(blob[: len(blob) // 2])
    (out / "bad-binary.txt").write_bytes(bytes(rng.randrange(256) for _ in range(4096)) + b"\x00" * 64)
    (out / "bad-empty.txt").write_bytes(b"")
    # Broken UTF-8 (valid multi-byte sequences beside stray bytes) is quarantined; a legacy
    # single-byte text (cp1252) is decoded and counted under its encoding.
    (out / "bad-utf8.txt").write_bytes(good.encode() + "\n\nBroken café \xff\xfe bytes here in this one.\n\n".encode(
        "utf-8", "surrogateescape").replace(b"\xc3\xbf\xc3\xbe", b"\xff\xfe") + document(rng).encode())
    (out / "legacy-cp1252.txt").write_bytes(document(rng).replace("the ", "the naïve ", 3).encode("cp1252"))
    (out / "bad-short.txt").write_text("too short\n\nspam spam spam spam spam spam\n")
    (out / "bad-json.jsonl").write_text('{"text": "' + document(rng).replace("\n", "\\n") + '"}\n{not json\n{"body": "no text field"}\n')

