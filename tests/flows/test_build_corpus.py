"""End to end: the build-corpus flow on a generated corpus with good and bad files.

Runs under Prefect's test harness with real Ray Data, then reads every shard back with plain
``tarfile`` + ``numpy`` and with ``webdataset`` and checks the manifest against the contents.
"""
from __future__ import annotations

import dataclasses
import io
import json
import os
import sys
import tarfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import webdataset as wds
import zstandard

from common.config import ConfigError
from flows.build_corpus import build_corpus
from pipelines.corpus_job import corpus_config
from pipelines import schema
from synthetic import prose
from pipelines.config import FilterConfig
from pipelines.filters import normalize_text
from pipelines.ingest import SourceError
from tests._procs import run_in_group

NUM_DOCS = 300
FLOW_CONFIG = {"tokenizer": {"vocab_size": 1500, "min_frequency": 1}, "shard": {"min_shards_per_split": 4}}
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, ray_local, prefect_harness):
    raw = prose.write_corpus(tmp_path_factory.mktemp("raw"), num_docs=NUM_DOCS, seed=3)
    out = tmp_path_factory.mktemp("corpus")
    manifest = build_corpus(source=[str(raw)], out=str(out), seq_len=64, validation_fraction=0.1,
                            seed=7, config=FLOW_CONFIG, keep_cache=True)
    return raw, out, manifest


def _chunks(path: Path) -> list[dict[str, np.ndarray]]:
    """A shard read with plain tarfile + numpy: one dict of arrays per chunk, in member order."""
    chunks: dict[str, dict[str, np.ndarray]] = {}
    with tarfile.open(path) as tar:
        for m in tar.getmembers():
            assert m.isfile() and "/" not in m.name and not m.name.startswith(".")
            key, ext = m.name.split(".", 1)
            chunks.setdefault(key, {})[ext] = np.load(io.BytesIO(tar.extractfile(m).read()), allow_pickle=False)
    return list(chunks.values())


def test_manifest_matches_every_shard(corpus):
    _, out, _ = corpus
    manifest = schema.Manifest.load(str(out))
    assert manifest.seq_len == 64 and manifest.format_version == schema.FORMAT_VERSION
    tok = out / manifest.tokenizer.path
    assert manifest.tokenizer.sha256 == __import__("hashlib").sha256((tok / "tokenizer.json").read_bytes()).hexdigest()
    assert (tok / "vocab.txt").is_file()
    assert len(manifest.shards_for("train")) >= 2 and manifest.shards_for("validation")
    special = manifest.tokenizer.special_tokens
    totals = {s: [0, 0] for s in schema.SPLITS}
    keys = set()
    for info in manifest.shards:
        path = out / info.path
        assert path.stat().st_size == info.bytes
        examples = tokens = 0
        for chunk in _chunks(path):
            ids, layout, ukeys = chunk["tokens.npy"], chunk["layout.npy"], chunk["keys.npy"]
            assert ids.dtype == np.uint16 and layout.dtype == np.uint32 and ukeys.dtype == np.uint64
            start = 0
            for (length, b_start), (uid, ordinal) in zip(layout.tolist(), ukeys.tolist()):
                ex = ids[start:start + length]
                start += length
                assert 2 <= length <= 64 and 2 <= b_start <= length
                assert ex[0] == special["[CLS]"] and ex[-1] == special["[SEP]"] and ex[b_start - 1] == special["[SEP]"]
                assert 0 not in ex  # unpadded: no [PAD] stored
                assert (uid, ordinal) not in keys, "an example appears twice"
                keys.add((uid, ordinal))
            assert start == len(ids)
            examples += len(layout)
            tokens += len(ids)
        assert (examples, tokens) == (info.num_examples, info.num_tokens)
        totals[info.split][0] += examples
        totals[info.split][1] += tokens
        # Plain webdataset reads the same chunks, and the schema decodes its samples.
        ds = wds.WebDataset(str(path), shardshuffle=False).decode()
        assert sum(len(schema.decode_sample(s)) for s in ds) == info.num_examples
    for split, (n, t) in totals.items():
        assert (manifest.splits[split].num_examples, manifest.splits[split].num_tokens) == (n, t)
        assert manifest.splits[split].num_documents > 0
    assert manifest.stats["shard"]["bytes_per_token"] == pytest.approx(
        sum(s.bytes for s in manifest.shards) / sum(s.num_tokens for s in manifest.shards), abs=1e-3)


def test_bad_input_is_counted_and_quarantined(corpus):
    _, out, manifest = corpus
    dropped = manifest["stats"]["summary"]["dropped_by_reason"]
    for reason in ("ingest:corrupt_compression", "ingest:binary", "ingest:empty_file",
                   "ingest:invalid_utf8", "ingest:bad_json", "ingest:missing_field",
                   "dedup:exact", "dedup:near"):
        assert dropped.get(reason, 0) >= 1, (reason, dropped)
    assert any(r.startswith("filter:") for r in dropped), dropped
    # The cp1252 file is read, not rejected: its document is decoded and counted by encoding.
    encodings = manifest["stats"]["ingest"]["encodings"]
    assert encodings.get("cp1252", 0) >= 1 and encodings["utf-8"] >= NUM_DOCS * 0.9, encodings
    assert dropped["dedup:exact"] >= int(NUM_DOCS * 0.05) * 0.9
    reasons = []
    for r in _rejected(out):
        text = zstandard.ZstdDecompressor().stream_reader(io.BytesIO((out / r["path"]).read_bytes())).read()
        reasons += [json.loads(line)["reason"] for line in text.decode().splitlines()]
    assert {r: reasons.count(r) for r in set(reasons)} == dropped


