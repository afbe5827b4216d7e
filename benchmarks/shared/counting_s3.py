"""A real S3 API (moto's server) behind a proxy that counts every request and byte, for benchmarks.

    moto, endpoint = start_moto()
    proxy = CountingProxy(endpoint); url = proxy.start()   # point AWS_ENDPOINT_URL at url
    ... ; proxy.mark("phase")                              # or GET url/__mark__/phase from anywhere
    proxy.totals(), proxy.phases()                         # requests by kind, bytes in and out

``CountingProxy`` is ``tests._s3proxy.S3Proxy`` (the tests' fault-injecting proxy) with a
handler that classifies and counts each request as it arrives and the bytes of each body:

* kinds: ``GET`` (a whole object), ``GET_RANGE`` (a GET with a ``Range`` header), ``LIST`` (a GET
  on the bucket, ``ListObjects(V2)``), ``HEAD``, ``PUT`` (a whole object), ``PUT_PART``
  (``UploadPart``), ``PUT_COPY`` (a PUT with ``x-amz-copy-source``), ``PUT_BUCKET``,
  ``MPU_CREATE`` / ``MPU_COMPLETE`` / ``MPU_ABORT`` (multipart uploads), ``DELETE``,
  ``DELETE_MULTI`` (``POST ?delete``), ``OTHER``;
* bytes: ``bytes_in`` (request bodies the clients sent: PUT bodies, the multi-delete XML) and
  ``bytes_out`` (answer bodies: objects and ranges read, listings' XML), per kind.

With no fault rule set (this module sets none) a request is forwarded at once, over one
keep-alive connection to the server per client connection, and not logged (the base class's
log would hold every request: millions in a large benchmark). Rules still work as in the tests.

A client, a Ray worker included, can ask the proxy to close a phase: ``GET <proxy>/__mark__/NAME``
(``mark_url``) is answered by the proxy itself, not counted, and records the counters at that
moment under NAME; ``phases()`` gives each phase's counts (from the previous mark). A benchmark
run in a child process uses it to split its requests into map side, reduce side and clean-up
without a channel of its own.

``benchmarks/train/start_proxy.py`` has an earlier copy of the server start and the bytes-out
counting (``CountingProxy`` there counts answers' bytes only); this module is meant to replace it.
"""
from __future__ import annotations

import http.client
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests._s3proxy import _HOP, S3Proxy, _Handler  # noqa: E402

MARK = "/__mark__/"
KINDS = ("GET", "GET_RANGE", "LIST", "HEAD", "PUT", "PUT_PART", "PUT_COPY", "PUT_BUCKET", "MPU_CREATE",
         "MPU_COMPLETE", "MPU_ABORT", "DELETE", "DELETE_MULTI", "OTHER")
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def classify(method: str, path: str, query: str, headers: Any) -> str:
    """The kind of one S3 request (path-style addressing: ``/bucket`` or ``/bucket/key``)."""
    bucket_only = path.strip("/").count("/") == 0
    params = urllib.parse.parse_qs(query, keep_blank_values=True)
    if method == "GET":
        if bucket_only:
            return "LIST" if not params or {"list-type", "prefix", "delimiter", "marker", "continuation-token"} & set(params) else "OTHER"
        return "GET_RANGE" if headers.get("Range") else "GET"
    if method == "HEAD":
        return "HEAD"
    if method == "PUT":
        if bucket_only:
            return "PUT_BUCKET"
        if "partNumber" in params and "uploadId" in params:
            return "PUT_PART"
        return "PUT_COPY" if headers.get("x-amz-copy-source") else "PUT"
    if method == "POST":
        if "uploads" in params:
            return "MPU_CREATE"
        if "uploadId" in params:
            return "MPU_COMPLETE"
        if "delete" in params:
            return "DELETE_MULTI"
        return "OTHER"
    if method == "DELETE":
        return "MPU_ABORT" if "uploadId" in params else "DELETE"
    return "OTHER"


