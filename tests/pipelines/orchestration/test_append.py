"""build-corpus --append: a new generation deduplicated against the corpus's index, the earlier
shards untouched, settings that would change the corpus refused, a killed append finished by a
rerun, and an index built once for a corpus written before indexes existed.

Independent references: the rejected records are read from the quarantine files themselves
(zstd JSON lines), the shards' bytes are hashed before and after, and the duplicate pairs are the
ones the test wrote.
"""
from __future__ import annotations

import hashlib
import json
import logging
import random
from pathlib import Path

import pytest
import zstandard

from common.config import ConfigError
from pipelines import schema
from pipelines.corpus_job import CorpusJob
from pipelines.orchestration.runner import CorpusBuild
from synthetic import prose

CFG = {"tokenizer": {"vocab_size": 900, "min_frequency": 1}, "shard": {"min_shards_per_split": 2},
       "pack": {"seq_len": 64, "validation_fraction": 0.1, "seed": 7}}


def _docs(path: Path, texts: list[str]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    with open(path / "docs.jsonl", "w") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")
    return path


def _ids(folder: str, texts: list[str]) -> dict[str, str]:
    """Each text's document id as ingest names a JSON line: the file under its source, and the
    line's byte offset."""
    out, at = {}, 0
    for t in texts:
        out[t] = f"{folder}/docs.jsonl:{at}"
        at += len((json.dumps({"text": t}) + "\n").encode())
    return out


def _near_copy(text: str, share: float = 0.01, seed: int = 3) -> str:
    words = text.split(" ")
    rng = random.Random(seed)
    for i in rng.sample(range(len(words)), max(1, int(share * len(words)))):
        words[i] = "zyzzyva"
    return " ".join(words)


@pytest.fixture(scope="module")
def texts():
    rng = random.Random(5)
    first = [prose.document(rng, paragraphs=(6, 8)) for _ in range(40)]
    more = [prose.document(rng, paragraphs=(6, 8)) for _ in range(30)]
    return first, more


def _build(out: Path, sources: Path, **job) -> schema.Manifest:
    config = job.pop("config", CFG if not job.get("append") else None)
    return CorpusBuild(CorpusJob.load(sources=[str(sources)], out=str(out), config=config, **job)).run()


def _shard_bytes(out: Path, manifest: schema.Manifest) -> dict[str, str]:
    return {s.path: hashlib.sha256((out / s.path).read_bytes()).hexdigest() for s in manifest.shards}


def _rejected(out: Path, stage: str) -> list[dict]:
    rows = []
    for part in sorted(out.glob(f"{schema.REJECTED_DIR}/{stage}-*/*.jsonl.zst")):
        rows += [json.loads(line) for line in zstandard.decompress(part.read_bytes()).decode().splitlines()]
    return rows


def test_an_append_drops_copies_of_the_corpus_and_keeps_its_shards(tmp_path, ray_local, texts):
    first, more = texts
    out = tmp_path / "corpus"
    gen0 = _build(out, _docs(tmp_path / "a", first))
    before = _shard_bytes(out, gen0)
    manifest_before = (out / schema.MANIFEST_NAME).read_bytes()
    exact, near = first[3], _near_copy(first[7])
    new = _docs(tmp_path / "b", more + [exact, near, more[0]])  # and a copy within the new text
    got = _build(out, new, append=True)

    assert [g.name for g in got.generations] == [gen0.generation, got.generation] != [gen0.generation] * 2
    assert _shard_bytes(out, gen0) == before  # the first generation's shards, byte for byte
    assert {s.path for s in got.shards} >= set(before)
    assert all(s.path.startswith(f"shards/{got.generation}/") for s in got.shards if s.path not in before)
    for split in schema.SPLITS:  # the whole corpus: both generations' examples
        new_examples = sum(s.num_examples for s in got.shards if s.path not in before and s.split == split)
        assert got.splits[split].num_examples == gen0.splits[split].num_examples + new_examples
    assert got.tokenizer == gen0.tokenizer and got.seq_len == gen0.seq_len
    assert manifest_before != (out / schema.MANIFEST_NAME).read_bytes()

    ids = _ids("a", first)
    exact_rows = [r for r in _rejected(out, "exact_dedup") if r["reason"] == "dedup:exact"]
    near_rows = [r for r in _rejected(out, "near_dedup") if r["reason"] == "dedup:near"]
    # the exact copy names the first generation's document; the copy within the new text its sibling
    old = [r for r in exact_rows if "of generation 0" in r["detail"]]
    assert len(old) == 1 and old[0]["text"].startswith(exact[:200]), exact_rows
    assert f"document {ids[exact]!r}" in old[0]["detail"] and f"({gen0.generation})" in old[0]["detail"]
    assert any("of generation" not in r["detail"] for r in exact_rows)
    assert len(near_rows) == 1 and near_rows[0]["text"].startswith(near[:200])
    assert "of generation 0" in near_rows[0]["detail"] and f"document {ids[first[7]]!r}" in near_rows[0]["detail"]
    assert got.stats["near_dedup"]["earlier_generations"]["matches"] >= 1
    # each generation has its index, named by the manifest
    for g in got.generations:
        assert g.index and (out / g.index / "_index.json").is_file()


def test_settings_that_change_the_corpus_are_refused(tmp_path, ray_local, texts):
    out = tmp_path / "corpus"
    _build(out, _docs(tmp_path / "a", texts[0][:20]))
    new = _docs(tmp_path / "b", texts[1][:5])
    for kwargs, key in (({"flags": {"seq_len": 128}}, "pack.seq_len"),
                        ({"overrides": ["tokenizer.kind=unigram"]}, "tokenizer.kind"),
                        ({"flags": {"profile": "books"}}, "profile")):
        with pytest.raises(ConfigError, match=rf"^--append: {key}=.* but {out} was built with"):
            CorpusJob.load(sources=[str(new)], out=str(out), append=True, **kwargs)
    # the corpus's own values, and shuffle sizes, are not a change
    CorpusJob.load(sources=[str(new)], out=str(out), append=True, flags={"seq_len": 64},
                   overrides=["shuffle.partition_mb=8"])
    with pytest.raises(ConfigError, match=r"^--append: .*nothing-here has no manifest.json"):
        CorpusJob.load(sources=[str(new)], out=str(tmp_path / "nothing-here"), append=True)


@pytest.mark.slow  # a kill or a rerun of a whole build (fault recovery: make test-all)
def test_a_killed_append_leaves_the_corpus_and_a_rerun_finishes_it(tmp_path, ray_local, texts, monkeypatch):
    import pipelines.shard as shard_module

    first, more = texts
    out = tmp_path / "corpus"
    gen0 = _build(out, _docs(tmp_path / "a", first[:25]))
    before, manifest = _shard_bytes(out, gen0), (out / schema.MANIFEST_NAME).read_bytes()
    new = _docs(tmp_path / "b", more[:20])
    real = shard_module.write_shards

    def killed(*args, **kwargs):  # the shards written, then the process "dies" before its marker
        real(*args, **kwargs)
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(shard_module, "write_shards", killed)
    with pytest.raises(KeyboardInterrupt):
        _build(out, new, append=True)
    assert (out / schema.MANIFEST_NAME).read_bytes() == manifest  # the previous corpus, whole
    assert schema.Manifest.load(str(out)).generations == gen0.generations
    monkeypatch.setattr(shard_module, "write_shards", real)
    got = _build(out, new, append=True)
    assert len(got.generations) == 2 and _shard_bytes(out, gen0) == before
    # the same append into a copy that was never killed writes the same shards
    clean = tmp_path / "clean"
    _build(clean, tmp_path / "a")
    again = _build(clean, new, append=True)
    assert _shard_bytes(clean, again) == _shard_bytes(out, got)
    # and rerunning a finished append does nothing
    assert (out / schema.MANIFEST_NAME).read_bytes() == (out / schema.MANIFEST_NAME).read_bytes()
    manifest = (out / schema.MANIFEST_NAME).read_bytes()
    _build(out, new, append=True)
    assert (out / schema.MANIFEST_NAME).read_bytes() == manifest


def test_a_grown_corpus_is_not_replaced_by_a_build(tmp_path, ray_local, texts):
    first, more = texts
    out = tmp_path / "corpus"
    a = _docs(tmp_path / "a", first[:20])
    _build(out, a)
    _build(out, _docs(tmp_path / "b", more[:10]), append=True)
    manifest = (out / schema.MANIFEST_NAME).read_bytes()
    _build(out, a)  # the first build again: one of its generations, nothing to do
    assert (out / schema.MANIFEST_NAME).read_bytes() == manifest
    with pytest.raises(ConfigError, match=r"has grown to 2 generations by appends"):
        _build(out, a, config={**CFG, "pack": {**CFG["pack"], "seed": 8}})


def test_a_corpus_without_an_index_gets_one_from_a_rerun_of_its_build(tmp_path, ray_local, texts, caplog):
    import shutil

    first, more = texts
    out = tmp_path / "corpus"
    a = _docs(tmp_path / "a", first[:20])
    gen0 = _build(out, a)
    before = _shard_bytes(out, gen0)
    # as an earlier version left it: no index (nor its stage), a manifest without generations
    # and of another build key (its stage table had no index)
    shutil.rmtree(out / gen0.generations[0].index)
    for marker in out.glob(f"{schema.WORK_DIR}/index-*"):
        shutil.rmtree(marker)
    old = json.loads((out / schema.MANIFEST_NAME).read_text())
    old.pop("sha256", None)  # as an earlier version wrote it: no seal
    del old["generations"]
    old["build_key"] = "an-earlier-version"
    (out / schema.MANIFEST_NAME).write_text(json.dumps(old))
    new = _docs(tmp_path / "b", more[:10] + [first[2]])
    with pytest.raises(ConfigError, match=r"^--append: .* generation 0 \(\w+\) has no dedup index .*without --append"):
        _build(out, new, append=True)
    caplog.set_level(logging.INFO, logger="pipelines.orchestration.runner")
    rebuilt = _build(out, a)
    assert any("has no dedup index" in r.getMessage() for r in caplog.records)
    assert _shard_bytes(out, rebuilt) == before and rebuilt.generations[0].index
    got = _build(out, new, append=True)
    assert len(got.generations) == 2
    assert any("of generation 0" in r["detail"] for r in _rejected(out, "exact_dedup"))
