"""Shared fixtures: one local Ray instance per test session (starting Ray costs seconds)."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Test models are tiny: one intra-op thread is many times faster than two fighting over 2 cores
# with Ray workers and launcher subprocesses (which inherit this).
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")


@pytest.fixture(scope="session")
def ray_local():
    """A local 2-CPU Ray cluster shared by every test that asks for it."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
    from pipelines.build import configure_data_context

    configure_data_context()
    yield ray
    ray.shutdown()
