"""Damaged bytes on the training side are named (issue 51): for each artifact a training start
reads (a shard, the tokenizer, ``manifest.json``) and each kind of damage (one byte flipped in
the middle; the object cut to half its size), the reader that consumes it (``open_corpus``,
``check_shards``, ``read_shard``) raises ONE line naming the file (the shard, by its path), or,
for a shard whose size is wrong and ``data.skip_corrupt``, skips it, counted and named in one
warning line. ``electra/train.py`` prints such an error as ``train: error: <message>``
(``user_errors``), so the message itself must be one line.

Before issue 51 a flipped byte in ``manifest.json`` that still parsed (a digit) went unseen: the
corpus then had another ``seq_len`` (or example count) and was trained on as such; the manifest
now carries a seal (``common.sealed``).
"""
from __future__ import annotations

import logging
from pathlib import Path

import pytest

from electra.data import corpus as sd
from electra.train import user_errors
from pipelines import schema
from tests._damage import DAMAGES, damage
from tests.electra._corpus import shard_path, upload_corpus, write_tiny_corpus

SEQ = 32
def one_line(exc: BaseException) -> str:
    assert isinstance(exc, user_errors()), f"train would print a traceback for {exc!r}"
    message = str(exc)
    assert message and "\n" not in message, message
    return message


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    return write_tiny_corpus(tmp_path_factory.mktemp("tiny"), seq_len=SEQ, train_shards=(9, 7, 5),
                             validation_shards=(6,))


@pytest.fixture
def root(template, tmp_path) -> Path:
    return Path(upload_corpus(template, str(tmp_path / "c")))


def _first_train_shard(root: Path) -> tuple[Path, str]:
    path = shard_path(root, "train", 0)
    return path, str(path)


def test_the_intact_copy_reads(root):
    info = sd.open_corpus(str(root), seq_len=SEQ)
    shards, skipped = sd.check_shards(info, "train")
    assert skipped == [] and [len(sd.read_shard(s)) for s in shards] == [9, 7, 5]


# ------------------------------------------------------------------------------ a shard
def test_a_flipped_byte_in_a_shard_fails_its_read_naming_it(root):
    path, uri = _first_train_shard(root)
    damage(path, "flip")
    for skip in (False, True):  # same size: the listing passes it; its content never is a skip
        shards, skipped = sd.check_shards(sd.open_corpus(str(root), seq_len=SEQ), "train", skip_corrupt=skip)
        assert skipped == [] and shards[0].uri == uri
        with pytest.raises(sd.CorruptShardError) as err:
            sd.read_shard(shards[0])
        assert one_line(err.value) == f"{uri}: sha256 differs from the manifest (altered after the manifest was written)"
        assert [len(sd.read_shard(s)) for s in shards[1:]] == [7, 5]  # the others are intact


def test_a_truncated_shard_is_an_error_or_a_counted_skip_naming_it(root, caplog):
    path, uri = _first_train_shard(root)
    full = path.stat().st_size
    damage(path, "truncate")
    info = sd.open_corpus(str(root), seq_len=SEQ)
    with pytest.raises(sd.CorruptShardError) as err:
        sd.check_shards(info, "train")
    assert one_line(err.value) == (f"{uri}: {full // 2} bytes, manifest says {full} (truncated or altered after the "
                                   "manifest was written) (set data.skip_corrupt=true to skip it)")
    caplog.set_level(logging.WARNING, logger="electra.data.corpus")
    shards, skipped = sd.check_shards(info, "train", skip_corrupt=True)
    assert skipped == [uri] and [s.uri for s in shards] == [str(shard_path(root, "train", i)) for i in (1, 2)]
    lines = [r.getMessage() for r in caplog.records if uri in r.getMessage()]
    assert lines == [f"skipping corrupt shard {uri}: {full // 2} bytes, manifest says {full} (truncated or altered "
                     "after the manifest was written)"]
    assert "1 of 3 train shards skipped as corrupt" in [r.getMessage() for r in caplog.records]
    # read anyway (a shard cut between the listing and its read): named, never parsed as short
    ref = sd.ShardRef(uri, 9, full, schema.Manifest.parse((root / "manifest.json").read_bytes(), "m").shards[0].sha256)
    with pytest.raises(sd.CorruptShardError) as err:
        sd.read_shard(ref)
    assert one_line(err.value).startswith(f"{uri}: {full // 2} bytes, manifest says {full}")


# ------------------------------------------------------------------------------ the tokenizer
@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_tokenizer_fails_the_open_naming_it(root, how):
    info = sd.open_corpus(str(root), seq_len=SEQ)
    path = root / info.manifest.tokenizer.path / schema.TOKENIZER_JSON
    damage(path, how)
    with pytest.raises(sd.CorpusMismatchError) as err:
        sd.open_corpus(str(root), seq_len=SEQ)
    message = one_line(err.value)
    assert message.startswith(f"{path}: sha256 ") and message.endswith("tokenizer replaced after the build")


# ------------------------------------------------------------------------------ manifest.json
@pytest.mark.parametrize("how", DAMAGES + ("digit",))
def test_a_damaged_manifest_fails_the_open_naming_it_and_the_corpus(root, how):
    path = root / schema.MANIFEST_NAME
    if how == "digit":  # still valid JSON: the corpus's seq_len 32 -> 33 (silent before the seal)
        text = path.read_text()
        assert text.count(f'\n  "seq_len": {SEQ},') == 1
        path.write_text(text.replace(f'\n  "seq_len": {SEQ},', f'\n  "seq_len": {SEQ + 1},'))
    else:
        damage(path, how)
    for seq_len in (None, SEQ):  # with or without data.seq_len to compare against
        with pytest.raises(ValueError) as err:
            sd.open_corpus(str(root), seq_len=seq_len)
        message = one_line(err.value)
        assert not isinstance(err.value, sd.CorpusMismatchError)  # the manifest is at fault, not the config
        assert message.startswith(f"{path}: ") and f"the manifest of the corpus at {root} cannot be trusted" in message
        if how != "truncate":
            assert "damaged manifest.json" in message or "malformed manifest" in message


def test_a_manifest_written_before_the_seal_still_reads(root):
    """A manifest without ``"sha256"`` (every corpus built before issue 51) is read as before."""
    import json

    path = root / schema.MANIFEST_NAME
    d = json.loads(path.read_text())
    assert len(d.pop("sha256")) == 64
    path.write_text(json.dumps(d, indent=2, sort_keys=True) + "\n")
    info = sd.open_corpus(str(root), seq_len=SEQ)
    assert info.manifest.seq_len == SEQ and len(info.manifest.shards) == 4
