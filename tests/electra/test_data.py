"""electra/data.py: corpus checks, rank/worker split, deterministic shuffle, resume, corrupt shards."""
from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from electra import data as sd
from pipelines import schema
from tests.electra._corpus import write_tiny_corpus

SEQ = 32


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    # 7 shards, 61 examples: divides by neither 2, 3 nor 4 ranks x workers
    root = write_tiny_corpus(tmp_path_factory.mktemp("c"), seq_len=SEQ, train_shards=(10, 7, 13, 1, 9, 12, 9),
                             validation_shards=(5, 4))
    return sd.open_corpus(root, seq_len=SEQ)


def plan(corpus, *, rank=0, world=1, micro=4, seed=3, block=8, split="train", shuffle=True):
    shards, _ = sd.check_shards(corpus, split)
    return sd.StreamPlan(tuple(shards), SEQ, micro, rank=rank, world_size=world, seed=seed,
                         shuffle_block=block, shuffle=shuffle)


def epoch_keys(p, epoch=0, workers=0):
    batches = list(sd.TrainStream(p, num_workers=workers).loader(epoch, 0))
    assert [b.position.batch for b in batches] == list(range(p.batches_per_epoch))
    return [k for b in batches for k in b.keys]


def all_keys(corpus):
    keys = []
    for s in corpus.manifest.shards_for("train"):
        keys += [x["__key__"] for x in sd.read_shard(sd.ShardRef(str(corpus.root / s.path), s.num_examples))]
    return keys


def test_open_corpus_refuses_mismatches(corpus, tmp_path):
    with pytest.raises(sd.CorpusMismatchError, match="seq_len 32 != config data.seq_len 64"):
        sd.open_corpus(corpus.root, seq_len=64)
    with pytest.raises(sd.CorpusMismatchError, match="differs from the checkpoint"):
        sd.open_corpus(corpus.root, seq_len=SEQ, tokenizer_sha256="0" * 64)
    assert corpus.vocab_size == corpus.manifest.tokenizer.vocab_size == 200
    other = write_tiny_corpus(tmp_path / "o", seq_len=SEQ, train_shards=(3,), validation_shards=(2,))
    tok = other / "tokenizer" / "tokenizer.json"
    tok.write_text(tok.read_text().replace("[UNK]", "[UNK2]", 1))
    with pytest.raises(sd.CorpusMismatchError, match="tokenizer.json: sha256"):
        sd.open_corpus(other, seq_len=SEQ)


@pytest.mark.parametrize("world", [2, 3])
def test_ranks_disjoint_equal_and_cover_the_epoch(corpus, world):
    per_rank = [epoch_keys(plan(corpus, rank=r, world=world)) for r in range(world)]
    n = plan(corpus, world=world).batches_per_epoch * 4
    assert all(len(k) == n for k in per_rank)  # equal steps on every rank
    flat = [k for keys in per_rank for k in keys]
    assert len(set(flat)) == len(flat)  # no duplicate within the epoch
    assert set(flat) <= set(all_keys(corpus))
    assert len(flat) + plan(corpus, world=world).dropped_per_epoch == 61


def test_order_independent_of_workers_and_world(corpus):
    p = plan(corpus, rank=1, world=3)
    assert epoch_keys(p, workers=0) == epoch_keys(p, workers=2) == epoch_keys(p, workers=3)
    # the global stream is a function of (seed, epoch) only: rank spans are slices of it
    whole = [k for keys in [epoch_keys(plan(corpus, world=1, micro=1))] for k in keys]
    span = 61 // 3
    assert epoch_keys(p) == whole[span: span + len(epoch_keys(p))]


def test_shuffle_is_a_function_of_seed_and_epoch(corpus):
    a, b = epoch_keys(plan(corpus, seed=3)), epoch_keys(plan(corpus, seed=3))
    assert a == b
    assert epoch_keys(plan(corpus, seed=3), epoch=1) != a
    assert epoch_keys(plan(corpus, seed=4)) != a
    assert sorted(epoch_keys(plan(corpus, seed=3, micro=1))) == sorted(all_keys(corpus))
    unshuffled = epoch_keys(plan(corpus, micro=1, shuffle=False))
    assert unshuffled == all_keys(corpus)


