"""The stage runner: planning, completion markers, pruning, kills at chosen points, publish and GC.

Builds run on a small generated corpus with real Ray Data. Kills are injected at a chosen point
(``tests._faults``) in a subprocess, never raced against a clock.
"""
from __future__ import annotations

import copy
import io
import json
import os
import sys
from pathlib import Path

import pytest
import pyarrow
import pyarrow.ipc
import zstandard

from common import storage
from common.config import ConfigError
from common.hashing import HashingReader
from pipelines import schema
from synthetic import prose
from pipelines.config import CorpusConfig
from pipelines.orchestration.runner import CorpusBuild
from pipelines.corpus_job import CorpusJob
from pipelines.orchestration.stages import STAGES
from tests._procs import run_in_group

REPO = Path(__file__).resolve().parents[3]
ORDER = [s.name for s in STAGES]
CFG = {"tokenizer": {"vocab_size": 700, "min_frequency": 1}, "shard": {"min_shards_per_split": 3},
       "pack": {"seq_len": 64, "validation_fraction": 0.1, "seed": 7}}
SCRIPT = """
import json, sys
from tests._faults import install
install(sys.argv[4])
from pipelines.engine import raydata
from pipelines.config import CorpusConfig
from pipelines.orchestration.runner import CorpusBuild
from pipelines.corpus_job import CorpusJob
raydata.init_ray(num_cpus=1)
CorpusBuild(CorpusJob([sys.argv[1]], sys.argv[2], CorpusConfig.from_dict(json.loads(sys.argv[3])))).run()
"""


def with_(cfg: dict, **changes) -> dict:
    out = copy.deepcopy(cfg)
    for dotted, value in changes.items():
        section, key = dotted.split("__")
        out.setdefault(section, {})[key] = value
    return out


def build(raw, out, cfg=CFG, keep_cache=False, **kw) -> CorpusBuild:
    return CorpusBuild(CorpusJob([str(raw)], str(out), CorpusConfig.from_dict(cfg), keep_cache=keep_cache), **kw)


def killed_build(raw, out, cfg, point: str):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return run_in_group([sys.executable, "-c", SCRIPT, str(raw), str(out), json.dumps(cfg), point], cwd=str(REPO),
                        env=env)


def verified_shards(corpus: Path, manifest: schema.Manifest) -> int:
    """Read every shard the manifest lists with an independent sha256 check; returns examples."""
    n = 0
    for s in manifest.shards:
        with open(corpus / s.path, "rb") as f:
            reader = HashingReader(f)
            examples = schema.read_shard(reader, s.path)
            reader.drain()
        assert reader.hexdigest() == s.sha256 and reader.bytes_read == s.bytes
        assert len(examples) == s.num_examples
        n += len(examples)
    return n


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    return prose.write_corpus(tmp_path_factory.mktemp("raw"), num_docs=150, seed=5)


@pytest.fixture(scope="module")
def clean(raw, tmp_path_factory, ray_local):
    out = tmp_path_factory.mktemp("clean")
    b = build(raw, out)
    assert b.plan() == ORDER
    return out, b.run()


