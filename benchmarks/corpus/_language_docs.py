"""Documents for benchmarks/corpus/languages.py: web-page-sized prose per language, planted
duplicates, the input file with its byte offsets, the scores computed against that truth, and
the tokenizer figures.

Helpers only (the benchmark's module docstring says what is measured and how).
"""
from __future__ import annotations

import json
import random
import re
import unicodedata
import zlib
from collections import Counter, defaultdict
from pathlib import Path

# name -> (group, ISO 639-1 code, script). Texts from benchmarks/corpus/language_texts.py.
LANGS = {
    "en": ("dev", "en", "Latin"), "zh-cn": ("dev", "zh", "Han"), "fr": ("dev", "fr", "Latin"),
    "de": ("dev", "de", "Latin"), "es": ("dev", "es", "Latin"), "pt": ("dev", "pt", "Latin"),
    "ja": ("heldout", "ja", "Japanese"), "it": ("heldout", "it", "Latin"),
    "ru-fortunes": ("heldout", "ru", "Cyrillic"),  # short fortunes: the tokenizer part only
}
EDIT_OPS = ("sub", "sub", "del", "ins")  # substitutions half of the edits, deletions and insertions a quarter each
_DUP_OF = re.compile(r"uid (\d+)")


def load(texts: Path, name: str) -> list[dict]:
    """The ``{"text", "source", "kind"}`` records of ``texts/<group>/<name>.jsonl``, in file order."""
    path = texts / LANGS[name][0] / f"{name}.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def word_count(text: str, split) -> int:
    """Words of ``text`` by ``split``, punctuation-only tokens not counted (as Gopher counts)."""
    from pipelines.filters.text import is_symbol

    return sum(not is_symbol(w) for w in split(text))


def chapter(source: str) -> str:
    """``debian-reference-fr_2.100:ch01.fr.html#_x`` -> ``ch01.fr.html`` (a fortune: its file)."""
    return source.split(":", 1)[-1].split("#", 1)[0]


def group_sections(records: list[dict], split, min_words: int) -> tuple[list[dict], int]:
    """Consecutive sections of one chapter joined (blank line between them) until the group has
    ``min_words`` words; a chapter's short tail joins its last group, a chapter with fewer words
    in all is left out. Returns (documents ``{"text", "chapter", "sections", "words"}``,
    sections left out)."""
    by_chapter: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        by_chapter[chapter(r["source"])].append(r)
    docs, left_out = [], 0
    for name, sections in by_chapter.items():
        groups, texts, words = [], [], 0
        for s in sections:
            texts.append(s["text"])
            words += word_count(s["text"], split)
            if words >= min_words:
                groups.append([texts, words])
                texts, words = [], 0
        if texts and groups:
            groups[-1][0] += texts
            groups[-1][1] += words
        elif texts:
            left_out += len(texts)
        docs += [{"text": "\n\n".join(t), "chapter": name, "sections": len(t), "words": w} for t, w in groups]
    return docs, left_out


def script_of(ch: str) -> str:
    """First word of the character's Unicode name: LATIN, CJK, HIRAGANA, KATAKANA, CYRILLIC..."""
    return unicodedata.name(ch, "?").split(" ", 1)[0]


def near_copy(text: str, rate: float, rng: random.Random) -> tuple[str, int]:
    """``text`` with ``rate`` of its characters edited at letters, never at whitespace: a letter
    substituted by another letter of its script from the same text, deleted, or preceded by an
    inserted one. Returns (the copy, edits made)."""
    letters = [i for i, c in enumerate(text) if c.isalpha()]
    found: dict[str, set[str]] = defaultdict(set)
    for i in letters:
        found[script_of(text[i])].add(text[i])
    pools = {k: sorted(v) for k, v in found.items()}
    n = min(len(letters), max(1, round(rate * len(text))))
    out = list(text)
    for i in rng.sample(letters, n):
        c = text[i]
        pool = pools[script_of(c)]
        op = rng.choice(EDIT_OPS)
        if op == "sub" and len(pool) > 1:
            out[i] = rng.choice([p for p in pool if p != c])
        elif op == "ins":
            out[i] = rng.choice(pool) + c
        else:
            out[i] = ""
    return "".join(out), n


