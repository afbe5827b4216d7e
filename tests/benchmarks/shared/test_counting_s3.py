"""benchmarks/shared/counting_s3.pointed_at: a benchmark run inside a test process sets the store
variables for its block only (one that did not sent every later test of a CI worker to a stopped
proxy)."""
from __future__ import annotations

import os

import pytest

from benchmarks.shared.counting_s3 import pointed_at


def test_pointed_at_restores_the_variables_it_set_and_drops_the_ones_it_added(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    monkeypatch.delenv("AWS_MAX_ATTEMPTS", raising=False)
    with pointed_at({"AWS_ENDPOINT_URL": "http://127.0.0.1:2", "AWS_MAX_ATTEMPTS": "1"}):
        assert (os.environ["AWS_ENDPOINT_URL"], os.environ["AWS_MAX_ATTEMPTS"]) == ("http://127.0.0.1:2", "1")
    assert os.environ["AWS_ENDPOINT_URL"] == "http://127.0.0.1:1" and "AWS_MAX_ATTEMPTS" not in os.environ


def test_pointed_at_restores_them_when_the_block_raises(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    with pytest.raises(RuntimeError), pointed_at({"AWS_ENDPOINT_URL": "http://127.0.0.1:2"}):
        raise RuntimeError("a failed benchmark")
    assert os.environ["AWS_ENDPOINT_URL"] == "http://127.0.0.1:1"
