"""electra/data.py + electra/corpus.py: corpus checks, rank/worker split, deterministic shuffle,
resume, read-ahead, corrupt shards (local and on a loopback S3 server)."""
from __future__ import annotations

import functools
import http.server
import json
import threading
from collections import Counter

import numpy as np
import pytest

from common import storage
from common.hashing import sha256_bytes
from electra import corpus as corpus_mod
from electra import data as sd
from pipelines import schema
from tests.electra._corpus import TOKENIZER_PATH, upload_corpus, write_tiny_corpus

SEQ = 32
TRAIN = (10, 7, 13, 1, 9, 12, 9)  # 7 shards, 61 examples: divides by neither 2, 3 nor 4 ranks x workers


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = write_tiny_corpus(tmp_path_factory.mktemp("c"), seq_len=SEQ, train_shards=TRAIN, validation_shards=(5, 4))
    return sd.open_corpus(str(root), seq_len=SEQ)


@pytest.fixture(params=["local", "s3"])
def damageable(request, corpus, tmp_path):
    """A private copy of the module's corpus (a folder, or a fresh S3 bucket) a test may damage."""
    if request.param == "local":
        return upload_corpus(corpus.root, str(tmp_path / "c"))
    return upload_corpus(corpus.root, request.getfixturevalue("s3_server").bucket() + "/corpus")


def plan(corpus, *, rank=0, world=1, micro=4, seed=3, block=8, split="train", shuffle=True, skip=False):
    shards, _ = sd.check_shards(corpus, split, skip_corrupt=skip)
    return sd.StreamPlan(tuple(shards), SEQ, micro, rank=rank, world_size=world, seed=seed,
                         shuffle_block=block, shuffle=shuffle)


def epoch_batches(p, epoch=0, workers=0, prefetch=2):
    batches = list(sd.TrainStream(p, num_workers=workers, prefetch=prefetch).loader(epoch, 0))
    assert [b.position.batch for b in batches] == list(range(p.batches_per_epoch))
    return batches


def epoch_keys(p, epoch=0, workers=0, prefetch=2):
    return [k for b in epoch_batches(p, epoch, workers, prefetch) for k in b.keys]


def all_keys(corpus):
    return [k for s in sd.check_shards(corpus, "train")[0] for k in sd.read_shard(s).keys()]


def uri(location, split, index):
    return storage.join(location, schema.shard_name("g0", split, index))


def test_open_corpus_refuses_mismatches(corpus, tmp_path):
    with pytest.raises(sd.CorpusMismatchError, match="seq_len 32 != config data.seq_len 64"):
        sd.open_corpus(corpus.root, seq_len=64)
    with pytest.raises(sd.CorpusMismatchError, match="differs from the checkpoint"):
        sd.open_corpus(corpus.root, seq_len=SEQ, tokenizer_sha256="0" * 64)
    assert corpus.vocab_size == corpus.manifest.tokenizer.vocab_size == 200
    assert corpus.tokenizer_uri == storage.join(corpus.root, TOKENIZER_PATH)
    assert corpus.manifest_sha256 == sha256_bytes(storage.read_bytes(storage.join(corpus.root, "manifest.json")))
    other = write_tiny_corpus(tmp_path / "o", seq_len=SEQ, train_shards=(3,), validation_shards=(2,))
    tok = other / TOKENIZER_PATH / "tokenizer.json"
    tok.write_text(tok.read_text().replace("[UNK]", "[UNK2]", 1))
    with pytest.raises(sd.CorpusMismatchError, match=f"{TOKENIZER_PATH}/tokenizer.json: sha256"):
        sd.open_corpus(str(other), seq_len=SEQ)
    tok.unlink()
    with pytest.raises(sd.CorpusMismatchError, match=f"{TOKENIZER_PATH}/tokenizer.json: missing tokenizer"):
        sd.open_corpus(str(other), seq_len=SEQ)
    with pytest.raises(FileNotFoundError, match=f"{tmp_path}/none/manifest.json: no manifest"):
        sd.open_corpus(str(tmp_path / "none"), seq_len=SEQ)


