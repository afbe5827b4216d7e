"""Prefect's test harness (a temporary local server) shared by the flow tests."""
from __future__ import annotations

import pytest

from electra.distributed import free_port


@pytest.fixture(scope="session")
def prefect_harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


def _kill_cluster(port: int) -> None:
    """SIGKILL every process of the cluster whose GCS listens on ``port`` (never ``ray stop``:
    that would also stop the test session's own local Ray)."""
    import os
    import signal

    marks = (f"127.0.0.1:{port}".encode(), f"gcs_server_port={port}".encode())
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if int(pid) != os.getpid() and any(m in cmdline for m in marks):
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture(scope="module")
def ray_cluster():
    """A real two-node Ray cluster on loopback: ``ray start --head`` plus ``ray start --address``
    (token auth, as Ray 2.60 turns it on for a head started by ``ray start``). Yields the address;
    drivers connect from subprocesses with ``--ray-address``."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    ray = str(Path(sys.executable).parent / "ray")
    port = free_port()
    env = {**os.environ, "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    common = ["--node-ip-address=127.0.0.1", "--num-cpus=1", "--object-store-memory=400000000",
              "--disable-usage-stats"]
    try:
        head = subprocess.run([ray, "start", "--head", f"--port={port}", "--include-dashboard=false", *common],
                              env=env, capture_output=True, text=True, timeout=180)
        assert head.returncode == 0, head.stdout[-2000:] + head.stderr[-2000:]
        worker = subprocess.run([ray, "start", f"--address=127.0.0.1:{port}", *common],
                                env={**env, "RAY_AUTH_MODE": "token"}, capture_output=True, text=True, timeout=180)
        assert worker.returncode == 0, worker.stdout[-2000:] + worker.stderr[-2000:]
        yield f"127.0.0.1:{port}"
    finally:
        _kill_cluster(port)
