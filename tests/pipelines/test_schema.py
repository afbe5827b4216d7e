"""The corpus contract: sample encoding, manifest round trip, atomic writes, config keys."""
from __future__ import annotations

import json

import numpy as np
import pytest

from pipelines import schema
from pipelines.config import CorpusConfig
from pipelines.stage_cache import run_cached


def test_encode_decode_sample_round_trip():
    sample = schema.encode_sample("00ab-00001", [2, 10, 11, 3, 12, 3], [0, 0, 0, 0, 1, 1])
    assert set(sample) == {"__key__", schema.INPUT_IDS, schema.SEGMENT_IDS}
    ids = schema.decode_array(sample[schema.INPUT_IDS])
    seg = schema.decode_array(sample[schema.SEGMENT_IDS])
    assert ids.dtype == schema.ID_DTYPE and seg.dtype == schema.SEGMENT_DTYPE
    assert ids.tolist() == [2, 10, 11, 3, 12, 3] and seg.tolist() == [0, 0, 0, 0, 1, 1]


@pytest.mark.parametrize("key", ["../evil", "a/b", ".hidden", "x.y"])
def test_keys_that_could_escape_the_folder_are_rejected(key):
    with pytest.raises(ValueError, match="invalid sample key"):
        schema.encode_sample(key, [2, 3], [0, 0])


def test_mismatched_lengths_rejected():
    with pytest.raises(ValueError, match="differ"):
        schema.encode_sample("k", [2, 3, 4], [0, 0])


def test_manifest_round_trip(tmp_path):
    m = schema.Manifest(
        seq_len=128,
        tokenizer=schema.TokenizerInfo("wordpiece", 1000, "ab" * 32, True, {"[PAD]": 0, "[CLS]": 2}),
        splits={"train": schema.SplitInfo(10, 1000, 3), "validation": schema.SplitInfo(1, 90, 1)},
        shards=[schema.ShardInfo("shards/train-000000.tar", "train", 10, 1000, 4096, "cd" * 32)],
        stats={"ingest": {"documents_in": 4}}, config={"pack": {"seq_len": 128}})
    m.save(tmp_path)
    back = schema.Manifest.load(tmp_path)
    assert back == m
    assert [s.path for s in back.shards_for("train")] == ["shards/train-000000.tar"]
    assert back.shards_for("validation") == []


def test_manifest_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="manifest"):
        schema.Manifest.load(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"format_version": 1}))
    with pytest.raises(ValueError, match="manifest.json"):
        schema.Manifest.load(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"format_version": 99}))
    with pytest.raises(ValueError, match="format_version"):
        schema.Manifest.load(tmp_path)


def test_atomic_write_leaves_no_temp_files(tmp_path):
    target = tmp_path / "sub" / "f.bin"
    schema.atomic_write_bytes(target, b"one")
    schema.atomic_write_bytes(target, b"two")
    assert target.read_bytes() == b"two"
    assert [p.name for p in target.parent.iterdir()] == ["f.bin"]
    assert schema.sha256_file(target) == __import__("hashlib").sha256(b"two").hexdigest()


def test_config_rejects_unknown_keys_and_keeps_defaults():
    cfg = CorpusConfig.from_dict({"dedup": {"num_bands": 20}, "pack": {"seq_len": 512}})
    assert cfg.dedup.num_bands == 20 and cfg.dedup.rows_per_band == 8
    assert cfg.pack.seq_len == 512 and cfg.tokenizer.vocab_size == 30522
    with pytest.raises(ValueError, match=r"corpus.dedup: unknown key\(s\) \['num_band'\]"):
        CorpusConfig.from_dict({"dedup": {"num_band": 20}})
    with pytest.raises(ValueError, match="unknown key"):
        CorpusConfig.from_dict({"shards": {}})


def test_stage_key_changes_only_with_its_sections():
    a, b = CorpusConfig(), CorpusConfig()
    b.filter.min_words = 7
    assert a.stage_key("ingest") == b.stage_key("ingest")
    assert a.stage_key("filter") != b.stage_key("filter")
    assert a.stage_key("filter", upstream="x") != a.stage_key("filter", upstream="y")


def test_run_cached_skips_finished_and_discards_partial(tmp_path):
    calls = []

    def produce(out):
        calls.append(out)
        (out / "data.txt").write_text("payload")
        return {"rows": 3}

    # A killed earlier attempt leaves a temp folder: it must be cleaned and never used.
    stale = tmp_path / ".stage-k1.tmp-dead"
    stale.mkdir()
    (stale / "data.txt").write_text("half")
    first = run_cached(tmp_path, "stage", "k1", produce)
    assert not first.cached and first.stats["rows"] == 3 and not stale.exists()
    second = run_cached(tmp_path, "stage", "k1", produce)
    assert second.cached and second.path == first.path and len(calls) == 1
    assert (second.path / "data.txt").read_text() == "payload"
    third = run_cached(tmp_path, "stage", "k2", produce)
    assert not third.cached and len(calls) == 2


def test_run_cached_failure_publishes_nothing(tmp_path):
    def boom(out):
        (out / "partial").write_text("x")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        run_cached(tmp_path, "stage", "k", boom)
    assert not (tmp_path / "stage-k").exists()