@pytest.mark.parametrize("world", [2, 3])
def test_ranks_disjoint_equal_and_cover_the_epoch(corpus, world):
    per_rank = [epoch_keys(plan(corpus, rank=r, world=world)) for r in range(world)]
    n = plan(corpus, world=world).batches_per_epoch * 4
    assert all(len(k) == n for k in per_rank)  # equal steps on every rank
    flat = [k for keys in per_rank for k in keys]
    assert len(set(flat)) == len(flat)  # no duplicate within the epoch
    assert set(flat) <= set(all_keys(corpus))
    assert len(flat) + plan(corpus, world=world).dropped_per_epoch == 61


def test_order_independent_of_workers_world_and_read_ahead(corpus):
    p = plan(corpus, rank=1, world=3)
    reference = epoch_keys(p, workers=0, prefetch=0)
    assert reference == epoch_keys(p, workers=2) == epoch_keys(p, workers=3, prefetch=1) == \
        epoch_keys(p, workers=0, prefetch=5)
    # the global stream is a function of (seed, epoch) only: rank spans are slices of it
    whole = epoch_keys(plan(corpus, world=1, micro=1))
    span = 61 // 3
    assert reference == whole[span: span + len(reference)]


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
    it = iter(sd.TrainStream(p, num_workers=2))
    reference = [next(it) for _ in range(p.batches_per_epoch + 4)]  # crosses an epoch boundary
    cut = 6
    pos = sd.DataPosition(reference[cut - 1].position.epoch, reference[cut - 1].position.batch + 1)
    resumed = iter(sd.TrainStream(p, num_workers=1, prefetch=0, start=pos))
    for ref in reference[cut:]:
        got = next(resumed)
        assert got.keys == ref.keys and got.position == ref.position
        assert np.array_equal(got.input_ids, ref.input_ids) and np.array_equal(got.segment_ids, ref.segment_ids)


def test_collate_pads_with_zero_and_keeps_segments(corpus):
    p = plan(corpus, micro=5, shuffle=False)
    batch = next(iter(sd.EpochStream(p, 0)))
    first = sd.read_shard(p.shards[0])
    assert batch.input_ids.shape == (5, SEQ) and batch.input_ids.dtype.is_floating_point is False
    assert batch.keys == first.keys()[:5]
    for i, (row, seg) in enumerate(zip(batch.input_ids, batch.segment_ids)):
        ids = first.ids(i)
        assert row[: len(ids)].tolist() == ids.tolist() and not row[len(ids):].any()
        assert seg[: len(ids)].tolist() == first.segments(i).tolist() and not seg[len(ids):].any()
        assert seg[: len(ids)].tolist() == [0] * int(first.b_start[i]) + [1] * (len(ids) - int(first.b_start[i]))
    assert batch.num_tokens == sum(len(first.ids(i)) for i in range(5))


def test_collate_rejects_an_example_longer_than_seq_len():
    ex = schema.Examples(np.arange(2, 12), [4, 6], [2, 3], [7, 7], [0, 1])
    rows = [sd.Row("s3://b/shard.tar", ex, 0), sd.Row("s3://b/shard.tar", ex, 1)]
    with pytest.raises(sd.CorruptShardError, match="s3://b/shard.tar: example 0000000000000007-00001 has 6 tokens"):
        sd.collate(rows, seq_len=5)
    ids, seg = sd.collate(rows, seq_len=6)
    assert ids.tolist() == [[2, 3, 4, 5, 0, 0], [6, 7, 8, 9, 10, 11]]
    assert seg.tolist() == [[0, 0, 1, 1, 0, 0], [0, 0, 0, 1, 1, 1]]


def test_eval_batches_fixed_and_disjoint(corpus):
    ranks = [plan(corpus, rank=r, world=2, micro=2, split="validation", shuffle=False) for r in range(2)]
    keys = [[k for b in sd.eval_batches(p, 2) for k in b.keys] for p in ranks]
    assert keys[0] == [k for b in sd.eval_batches(ranks[0], 2, prefetch=0) for k in b.keys]
    assert not set(keys[0]) & set(keys[1]) and len(keys[0]) == len(keys[1]) == 4