def plant(docs: list[dict], *, exact: float, near: float, rate: float, seed: int, name: str) -> list[dict]:
    """Every document as an ``original`` plus exact copies of ``exact`` of them and near copies
    (``near_copy``) of another ``near``, shuffled; each record ``{"text", "role", "doc"}`` where
    ``doc`` indexes ``docs``. Seeded by ``seed`` and the language's name."""
    rng = random.Random(seed * 1_000_003 + zlib.crc32(name.encode()))
    n_exact, n_near = round(exact * len(docs)), round(near * len(docs))
    picked = rng.sample(range(len(docs)), min(len(docs), n_exact + n_near))
    records = [{"text": d["text"], "role": "original", "doc": i} for i, d in enumerate(docs)]
    for k, i in enumerate(picked):
        if k < n_exact:
            records.append({"text": docs[i]["text"], "role": "exact", "doc": i})
        else:
            text, edits = near_copy(docs[i]["text"], rate, rng)
            records.append({"text": text, "role": "near", "doc": i, "edits": edits})
    rng.shuffle(records)
    return records


def write_jsonl(path: Path, records: list[dict]) -> list[int]:
    """Write the records one JSON object a line; returns each line's byte offset (the id's)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    offsets, pos, lines = [], 0, []
    for r in records:
        line = (json.dumps(r, ensure_ascii=False) + "\n").encode("utf-8")
        offsets.append(pos)
        pos += len(line)
        lines.append(line)
    path.write_bytes(b"".join(lines))
    return offsets


# ------------------------------------------------------------------------------ scores
def stage_of(reason: str) -> str:
    """``filter`` / ``dedup`` / ``ingest`` / ``decontaminate`` / ``kept`` ("")."""
    return reason.split(":", 1)[0] if reason else "kept"


def clean_kept(records: list[dict], ids: list[str], rejected: dict[str, tuple[str, str]]) -> dict:
    """Share of the original documents that passed the filter stage, and the drop reasons of the
    originals and of the copies (the filter's own, and ingest's should there be any)."""
    total, dropped, reasons, copy_reasons, details = 0, 0, Counter(), Counter(), []
    for r, i in zip(records, ids):
        reason, detail = rejected.get(i, ("", ""))
        before_dedup = stage_of(reason) in ("filter", "ingest", "decontaminate")
        if r["role"] == "original":
            total += 1
            dropped += before_dedup
            if before_dedup:
                reasons[reason] += 1
                details.append({"id": i, "reason": reason, "detail": detail})
        elif before_dedup:
            copy_reasons[reason] += 1
    return {"originals": total, "dropped": dropped, "kept": total - dropped,
            "share": round((total - dropped) / total, 4) if total else 1.0,
            "reasons": dict(reasons.most_common()), "copy_reasons": dict(copy_reasons.most_common()),
            "dropped_originals": details}


def dedup_scores(records: list[dict], ids: list[str], rejected: dict[str, tuple[str, str]]) -> dict:
    """Recall per planted kind (a pair whose two members both reached dedup counts when one of
    them was removed by dedup) and precision per dedup reason (a removal is right when the
    removed document and the one it duplicates, ``duplicate of uid N``, are the same pair)."""
    from common.hashing import stable_uid

    pair_of: dict[int, int] = {}  # uid -> doc index of its pair (planted pairs only)
    members: dict[int, list[str]] = defaultdict(list)  # doc -> ids of original and copy
    kind_of: dict[int, str] = {}
    for r, i in zip(records, ids):
        members[r["doc"]].append(i)
        if r["role"] != "original":
            kind_of[r["doc"]] = r["role"]
    for doc in kind_of:
        for i in members[doc]:
            pair_of[stable_uid(i)] = doc
    out: dict[str, dict] = {}
    for kind in ("exact", "near"):
        eligible = removed = 0
        by_reason: Counter = Counter()
        for doc, k in kind_of.items():
            if k != kind:
                continue
            reasons = [rejected.get(i, ("", ""))[0] for i in members[doc]]
            if all(stage_of(x) in ("kept", "dedup") for x in reasons):
                eligible += 1
                hit = [x for x in reasons if stage_of(x) == "dedup"]
                removed += bool(hit)
                by_reason.update(hit[:1])
        out[kind] = {"planted": sum(k == kind for k in kind_of.values()), "eligible": eligible,
                     "removed": removed, "recall": round(removed / eligible, 4) if eligible else 1.0,
                     "removed_as": dict(by_reason)}
    false: list[dict] = []
    for reason in ("dedup:exact", "dedup:near"):
        dropped = right = 0
        for i, (why, detail) in rejected.items():
            if why != reason:
                continue
            dropped += 1
            m = _DUP_OF.search(detail)
            me, target = pair_of.get(stable_uid(i)), pair_of.get(int(m.group(1))) if m else None
            if me is not None and me == target:
                right += 1
            else:
                false.append({"id": i, "reason": why, "detail": detail})
        out[reason.split(":")[1]].update(dropped=dropped, right=right,
                                          precision=round(right / dropped, 4) if dropped else 1.0)
    out["false_removals"] = false
    return out


def shingle_size(text: str, cfg) -> str:
    """The shingles near dedup cuts ``text`` into (``pipelines.dedup.minhash``: per run of one
    script kind): ``5w`` (word ``cfg.ngram``-grams) for text without spaceless characters, ``3c``
    (character ``cfg.spaceless_ngram``-grams) for text only in spaceless scripts, ``5w+3c`` for both."""
    from pipelines.language.scripts import SPACELESS, space_out

    spaceless = SPACELESS.search(text) is not None
    spaced = re.search(r"[^\s!-/:-@\[-`{-~]", space_out(SPACELESS.sub(" ", text))) is not None
    return "+".join([f"{cfg.ngram}w"] * spaced + [f"{cfg.spaceless_ngram}c"] * spaceless)


def near_jaccard(records: list[dict], docs: list[dict], cfg) -> tuple[list[float], list[str]]:
    """True Jaccard of each near copy with its original over the shingles near dedup uses
    (``pipelines.dedup.minhash.shingle_hashes``; what MinHash estimates), and the shingle kinds."""
    from pipelines.dedup.minhash import shingle_hashes

    out, sizes = [], []
    for r in records:
        if r["role"] != "near":
            continue
        h, d = shingle_hashes([docs[r["doc"]]["text"], r["text"]], cfg.ngram, cfg.spaceless_ngram)
        a, b = set(h[d == 0].tolist()), set(h[d == 1].tolist())
        out.append(round(len(a & b) / max(len(a | b), 1), 4))
        sizes.append(shingle_size(docs[r["doc"]]["text"], cfg))
    return out, sizes


# ------------------------------------------------------------------------------ tokenizer
def tokenizer_stats(texts: list[str], vocab: int, tmp: Path, code: str = "en") -> dict:
    """WordPiece and Unigram (``pipelines.tokenizer.train_tokenizer``, ``vocab`` pieces) trained
    on ``texts`` and encoding them: [UNK] share of the tokens and of the characters (a WordPiece
    word with one unknown character is one [UNK] for all of it), characters per token; and the
    [UNK] token share on every 5th text of a tokenizer trained on the other texts (``unk_unseen``)."""
    from tokenizers import Tokenizer

    from pipelines.config import CorpusConfig
    from pipelines.tokenizer import train_tokenizer

    def measure(train: list[str], test: list[str], kind: str, where: Path) -> dict:
        # the build's own tokenizer settings for the language (a spaceless one keeps every character)
        cfg = CorpusConfig.from_dict({"language": [code], "tokenizer": {"kind": kind, "vocab_size": vocab}}).tokenizer
        train_tokenizer(train, cfg, str(where))
        tok = Tokenizer.from_file(str(where / "tokenizer.json"))
        n = unk = unk_chars = 0
        for e in tok.encode_batch(test, add_special_tokens=False):
            n += len(e.ids)
            for i, (a, b) in zip(e.ids, e.offsets):
                if i == 1:
                    unk += 1
                    unk_chars += b - a
        chars = sum(map(len, test))
        return {"unk": round(unk / max(n, 1), 5), "unk_chars": round(unk_chars / max(chars, 1), 5),
                "chars_per_token": round(chars / max(n, 1), 3), "vocab": tok.get_vocab_size()}

    out: dict = {}
    for kind in ("wordpiece", "unigram"):
        out[kind] = measure(texts, texts, kind, tmp / kind)
        rest, held = [t for i, t in enumerate(texts) if i % 5], texts[::5]
        out[kind]["unk_unseen"] = measure(rest, held, kind, tmp / f"{kind}-4of5")["unk"] if len(texts) >= 5 else None
    out["mb"] = round(sum(len(t.encode()) for t in texts) / 1e6, 4)
    out["documents"] = len(texts)
    out["distinct_chars"] = len({c for t in texts for c in t if not c.isspace()})
    return out


def fortunes(texts: Path, name: str, kb: int) -> list[str]:
    """Every k-th fortune of ``name`` up to ``kb`` KB (fortunes run ~300 bytes: spread over the file)."""
    docs = [r["text"] for r in load(texts, name)]
    budget, picked = kb * 1000, []
    for t in docs[::max(1, len(docs) * 300 // budget)]:
        if budget <= 0:
            break
        picked.append(t)
        budget -= len(t.encode())
    return picked