def test_finished_build_is_a_noop_with_stats_and_only_markers_left(raw, clean):
    out, manifest = clean
    again = build(raw, out)
    assert again.plan() == []
    assert again.run() == manifest
    for name in ORDER:
        assert manifest.stats[name]["seconds"] >= 0
    assert manifest.stats["ingest"]["mb_per_sec"] > 0 and manifest.stats["pack"]["tokens_per_sec"] > 0
    # Data of every stage was pruned once consumed: .work holds completion markers only, and
    # the document stages' quarantine-part lists beside them.
    left = storage.find(str(out / schema.WORK_DIR))
    documents = ("ingest", "filter", "exact_dedup", "near_dedup")
    assert left and all(p.endswith("_SUCCESS") or (p.endswith("/_rejected.arrow") and p.split("-")[0] in documents)
                        for p in left), left
    assert {Path(p).parent.name.split("-")[0] for p in left} == set(ORDER)
    pruned = [json.loads((out / schema.WORK_DIR / p).read_text())
              for p in left if p.endswith("_SUCCESS") and p.split("-")[0] in documents + ("pack",)]
    # a pruned marker keeps its statistics and quarantine, and no longer names the deleted parts
    assert len(pruned) == 5 and all(m["pruned"] and m["files"]["parts"] == 0 and m["files"]["file"] == ""
                                    and m["stats"] for m in pruned)
    for m in pruned:
        if m["name"] == "pack":
            continue
        listed = pyarrow.ipc.open_file(str(out / schema.WORK_DIR / f"{m['name']}-{m['key']}" /
                                           m["rejected"]["file"])).read_all().column("name").to_pylist()
        assert m["rejected"]["parts"] == len(listed) > 0
        assert [r.path.rsplit("/", 1)[1] for r in schema.Manifest.load(str(out)).rejected
                if r.stage == m["name"]] == listed
    assert verified_shards(out, manifest) == sum(s.num_examples for s in manifest.splits.values())


def test_quarantine_is_compressed_prefix_only_and_counts_every_drop(clean):
    out, manifest = clean
    records = []
    for r in schema.Manifest.load(str(out)).rejected:
        blob = (out / r.path).read_bytes()
        assert len(blob) == r.bytes
        lines = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(blob)).read().decode().splitlines()
        assert len(lines) == r.records
        records += [(r.stage, json.loads(line)) for line in lines]
    dropped = manifest.stats["summary"]["dropped_by_reason"]
    assert sum(dropped.values()) == len(records)
    for stage, rec in records:
        assert rec["reason"].split(":")[0] in (stage.split("_")[-1], stage) or rec["reason"].startswith("dedup:")
        assert set(rec) == {"id", "reason", "detail", "text", "chars"}
        assert len(rec["text"]) <= CorpusConfig().rejected.text_prefix_chars
    assert any(rec["chars"] > len(rec["text"]) for _, rec in records), "no text was cut to its prefix"


@pytest.mark.slow  # a kill or a rerun of a whole build (fault recovery: make test-all)
def test_keep_cache_reruns_only_what_a_config_change_touches(raw, tmp_path, ray_local):
    out = tmp_path / "c"
    first = build(raw, out, keep_cache=True).run()
    pack_seed = with_(CFG, pack__seed=8)
    b = build(raw, out, pack_seed, keep_cache=True)
    assert b.plan() == ["pack", "shard"]
    second = b.run()
    assert second.tokenizer == first.tokenizer
    assert {s.sha256 for s in second.shards} != {s.sha256 for s in first.shards}
    # The tokenizer's sample seed is an input of the tokenizer stage (it used to be left out).
    assert build(raw, out, with_(pack_seed, tokenizer__sample_seed=99), keep_cache=True).plan() == \
        ["tokenizer", "pack", "shard"]
    assert build(raw, out, with_(pack_seed, filter__unicode_form="NFKC"), keep_cache=True).plan() == ORDER[1:]


def test_without_keep_cache_a_later_change_rebuilds_from_pruned_inputs(raw, clean):
    out, _ = clean
    # shard needs pack's data, pack needs near_dedup's, ... all pruned; the tokenizer and the
    # dedup index (products in the corpus, never pruned) are reused.
    assert build(raw, out, with_(CFG, shard__min_shards_per_split=2)).plan() == \
        [n for n in ORDER if n not in ("tokenizer", "index")]


