"""Damaged bytes on the build side are named (issue 51): for each artifact a build or an append
reads back, and each kind of damage (one byte flipped in the middle; the object cut to half its
size), the reader that consumes it raises ONE line naming the file (and its stage or
generation), and nothing is published from the damaged bytes.

Artifacts and readers (the training side is in tests/electra/data/test_damaged_bytes.py):

* a cached stage part (``.work/near_dedup-<key>/data/part-*.parquet``): a resumed build (killed
  in pack, before its manifest) whose pack stage reads it (``pipelines.engine.parts.read_task``);
* the tokenizer the build wrote (``tokenizer/<key>/tokenizer.json``): the same resume, whose pack
  encodes with it (``pipelines.orchestration.stages._tokenizer_text``);
* ``manifest.json``: an ``--append`` (``CorpusJob.load`` -> ``append.load_prior``);
* a generation's dedup index, ``index/<key>/_index.json`` and a part of it: the reader an
  append's dedup probes with (``Prior.indexes`` -> ``GenerationIndex.read``);
* a shuffle map file: a reduce task's read (``shuffle.read_range``), reusing the map-file tests'
  writer. tests/pipelines/engine/test_map_file.py (truncation at every trailer field, flips in a
  slice and in each trailer field) and tests/pipelines/engine/test_shuffle.py
  (``test_a_damaged_map_file_fails_the_reduce_with_its_name``, through Ray) prove the rest.

One tiny corpus is built once (keep_cache, so every stage's parts stay) and copied per case.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from common import storage
from common.config import ConfigError
from pipelines import schema
from pipelines.config import CorpusConfig
from pipelines.corpus_job import CorpusJob
from pipelines.orchestration.append import load_prior
from pipelines.orchestration.runner import CorpusBuild
from synthetic import prose
from tests._damage import DAMAGES, damage

CFG = {"tokenizer": {"vocab_size": 600, "min_frequency": 1}, "shard": {"min_shards_per_split": 2},
       "pack": {"seq_len": 64, "validation_fraction": 0.1, "seed": 7}}
def one_line(exc: BaseException) -> str:
    """The line build-corpus prints for ``exc`` (``cli._errors.user_error``: found in what Ray
    wraps, the first line of a known error; None would mean a traceback), checked to be the
    error's whole first line."""
    from cli._errors import user_error

    line = user_error(exc)
    assert line is not None, f"build-corpus would print a traceback for {exc!r}"
    assert line == str(exc).splitlines()[0]
    return line


def _build(raw: Path, out: Path) -> CorpusBuild:
    return CorpusBuild(CorpusJob([str(raw)], str(out), CorpusConfig.from_dict(CFG), keep_cache=True))


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    return prose.write_corpus(tmp_path_factory.mktemp("raw"), num_docs=40, seed=11)


@pytest.fixture(scope="module")
def built(raw, tmp_path_factory, ray_local):
    out = tmp_path_factory.mktemp("built")
    manifest = _build(raw, out).run()
    return out, manifest


@pytest.fixture
def copy(built, tmp_path):
    out = tmp_path / "corpus"
    shutil.copytree(built[0], out)
    return out, built[1]


def _killed_in_pack(raw: Path, out: Path) -> CorpusBuild:
    """``out`` as a build killed in its pack stage leaves it: no pack or shard marker, no
    manifest (a kill before the commit point); the resumed build reruns pack and shard."""
    b = _build(raw, out)
    for name in ("pack", "shard"):
        shutil.rmtree(Path(b.cache(name)))
    (out / schema.MANIFEST_NAME).unlink()
    assert b.plan() == ["pack", "shard"]
    return b


# ------------------------------------------------------------------------------ cached stage part
@pytest.mark.slow  # a kill or a rerun of a whole build (fault recovery: make test-all)
@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_cached_part_fails_the_resumed_build_naming_it_and_its_stage(raw, copy, how):
    out, _ = copy
    b = _killed_in_pack(raw, out)
    stage = Path(b.cache("near_dedup"))
    victim = sorted((stage / "data").glob("part-*.parquet"))[0]
    damage(victim, how)
    with pytest.raises(storage.StorageError) as err:
        b.run()
    message = one_line(err.value)
    assert message.startswith(f"{victim}: damaged part of the stage cached in {stage}: ")
    assert f"remove {stage / '_SUCCESS'} to build that stage again" in message
    if how == "truncate":
        assert f"{victim.stat().st_size} bytes, the stage's part list says" in message
    assert not (out / schema.MANIFEST_NAME).exists()  # nothing published from it


# ------------------------------------------------------------------------------ build's tokenizer
@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_tokenizer_fails_the_resumed_pack_naming_it(raw, copy, how):
    out, manifest = copy
    b = _killed_in_pack(raw, out)
    victim = Path(schema.tokenizer_json(str(out), manifest.tokenizer.path))
    damage(victim, how)
    with pytest.raises(storage.StorageError) as err:
        b.run()
    message = one_line(err.value)
    assert message.startswith(f"{victim}: sha256 ") and "the tokenizer stage recorded" in message
    assert not (out / schema.MANIFEST_NAME).exists()