def empty_counts() -> dict[str, dict[str, int]]:
    return {"requests": Counter(), "bytes_in": Counter(), "bytes_out": Counter()}


class _CountingHandler(_Handler):
    """Counts a request when its body has been read (``_body``, called once per request) and the
    bytes of the answer's body (``_reply``); forwards over a kept-alive upstream connection."""

    _upstream: http.client.HTTPConnection | None = None
    _kind = "OTHER"

    def _body(self) -> bytes:
        body = super()._body()
        split = urllib.parse.urlsplit(self.path)
        self._kind = classify(self.command, urllib.parse.unquote(split.path), split.query, self.headers)
        self.proxy.count(self._kind, len(body), 0, request=True)
        return body

    def _reply(self, status: int, body: bytes, headers=()) -> None:
        if self.command != "HEAD":
            self.proxy.count(self._kind, 0, len(body))
        super()._reply(status, body, headers)

    def _handle(self) -> None:
        if self.path.startswith(MARK):
            _Handler._body(self)  # not a request to the store: not counted
            self.proxy.mark(urllib.parse.unquote(self.path[len(MARK):]))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.proxy.has_rules():
            return super()._handle()  # the tests' fault rules: the base class's path
        body = self._body()
        headers = [(k, v) for k, v in self.headers.items() if k.lower() not in _HOP and k.lower() != "content-length"]
        for attempt in (0, 1):  # a kept-alive upstream connection the server closed: open another once
            conn = self._upstream
            if conn is None:
                conn = self._upstream = http.client.HTTPConnection(*self.proxy.upstream, timeout=120)
            try:
                conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                for k, v in headers:
                    conn.putheader(k, v)
                if body or self.command in ("PUT", "POST"):
                    conn.putheader("Content-Length", str(len(body)))
                conn.endheaders(body or None)
                resp = conn.getresponse()
                data = resp.read()
                break
            except (http.client.HTTPException, ConnectionError):
                conn.close()
                self._upstream = None
                if attempt:
                    raise
        if resp.will_close:
            conn.close()
            self._upstream = None
        out = [(k, v) for k, v in resp.getheaders() if k.lower() not in _HOP and k.lower() != "content-length"]
        if self.command == "HEAD":
            self.send_response(resp.status)
            for k, v in out:
                self.send_header(k, v)
            length = resp.getheader("Content-Length")
            if length is not None:
                self.send_header("Content-Length", length)
            self.end_headers()
            return
        self._reply(resp.status, data, out)

    def finish(self) -> None:
        if self._upstream is not None:
            self._upstream.close()
        super().finish()

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle


class CountingProxy(S3Proxy):
    """``S3Proxy`` counting requests by kind and body bytes both ways; ``mark`` closes a phase."""

    def __init__(self, upstream: str):
        super().__init__(upstream)
        self.handler_class = _CountingHandler
        self._counts = empty_counts()
        self._marks: list[tuple[str, float, dict[str, dict[str, int]]]] = []

    def has_rules(self) -> bool:
        r = self._rules
        return bool(r.windows or r.deny or r.truncate or r.misreport or r.cut or r.reset or r.chaos)

    def count(self, kind: str, bytes_in: int, bytes_out: int, *, request: bool = False) -> None:
        with self._lock:
            if request:
                self._counts["requests"][kind] += 1
            if bytes_in:
                self._counts["bytes_in"][kind] += bytes_in
            if bytes_out:
                self._counts["bytes_out"][kind] += bytes_out

    def totals(self) -> dict[str, dict[str, int]]:
        """Every request and byte since the start (a copy)."""
        with self._lock:
            return {k: dict(v) for k, v in self._counts.items()}

    def mark(self, name: str) -> None:
        with self._lock:
            self._marks.append((name, time.time(), {k: Counter(v) for k, v in self._counts.items()}))

    def phases(self) -> dict[str, dict[str, Any]]:
        """Per mark (in order): the requests and bytes since the previous one, and when it came."""
        out, prev = {}, empty_counts()
        with self._lock:
            marks = list(self._marks)
        for name, at, snap in marks:
            out[name] = {**{k: summarize(snap[k], prev[k]) for k in snap}, "at": at}
            prev = snap
        return out

    def decide(self, method: str, path: str, query: str):
        if not self.has_rules():
            return "forward", None
        return super().decide(method, path, query)


