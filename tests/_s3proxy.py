"""A fault-injecting HTTP proxy in front of an S3 API server (moto), for storage tests.

Every request is forwarded unchanged to the upstream server and its answer returned unchanged,
except where a rule applies. Rules are set at runtime, from the test's thread, while clients
(this process's s3fs, or a subprocess whose ``AWS_ENDPOINT_URL`` is ``proxy.start()``) talk to it:

* ``slowdown``: answer ``503 SlowDown`` (S3's XML error body) to *every* request during a window.
  The window opens at a trigger (the first request whose ``"METHOD /bucket/key?query"``,
  percent-decoded, matches a regex; or at once) and lasts some seconds or some requests.
* ``deny``: ``403 AccessDenied`` for keys matching a regex.
* ``truncate_puts``: a PUT to a matching key reaches the server with a shorter body (and a
  matching ``Content-Length``; its checksums dropped so the server stores it); the client gets
  the server's ``200``. Optionally only the first N times.
* ``misreport_length``: HEAD answers for matching keys carry a wrong ``Content-Length``.
* ``cut``: a GET to a matching key gets its headers and part of its body, then the connection
  closes (an incomplete read, what a dropped connection looks like mid-stream).
* ``reset``: a request to a matching key is read, then the connection closes with no answer.
* ``chaos``: a store that keeps failing a share of all requests, for as long as it is set (a soak:
  S3 throttling a busy prefix, a load balancer dropping connections, a flaky network path). Each
  request takes one draw from ``random.Random(seed)`` (under the lock, so the sequence of
  outcomes is fixed by the seed; which request gets which depends on the order concurrent ones
  arrive in): ``slowdown`` (503 SlowDown), ``reset`` (read, then closed unanswered), ``cut`` (GET:
  the headers with the full Content-Length, part of the body, closed) or ``stall`` (GET: headers
  and part of the body, then silence for ``stall_s`` before the close: a client read timeout when
  longer than the client's; ``stalls`` caps them, since each costs that timeout), else forwarded.
  The rest of the same draw says where in the body a cut or stall stops. A cut or stall drawn by
  a request with no body to cut (HEAD, PUT) falls on the next GET, so how many there are depends
  on the seed and the number of requests, not on the order methods arrive in. It models
  independent failures at a steady rate, not outages (``slowdown`` windows) or a bad key.

Keys are matched (``re.search``) against the decoded path, ``/bucket/key`` (clients address a
loopback endpoint path-style). ``counts`` says how many requests each outcome had (the rule that
refused or altered them, or ``forward``: passed on unchanged);
``log`` lists ``(method, path, outcome)`` of every request. Bodies are buffered whole: this is
for tests, not throughput.
"""
from __future__ import annotations

import http.client
import http.server
import random
import re
import threading
import time
import urllib.parse
from collections import Counter
from dataclasses import dataclass, field

import pytest

_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection",
        "expect"}  # the proxy answers 100-continue itself and forwards whole bodies
# Headers that bind a PUT's body to its content: dropped when the proxy alters the body (the
# point of that rule is a store that silently keeps fewer bytes).
_CHECKSUMS = ("content-md5", "x-amz-checksum-", "x-amz-sdk-checksum-algorithm", "x-amz-trailer",
              "x-amz-decoded-content-length")


def error_body(code: str, message: str, resource: str = "") -> bytes:
    return ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            f"<Error><Code>{code}</Code><Message>{message}</Message><Resource>{resource}</Resource>"
            "<RequestId>s3proxy</RequestId><HostId>s3proxy</HostId></Error>").encode()


@dataclass
class Window:
    """A 503 window: closed until ``trigger`` matches, then open for ``seconds`` or ``requests``."""
    trigger: re.Pattern | None
    seconds: float | None
    requests: int | None
    opened_at: float | None = None
    refused: int = 0

    def admits(self, target: str, now: float) -> bool:
        """False while the window refuses requests (and counts the refusal)."""
        if self.opened_at is None:
            if self.trigger is not None and not self.trigger.search(target):
                return True
            self.opened_at = now
        if self.seconds is not None and now - self.opened_at >= self.seconds:
            return True
        if self.requests is not None and self.refused >= self.requests:
            return True
        self.refused += 1
        return False


@dataclass
class _KeyRule:
    pattern: re.Pattern
    times: int | None = None  # applies this many times, then never again (None: always)
    arg: int | None = None
    applied: int = 0

    def take(self, path: str) -> bool:
        if not self.pattern.search(path) or (self.times is not None and self.applied >= self.times):
            return False
        self.applied += 1
        return True


