"""build-corpus on a real two-node Ray cluster, reading and writing a real S3-API server.

Both run on loopback (``ray start`` twice; moto's standalone S3 server). The driver is the CLI in
a subprocess, started in an empty temporary folder: the nodes share nothing but the bucket.
Checked: shards and tokenizer byte-identical to a local build of the same files; nothing written
to local disk by the build; a SIGKILL mid-build (at a chosen point) and a rerun give the same
shards; the trainer streams the S3 corpus with the same losses as the local one.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from common import storage
from pipelines import schema
from tests._procs import run_in_group
from tests.flows._bucket_corpus import bucket_corpus

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def driver_env(tmp: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "RAY_AUTH_MODE": "token", "PREFECT_HOME": str(tmp / "prefect"),
            "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120", **extra}


def cli(source: str, out: str, address: str, cfg_uri: str, *, kill_at: str | None = None) -> list[str]:
    entry = ["-m", "tests._faults", kill_at, "cli.build_corpus"] if kill_at else ["-m", "cli.build_corpus"]
    return [sys.executable, *entry, "--source", source, "--out", out, "--config", cfg_uri, "--ray-address", address]


def shard_bytes(corpus: str) -> tuple[list[bytes], bytes]:
    m = schema.Manifest.load(corpus)
    shards = [storage.read_bytes(storage.join(corpus, s.path)) for s in m.shards]
    return shards, storage.read_bytes(storage.join(corpus, m.tokenizer.path, "tokenizer.json"))


@pytest.fixture(scope="module")
def setting(tmp_path_factory, s3_server, ray_local, ray_cluster):
    return {**bucket_corpus(tmp_path_factory.mktemp("cluster"), s3_server, "corpus"), "address": ray_cluster}


@pytest.fixture(scope="module")
def s3_build(setting):
    tmp, bucket = setting["tmp"], setting["bucket"]
    cwd = tmp / "empty_cwd"
    cwd.mkdir()
    out = f"{bucket}/corpora/books"
    done = run_in_group(cli(f"{bucket}/raw", out, setting["address"], f"{bucket}/corpus.json"), cwd=str(cwd),
                        env=driver_env(tmp))
    assert done.returncode == 0, done.output[-4000:]
    return out, cwd, done.output


def test_the_cluster_has_two_nodes(setting, tmp_path):
    probe = ("import ray; ray.init(address=%r, log_to_driver=False); "
             "print(sum(n['Alive'] for n in ray.nodes()), int(ray.cluster_resources()['CPU']))") % setting["address"]
    done = run_in_group([sys.executable, "-c", probe], cwd=str(tmp_path), env=driver_env(tmp_path), timeout=120)
    assert done.returncode == 0 and done.output.strip().splitlines()[-1] == "2 2", done.output[-2000:]


def test_s3_build_is_byte_identical_to_a_local_build(setting, s3_build):
    out, _, _ = s3_build
    remote, local = shard_bytes(out), shard_bytes(setting["local"])
    assert remote[1] == local[1], "tokenizer.json differs"
    assert len(remote[0]) == len(local[0]) and remote[0] == local[0]
    m = schema.Manifest.load(out)
    assert m.stats["sources"]["names"] == schema.Manifest.load(setting["local"]).stats["sources"]["names"]
    # Same documents, ids relative to the sources' root: the same survivors as the local build.
    assert m.stats["summary"] == schema.Manifest.load(setting["local"]).stats["summary"]


def test_s3_build_writes_nothing_locally(setting, s3_build):
    out, cwd, _ = s3_build
    assert list(cwd.iterdir()) == []
    assert not any(p.name.startswith("s3:") for p in ROOT.iterdir())
    listed = storage.find(out)
    assert schema.MANIFEST_NAME in listed and any(p.startswith(".work/") for p in listed)


def test_killed_cluster_build_reruns_to_the_same_shards(setting, s3_build):
    out, _, _ = s3_build
    tmp, bucket = setting["tmp"], setting["bucket"]
    killed = f"{bucket}/corpora/killed"
    cmd = cli(f"{bucket}/raw", killed, setting["address"], f"{bucket}/corpus.json")
    first = run_in_group(cli(f"{bucket}/raw", killed, setting["address"], f"{bucket}/corpus.json", kill_at="pack"),
                         cwd=str(tmp), env=driver_env(tmp))
    assert first.returncode == -9, first.output[-3000:]
    assert not storage.exists(f"{killed}/{schema.MANIFEST_NAME}")
    again = run_in_group(cmd, cwd=str(tmp), env=driver_env(tmp))
    assert again.returncode == 0, again.output[-3000:]
    assert "stages to run: pack, shard" in again.output
    assert shard_bytes(killed) == shard_bytes(out)


def test_training_streams_the_s3_corpus_with_the_local_losses(setting, s3_build, tmp_path):
    out, _, _ = s3_build
    flags = ["--config", "electra/configs/tiny.json", "--set", "data.seq_len=64", "--set", "train.log_every=1",
             "--set", "train.eval_every=0", "--set", "data.shuffle_buffer=64", "--set", "optimizer.warmup_steps=2",
             "--max-steps", "3", "--micro-batch", "4", "--set", "train.global_batch_size=4", "--seed", "5"]
    losses = []
    for name, data in (("s3", out), ("local", setting["local"])):
        run_dir = tmp_path / name
        done = run_in_group([sys.executable, "electra/train.py", *flags, "--data", data, "--out", str(run_dir)],
                            cwd=str(ROOT), env={**driver_env(tmp_path), "OMP_NUM_THREADS": "1"})
        assert done.returncode == 0, done.output[-4000:]
        records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
        losses.append([(r["step"], r["loss"], r["disc_loss"]) for r in records if r.get("kind") == "train"])
    assert len(losses[0]) == 3 and losses[0] == losses[1]