def summarize(now: dict[str, int], before: dict[str, int] | None = None) -> dict[str, int]:
    before = before or {}
    return {k: now.get(k, 0) - before.get(k, 0) for k in KINDS if now.get(k, 0) - before.get(k, 0)}


def mark_url(endpoint: str, name: str) -> str:
    return endpoint.rstrip("/") + MARK + urllib.parse.quote(name)


def mark(name: str, endpoint: str | None = None) -> None:
    """Close phase ``name`` at the counting proxy ``endpoint`` (default ``AWS_ENDPOINT_URL``)."""
    with urllib.request.urlopen(mark_url(endpoint or os.environ["AWS_ENDPOINT_URL"], name), timeout=30) as r:
        r.read()


# moto's server looks up its backend per request by listing its own package folder (about 175
# isdir calls per request: a third of its time per ranged GET, measured). The list is fixed once
# moto is installed, so the launcher computes it once; nothing else of the server changes.
_FAST_MOTO = """
import logging, sys
from moto import backends
_modules = tuple(backends.list_of_moto_modules())
backends.list_of_moto_modules = lambda: iter(_modules)
logging.getLogger("werkzeug").setLevel(logging.ERROR)
from moto.server import main
main(sys.argv[1:])
"""


def start_moto(log: Path | None = None, *, cached_lookup: bool = True) -> tuple[subprocess.Popen, str]:
    """moto's S3 server on a free loopback port (``cached_lookup``: its per-request backend lookup
    computed once, ``_FAST_MOTO``); returns the process and its endpoint."""
    from common.ports import free_port

    port = free_port()
    out = open(log, "wb") if log else subprocess.DEVNULL
    launch = ["-c", _FAST_MOTO] if cached_lookup else ["-m", "moto.server"]
    proc = subprocess.Popen([sys.executable, *launch, "-H", "127.0.0.1", "-p", str(port)],
                            stdout=out, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:  # readiness of a server started here
        try:
            urllib.request.urlopen(endpoint, timeout=2)
            return proc, endpoint
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"moto server did not start on {endpoint}")
            time.sleep(0.2)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def pointed_at(env: dict[str, str]) -> Iterator[None]:
    """This process's store variables set to ``env`` for the block, then restored, and s3fs's
    cached clients dropped both ways (each keeps the endpoint it was made with). A benchmark run
    inside a test session must not leave ``AWS_ENDPOINT_URL`` at a proxy it has stopped: every
    later test of that process would meet a closed port."""
    import s3fs

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        s3fs.S3FileSystem.clear_instance_cache()

class CountingS3:
    """moto + ``CountingProxy``, as a context: ``env`` holds the ``AWS_*`` variables pointing at
    the proxy (with test credentials), ``bucket(name)`` makes a bucket through it."""

    def __init__(self, log: Path | None = None):
        self.log = log
        self.moto: subprocess.Popen | None = None
        self.proxy: CountingProxy | None = None
        self.endpoint = ""

    def __enter__(self) -> "CountingS3":
        self.moto, upstream = start_moto(self.log)
        self.proxy = CountingProxy(upstream)
        self.endpoint = self.proxy.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.proxy is not None:
            self.proxy.stop()
        if self.moto is not None:
            stop(self.moto)

    @property
    def env(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL": self.endpoint, **CREDENTIALS}

    def bucket(self, name: str) -> str:
        req = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        with urllib.request.urlopen(req, timeout=30) as r:
            r.read()
        return f"s3://{name}"
