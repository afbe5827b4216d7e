"""build-corpus from s3:// to s3:// through a faulty store: a 20-second outage, a refused key, a
store that keeps fewer bytes than it was sent, a HEAD that lies about a size.

The store is moto's S3 server behind the test's own proxy (``tests._s3proxy``); each build is
the CLI in a subprocess whose ``AWS_ENDPOINT_URL`` is the proxy, with a local Ray of its own.
Every fault starts at a chosen request (a key pattern), never at a moment on a clock; what is
checked is the outcome: the build finishes by itself with the shards of a build without faults,
or it fails with one line naming the object.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from common import storage
from pipelines import schema
from tests._procs import run_in_group
from tests._s3proxy import S3Proxy
from tests.flows._bucket_corpus import bucket_corpus

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def store(tmp_path_factory, s3_server, ray_local):
    return {**bucket_corpus(tmp_path_factory.mktemp("faults"), s3_server, "faults"), "upstream": s3_server.endpoint}


def shards_of(corpus: str) -> tuple[list[bytes], bytes]:
    m = schema.Manifest.load(corpus)
    return ([storage.read_bytes(storage.join(corpus, s.path)) for s in m.shards],
            storage.read_bytes(storage.join(corpus, m.tokenizer.path, "tokenizer.json")))


def build(store, proxy: S3Proxy, out: str, *, retry_seconds: int | None = None):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AWS_ENDPOINT_URL": proxy.endpoint,
           "PREFECT_HOME": str(store["tmp"] / "prefect"), "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120"}
    if retry_seconds is not None:
        env["ELECTRA_STORE_RETRY_SECONDS"] = str(retry_seconds)
    cmd = [sys.executable, "-m", "cli.build_corpus", "--source", f"{store['bucket']}/raw", "--out", out,
           "--config", f"{store['bucket']}/corpus.json"]
    start = time.monotonic()
    done = run_in_group(cmd, cwd=str(store["tmp"]), env=env, timeout=900)
    return done, time.monotonic() - start


@pytest.fixture
def proxy(store):
    with S3Proxy(store["upstream"]) as p:
        yield p


def test_a_20_second_slowdown_mid_build_is_ridden_out(store, proxy):
    """Every request answered 503 SlowDown for 20 s, from the first request of exact dedup."""
    window = proxy.slowdown(trigger=r"/\.work/exact_dedup-", seconds=20)
    out = f"{store['bucket']}/corpora/outage"
    done, _ = build(store, proxy, out)
    assert done.returncode == 0, done.output[-4000:]
    assert window.opened_at is not None and proxy.counts["slowdown"] > 0, proxy.counts
    assert shards_of(out) == shards_of(store["local"])


def test_a_refused_source_fails_at_once_in_one_line(store, proxy):
    name = store["names"][len(store["names"]) // 2]
    proxy.deny(rf"/raw/{name}$")
    done, seconds = build(store, proxy, f"{store['bucket']}/corpora/denied")
    assert done.returncode == 2, done.output[-4000:]
    errors = [ln for ln in done.output.splitlines() if ln.startswith("build-corpus: error:")]
    assert len(errors) == 1, done.output[-4000:]
    assert f"raw/{name}" in errors[0] and "credentials" in errors[0].lower(), errors[0]
    assert proxy.counts["deny"] >= 1 and seconds < 120  # no retrying of a permanent error
    assert not storage.exists(f"{store['bucket']}/corpora/denied/{schema.MANIFEST_NAME}")


def test_a_store_that_keeps_fewer_bytes_once_is_caught_and_written_again(store, proxy):
    proxy.truncate_puts(r"/\.work/filter-[0-9a-f]+/data/part-", keep=100, times=1)
    out = f"{store['bucket']}/corpora/truncated_once"
    done, _ = build(store, proxy, out)
    assert done.returncode == 0, done.output[-4000:]
    assert proxy.counts["truncate"] == 1
    assert shards_of(out) == shards_of(store["local"])


def test_a_store_that_always_keeps_fewer_bytes_fails_before_the_marker(store, proxy):
    proxy.truncate_puts(r"/\.work/filter-[0-9a-f]+/data/part-", keep=100)
    out = f"{store['bucket']}/corpora/truncated"
    done, _ = build(store, proxy, out, retry_seconds=2)
    assert done.returncode == 2, done.output[-4000:]
    errors = [ln for ln in done.output.splitlines() if ln.startswith("build-corpus: error:")]
    assert len(errors) == 1 and "/data/part-" in errors[0] and "bytes" in errors[0], done.output[-4000:]
    work = storage.find(f"{out}/.work")
    assert not any(p.startswith("filter-") and p.endswith("_SUCCESS") for p in work), work
    assert any(p.startswith("ingest-") and p.endswith("_SUCCESS") for p in work)  # the stage before stands


def test_a_head_that_misreports_a_source_size_is_an_error_not_an_empty_source(store, proxy):
    name = store["names"][0]
    proxy.misreport_length(rf"/raw/{name}$", 0)
    done, _ = build(store, proxy, f"{store['bucket']}/corpora/misreported", retry_seconds=2)
    assert done.returncode == 2, done.output[-4000:]
    errors = [ln for ln in done.output.splitlines() if ln.startswith("build-corpus: error:")]
    assert len(errors) == 1 and f"raw/{name}" in errors[0], done.output[-4000:]
