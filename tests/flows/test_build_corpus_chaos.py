"""build-corpus from s3:// to s3:// through a store that keeps failing: for the whole build 15% of
requests get 503 SlowDown, 3% of connections are dropped unanswered, ~1% of GETs are cut short
and two stall past the client's read timeout (``S3Proxy.chaos``, seeded).

The clients keep the retries a user has (botocore's and s3fs's defaults): the point is that the
build finishes by itself, every retry path above them riding out a failure rate that never
stops, and that what it publishes is byte for byte what a build against the same store without
faults publishes. The clean build runs in this process on the session's Ray, straight to moto;
the chaos build is the CLI in a subprocess (its own local Ray) whose ``AWS_ENDPOINT_URL`` is
the proxy, so that every request of the build, the Ray workers' included, goes through it.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from common import storage
from pipelines import schema
from pipelines.config import CorpusConfig
from pipelines.corpus_job import CorpusJob
from pipelines.orchestration.runner import CorpusBuild
from synthetic import prose
from tests._procs import run_in_group
from tests._s3proxy import S3Proxy
from tests.flows._bucket_corpus import CFG

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
# 15% 503, 3% dropped, 1% cut; stalls rare, and capped, since each costs s3fs's 15 s read timeout.
CHAOS = {"seed": 51, "slowdown": 0.15, "drop": 0.03, "cut": 0.01, "stall": 0.01, "stall_s": 16.0, "stalls": 2}


def published(corpus: str) -> dict:
    """What a build published: the manifest's shard list and the bytes it names."""
    m = schema.Manifest.load(corpus)
    return {"shards": [(s.path, s.sha256) for s in m.shards],
            "shard_bytes": [storage.read_bytes(storage.join(corpus, s.path)) for s in m.shards],
            "tokenizer": storage.read_bytes(storage.join(corpus, m.tokenizer.path, "tokenizer.json"))}


def test_a_build_through_a_store_failing_a_share_of_all_requests_publishes_the_clean_bytes(
        tmp_path, s3_server, ray_local):
    raw = prose.write_corpus(tmp_path / "raw", num_docs=200, seed=11)
    bucket = s3_server.bucket("chaos")
    for rel in storage.find(str(raw)):
        storage.write_bytes(f"{bucket}/raw/{rel}", (raw / rel).read_bytes())
    storage.write_json(f"{bucket}/corpus.json", CFG)
    CorpusBuild(CorpusJob([f"{bucket}/raw"], f"{bucket}/clean", CorpusConfig.from_dict(CFG))).run()
    clean = published(f"{bucket}/clean")

    env = {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_HOME": str(tmp_path / "prefect"),
           "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120"}
    env.pop("ELECTRA_STORE_RETRY_SECONDS", None)  # the default budget, as a user has it
    cmd = [sys.executable, "-m", "cli.build_corpus", "--source", f"{bucket}/raw", "--out", f"{bucket}/chaos",
           "--config", f"{bucket}/corpus.json"]
    with S3Proxy(s3_server.endpoint) as proxy:
        proxy.chaos(**CHAOS)
        start = time.monotonic()
        done = run_in_group(cmd, cwd=str(tmp_path), env={**env, "AWS_ENDPOINT_URL": proxy.endpoint}, timeout=900)
        seconds = time.monotonic() - start
    counts = dict(proxy.counts)
    retried = sum("retrying in" in ln for ln in done.output.splitlines())  # the driver's; workers' go to Ray's logs
    print(f"chaos build: {seconds:.0f} s, {counts}, {retried} retries logged by the driver")
    assert done.returncode == 0, done.output[-4000:]
    for outcome in ("slowdown", "reset", "cut", "stall", "forward"):
        assert counts.get(outcome, 0) > 0, (outcome, counts)
    assert counts["stall"] == CHAOS["stalls"], counts
    faults = counts["slowdown"] + counts["reset"] + counts["cut"] + counts["stall"]
    assert 0.1 < faults / sum(counts.values()) < 0.3, counts  # the share asked for, over the whole build
    chaos = published(f"{bucket}/chaos")
    assert chaos["shards"] == clean["shards"]
    assert chaos["shard_bytes"] == clean["shard_bytes"]
    assert chaos["tokenizer"] == clean["tokenizer"]
