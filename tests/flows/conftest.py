"""Prefect's test harness (a temporary local server) shared by the flow tests."""
from __future__ import annotations

import pytest

from common.ports import free_port
from tests._procs import kill_mentioning


@pytest.fixture(scope="session")
def prefect_harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny export with GLUE (SST-2 keyword task, MNLI, STS-B) and SQuAD 2.0 files."""
    from tests.flows._eval_data import build_tiny

    return build_tiny(tmp_path_factory.mktemp("eval"))


@pytest.fixture(scope="module")
def ray_cluster():
    """A real two-node Ray cluster on loopback: ``ray start --head`` plus ``ray start --address``
    (token auth, as Ray 2.60 turns it on for a head started by ``ray start``). Yields the address;
    drivers connect from subprocesses with ``--ray-address``."""
    import os
    import shutil
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    ray = str(Path(sys.executable).parent / "ray")
    port = free_port()
    # The cluster's own Ray folder (short: Ray's Unix sockets live in it): every process of both
    # nodes names it, so the clean-up finds them all, and nothing else (never ``ray stop``: that
    # would also stop the test session's own local Ray).
    temp = tempfile.mkdtemp(prefix="rcl", dir="/tmp")
    env = {**os.environ, "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    common = ["--node-ip-address=127.0.0.1", "--num-cpus=1", "--object-store-memory=400000000",
              "--disable-usage-stats", f"--temp-dir={temp}"]
    try:
        head = subprocess.run([ray, "start", "--head", f"--port={port}", "--include-dashboard=false", *common],
                              env=env, capture_output=True, text=True, timeout=180)
        assert head.returncode == 0, head.stdout[-2000:] + head.stderr[-2000:]
        worker = subprocess.run([ray, "start", f"--address=127.0.0.1:{port}", *common],
                                env={**env, "RAY_AUTH_MODE": "token"}, capture_output=True, text=True, timeout=180)
        assert worker.returncode == 0, worker.stdout[-2000:] + worker.stderr[-2000:]
        yield f"127.0.0.1:{port}"
    finally:
        kill_mentioning(temp)
        shutil.rmtree(temp, ignore_errors=True)