@pytest.mark.slow  # a kill or a rerun of a whole build (fault recovery: make test-all)
@pytest.mark.parametrize("point", ["near_dedup", "shard"])
def test_kill_at_a_stage_boundary_then_rerun_gives_identical_shards(raw, clean, tmp_path, point):
    clean_out, manifest = clean
    out = tmp_path / "killed"
    p = killed_build(raw, out, CFG, point)
    assert p.returncode == -9, p.output[-2000:]
    assert not (out / schema.MANIFEST_NAME).exists()
    b = build(raw, out)
    assert b.plan() == ORDER[ORDER.index(point):]  # finished stages kept their data for it
    again = b.run()
    assert [(s.path, s.sha256) for s in again.shards] == [(s.path, s.sha256) for s in manifest.shards]
    for s in again.shards:
        assert (out / s.path).read_bytes() == (clean_out / s.path).read_bytes()


@pytest.mark.slow  # a kill or a rerun of a whole build (fault recovery: make test-all)
def test_interrupted_publish_keeps_the_previous_corpus_readable(raw, tmp_path, ray_local):
    out = tmp_path / "c"
    a = build(raw, out).run()
    cfg_b = with_(CFG, pack__seq_len=48)
    p = killed_build(raw, out, cfg_b, "publish")
    assert p.returncode == -9, p.output[-2000:]
    # the commit point was never reached: the previous manifest, its quarantine lists intact
    assert schema.Manifest.parse(schema.read_manifest_bytes(str(out)), "m") == a
    assert schema.Manifest.load(str(out)).rejected
    verified_shards(out, a)
    b = build(raw, out, cfg_b).run()
    assert b.seq_len == 48 and b.generation != a.generation
    verified_shards(out, b)
    verified_shards(out, a)  # a reader still on the previous manifest can finish
    c = build(raw, out, with_(CFG, pack__seq_len=40)).run()
    kept = set(storage.listdir(str(out / schema.SHARDS_DIR)))
    assert kept == {b.generation, c.generation}
    # the quarantine's part lists, one per stage in its folder: those the kept manifests name
    lists = {r.path for m in (b, c) for r in m.rejected_lists}
    assert c.rejected_lists and lists == {p.relative_to(out).as_posix() for p in out.glob("rejected/*/_parts-*.arrow")}
    assert not list(out.glob("rejected-*.json"))
    assert not (out / a.tokenizer.path).exists() or a.tokenizer.path in {b.tokenizer.path, c.tokenizer.path}
    # Stage caches of earlier configs are gone too: only the current keys remain in .work.
    assert len(storage.listdir(str(out / schema.WORK_DIR))) == len(ORDER)


def test_bad_config_and_locations_fail_before_any_work(raw, tmp_path, s3_server):
    with pytest.raises(ConfigError, match=r"tokenizer\.kind: 'bpe' is not one of"):
        CorpusConfig.from_dict({"tokenizer": {"kind": "bpe"}})
    with pytest.raises(ConfigError, match=r"pack\.seq_len: expected int"):
        CorpusConfig.from_dict({"pack": {"seq_len": "128"}})
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['min_word'\]"):
        CorpusConfig.from_dict({"filter": {"min_word": 3}})
    with pytest.raises(storage.StorageError, match="bucket 'no-such-bucket' does not exist"):
        build(raw, "s3://no-such-bucket/corpus")
    with pytest.raises(storage.StorageError, match="read-only"):
        build(raw, "https://example.invalid/corpus")
    assert not list(tmp_path.iterdir())


@pytest.mark.slow  # a kill or a rerun of a whole build (fault recovery: make test-all)
def test_kept_caches_never_outlive_the_outputs_they_describe(raw, tmp_path, ray_local):
    """With --keep-cache, builds A, B, C then A again: A's shards were garbage-collected after C,
    so A's markers went with them and A is rebuilt, never published with missing shards."""
    out = tmp_path / "c"
    configs = [with_(CFG, shard__min_shards_per_split=n) for n in (3, 2, 4)]
    first = build(raw, out, configs[0], keep_cache=True).run()
    for cfg in configs[1:]:
        build(raw, out, cfg, keep_cache=True).run()
    again = build(raw, out, configs[0], keep_cache=True)
    assert again.plan() == ["shard"]  # its shards are gone, its inputs' data kept
    manifest = again.run()
    assert [(s.path, s.sha256) for s in manifest.shards] == [(s.path, s.sha256) for s in first.shards]
    verified_shards(out, manifest)