def test_read_ahead_is_bounded_and_ordered(corpus, tmp_path):
    ordered, _ = sd.check_shards(corpus, "train")
    with corpus_mod.ShardCache(ordered, prefetch=2, last=4) as cache:
        cache.get(0)
        assert set(cache.loaded) == {0} and set(cache.pending) == {1, 2}  # the next two, in order
        cache.get(1)
        assert set(cache.loaded) == {0, 1} and set(cache.pending) == {2, 3}
        cache.evict_before(1)
        cache.get(3)
        assert set(cache.loaded) == {1, 3} and set(cache.pending) == {2, 4}  # never past last
        assert len(cache.get(2)) == TRAIN[2] and len(cache.get(4)) == TRAIN[4]
        assert not cache.pending
    # a shard read ahead that fails raises only when (and if) the stream reaches it
    root = upload_corpus(corpus.root, str(tmp_path / "c"))
    storage.remove(uri(root, "train", 2))
    ordered, _ = sd.check_shards(sd.open_corpus(root, seq_len=SEQ), "train", skip_corrupt=True)
    broken = [*ordered[:2], sd.ShardRef(uri(root, "train", 2), TRAIN[2], 1, "0")]
    with corpus_mod.ShardCache(broken, prefetch=2) as cache:
        assert len(cache.get(0)) == TRAIN[0] and 2 in cache.pending
        assert len(cache.get(1)) == TRAIN[1]
        with pytest.raises(sd.CorruptShardError, match="train-000002.tar: missing"):
            cache.get(2)


def test_truncated_shard_is_named_or_skipped(damageable):
    bad = uri(damageable, "train", 2)
    storage.write_bytes(bad, storage.read_bytes(bad)[:3000])
    info = sd.open_corpus(damageable, seq_len=SEQ)
    with pytest.raises(sd.CorruptShardError, match=f"{bad}: 3000 bytes, manifest says .*truncated"):
        sd.check_shards(info, "train")
    good, skipped = sd.check_shards(info, "train", skip_corrupt=True)
    assert skipped == [bad] and len(good) == 6
    keys = epoch_keys(sd.StreamPlan(tuple(good), SEQ, 4, seed=3, shuffle_block=8))
    assert len(keys) == (61 - 13) // 4 * 4


def test_deleted_shard_is_named_or_skipped_alike_on_every_rank(damageable):
    bad = uri(damageable, "train", 4)
    storage.remove(bad)
    info = sd.open_corpus(damageable, seq_len=SEQ)
    with pytest.raises(sd.CorruptShardError, match=f"{bad}: missing .*skip_corrupt"):
        sd.check_shards(info, "train")
    plans = [plan(info, rank=r, world=2, skip=True) for r in range(2)]
    assert plans[0].shards == plans[1].shards and bad not in [s.uri for s in plans[0].shards]
    assert plans[0].num_examples == plans[1].num_examples == 61 - TRAIN[4]
    assert sd.check_shards(info, "train", skip_corrupt=True)[1] == [bad]
    a, b = (set(epoch_keys(p)) for p in plans)
    assert not a & b and len(a) == len(b) == plans[0].batches_per_epoch * 4


@pytest.mark.parametrize("offset", [100, -2000])  # a tar header byte; a byte inside the last chunk's data
def test_altered_shard_fails_while_streaming_naming_it(damageable, offset):
    bad = uri(damageable, "train", 0)
    raw = bytearray(storage.read_bytes(bad))
    raw[offset] ^= 0x01  # same size, one bit
    storage.write_bytes(bad, bytes(raw))
    info = sd.open_corpus(damageable, seq_len=SEQ)
    good, skipped = sd.check_shards(info, "train", skip_corrupt=True)  # metadata only: it passes
    assert len(good) == 7 and not skipped
    p = sd.StreamPlan(tuple(good), SEQ, 4, shuffle=False)
    with pytest.raises(sd.CorruptShardError, match=f"{bad}: sha256 differs from the manifest .altered"):
        epoch_keys(p)  # skip_corrupt does not apply: content errors always raise


