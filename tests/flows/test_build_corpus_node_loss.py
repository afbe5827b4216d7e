"""build-corpus survives losing a Ray worker node in the middle of a stage.

A two-node loopback cluster of the test's own (``ray start`` twice; the shared ``ray_cluster``
fixture's worker must not die under other tests) reads and writes moto's S3 server. Both nodes
start with ``tests/flows/_node_loss`` on ``PYTHONPATH``: its ``sitecustomize`` wraps a chosen
pipeline function so that call number n of it on the worker node SIGKILLs that node's raylet
(object store included; its workers die with it), and a call on the head waits until that has
happened (so the worker, not the scheduler's choice, meets the kill point). The head keeps its
CPU, so the build can finish there. The driver is the CLI in a subprocess, run once: it must
finish by itself with shards, tokenizer and the manifest's summary byte-identical to a local
build of the same files.

Configuration of this test's cluster, not clocks: the head's GCS checks raylet health every
500 ms and declares a node dead after 3 failed checks (Ray notices the loss in 1-1.5 s instead
of its default ~15 s), and task outputs over 1 KiB go to the object store (``SYSTEM_CONFIG``).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from common.ports import free_port
from pipelines import schema
from tests._procs import kill_mentioning, run_in_group
from tests.flows._bucket_corpus import bucket_corpus
from tests.flows.test_build_corpus_cluster import cli, driver_env, shard_bytes

HOOK_DIR = Path(__file__).resolve().parent / "_node_loss"
# Where the worker node dies: call number n of a function on it, in the middle of exact_dedup.
# Each function runs in several Ray tasks of the stage (the head's wait holds one of them; the
# worker must reach call n with the rest).
KILL_POINTS = {
    # the digest shuffle's map side: the task in flight on the node dies with it
    "digest_in_flight": ("pipelines.dedup.exact:digest_rows", 1),
    # the same, one task later: the digest block of the node's first task, finished but not yet
    # read by the shuffle's map-file writer, is lost with the node's object store (Ray rebuilds
    # it from its lineage)
    "digest_block_lost": ("pipelines.dedup.exact:digest_rows", 2),
    # the shuffle's reduce side (its map files are on the store)
    "reduce": ("pipelines.dedup.exact:exact_marks", 1),
    # the marking pass, fused with the writing of the stage's parts (a part half-written by the
    # dead task is rewritten under the same name)
    "mark": ("pipelines.dedup.marks:apply_marks", 1),
}
HEALTH_CHECK = {"RAY_health_check_initial_delay_ms": "0", "RAY_health_check_period_ms": "500",
                "RAY_health_check_timeout_ms": "500", "RAY_health_check_failure_threshold": "3"}
# Ray returns task outputs under 100 KiB inline to their owner (the driver), where a node's loss
# cannot reach them; a real corpus's blocks are MBs. The test's blocks are KBs, so its cluster
# inlines nothing over 1 KiB: blocks live in the object store of the node that made them.
SYSTEM_CONFIG = {"max_direct_call_object_size": 1024}
pytestmark = pytest.mark.slow


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture(scope="module")
def setting(tmp_path_factory, s3_server, ray_local):
    return bucket_corpus(tmp_path_factory.mktemp("node_loss"), s3_server, "nodeloss")


@pytest.fixture
def doomed_cluster(request, tmp_path):
    """A two-node loopback cluster whose worker node dies at ``KILL_POINTS[request.param]``.
    Yields its address, the kill marker's path, the kill point and the cluster's Ray folder;
    SIGKILLs every process of both nodes after (``NODE_LOSS_KEEP_LOGS=<folder>`` keeps Ray's
    logs there)."""
    ray = str(Path(sys.executable).parent / "ray")
    port = free_port()
    marker = tmp_path / "node_killed.json"
    os.mkfifo(f"{marker}.fifo")
    # Ray's own folder for this cluster (its logs apart from other clusters'); short, as Ray's
    # Unix sockets live in it.
    temp = tempfile.mkdtemp(prefix="rnl", dir="/tmp")
    env = {**os.environ, "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    common = ["--node-ip-address=127.0.0.1", "--num-cpus=1", "--object-store-memory=400000000",
              "--disable-usage-stats", f"--temp-dir={temp}"]
    head_only = ["--include-dashboard=false", f"--system-config={json.dumps(SYSTEM_CONFIG)}"]
    at, nth = KILL_POINTS[request.param]
    hook = {"PYTHONPATH": str(HOOK_DIR), "NODE_LOSS_AT": at, "NODE_LOSS_NTH": str(nth),
            "NODE_LOSS_MARKER": str(marker)}
    try:
        head = subprocess.run([ray, "start", "--head", f"--port={port}", *head_only, *common],
                              env={**env, **HEALTH_CHECK, **hook, "NODE_LOSS_ROLE": "wait"},
                              capture_output=True, text=True, timeout=180)
        assert head.returncode == 0, head.stdout[-2000:] + head.stderr[-2000:]
        worker = subprocess.run([ray, "start", f"--address=127.0.0.1:{port}", *common],
                                env={**env, **hook, "NODE_LOSS_ROLE": "kill", "RAY_AUTH_MODE": "token"},
                                capture_output=True, text=True, timeout=180)
        assert worker.returncode == 0, worker.stdout[-2000:] + worker.stderr[-2000:]
        yield {"address": f"127.0.0.1:{port}", "marker": marker, "at": (at, nth), "ray_temp": temp}
    finally:
        kill_mentioning(temp)
        keep = os.environ.get("NODE_LOSS_KEEP_LOGS")
        if keep:
            shutil.copytree(temp, Path(keep) / f"{request.param}-{port}", ignore_dangling_symlinks=True,
                            ignore=shutil.ignore_patterns("sockets", "runtime_resources"), dirs_exist_ok=True)
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.parametrize("doomed_cluster", list(KILL_POINTS), indirect=True)
def test_build_finishes_after_losing_a_worker_node_mid_stage(setting, doomed_cluster):
    marker = doomed_cluster["marker"]
    tmp, bucket = setting["tmp"], setting["bucket"]
    out = f"{bucket}/corpora/{marker.parent.name}"
    done = run_in_group(cli(f"{bucket}/raw", out, doomed_cluster["address"], f"{bucket}/corpus.json"),
                        cwd=str(tmp), env=driver_env(tmp))
    Path(doomed_cluster["ray_temp"], "driver.out").write_text(done.output)
    # The worker node died where it was told to, during this build ...
    assert marker.exists(), "the worker node never reached the kill point:\n" + done.output[-3000:]
    killed = json.loads(marker.read_text())
    assert (killed["at"], killed["call"]) == doomed_cluster["at"] and not _alive(killed["raylet"]), killed
    # ... and the build finished by itself, in this one run, with the local build's bytes.
    assert done.returncode == 0, done.output[-6000:]
    remote, local = shard_bytes(out), shard_bytes(setting["local"])
    assert remote[1] == local[1], "tokenizer.json differs"
    assert len(remote[0]) == len(local[0]) and remote[0] == local[0]
    manifest = schema.Manifest.load(out)
    assert manifest.stats["summary"] == schema.Manifest.load(setting["local"]).stats["summary"]
    attempts = {name: manifest.stats[name].get("attempts") for name in ("exact_dedup", "near_dedup", "pack", "shard")}
    Path(doomed_cluster["ray_temp"], "stage_attempts.json").write_text(json.dumps(attempts))
    # Ray's task retries and lineage reconstruction absorbed the loss: the runner never threw the
    # stage's finished work away to run it again (benchmarks/corpus/node_loss.py counts what was redone).
    assert attempts["exact_dedup"] == 1, attempts