@dataclass
class _Chaos:
    """The ``chaos`` rule: shares of requests per outcome, drawn from one seeded generator."""
    rng: random.Random
    shares: tuple[tuple[str, float], ...]  # (outcome, probability), tried in this order
    stall_s: float
    stalls: int | None
    keys: re.Pattern | None
    stalled: int = 0  # stalls drawn (capped by ``stalls``)
    owed: list[tuple[str, float]] = field(default_factory=list)  # cuts and stalls for the next GETs

    def draw(self, method: str, path: str) -> tuple[str, float | None]:
        """(outcome, where in the body a cut or stall stops, as a fraction of it)."""
        if self.keys is not None and not self.keys.search(path):
            return "forward", None
        u, outcome, frac = self.rng.random(), "forward", None
        for name, p in self.shares:
            if u < p:
                outcome, frac = name, (u / p if name in ("cut", "stall") else None)
                break
            u -= p
        if outcome == "stall" and self.stalls is not None and self.stalled >= self.stalls:
            outcome, frac = "forward", None
        self.stalled += outcome == "stall"
        if outcome in ("cut", "stall") and method != "GET":  # no body to cut short (HEAD), or sent (PUT)
            self.owed.append((outcome, frac))
            outcome, frac = "forward", None
        if outcome == "forward" and method == "GET" and self.owed:
            outcome, frac = self.owed.pop(0)
        return outcome, frac


@dataclass
class _Rules:
    windows: list[Window] = field(default_factory=list)
    deny: list[_KeyRule] = field(default_factory=list)
    truncate: list[_KeyRule] = field(default_factory=list)
    misreport: list[_KeyRule] = field(default_factory=list)
    cut: list[_KeyRule] = field(default_factory=list)
    reset: list[_KeyRule] = field(default_factory=list)
    chaos: _Chaos | None = None


class S3Proxy:
    """``S3Proxy(upstream).start()`` returns the endpoint URL; ``stop()`` ends it."""

    def __init__(self, upstream: str):
        parsed = urllib.parse.urlsplit(upstream)
        self.upstream = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self.counts: Counter[str] = Counter()
        self.log: list[tuple[str, str, str]] = []
        self._rules = _Rules()
        self._lock = threading.Lock()
        self._server: http.server.ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.endpoint = ""
        self.handler_class: type[http.server.BaseHTTPRequestHandler] = _Handler  # a subclass may count more

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> str:
        handler = type("Handler", (self.handler_class,), {"proxy": self})
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="s3proxy", daemon=True)
        self._thread.start()
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        return self.endpoint

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join()
            self._server = None

    def __enter__(self) -> "S3Proxy":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ rules
    def slowdown(self, *, trigger: str | None = None, seconds: float | None = None,
                 requests: int | None = None) -> Window:
        """503 SlowDown to every request from the first one matching ``trigger`` (None: now) for
        ``seconds`` or ``requests`` (one of them; ``seconds=None, requests=None``: until ``clear``)."""
        window = Window(re.compile(trigger) if trigger else None, seconds, requests,
                        opened_at=None if trigger else time.monotonic())
        with self._lock:
            self._rules.windows.append(window)
        return window

    def deny(self, key: str) -> None:
        self._add("deny", _KeyRule(re.compile(key)))

    def truncate_puts(self, key: str, *, keep: int = 0, times: int | None = None) -> None:
        """PUT bodies to ``key`` stored as their first ``keep`` bytes (the first ``times`` PUTs)."""
        self._add("truncate", _KeyRule(re.compile(key), times, keep))

    def misreport_length(self, key: str, length: int) -> None:
        """HEAD answers for ``key`` say ``Content-Length: length``."""
        self._add("misreport", _KeyRule(re.compile(key), None, length))

    def cut(self, key: str, *, after: int, times: int | None = None) -> None:
        """GETs of ``key`` send ``after`` bytes of body, then the connection closes."""
        self._add("cut", _KeyRule(re.compile(key), times, after))

    def reset(self, key: str, *, times: int | None = None) -> None:
        self._add("reset", _KeyRule(re.compile(key), times))

    def chaos(self, *, seed: int = 0, slowdown: float = 0.15, drop: float = 0.03, cut: float = 0.01,
              stall: float = 0.0, stall_s: float = 20.0, stalls: int | None = None, keys: str | None = None) -> None:
        """From now until ``clear``, each request (to a key matching ``keys``; None: all) fails at
        random (module docstring): ``slowdown`` 503s, ``drop`` resets, ``cut`` and ``stall`` GETs."""
        shares = (("slowdown", slowdown), ("reset", drop), ("cut", cut), ("stall", stall))
        if any(p < 0 for _, p in shares) or sum(p for _, p in shares) > 1:
            raise ValueError(f"chaos shares {dict(shares)}: each must be >= 0 and their sum <= 1")
        rule = _Chaos(random.Random(seed), shares, stall_s, stalls, re.compile(keys) if keys else None)
        with self._lock:
            self._rules.chaos = rule

    def clear(self) -> None:
        with self._lock:
            self._rules = _Rules()

    def _add(self, kind: str, rule: _KeyRule) -> None:
        with self._lock:
            getattr(self._rules, kind).append(rule)

    # ------------------------------------------------------------------ decisions (under the lock)
    def decide(self, method: str, path: str, query: str) -> tuple[str, int | None]:
        """What to do with one request: ``("forward"|"slowdown"|"deny"|"reset"|"truncate"|...,
        arg)``; counted and logged here so that tests read consistent numbers."""
        target = f"{method} {path}" + (f"?{query}" if query else "")
        with self._lock:
            now = time.monotonic()
            outcome, arg = "forward", None
            # Every window sees every request: a trigger may match while another window is open.
            if not all([w.admits(target, now) for w in self._rules.windows]):
                outcome = "slowdown"
            elif any(r.take(path) for r in self._rules.deny):
                outcome = "deny"
            elif any(r.take(path) for r in self._rules.reset):
                outcome = "reset"
            elif method == "PUT" and (rule := next((r for r in self._rules.truncate if r.take(path)), None)):
                outcome, arg = "truncate", rule.arg
            elif method == "HEAD" and (rule := next((r for r in self._rules.misreport if r.take(path)), None)):
                outcome, arg = "misreport", rule.arg
            elif method == "GET" and (rule := next((r for r in self._rules.cut if r.take(path)), None)):
                outcome, arg = "cut", rule.arg
            elif self._rules.chaos is not None:
                outcome, arg = self._rules.chaos.draw(method, path)
            self.counts[outcome] += 1
            self.log.append((method, path, outcome))
            return outcome, arg