def test_resume_mid_epoch_sees_the_same_batches(corpus):
    p = plan(corpus, rank=0, world=2, micro=3)
    full = sd.TrainStream(p, num_workers=2)
    it = iter(full)
    reference = [next(it) for _ in range(p.batches_per_epoch + 4)]  # crosses an epoch boundary
    cut = 6
    pos = sd.DataPosition(reference[cut - 1].position.epoch, reference[cut - 1].position.batch + 1)
    resumed = iter(sd.TrainStream(p, num_workers=1, start=pos))
    for ref in reference[cut:]:
        got = next(resumed)
        assert got.keys == ref.keys and got.position == ref.position
        assert np.array_equal(got.input_ids, ref.input_ids)


def test_collate_pads_with_zero_and_keeps_segments(corpus):
    p = plan(corpus, micro=5, shuffle=False)
    batch = next(iter(sd.EpochStream(p, 0)))
    first = sd.read_shard(p.shards[0])[:5]
    assert batch.input_ids.shape == (5, SEQ) and batch.input_ids.dtype.is_floating_point is False
    for row, seg, sample in zip(batch.input_ids, batch.segment_ids, first):
        ids = schema.decode_array(sample[schema.INPUT_IDS])
        assert row[: len(ids)].tolist() == ids.tolist() and not row[len(ids):].any()
        assert seg[: len(ids)].tolist() == schema.decode_array(sample[schema.SEGMENT_IDS]).tolist()
    assert batch.num_tokens == sum(len(schema.decode_array(s[schema.INPUT_IDS])) for s in first)


def test_eval_batches_fixed_and_disjoint(corpus):
    ranks = [plan(corpus, rank=r, world=2, micro=2, split="validation", shuffle=False) for r in range(2)]
    keys = [[k for b in sd.eval_batches(p, 2) for k in b.keys] for p in ranks]
    assert keys[0] == [k for b in sd.eval_batches(ranks[0], 2) for k in b.keys]
    assert not set(keys[0]) & set(keys[1]) and len(keys[0]) == len(keys[1]) == 4


def _copy_corpus(src, dst):
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_truncated_shard_is_named_or_skipped(corpus, tmp_path):
    root = _copy_corpus(corpus.root, tmp_path / "c")
    bad = root / "shards" / "train-000002.tar"
    bad.write_bytes(bad.read_bytes()[:3000])
    info = sd.open_corpus(root, seq_len=SEQ)
    with pytest.raises(sd.CorruptShardError, match="train-000002.tar: .*truncated"):
        sd.check_shards(info, "train")
    good, skipped = sd.check_shards(info, "train", skip_corrupt=True)
    assert skipped == [str(bad)] and len(good) == 6
    keys = epoch_keys(sd.StreamPlan(tuple(good), SEQ, 4, seed=3, shuffle_block=8))
    assert len(keys) == (61 - 13) // 4 * 4


def test_altered_shard_fails_sha_or_parse_naming_it(corpus, tmp_path):
    root = _copy_corpus(corpus.root, tmp_path / "c")
    bad = root / "shards" / "train-000000.tar"
    raw = bytearray(bad.read_bytes())
    raw[100:140] = b"\xff" * 40  # inside the first member's header: same size, broken tar
    bad.write_bytes(bytes(raw))
    info = sd.open_corpus(root, seq_len=SEQ)
    with pytest.raises(sd.CorruptShardError, match="train-000000.tar: sha256 differs"):
        sd.check_shards(info, "train")
    good, _ = sd.check_shards(info, "train", verify=False)  # size matches: only reading finds it
    with pytest.raises(sd.CorruptShardError, match="train-000000.tar"):
        epoch_keys(sd.StreamPlan(tuple(good), SEQ, 4, shuffle=False))


def test_manifest_count_mismatch_is_an_error(corpus, tmp_path):
    root = _copy_corpus(corpus.root, tmp_path / "c")
    m = json.loads((root / "manifest.json").read_text())
    m["shards"][0]["num_examples"] += 1
    (root / "manifest.json").write_text(json.dumps(m))
    info = sd.open_corpus(root, seq_len=SEQ)
    shards, _ = sd.check_shards(info, "train")
    with pytest.raises(sd.CorruptShardError, match="10 samples, manifest says 11"):
        sd.read_shard(shards[0])


def test_too_small_corpus_is_a_clear_error(corpus):
    with pytest.raises(ValueError, match="cannot fill one micro batch"):
        sd.TrainStream(plan(corpus, world=4, micro=16))


def test_block_shuffle_is_a_permutation_of_each_block(corpus):
    p = plan(corpus, block=8)
    pos = np.arange(61)
    src = p.source_positions(0, pos)
    assert sorted(src.tolist()) == list(range(61))
    assert all(set(src[i:i + 8] // 8) == {i // 8} for i in range(0, 61, 8))
    assert Counter(src.tolist()).most_common(1)[0][1] == 1