# ------------------------------------------------------------------------------ manifest.json, append
@pytest.mark.parametrize("how", DAMAGES + ("digit",))
def test_an_append_to_a_damaged_manifest_is_refused_naming_it(raw, copy, how):
    out, manifest = copy
    path = out / schema.MANIFEST_NAME
    if how == "digit":  # valid JSON still: the corpus's seq_len 64 -> 65
        text = path.read_text()
        assert text.count('\n  "seq_len": 64,') == 1  # the top level's (the config has one too)
        path.write_text(text.replace('\n  "seq_len": 64,', '\n  "seq_len": 65,'))
    else:
        damage(path, how)
    before = path.read_bytes()
    with pytest.raises(ConfigError) as err:
        CorpusJob.load(sources=[str(raw)], out=str(out), append=True)
    message = one_line(err.value)
    assert "\n" not in str(err.value)
    assert message.startswith(f"--append: {path}: ") and f"the corpus at {out} cannot be trusted" in message
    if how != "truncate":
        assert "damaged manifest.json" in message or "malformed manifest" in message
    assert path.read_bytes() == before  # left as it was, for a person to look at


def test_a_rerun_never_replaces_a_manifest_that_fails_its_seal(raw, copy):
    """A rerun of the build reads the published manifest first (is this build published?); one
    whose seal fails is refused in one line, never replaced unseen (it may list generations that
    appends added, which a republish by this build would drop)."""
    out, _ = copy
    path = out / schema.MANIFEST_NAME
    text = path.read_text()
    path.write_text(text.replace('\n  "seq_len": 64,', '\n  "seq_len": 65,'))
    before = path.read_bytes()
    with pytest.raises(ConfigError) as err:
        _build(raw, out).run()
    message = one_line(err.value)
    assert "\n" not in str(err.value)
    assert message.startswith(f"{path}: damaged manifest.json: ") and f"the corpus at {out} cannot be trusted" in message
    assert path.read_bytes() == before


def test_a_rebuild_writes_the_same_sealed_manifest(raw, built):
    """The seal is a function of the content: the published bytes equal a fresh encoding, and a
    rerun of the same build (a no-op) leaves them byte-identical."""
    out, manifest = built
    data = (out / schema.MANIFEST_NAME).read_bytes()
    assert b'"sha256": "' in data.split(b'"shards"')[0]  # the seal, beside the fields
    assert schema.Manifest.parse(data, "m").encode() == data
    assert _build(raw, out).run() == manifest and (out / schema.MANIFEST_NAME).read_bytes() == data


# ------------------------------------------------------------------------------ dedup index
@pytest.mark.parametrize("how", DAMAGES + ("digit",))
def test_a_damaged_index_record_is_named_with_its_generation(copy, how):
    out, manifest = copy
    generation = manifest.generations[0]
    path = out / generation.index / "_index.json"
    if how == "digit":  # valid JSON still: twice the partitions (every probe to the wrong part)
        text = path.read_text()
        assert text.count('"partitions": 1,') == 1
        path.write_text(text.replace('"partitions": 1,', '"partitions": 2,'))
    else:
        damage(path, how)
    prior = load_prior(str(out))
    with pytest.raises(Exception) as err:
        prior.indexes(CorpusConfig.from_dict(CFG))
    message = one_line(err.value)
    assert "\n" not in str(err.value)
    assert type(err.value).__name__ == "CorpusIndexError"
    assert message.startswith(f"{path}: ") and f"generation 0 ({generation.name})" in message


@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_index_part_is_named_with_its_generation(copy, how):
    out, manifest = copy
    generation = manifest.generations[0]
    victim = sorted((out / generation.index / "docs").glob("part-*.arrow"))[0]
    damage(victim, how)
    (index,) = load_prior(str(out)).indexes(CorpusConfig.from_dict(CFG))
    with pytest.raises(Exception) as err:
        index.read("docs", int(victim.stem.split("-")[1]))
    message = one_line(err.value)
    assert "\n" not in str(err.value)
    assert type(err.value).__name__ == "CorpusIndexError"
    assert message.startswith(f"{victim}: damaged: ") and f"generation 0 ({generation.name})" in message


# ------------------------------------------------------------------------------ shuffle map file
@pytest.mark.parametrize("how", DAMAGES)
def test_a_damaged_map_file_is_named_by_the_reduce_reading_it(tmp_path, how):
    from pipelines.engine import map_file as mf
    from pipelines.engine import shuffle as sh
    from tests.pipelines.engine.test_map_file import R, _expected, _one_file, _read

    shuffled, _, part, uri = _one_file(tmp_path)
    damage(tmp_path / "map-a.arrows", how)
    named = 0
    for r in range(R):
        try:
            got = _read(shuffled, r)
        except mf.MapFileError as exc:
            assert "\n" not in str(exc) and one_line(exc).startswith(f"{uri}: range {r}: ")
            named += 1
            continue
        assert got == _expected(part, r)  # a range it spared reads its own rows, never others
    assert named >= 1
    assert sh is not None