def test_shard_deleted_mid_run_is_an_error_naming_it(damageable):
    info = sd.open_corpus(damageable, seq_len=SEQ)
    shards, _ = sd.check_shards(info, "train")
    storage.remove(shards[1].uri)
    with pytest.raises(sd.CorruptShardError, match=f"{shards[1].uri}: missing .deleted after the manifest"):
        sd.read_shard(shards[1])


def test_manifest_count_mismatch_is_an_error(corpus, tmp_path):
    root = upload_corpus(corpus.root, str(tmp_path / "c"))
    m = json.loads(storage.read_text(storage.join(root, "manifest.json")))
    m["shards"][0]["num_examples"] += 1
    storage.write_json(storage.join(root, "manifest.json"), m)
    shards, _ = sd.check_shards(sd.open_corpus(root, seq_len=SEQ), "train")
    with pytest.raises(sd.CorruptShardError, match="train-000000.tar: 10 examples, manifest says 11"):
        sd.read_shard(shards[0])


def test_unparseable_shard_the_manifest_vouches_for_is_named(corpus, tmp_path):
    """A bad build (the manifest's bytes and hash match, the content is no shard) is an error too."""
    root = upload_corpus(corpus.root, str(tmp_path / "c"))
    junk = b"not a tar archive" * 64
    storage.write_bytes(uri(root, "train", 0), junk)
    m = json.loads(storage.read_text(storage.join(root, "manifest.json")))
    m["shards"][0].update(bytes=len(junk), sha256=sha256_bytes(junk))
    storage.write_json(storage.join(root, "manifest.json"), m)
    shards, _ = sd.check_shards(sd.open_corpus(root, seq_len=SEQ), "train")
    with pytest.raises(sd.CorruptShardError, match="train-000000.tar: unreadable tar"):
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
    # the span a rank's batches can touch covers every source position they map to
    p2 = plan(corpus, rank=1, world=2, block=8)
    lo, hi = p2.source_span(0, p2.batches_per_epoch)
    for epoch in range(3):
        got = np.concatenate([p2.batch_positions(epoch, b) for b in range(p2.batches_per_epoch)])
        assert lo <= got.min() and got.max() < hi


# ------------------------------------------------------------------------------ S3
@pytest.fixture(scope="module")
def s3_corpus(corpus, s3_server):
    return upload_corpus(corpus.root, s3_server.bucket() + "/corpora/tiny")


def test_s3_corpus_streams_exactly_the_local_batches(corpus, s3_corpus):
    remote = sd.open_corpus(s3_corpus, seq_len=SEQ)
    assert remote.manifest_sha256 == corpus.manifest_sha256 and remote.tokenizer_sha256 == corpus.tokenizer_sha256
    assert remote.root == s3_corpus and remote.tokenizer_uri.startswith("s3://")
    for split, world, workers in (("train", 2, 2), ("validation", 1, 0)):
        local_plan = plan(corpus, rank=world - 1, world=world, split=split, micro=2)
        remote_plan = plan(remote, rank=world - 1, world=world, split=split, micro=2)
        assert all(s.uri.startswith(s3_corpus + "/shards/g0/") for s in remote_plan.shards)
        local, s3 = epoch_batches(local_plan, workers=workers), epoch_batches(remote_plan, workers=workers)
        assert len(local) == len(s3) >= 2
        for a, b in zip(local, s3):
            assert a.keys == b.keys and a.position == b.position
            assert a.input_ids.equal(b.input_ids) and a.segment_ids.equal(b.segment_ids)


def test_missing_bucket_or_manifest_names_the_location(s3_server):
    with pytest.raises(FileNotFoundError, match="s3://no-such-bucket-x1/corpus/manifest.json: no manifest"):
        sd.open_corpus("s3://no-such-bucket-x1/corpus", seq_len=SEQ)
    empty = s3_server.bucket()
    with pytest.raises(FileNotFoundError, match=f"{empty}/corpus/manifest.json: no manifest"):
        sd.open_corpus(f"{empty}/corpus", seq_len=SEQ)


