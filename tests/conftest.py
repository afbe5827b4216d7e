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

# Prefect sets up its console handlers when its flow machinery is first imported, bound to the
# sys.stderr of that moment. The command lines import it late (cli/build_corpus.py checks the job
# first), so a test calling a CLI's main() under capsys would bind them to that test's captured
# stream: its log lines would land in the test's stderr, and later tests' writes fail on the
# closed stream. Imported here, at collection, as in a user's process: the real stderr.
from prefect import flow  # noqa: E402,F401


def pytest_sessionstart(session):
    """Free the DeepSpeed all-reduce segments that runs before the fix in
    ``electra.distributed.deepspeed_glue.unlink_shm_segment`` left in /dev/shm (69 MB of RAM each; a machine
    that ran the suite all day had 17 GB of them, and Ray's memory monitor then killed its workers
    in a loop until CI timed out). Only segments no live process maps are removed: those are
    garbage, since every rank maps its own for as long as it lives."""
    import glob

    from tests._procs import mapped_shm_files

    if os.environ.get("PYTEST_XDIST_WORKER"):
        return  # once, in the controlling process
    mapped = mapped_shm_files()
    for name in glob.glob(f"/dev/shm/deepspeed_allreduce_buffer_{os.getuid()}_*"):
        if name not in mapped:
            try:
                os.unlink(name)
            except OSError:
                pass


STORE_VARIABLES = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION",
                   "AWS_MAX_ATTEMPTS", "ELECTRA_STORE_RETRY_SECONDS")


@pytest.fixture(autouse=True)
def _fresh_s3_clients():
    """Every test starts with no cached S3 filesystem and leaves the store variables as it found
    them. fsspec caches filesystems by their arguments, not by the environment, and each keeps the
    endpoint it was made with; and a benchmark run in process that pointed ``AWS_ENDPOINT_URL`` at
    a proxy of its own and never set it back sent every later test of that process to a closed
    port (twice the CI run's last tests, refused for their whole retry budget). A test that changes
    one without restoring it errors here, naming it; the value is restored for the tests after."""
    import sys

    _endpoint_answers()
    before = {k: os.environ.get(k) for k in STORE_VARIABLES}
    yield
    if "s3fs" in sys.modules:
        sys.modules["s3fs"].S3FileSystem.clear_instance_cache()
    session = _SESSION.get("env", {})  # the session server's values, set up during this test: kept
    changed = {k: (v, os.environ.get(k)) for k, v in before.items()
               if os.environ.get(k) != v and not (v is None and os.environ.get(k) == session.get(k))}
    for k, (v, _) in changed.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    if changed:
        pytest.fail("the test left store variables changed (restored now): "
                    + ", ".join(f"{k} {v!r} -> {now!r}" for k, (v, now) in changed.items())
                    + "; use monkeypatch.setenv or benchmarks.shared.counting_s3.pointed_at", pytrace=False)


_SESSION: dict = {}  # the session's S3 server and the store variables it set (``s3_server``)


def _endpoint_answers() -> None:
    """A test must not start with ``AWS_ENDPOINT_URL`` at a closed port: a fixture (module or
    session scope, which the per-test check after the test cannot see) that left it at a proxy it
    stopped fails the next test at once, named, instead of making it retry for five minutes. The
    session's own server, found dead, is started again (``S3Server.alive``)."""
    import socket
    import urllib.parse

    url = os.environ.get("AWS_ENDPOINT_URL")
    if not url:
        return
    server = _SESSION.get("server")
    if server is not None and url == server.endpoint:
        server.alive()
        return
    parts = urllib.parse.urlsplit(url)
    if parts.hostname not in ("127.0.0.1", "localhost"):
        return
    try:
        socket.create_connection((parts.hostname, parts.port or 80), timeout=5).close()
    except OSError:
        for k in STORE_VARIABLES:
            if k in _SESSION.get("env", {}):
                os.environ[k] = _SESSION["env"][k]
            else:
                os.environ.pop(k, None)
        pytest.fail(f"AWS_ENDPOINT_URL={url} refuses connections: an earlier test or fixture pointed it at "
                    "a server it stopped and never set it back (the session's values are restored now)",
                    pytrace=False)


@pytest.fixture(scope="session")
def ray_local(s3_server):
    """A local 2-CPU Ray cluster shared by every test that asks for it.

    Started after the S3 server: Ray's worker processes inherit the driver's environment at
    ``ray.init``, so this order lets every Ray task reach the server through ``AWS_*``.
    """
    import ray

    if not ray.is_initialized():
        # address="local": never attach to a cluster another test started with `ray start`.
        # A bounded object store: two test processes each run one of these beside Prefect servers,
        # clusters and trainers on a 24 GB machine (Ray's default is 30% of the memory each).
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
                 configure_logging=False, object_store_memory=1_500_000_000)
    from pipelines.engine.raydata import configure_data_context

    configure_data_context()
    yield ray
    ray.shutdown()


class S3Server:
    """A real S3-API server (moto's standalone server) on loopback, as s3fs's own tests use.

    One per test process, for the whole session. A server that has exited by the time a test asks
    for a bucket is started again on the same port, so the session's ``AWS_ENDPOINT_URL`` still
    reaches it, with a warning naming its exit status and its log's last lines: every test makes
    its own buckets, so nothing is lost. Buckets are made through a client of this endpoint, never
    a cached one (``_fresh_s3_clients``).
    """

    def __init__(self, port: int, log_path):
        self.port, self.log_path = port, log_path
        self.endpoint = f"http://127.0.0.1:{port}"
        self.proc = None
        self._made = 0
        self.start()

    def start(self) -> None:
        import subprocess
        import sys
        import time
        import urllib.request

        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                         stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:  # readiness of a server we started, not a race with the code under test
            try:
                urllib.request.urlopen(self.endpoint, timeout=2)
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.proc.kill()
                    raise RuntimeError(f"moto server did not start on {self.endpoint} (log: {self.log_path})")
                time.sleep(0.2)

    def alive(self) -> None:
        """Start the server again if it has exited (class docstring)."""
        import warnings

        code = self.proc.poll()
        if code is None:
            return
        with open(self.log_path, "rb") as log:
            tail = log.read()[-600:].decode("utf-8", "replace")
        warnings.warn(f"moto server on {self.endpoint} had exited ({code}); started again. Its log ended: {tail}")
        self.start()

    def bucket(self, prefix: str = "b") -> str:
        """Create a fresh, empty bucket and return ``s3://<name>``."""
        import fsspec

        self.alive()
        self._made += 1
        name = f"{prefix}{self._made}-{os.getpid()}"
        fsspec.filesystem("s3", use_listings_cache=False, skip_instance_cache=True,
                          endpoint_url=self.endpoint).mkdir(name)
        return f"s3://{name}"

    def stop(self) -> None:
        import subprocess

        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """moto's S3 server on a free loopback port, with the standard AWS_* variables pointing at it
    for the whole session (so subprocesses and Ray workers started later inherit them)."""
    import moto  # noqa: F401  (a test dependency: without it the storage tests must fail, not skip)

    from common.ports import free_port
    server = S3Server(free_port(), tmp_path_factory.mktemp("moto") / "moto.log")
    env = {"AWS_ENDPOINT_URL": server.endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1"}
    from benchmarks.shared.counting_s3 import pointed_at

    _SESSION.update(server=server, env=env)
    try:
        with pointed_at(env):
            yield server
    finally:
        _SESSION.clear()
        server.stop()
