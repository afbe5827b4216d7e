"""Fixtures of the pipeline tests."""
from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def ray_s3(s3_server, ray_local):
    """Local Ray whose workers reach the S3 server (the root ``ray_local`` starts after it)."""
    @ray_local.remote
    def endpoint() -> str | None:
        return os.environ.get("AWS_ENDPOINT_URL")

    assert ray_local.get(endpoint.remote()) == s3_server.endpoint, "Ray workers do not see the S3 server"
    return ray_local, s3_server
