"""benchmarks/corpus/languages: the document helpers by hand, and the --smoke run's JSON checked for
structure and internal consistency (no speed assertion)."""
from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.corpus import _language_docs as ld

REPO = Path(__file__).resolve().parents[3]
TEXTS = REPO / "bench_out" / "languages"


def test_near_copy_edits_letters_only():
    text = "The quick brown fox jumps over the lazy dog.\n\n敏捷的棕色狐狸跳过了懒狗。 " * 20
    copy, edits = ld.near_copy(text, 0.02, random.Random(3))
    assert edits == round(0.02 * len(text)) and copy != text
    assert [c for c in copy if c.isspace()] == [c for c in text if c.isspace()]  # whitespace untouched
    assert set(copy) <= set(text)  # substitutes and insertions come from the same text
    assert abs(len(copy) - len(text)) <= edits


def test_group_sections_by_chapter():
    recs = [{"text": " ".join(["w"] * n), "source": f"p:{ch}.html#{i}", "kind": "prose"}
            for i, (ch, n) in enumerate([("a", 60), ("a", 60), ("a", 40), ("a", 10), ("b", 30), ("c", 120)])]
    docs, left_out = ld.group_sections(recs, str.split, 100)
    assert [(d["chapter"], d["sections"], d["words"]) for d in docs] == [("a.html", 4, 170), ("c.html", 1, 120)]
    assert left_out == 1  # chapter b never reaches 100 words
    assert docs[0]["text"].count("\n\n") == 3


def test_plant_and_offsets_are_the_pipelines_ids(tmp_path):
    from pipelines.config import IngestConfig
    from pipelines.ingest import resolve_sources
    from pipelines.ingest.documents import read_documents

    docs = [{"text": f"Document {i} says something ünïcode 中文 here.\n\nSecond paragraph {i}."} for i in range(20)]
    records = ld.plant(docs, exact=0.15, near=0.15, rate=0.05, seed=1, name="x")
    assert records == ld.plant(docs, exact=0.15, near=0.15, rate=0.05, seed=1, name="x")  # seeded
    roles = [r["role"] for r in records]
    assert roles.count("original") == 20 and roles.count("exact") == 3 and roles.count("near") == 3
    offsets = ld.write_jsonl(tmp_path / "data" / "docs.jsonl", records)
    sources = resolve_sources([str(tmp_path / "data")])
    texts = {}
    for batch in read_documents(sources.files[0], IngestConfig(), name=sources.names[0]):
        texts.update(zip(batch["id"], batch["text"]))
    assert [texts[f"{sources.names[0]}:{o}"] for o in offsets] == [r["text"] for r in records]


def test_scores_by_hand():
    from common.hashing import stable_uid

    records = [{"role": "original", "doc": 0}, {"role": "exact", "doc": 0}, {"role": "original", "doc": 1},
               {"role": "near", "doc": 1}, {"role": "original", "doc": 2}, {"role": "near", "doc": 2},
               {"role": "original", "doc": 3}]
    ids = [f"f:{i}" for i in range(len(records))]
    dup = (lambda i: f"duplicate of uid {stable_uid(f'f:{i}')}")
    rejected = {"f:1": ("dedup:exact", dup(0)), "f:3": ("filter:c4:x", ""), "f:5": ("dedup:near", dup(4)),
                "f:6": ("dedup:near", dup(0))}
    kept = ld.clean_kept(records, ids, rejected)
    assert kept == {"originals": 4, "dropped": 0, "kept": 4, "share": 1.0, "reasons": {},
                    "copy_reasons": {"filter:c4:x": 1}, "dropped_originals": []}
    d = ld.dedup_scores(records, ids, rejected)
    assert (d["exact"]["eligible"], d["exact"]["removed"], d["exact"]["precision"]) == (1, 1, 1.0)
    assert (d["near"]["planted"], d["near"]["eligible"], d["near"]["recall"]) == (2, 1, 1.0)
    assert (d["near"]["dropped"], d["near"]["right"], d["near"]["precision"]) == (2, 1, 0.5)
    assert [f["id"] for f in d["false_removals"]] == ["f:6"]


@pytest.mark.timeout(300)
def test_smoke_report_is_consistent(tmp_path):
    if not (TEXTS / "dev" / "en.jsonl").is_file():
        pytest.skip(f"no language texts in {TEXTS}: run benchmarks/corpus/language_texts.py (Debian packages)")
    out = tmp_path / "report.json"
    p = subprocess.run([sys.executable, "benchmarks/corpus/languages.py", "--smoke", "--json", str(out)],
                       cwd=REPO, capture_output=True, text=True, timeout=280)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "dedup near" in p.stdout and "load average" in p.stdout
    r = json.loads(out.read_text())
    langs = ["en", "zh-cn"]
    assert r["langs"] == langs and r["smoke"] is True
    for part in ("documents", "builds", "kept", "dedup", "blocks"):
        assert list(r[part]) == langs, part
    assert list(r["tokenizer"]) == langs + ["ru-fortunes"]
    assert len(r["english_runs"]) == 1 and r["builds"]["en"]["ratio"] == 1.0
    for n in langs:
        doc, b, k, d = r["documents"][n], r["builds"][n], r["kept"][n], r["dedup"][n]
        assert doc["records"] == doc["documents"] + doc["exact_copies"] + doc["near_copies"]
        assert b["filter"]["documents_in"] == doc["records"] and b["mb_s"] > 0 and b["seconds"] > 0
        assert b["filter"]["documents_out"] + sum(b["filter"]["dropped"].values()) == b["filter"]["documents_in"]
        assert k["originals"] == doc["documents"] and k["kept"] + k["dropped"] == k["originals"]
        assert sum(k["reasons"].values()) == k["dropped"] == len(k["dropped_originals"]) and 0 <= k["share"] <= 1
        assert k["share"] == round(k["kept"] / k["originals"], 4)
        for kind, planted in (("exact", doc["exact_copies"]), ("near", doc["near_copies"])):
            s = d[kind]
            assert s["planted"] == planted and s["removed"] <= s["eligible"] <= s["planted"]
            assert sum(s["removed_as"].values()) == s["removed"] and s["right"] <= s["dropped"]
            assert 0 <= s["recall"] <= 1 and 0 <= s["precision"] <= 1
        assert d["exact"]["removed"] == d["exact"]["eligible"] > 0  # identical copies: the ids map right
        assert len(d["false_removals"]) == sum(d[x]["dropped"] - d[x]["right"] for x in ("exact", "near"))
        assert 0 <= doc["near_jaccard_min"] <= doc["near_jaccard_mean"] <= 1
        assert {"splitter", "all blocks"} <= set(r["blocks"][n]["mb_s"])
        assert all(v > 0 for v in r["blocks"][n]["mb_s"].values())
    for n, t in r["tokenizer"].items():
        for kind in ("wordpiece", "unigram"):
            assert 0 <= t[kind]["unk"] <= 1 and 0 <= t[kind]["unk_chars"] <= 1, (n, kind)
            assert t[kind]["chars_per_token"] > 0 and t[kind]["vocab"] <= 8000, (n, kind)
    assert set(r["goals"]) == {"speed", "clean_kept", "dedup_exact", "dedup_near", "unk_wordpiece", "unk_unigram"}
    assert all(isinstance(g["met"], bool) for g in r["goals"].values())
    assert r["machine"]["kind"] and len(r["loadavg_end"]) == 3