def _rejected(out: Path) -> list[dict]:
    """The quarantine's parts, from the lists the manifest names (the flow's result names them)."""
    return [dataclasses.asdict(r) for r in schema.Manifest.load(str(out)).rejected]


def test_every_good_document_survives_exactly_once(corpus):
    _, out, manifest = corpus
    originals = {normalize_text(d, FilterConfig()) for d in prose.documents(NUM_DOCS, seed=3)}
    near = [p for p in (out / schema.WORK_DIR).iterdir() if p.name.startswith("near_dedup-")]
    assert len(near) == 1  # keep_cache: the stage's documents are still there
    kept_rows = pq.read_table(near[0] / "data").to_pylist()
    kept = [r["text"] for r in kept_rows]
    kept_uids = {r["uid"] for r in kept_rows}
    near_removed = {}
    for r in _rejected(out):
        if r["stage"] == "near_dedup":
            blob = zstandard.ZstdDecompressor().stream_reader(io.BytesIO((out / r["path"]).read_bytes())).read()
            for rec in map(json.loads, blob.decode().splitlines()):
                near_removed[rec["id"]] = rec["detail"]
    counts = {d: kept.count(d) for d in originals}
    assert max(counts.values()) == 1, "a document survived twice"
    # A cluster keeps its smallest uid, which may be the planted near copy: then the original is
    # gone as dedup:near, pointing at a kept document — never lost for another reason.
    missing = [d for d, c in counts.items() if c == 0]
    assert len(missing) <= int(NUM_DOCS * 0.05)
    assert len(near_removed) >= len(missing)
    for detail in near_removed.values():
        assert int(detail.rsplit(" ", 1)[1]) in kept_uids


def test_rerun_is_a_noop_and_byte_identical(corpus):
    raw, out, manifest = corpus
    again = build_corpus(source=[str(raw)], out=str(out), seq_len=64, validation_fraction=0.1,
                         seed=7, config=FLOW_CONFIG, keep_cache=True)
    assert again == manifest


def test_missing_source_fails_before_any_work(tmp_path, ray_local, prefect_harness):
    with pytest.raises(SourceError, match="nope"):
        build_corpus(source=[str(tmp_path / "nope")], out=str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_config_file_is_not_overridden_by_flags_that_were_not_passed(tmp_path):
    path = tmp_path / "corpus.json"
    path.write_text(json.dumps({"tokenizer": {"kind": "unigram", "lowercase": False, "strip_accents": False}}))
    cfg = corpus_config(config=str(path))
    assert (cfg.tokenizer.kind, cfg.tokenizer.lowercase, cfg.tokenizer.strip_accents) == ("unigram", False, False)
    cfg = corpus_config(config=str(path), tokenizer="wordpiece", lowercase=True, seed=3,
                        overrides=["filter.gopher_quality.min_doc_words=80"])
    assert (cfg.tokenizer.kind, cfg.tokenizer.lowercase, cfg.pack.seed, cfg.tokenizer.sample_seed,
            cfg.filter.gopher_quality.min_doc_words) == ("wordpiece", True, 3, 3, 80)
    with pytest.raises(ConfigError, match=r"tokenizer\.kind: 'bpe'"):
        corpus_config(config={"tokenizer": {"kind": "bpe"}})
    with pytest.raises(ConfigError, match=r"pack\.seq_len: expected int"):
        corpus_config(overrides=["pack.seq_len=long"])


@pytest.mark.slow  # a kill or a rerun of a whole build (fault recovery: make test-all)
def test_cli_killed_mid_build_then_rerun_gives_byte_identical_shards(corpus, tmp_path):
    """SIGKILL at a chosen point (after exact dedup wrote its parts, before its marker), then the
    same command again: the same bytes as a clean build."""
    raw, clean_out, manifest = corpus
    (tmp_path / "cfg.json").write_text(json.dumps(FLOW_CONFIG))
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "cli.build_corpus", "--source", str(raw), "--out", str(out),
           "--seq-len", "64", "--validation-fraction", "0.1", "--seed", "7", "--config", str(tmp_path / "cfg.json")]
    env = {**os.environ, "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120"}
    kill = [sys.executable, "-m", "tests._faults", "exact_dedup", *cmd[2:]]  # same CLI, killed at a point
    killed = run_in_group(kill, cwd=str(ROOT), env={**env, "PYTHONPATH": str(ROOT)})
    assert killed.returncode == -9, killed.output[-3000:]
    assert not (out / schema.MANIFEST_NAME).exists()
    done = run_in_group(cmd, cwd=str(ROOT), env=env)
    assert done.returncode == 0, done.output[-3000:]
    again = schema.Manifest.load(str(out))
    assert [(s.path, s.sha256) for s in again.shards] == [(s["path"], s["sha256"]) for s in manifest["shards"]]
    for s in again.shards:
        assert (out / s.path).read_bytes() == (clean_out / s.path).read_bytes()