def test_publish_sweeps_data_a_kill_left_behind(raw, clean, tmp_path):
    """A kill between a stage's marker and the pruning of its inputs leaves their data; the next
    run (even a no-op) deletes it, and the marker says it is gone."""
    out, manifest = clean
    b = build(raw, out)
    leftover = out / schema.WORK_DIR / f"filter-{b.keys['filter']}" / "data" / "part-stale.parquet"
    leftover.parent.mkdir(parents=True)
    leftover.write_bytes(b"x")
    assert b.run() == manifest
    assert not leftover.parent.exists() and b.result("filter").pruned


def test_an_altered_part_list_fails_the_publish_naming_it(raw, clean, tmp_path):
    """A stage's part list is checked against its marker (size, sha256) where it is loaded: a
    byte changed in the filter stage's quarantine list fails the publish, naming that file and
    the fix; the list restored, the same publish goes through."""
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(clean[0], out)
    (out / schema.MANIFEST_NAME).unlink()  # so that the next run publishes again
    b = build(raw, out)
    assert b.plan() == []  # every stage has its marker: only the publish reads the lists
    listed = out / schema.WORK_DIR / f"filter-{b.keys['filter']}" / "_rejected.arrow"
    original = listed.read_bytes()
    listed.write_bytes(original[:-9] + bytes([original[-9] ^ 1]) + original[-8:])
    with pytest.raises(storage.StorageError, match=rf"{listed}: .*sha256 differs.*remove .*_SUCCESS"):
        b.run()
    listed.write_bytes(original)
    assert build(raw, out).run() == clean[1]
    assert schema.Manifest.load(str(out)).rejected == schema.Manifest.load(str(clean[0])).rejected


@pytest.mark.slow  # a kill or a rerun of a whole build (fault recovery: make test-all)
@pytest.mark.parametrize("slice_mb,streamed", [(0.0001, False), (0.002, True)])
def test_shards_do_not_depend_on_shuffle_sizes_or_read_blocks(raw, clean, tmp_path, monkeypatch, slice_mb, streamed):
    """``shuffle.*`` and the read tasks' grouping change requests and memory, never the corpus:
    tiny map files and partitions, 3 reduce tasks spilling after 1 KB, and every stage read as
    fewer blocks than tasks give the shards of the default build, byte for byte; so do map files
    of ``reduce_tasks x slice_mb`` sorted through a local spill (``map_task.stream_map_file``)."""
    from pipelines.engine import raydata

    out, manifest = clean
    monkeypatch.setattr(raydata, "MAX_TASK_BLOCKS", 2)
    cfg = with_(CFG, shuffle__map_file_mb=0.004, shuffle__partition_mb=0.002, shuffle__reduce_tasks=3,
                shuffle__task_memory_mb=0.001, shuffle__slice_mb=slice_mb)
    other = build(raw, tmp_path / "o", cfg).run()
    assert sorted((s.path, s.sha256) for s in other.shards) == sorted((s.path, s.sha256) for s in manifest.shards)
    near = {s["name"]: s for s in other.stats["near_dedup"]["shuffles"]}
    # the signature shuffle's two halves (band rows, sketches) are read by 3 tasks each
    signatures, buckets = near["lsh_signatures"], near["lsh_buckets"]
    assert signatures["ranges"] == 6 and signatures["map_files"] > 1 and signatures["partitions"] > 16
    assert buckets["ranges"] == 3 and (buckets["map_files"] > 1 or streamed)  # streamed: one file of 3 x slice_mb
    assert signatures["streamed"] is buckets["streamed"] is streamed
    target = max(int(0.004 * (1 << 20)), 6 * int(slice_mb * (1 << 20)))
    assert signatures["map_file_target"] == target
