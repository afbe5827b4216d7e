"""A corpus that grows while a run trains on it, end to end with real books and the real commands.

A corpus is built from one book (``electra-build-corpus``, books profile); a tiny run starts on it
with the sample log on; after its second step the run's own hook (``_train_appending.py``) runs
``electra-build-corpus --append`` with three more books, an exact copy of the first book and a
near copy (1% of its words changed). Then: both copies dropped, each quarantined record naming
the first book's document and generation 0; the first build's shards byte-identical; the run,
never restarted, trains on the appended books from its next epoch on (its sample log's
generations and document uids), and not before.

Independent references: the document uids are computed here from the ids ingest gives books (the
file's path under its source: ``common.hashing.stable_uid``), the shards are hashed before and
after, and the copies are made here.
"""
from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
import zstandard

from common.hashing import stable_uid
from pipelines import schema

ROOT = Path(__file__).resolve().parents[2]
BOOKS = ROOT.parent / "shared" / "data" / "corpus" / "gutenberg"
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not BOOKS.is_dir(), reason=f"the books are not in {BOOKS} (shared data absent)")]
SLICE = 24_000  # characters of each book, from its middle (past the licence header)
NAMES = ["pg105.txt", "pg110.txt", "pg120.txt", "pg1232.txt"]


def _slice(name: str) -> str:
    text = (BOOKS / name).read_text(encoding="utf-8", errors="replace")
    start = len(text) // 3
    return text[start:start + SLICE]


def _cli(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", "cli.build_corpus", *args], cwd=ROOT, capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


def _rejected(corpus: Path) -> list[dict]:
    rows = []
    for part in sorted(corpus.glob(f"{schema.REJECTED_DIR}/*dedup-*/*.jsonl.zst")):
        rows += [json.loads(line) for line in zstandard.decompress(part.read_bytes()).decode().splitlines()]
    return rows


def test_an_append_during_training_joins_the_run_at_its_next_epoch(tmp_path):
    first = tmp_path / "first"
    first.mkdir()
    (first / "book1.txt").write_text(_slice(NAMES[0]))
    more = tmp_path / "more"
    more.mkdir()
    for i, name in enumerate(NAMES[1:], start=2):
        (more / f"book{i}.txt").write_text(_slice(name))
    (more / "copy-exact.txt").write_text(_slice(NAMES[0]))
    words = _slice(NAMES[0]).split(" ")
    for i in random.Random(1).sample(range(len(words)), len(words) // 100):
        words[i] = "quux"
    (more / "copy-near.txt").write_text(" ".join(words))

    corpus = tmp_path / "corpus"
    _cli("--source", str(first), "--out", str(corpus), "--profile", "books", "--seq-len", "64",
         "--vocab-size", "2000", "--validation-fraction", "0")
    gen0 = schema.Manifest.load(str(corpus))
    before = {s.path: hashlib.sha256((corpus / s.path).read_bytes()).hexdigest() for s in gen0.shards}
    steps0 = -(-gen0.splits["train"].num_examples // 8)  # steps of epoch 0: a global batch of 8

    run = tmp_path / "run"
    train = [sys.executable, "tests/flows/_train_appending.py", "--append-after", "2", str(more), str(corpus),
             "--config", "tiny", "--data", str(corpus), "--out", str(run), "--max-steps", str(steps0 + 6),
             "--micro-batch", "8", "--set", "train.global_batch_size=8", "--set", "train.eval_every=0",
             "--set", "data.log_samples=true", "--set", "data.num_workers=0", "--set", "train.log_every=1",
             "--set", f"optimizer.total_steps={steps0 + 6}", "--set", "optimizer.warmup_steps=2"]
    p = subprocess.run(train, cwd=ROOT, capture_output=True, text=True, timeout=1200,
                       env={**__import__("os").environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    assert "append after step 2: exit 0" in p.stdout

    grown = schema.Manifest.load(str(corpus))
    assert [g.name for g in grown.generations][0] == gen0.generation and len(grown.generations) == 2
    assert {s.path: hashlib.sha256((corpus / s.path).read_bytes()).hexdigest() for s in gen0.shards} == before
    dropped = {r["id"]: r for r in _rejected(corpus) if r["reason"].startswith("dedup:")}
    # ids: the file's path under its source folder, and the document's byte offset (0: a book is one)
    assert set(dropped) == {"more/copy-exact.txt:0", "more/copy-near.txt:0"}, dropped
    assert dropped["more/copy-exact.txt:0"]["reason"] == "dedup:exact"
    assert dropped["more/copy-near.txt:0"]["reason"] == "dedup:near"
    for r in dropped.values():
        assert r["detail"].startswith("duplicate of document 'first/book1.txt:0' ") and "of generation 0" in r["detail"]

    appended = {stable_uid(f"more/book{i}.txt:0") for i in (2, 3, 4)}
    log = [json.loads(line) for line in (run / "samples" / "rank0.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == list(range(1, steps0 + 7))
    new_gen = grown.generations[1].name
    for r in log:
        uids = {k[0] for k in r["keys"]}
        if r["step"] <= steps0:  # epoch 0, on the corpus the run started with (the append came at step 2)
            assert not uids & appended and set(r["generation"]) == {gen0.generation}, r
    later = [r for r in log if r["step"] > steps0]
    assert any(uids & appended for uids in ({k[0] for k in r["keys"]} for r in later))
    assert any(new_gen in r["generation"] for r in later)
    assert all(((k[0] in appended) == (g == new_gen)) for r in log for k, g in zip(r["keys"], r["generation"]))
