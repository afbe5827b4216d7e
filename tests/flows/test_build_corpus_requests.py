"""build-corpus from s3:// to s3:// through a counting proxy: 4x the text with 4x the reduce tasks
(4, then 16, as a cluster that grows with the data picks them) costs at most 4.6x the requests.

Shuffle sizes are scaled down (``shuffle.map_file_mb``, ``partition_mb``, ``slice_mb``) so that a
small corpus has many map files and partitions, as a large one has at the defaults; a second
case scales only the two sizes a user of the earlier shuffle knew (``map_file_mb``,
``partition_mb``) and leaves ``slice_mb`` at its default, so each shuffle writes few, large map
files (the bar must hold whichever sizes a user sets); every request
of each build (the CLI in a subprocess whose ``AWS_ENDPOINT_URL`` is the proxy) is in the proxy's
log. With map files of a fixed size the shuffles' reads grow as map files x reduce tasks (16x
here); with map files of ``reduce_tasks x slice_mb`` they grow with the data.
"""
from __future__ import annotations

import collections
import os
import sys
from pathlib import Path

import pytest

from common import storage
from pipelines import schema
from synthetic import prose
from tests._procs import run_in_group
from tests._s3proxy import S3Proxy
from tests.flows._bucket_corpus import CFG

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
SHUFFLE = {"map_file_mb": 0.004, "partition_mb": 0.002, "slice_mb": 0.002, "task_memory_mb": 0.05}
SLICES_AT_DEFAULT = {"map_file_mb": 0.004, "partition_mb": 0.002}


def _build(tmp: Path, proxy: S3Proxy, bucket: str, name: str, docs: int, reduce_tasks: int,
           shuffle: dict) -> collections.Counter:
    raw = prose.write_corpus(tmp / name, num_docs=docs, seed=11)
    for rel in storage.find(str(raw)):
        storage.write_bytes(f"{bucket}/{name}/raw/{rel}", (raw / rel).read_bytes())
    storage.write_json(f"{bucket}/{name}/corpus.json", {**CFG, "shuffle": shuffle})
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AWS_ENDPOINT_URL": proxy.endpoint,
           "PREFECT_HOME": str(tmp / "prefect"), "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120"}
    cmd = [sys.executable, "-m", "cli.build_corpus", "--source", f"{bucket}/{name}/raw", "--out",
           f"{bucket}/{name}/corpus", "--config", f"{bucket}/{name}/corpus.json",
           "--set", f"shuffle.reduce_tasks={reduce_tasks}"]
    before = len(proxy.log)
    done = run_in_group(cmd, cwd=str(tmp), env=env, timeout=900)
    assert done.returncode == 0, done.output[-4000:]
    requests = collections.Counter(method for method, _, _ in proxy.log[before:])
    requests["total"] = len(proxy.log) - before
    manifest = schema.Manifest.load(f"{bucket}/{name}/corpus")
    ranges = {s["name"]: s["ranges"] for stage in ("exact_dedup", "near_dedup")
              for s in manifest.stats.get(stage, {}).get("shuffles", []) if isinstance(s, dict) and "ranges" in s}
    # as asked (two halves of the signature shuffle: twice), or one per partition where fewer
    assert ranges and max(ranges.values()) == 2 * reduce_tasks and ranges["lsh_buckets"] == reduce_tasks, ranges
    print(name, reduce_tasks, dict(requests), ranges)
    return requests


@pytest.mark.parametrize("shuffle", [SHUFFLE, SLICES_AT_DEFAULT], ids=["scaled", "slices-at-default"])
def test_requests_at_4x_the_text_and_4x_the_reduce_tasks(tmp_path, s3_server, ray_local, shuffle):
    bucket = s3_server.bucket("requests")
    with S3Proxy(s3_server.endpoint) as proxy:
        small = _build(tmp_path, proxy, bucket, "s", 200, 4, shuffle)
        large = _build(tmp_path, proxy, bucket, "l", 800, 16, shuffle)
    assert large["total"] <= 4.6 * small["total"], (small, large)
    assert large["GET"] <= 4.6 * small["GET"], (small, large)
