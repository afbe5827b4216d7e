"""Example fill (non-pad share of positions) and documents per split, end to end: the manifest's
figures against an independent count over the shards, and the low-fill warning."""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from pipelines import schema

from synthetic import prose
from pipelines.config import CorpusConfig
from pipelines.pack import MIN_FILL, empty_split_warnings, fill_warnings
from pipelines.orchestration.runner import CorpusBuild
from pipelines.corpus_job import CorpusJob

SEQ_LEN = 64


def _build(raw: Path, out: Path, text_mode: str) -> schema.Manifest:
    cfg = CorpusConfig.from_dict({
        "ingest": {"text_mode": text_mode}, "filter": {"blocks": []}, "dedup": {"near": False},
        "tokenizer": {"vocab_size": 500, "min_frequency": 1}, "shard": {"min_shards_per_split": 2},
        "pack": {"seq_len": SEQ_LEN, "validation_fraction": 0.3, "seed": 3}})
    return CorpusBuild(CorpusJob([str(raw)], str(out), cfg)).run()


def _shard_counts(out: Path, manifest: schema.Manifest) -> dict[str, tuple[int, int, int]]:
    """Per split, from the shard files: (examples, tokens, distinct documents)."""
    counts = {}
    for split in schema.SPLITS:
        lengths, uids = [], []
        for info in manifest.shards_for(split):
            with open(out / info.path, "rb") as f:
                ex = schema.read_shard(f, info.path)
            lengths.append(ex.lengths)
            uids.append(ex.uid)
        lengths = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
        uids = np.concatenate(uids) if uids else np.zeros(0, np.uint64)
        counts[split] = (len(lengths), int(lengths.sum()), len(set(uids.tolist())))
    return counts


def _check_against_shards(out: Path, manifest: schema.Manifest) -> dict[str, float]:
    fills = {}
    for split, (examples, tokens, docs) in _shard_counts(out, manifest).items():
        info = manifest.splits[split]
        assert examples > 0 and (info.num_examples, info.num_tokens) == (examples, tokens)
        assert info.num_documents == docs  # documents that produced examples, as the shards hold them
        assert info.fill == pytest.approx(tokens / (examples * SEQ_LEN), abs=1e-4)
        fills[split] = info.fill
    assert schema.Manifest.load(str(out)).splits == manifest.splits  # it is what manifest.json says
    return fills


def test_short_documents_fill_little_and_warn(tmp_path, ray_local):
    raw = tmp_path / "raw"
    raw.mkdir()
    rng = random.Random(1)
    words = "the river bridge old town carried letter quiet morning road north".split()
    for f in range(3):  # paragraphs of one short line: dialogue, headings
        paras = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) + "." for _ in range(120)]
        (raw / f"book{f}.txt").write_text("\n\n".join(f"{i} {p}" for i, p in enumerate(paras)))
    manifest = _build(raw, tmp_path / "out", "blank_line")
    fills = _check_against_shards(tmp_path / "out", manifest)
    assert all(v < MIN_FILL for v in fills.values())
    assert len(manifest.warnings) == 2
    assert all("text_mode=blank_line" in w and "profile=books" in w for w in manifest.warnings)
    assert manifest.stats["pack"]["warnings"] == manifest.warnings


def test_long_documents_fill_most_positions_without_warning(tmp_path, ray_local):
    raw = tmp_path / "raw"
    raw.mkdir()
    for f in range(12):  # whole files as documents, each worth many examples
        (raw / f"book{f}.txt").write_text("\n".join(prose.documents(25, seed=100 + f)))
    manifest = _build(raw, tmp_path / "out", "file")
    fills = _check_against_shards(tmp_path / "out", manifest)
    assert all(v >= MIN_FILL for v in fills.values()) and manifest.warnings == []


def test_fill_warning_names_the_likely_cause():
    splits = {"train": {"examples": 10, "tokens": 320}, "validation": {"examples": 0, "tokens": 0}}
    assert fill_warnings(splits, 64, "file") == [
        "train: examples fill 50% of their 64 positions (32 tokens per example, below 85%): the documents "
        "are short for seq_len (examples never span documents); a smaller pack.seq_len fits them"]
    assert "profile=books" in fill_warnings(splits, 64, "blank_line")[0]
    assert fill_warnings({"train": {"examples": 10, "tokens": 600}}, 64, "blank_line") == []


def test_an_empty_validation_split_is_a_warning_only_when_one_was_asked_for():
    full = {"train": {"examples": 9, "tokens": 500}, "validation": {"examples": 1, "tokens": 60}}
    empty = {"train": {"examples": 9, "tokens": 500}}
    assert empty_split_warnings(full, 0.01, 58) == []
    assert empty_split_warnings(empty, 0.0, 58) == []
    (warning,) = empty_split_warnings(empty, 0.01, 58)
    assert "validation_fraction=0.01 of 58 documents" in warning
    assert empty_split_warnings({**empty, "validation": {"examples": 0, "tokens": 0}}, 0.01, 58) == [warning]