class _Handler(http.server.BaseHTTPRequestHandler):
    proxy: S3Proxy
    protocol_version = "HTTP/1.1"  # keep-alive, as S3 clients expect

    def log_message(self, *args) -> None:
        pass

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts = []
            while True:
                n = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if n == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(n))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _reply(self, status: int, body: bytes, headers: list[tuple[str, str]] = ()) -> None:
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _handle(self) -> None:
        split = urllib.parse.urlsplit(self.path)
        path, query = urllib.parse.unquote(split.path), urllib.parse.unquote(split.query)
        body = self._body()  # read first: a refused request must leave the connection in step
        outcome, arg = self.proxy.decide(self.command, path, query)
        xml = [("Content-Type", "application/xml")]
        if outcome == "slowdown":
            return self._reply(503, error_body("SlowDown", "Please reduce your request rate.", path), xml)
        if outcome == "deny":
            return self._reply(403, error_body("AccessDenied", "Access Denied", path), xml)
        if outcome == "reset":
            self.close_connection = True
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
        if outcome == "truncate":
            body = body[:arg]
            headers = {k: v for k, v in headers.items() if not k.lower().startswith(_CHECKSUMS)}
            headers = {k: v for k, v in headers.items() if k.lower() != "content-encoding"
                       or v.lower() != "aws-chunked"}
            if "x-amz-content-sha256" in {k.lower() for k in headers}:
                headers = {k: ("UNSIGNED-PAYLOAD" if k.lower() == "x-amz-content-sha256" else v)
                           for k, v in headers.items()}
        headers = {k: v for k, v in headers.items() if k.lower() != "content-length"}
        conn = http.client.HTTPConnection(*self.proxy.upstream, timeout=60)
        try:
            conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for k, v in headers.items():
                conn.putheader(k, v)
            if body or self.command in ("PUT", "POST"):
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body or None)
            resp = conn.getresponse()
            data = resp.read()
            out = [(k, v) for k, v in resp.getheaders() if k.lower() not in _HOP and k.lower() != "content-length"]
        finally:
            conn.close()
        if self.command == "HEAD":
            length = arg if outcome == "misreport" else resp.getheader("Content-Length")
            self.send_response(resp.status)
            for k, v in out:
                self.send_header(k, v)
            if length is not None:
                self.send_header("Content-Length", str(length))
            self.end_headers()
            return
        if outcome in ("cut", "stall"):
            self.send_response(resp.status)
            for k, v in out:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            # ``cut(after=)`` gives a byte count; ``chaos`` a fraction of the body (always short of it).
            self.wfile.write(data[:arg if isinstance(arg, int) else int(len(data) * arg)])
            self.wfile.flush()
            if outcome == "stall":
                time.sleep(self.proxy._rules.chaos.stall_s if self.proxy._rules.chaos else 0)
            self.close_connection = True
            return
        self._reply(resp.status, data, out)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle


# ------------------------------------------------------------------------------ pytest fixtures
@pytest.fixture
def s3_proxy(s3_server, monkeypatch):
    """An ``S3Proxy`` in front of the session's moto server, ``AWS_ENDPOINT_URL`` pointing at it
    for one test and ``ELECTRA_STORE_RETRY_SECONDS`` at 30. fsspec caches filesystems (and their
    clients, which keep the endpoint they were made with): dropped on the way in and out."""
    import s3fs

    proxy = S3Proxy(s3_server.endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.start())
    monkeypatch.setenv("ELECTRA_STORE_RETRY_SECONDS", "30")
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        yield proxy
    finally:
        proxy.stop()
        s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture
def one_request_per_attempt(s3_proxy, monkeypatch):
    """The client libraries' own retries off (botocore's ``AWS_MAX_ATTEMPTS``, s3fs's ``retries``),
    so that each attempt of the storage layer is one request: the proxy's counts are its attempts,
    and a window of a few requests or seconds reaches the layer under test instead of being
    absorbed underneath (with them on, one attempt rides out ~10-45 s of 503s)."""
    import s3fs

    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    monkeypatch.setattr(s3fs.S3FileSystem, "retries", 1)
    s3fs.S3FileSystem.clear_instance_cache()
    return s3_proxy