# ------------------------------------------------------------------------------ HTTP (read-only, no listing)
class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def http_corpus(corpus, tmp_path):
    """A copy of the corpus served over plain HTTP from a loopback server (a store that cannot list
    folders: shards are then checked by name, one HEAD each); yields (url, local folder)."""
    folder = upload_corpus(corpus.root, str(tmp_path / "c"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=folder))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/", folder
    server.shutdown()
    thread.join()


def test_http_corpus_streams_the_local_batches_and_names_a_missing_shard(corpus, http_corpus):
    url, folder = http_corpus
    remote = sd.open_corpus(url, seq_len=SEQ)
    p_local, p_http = plan(corpus, micro=3), plan(remote, micro=3)
    assert all(s.uri.startswith(url) for s in p_http.shards)
    for a, b in zip(epoch_batches(p_local), epoch_batches(p_http), strict=True):
        assert a.keys == b.keys and a.input_ids.equal(b.input_ids) and a.segment_ids.equal(b.segment_ids)
    storage.remove(uri(folder, "train", 3))
    with pytest.raises(sd.CorruptShardError, match=f"{url}shards/g0/train-000003.tar: missing"):
        sd.check_shards(remote, "train")


def test_a_failing_read_is_retried_then_named(corpus, monkeypatch):
    """A connection reset mid-shard is retried from the start; if it keeps failing, the error
    names the shard (it used to surface as a bare ConnectionResetError from a loader worker)."""
    shard = sd.check_shards(corpus, "train")[0][0]
    want = sd.read_shard(shard).keys()
    real_open = storage.open_input
    failures = {"left": 1}

    class Flaky:
        def __init__(self, raw):
            self.raw = raw

        def read(self, n=-1):
            if failures["left"] > 0:
                failures["left"] -= 1
                raise ConnectionResetError("Connection reset by peer")
            return self.raw.read(n)

    def flaky_open(uri, block_size=None):
        import contextlib

        @contextlib.contextmanager
        def opened():
            with real_open(uri, block_size=block_size) as raw:
                yield Flaky(raw)
        return opened()

    monkeypatch.setattr(corpus_mod.storage, "open_input", flaky_open)
    monkeypatch.setattr(corpus_mod, "RETRY_PAUSE_S", 0.0)
    assert sd.read_shard(shard).keys() == want  # one failure, one retry
    failures["left"] = 10
    with pytest.raises(corpus_mod.ShardReadError, match=rf"^{shard.uri}: read failed 3 times .*Connection reset"):
        sd.read_shard(shard)


def test_resume_refuses_a_republished_corpus(corpus, tmp_path):
    """The checkpoint records what the stream is a function of; other shards are an error (or,
    when allowed, a warning), while a manifest that changed only in its statistics is fine."""
    saved = corpus.data_sha256
    same = sd.open_corpus(corpus.root, seq_len=SEQ, data_sha256=saved)
    assert same.data_sha256 == saved
    other = write_tiny_corpus(tmp_path / "other", seq_len=SEQ, train_shards=(4, 4), validation_shards=(2,))
    with pytest.raises(sd.CorpusMismatchError, match="shards differ from the checkpoint's"):
        sd.open_corpus(other, seq_len=SEQ, data_sha256=saved)
    assert sd.open_corpus(other, seq_len=SEQ, data_sha256=saved, allow_change=True).data_sha256 != saved
    # Statistics only: same shards, another manifest text.
    stats_only = tmp_path / "stats_only"
    for rel in storage.find(str(corpus.root)):
        storage.write_bytes(str(stats_only / rel), storage.read_bytes(storage.join(str(corpus.root), rel)))
    m = schema.Manifest.load(str(stats_only))
    m.stats["note"] = "rebuilt"
    m.save(str(stats_only))
    reopened = sd.open_corpus(str(stats_only), seq_len=SEQ, data_sha256=saved, manifest_sha256=corpus.manifest_sha256)
    assert reopened.manifest_sha256 != corpus.manifest_sha256 and reopened.data_sha256 == saved
