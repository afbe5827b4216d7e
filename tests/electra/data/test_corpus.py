"""electra/data/corpus.py: opening a corpus, the metadata check, content verified while it streams,
corrupt shards named or skipped (local, on a loopback S3 server, over plain HTTP), read retries,
a republished corpus refused on resume. The loader on top: tests/electra/data/test_stream.py."""
from __future__ import annotations

import functools
import http.server
import json
import threading

import pytest

from common import storage
from common.hashing import sha256_bytes
from electra.data import corpus as corpus_mod
from electra.data import stream as sd
from pipelines import schema
from tests.electra._corpus import TOKENIZER_PATH, upload_corpus, write_tiny_corpus
from tests.electra.data.test_stream import SEQ, TRAIN, epoch_batches, epoch_keys, plan, uri


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


def test_truncated_shard_is_named_or_skipped(damageable):
    bad = uri(damageable, "train", 2)
    storage.write_bytes(bad, storage.read_bytes(bad)[:3000])
    info = sd.open_corpus(damageable, seq_len=SEQ)
    with pytest.raises(sd.CorruptShardError, match=f"{bad}: 3000 bytes, manifest says .*truncated"):
        sd.check_shards(info, "train")
    good, skipped = sd.check_shards(info, "train", skip_corrupt=True)
    assert skipped == [bad] and len(good) == 6
    p = sd.StreamPlan(tuple(good), SEQ, 8, 4, seed=3, shuffle_block=8, streams=4)
    keys = epoch_keys(p)
    assert len(keys) == p.steps_per_epoch * 8 == (61 - 13) // 4 // 2 * 8 and len(set(keys)) == len(keys)


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
    assert not a & b and len(a) == len(b) == plans[0].steps_per_epoch * 4


@pytest.mark.parametrize("offset", [100, -2000])  # a tar header byte; a byte inside the last chunk's data
def test_altered_shard_fails_while_streaming_naming_it(damageable, offset):
    bad = uri(damageable, "train", 0)
    raw = bytearray(storage.read_bytes(bad))
    raw[offset] ^= 0x01  # same size, one bit
    storage.write_bytes(bad, bytes(raw))
    info = sd.open_corpus(damageable, seq_len=SEQ)
    good, skipped = sd.check_shards(info, "train", skip_corrupt=True)  # metadata only: it passes
    assert len(good) == 7 and not skipped
    p = sd.StreamPlan(tuple(good), SEQ, 4, 4, shuffle=False)
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
    m.pop("sha256", None)  # a hand edit: unsealed (a republish would seal it anew)
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
    m.pop("sha256", None)  # a hand edit: unsealed (a republish would seal it anew)
    m["shards"][0].update(bytes=len(junk), sha256=sha256_bytes(junk))
    storage.write_json(storage.join(root, "manifest.json"), m)
    shards, _ = sd.check_shards(sd.open_corpus(root, seq_len=SEQ), "train")
    with pytest.raises(sd.CorruptShardError, match="train-000000.tar: unreadable tar"):
        sd.read_shard(shards[0])


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
    p_local, p_http = plan(corpus, micro=4), plan(remote, micro=4)
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
