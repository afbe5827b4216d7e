"""Transient store errors are retried inside every storage call; permanent ones fail at once.

Against moto through a fault-injecting proxy (tests/_s3proxy.py). With the client libraries'
own retries off (``one_request_per_attempt``), every attempt of the storage layer is one
request, so the proxy's counts are the layer's attempts, and a 503 window of N requests is N
failed attempts, N log lines, then success: nothing here depends on timing.
"""
from __future__ import annotations

import json
import logging
import random
import re

import pytest

from common import retry, storage
from common.storage import StorageError, StoreUnavailableError
from tests._s3proxy import one_request_per_attempt, s3_proxy  # noqa: F401  (fixtures)

DATA = random.Random(7).randbytes(3000)


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "common.storage" and r.levelno == logging.WARNING]


@pytest.fixture
def tree(s3_server, one_request_per_attempt):
    """A prefix holding ``a.bin`` (DATA), ``t.txt`` and ``sub/c.json``, written through the proxy."""
    root = s3_server.bucket("rt") + "/root"
    storage.write_bytes(f"{root}/a.bin", DATA)
    storage.write_text(f"{root}/t.txt", "text")
    storage.write_json(f"{root}/sub/c.json", {"k": 1})
    return root


def _json_bytes() -> int:
    return len(json.dumps({"k": 1}, indent=2, sort_keys=True)) + 1


# test id -> (the operation the log names, its object, the call, what it must return)
OPERATIONS = {
    "read_bytes": ("read_bytes", "a.bin", lambda r: storage.read_bytes(f"{r}/a.bin"), DATA),
    "read_text": ("read_bytes", "t.txt", lambda r: storage.read_text(f"{r}/t.txt"), "text"),
    "read_json": ("read_bytes", "sub/c.json", lambda r: storage.read_json(f"{r}/sub/c.json"), {"k": 1}),
    "read_range": ("read_ranges", "a.bin", lambda r: storage.read_range(f"{r}/a.bin", 100, 2500), DATA[100:2500]),
    "open_input": ("open_input", "a.bin", lambda r: _stream(f"{r}/a.bin"), DATA),
    "exists": ("exists", "a.bin", lambda r: storage.exists(f"{r}/a.bin"), True),
    "size": ("info", "a.bin", lambda r: storage.size(f"{r}/a.bin"), len(DATA)),
    "info": ("info", "a.bin", lambda r: storage.info(f"{r}/a.bin")["size"], len(DATA)),
    "listdir": ("listdir", "", lambda r: storage.listdir(r), ["a.bin", "sub", "t.txt"]),
    "find": ("find", "", lambda r: storage.find(r), ["a.bin", "sub/c.json", "t.txt"]),
    "du": ("du", "", lambda r: storage.du(r), len(DATA) + 4 + _json_bytes()),
    "write_bytes": ("write_bytes", "new.bin", lambda r: (storage.write_bytes(f"{r}/new.bin", b"fresh"),
                                                         storage.read_bytes(f"{r}/new.bin"))[1], b"fresh"),
    "remove": ("remove", "t.txt", lambda r: (storage.remove(f"{r}/t.txt"), storage.exists(f"{r}/t.txt"))[1], False),
    "check_output": ("check_output", "", lambda r: storage.check_output(r), None),
}


def _stream(uri: str) -> bytes:
    with storage.open_input(uri, block_size=1024) as f:
        return f.read()


@pytest.mark.parametrize("op", sorted(OPERATIONS))
def test_every_operation_rides_out_a_503_window(tree, one_request_per_attempt, caplog, op):
    proxy = one_request_per_attempt
    logged_op, name, call, want = OPERATIONS[op]
    uri = f"{tree}/{name}" if name else tree
    caplog.set_level(logging.WARNING, logger="common.storage")
    proxy.slowdown(requests=2)  # the next 2 requests, whatever they are, get 503 SlowDown
    assert call(tree) == want
    assert proxy.counts["slowdown"] == 2
    logged = _warnings(caplog)
    assert len(logged) == 2  # once per retry, naming the operation, the object and the error
    for attempt, line in enumerate(logged, 1):
        assert re.fullmatch(rf"{logged_op} {re.escape(uri)}: 503 (SlowDown|Service Unavailable) \(attempt {attempt}\);"
                            r" retrying in \d+\.\d s", line), line


def test_a_window_of_seconds_is_ridden_out(tree, one_request_per_attempt, caplog):
    """A window by wall time, as a store's outage is: one attempt per refused request."""
    proxy = one_request_per_attempt
    caplog.set_level(logging.WARNING, logger="common.storage")
    proxy.slowdown(seconds=2)
    assert storage.read_bytes(f"{tree}/a.bin") == DATA
    assert proxy.counts["slowdown"] >= 1 and len(_warnings(caplog)) == proxy.counts["slowdown"]


def test_access_denied_fails_at_once_in_one_line(s3_server, s3_proxy, caplog):
    """With the client libraries' own retries on: a 403 is one request, and one line that says what
    to check."""
    root = s3_server.bucket("deny") + "/root"
    storage.write_bytes(f"{root}/a.bin", DATA)
    s3_proxy.deny(rf"^/{root.removeprefix('s3://').split('/')[0]}(/|$)")
    caplog.set_level(logging.WARNING, logger="common.storage")
    fix = (r"check the credentials \(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN\) "
           r"and the bucket policy")
    calls = {"read_bytes": storage.read_bytes, "size": storage.size, "info": storage.info,
             "exists": storage.exists, "listdir": storage.listdir, "find": storage.find,
             "open_input": _stream, "read_range": lambda u: storage.read_range(u, 0, 10),
             "write_bytes": lambda u: storage.write_bytes(u, b"x"), "remove": storage.remove,
             "check_output": storage.check_output}
    for name, call in calls.items():
        uri = root if name in ("listdir", "find") else f"{root}/a.bin"
        before = s3_proxy.counts["deny"]
        with pytest.raises(StorageError) as err:
            call(uri)
        assert not isinstance(err.value, StoreUnavailableError)
        assert re.fullmatch(rf"{re.escape(uri)}: access denied \(403 (Forbidden|AccessDenied)\); {fix}",
                            str(err.value)), (name, str(err.value))
        assert s3_proxy.counts["deny"] - before == 1, name  # one request: no retry at any level
    assert _warnings(caplog) == []


def test_a_store_that_keeps_failing_is_unavailable(tree, one_request_per_attempt, caplog, monkeypatch):
    proxy = one_request_per_attempt
    caplog.set_level(logging.WARNING, logger="common.storage")
    monkeypatch.setenv(retry.ENV, "1")
    proxy.slowdown()  # until the end of the test
    uri = f"{tree}/b.bin"
    with pytest.raises(StoreUnavailableError) as err:
        storage.write_bytes(uri, b"data")
    m = re.fullmatch(rf"{re.escape(uri)}: the store kept failing for \d+ s \(503 SlowDown, (\d+) attempts\): "
                     r"it is unavailable or throttling; retry later or raise ELECTRA_STORE_RETRY_SECONDS",
                     str(err.value))
    assert m, str(err.value)
    assert isinstance(err.value, StorageError)
    assert int(m.group(1)) == proxy.counts["slowdown"] == len(_warnings(caplog)) + 1 >= 2


def test_a_zero_budget_means_one_attempt(tree, one_request_per_attempt, caplog, monkeypatch):
    proxy = one_request_per_attempt
    caplog.set_level(logging.WARNING, logger="common.storage")
    monkeypatch.setenv(retry.ENV, "0")
    proxy.slowdown()
    with pytest.raises(StoreUnavailableError, match=r"\(503 Service Unavailable, 1 attempts\)"):
        storage.size(f"{tree}/a.bin")
    assert proxy.counts["slowdown"] == 1 and _warnings(caplog) == []


def test_the_budget_setting(monkeypatch):
    monkeypatch.delenv(retry.ENV, raising=False)
    assert retry.budget_seconds() == 300
    monkeypatch.setenv(retry.ENV, "2.5")
    assert retry.budget_seconds() == 2.5
    for bad in ("abc", "-1", "nan"):
        monkeypatch.setenv(retry.ENV, bad)
        with pytest.raises(ValueError, match=rf"^ELECTRA_STORE_RETRY_SECONDS='{bad}': not a number of seconds; "
                                             "set it to e.g. 300$"):
            storage.read_bytes("/nonexistent/file")
    monkeypatch.setenv(retry.ENV, "7")
    assert storage.worker_env()[retry.ENV] == "7"  # Ray workers get the driver's value


def test_what_counts_as_transient():
    """The shapes s3fs/botocore/aiohttp raise (see common.retry's docstring), built as they are."""
    import aiohttp
    from botocore import exceptions as bx
    from s3fs.errors import translate_boto_error

    def s3(code: str, status: int) -> OSError:
        return translate_boto_error(bx.ClientError({"Error": {"Code": code, "Message": "m"},
                                                    "ResponseMetadata": {"HTTPStatusCode": status}}, "GetObject"))

    for exc in (s3("SlowDown", 503), s3("503", 503), s3("InternalError", 500), s3("502", 502), s3("504", 504),
                s3("RequestTimeout", 400), s3("ThrottlingException", 400), s3("ServiceUnavailable", 503),
                bx.EndpointConnectionError(endpoint_url="http://x"), bx.ConnectionClosedError(endpoint_url="http://x"),
                bx.ReadTimeoutError(endpoint_url="http://x"), aiohttp.ClientPayloadError("cut"),
                ConnectionResetError(104, "reset"), TimeoutError("t"), retry.Mismatch("short")):
        assert retry.transient(exc), exc
    for exc in (s3("AccessDenied", 403), s3("403", 403), s3("NoSuchKey", 404), s3("NoSuchBucket", 404),
                s3("InvalidRange", 416), FileNotFoundError("k"), ValueError("v"), StorageError("s")):
        assert not retry.transient(exc), exc
    assert retry.label(s3("SlowDown", 503)) == "503 SlowDown"
    assert retry.label(s3("503", 503)) == "503 Service Unavailable"  # a HEAD's answer has no body
    assert retry.denied(s3("403", 403)) and retry.missing_bucket(s3("NoSuchBucket", 404))



def test_connections_closed_or_refused_are_transient(tree, one_request_per_attempt, caplog, monkeypatch):
    import socket

    import s3fs

    proxy = one_request_per_attempt
    caplog.set_level(logging.WARNING, logger="common.storage")
    proxy.reset(r"/a\.bin$", times=4)  # read, then the connection closed with no answer
    assert storage.read_bytes(f"{tree}/a.bin") == DATA
    # aiohttp itself re-sends once on a reused connection found closed: 4 resets, 2 to 4 attempts
    assert proxy.counts["reset"] == 4 and 2 <= len(_warnings(caplog)) <= 4
    assert all(re.search(r": ConnectionClosedError: Connection was closed before we received a valid response", w)
               for w in _warnings(caplog)), _warnings(caplog)
    with socket.socket() as closed:  # bound, never listening: every connection is refused
        closed.bind(("127.0.0.1", 0))
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{closed.getsockname()[1]}")
        monkeypatch.setenv(retry.ENV, "1")
        s3fs.S3FileSystem.clear_instance_cache()
        with pytest.raises(StoreUnavailableError, match=r"\(EndpointConnectionError: Could not connect to the "
                                                        r"endpoint URL: .*, \d+ attempts\)"):
            storage.read_bytes(f"{tree}/a.bin")


SUBPROCESS = """
import sys
from common import storage
root = sys.argv[1]
storage.write_bytes(root + "/a.bin", b"a")
storage.write_bytes(root + "/.work/exact_dedup-0/part.bin", b"b" * 100)
print(storage.find(root), storage.read_bytes(root + "/.work/exact_dedup-0/part.bin") == b"b" * 100)
"""


def test_the_proxy_serves_a_subprocess_and_opens_its_window_at_a_trigger(s3_server, s3_proxy):
    """How a build-level test uses it: ``AWS_ENDPOINT_URL`` in the child's environment, a window
    that opens at the first request under a prefix. The child keeps its libraries' own retries,
    which ride out these 3 refusals underneath the storage layer."""
    import os
    import subprocess
    import sys

    root = s3_server.bucket("sub") + "/corpus"
    window = s3_proxy.slowdown(trigger=r"\.work/exact_dedup-", requests=3)
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(storage.__file__)))}
    out = subprocess.run([sys.executable, "-c", SUBPROCESS, root], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["['.work/exact_dedup-0/part.bin',", "'a.bin']", "True"]
    outcomes = list(s3_proxy.log)
    first = next(i for i, (_, _, outcome) in enumerate(outcomes) if outcome == "slowdown")
    assert ".work/exact_dedup-0/part.bin" in outcomes[first][1] and outcomes[first][0] == "PUT"
    assert [o for _, _, o in outcomes[first:first + 3]] == ["slowdown"] * 3 and window.refused == 3
    assert s3_proxy.counts["slowdown"] == 3


# ------------------------------------------------------------------ the budget per stall, not per call
class _Clock:
    """The retry layer's clock and sleep (``retry.time``): time passes only when told to."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class _PacedStore:
    """A store whose ``cat_ranges`` takes ``seconds_per_call`` of the fake clock and answers the
    first ``served[k]`` of the ranges asked in its k-th call (the rest 503 SlowDown), then none."""

    def __init__(self, clock: _Clock, served: list[int], seconds_per_call: float):
        self.clock, self.served, self.seconds = clock, served, seconds_per_call
        self.calls: list[tuple[float, int]] = []  # (clock at the answer, ranges asked)

    def cat_ranges(self, paths, starts, ends, on_error="return", **kwargs):
        from botocore.exceptions import ClientError

        assert on_error == "return"
        self.clock.now += self.seconds
        self.calls.append((self.clock.now, len(paths)))
        ok = self.served[len(self.calls) - 1] if len(self.calls) <= len(self.served) else 0
        busy = ClientError({"Error": {"Code": "SlowDown", "Message": "slow down"},
                            "ResponseMetadata": {"HTTPStatusCode": 503}}, "GetObject")
        return [DATA[s:e] if n < ok else _slowdown(busy) for n, (s, e) in enumerate(zip(starts, ends))]


def _slowdown(cause: BaseException) -> OSError:
    err = OSError(16, "Please reduce your request rate.")  # what s3fs makes of a 503 SlowDown
    err.__cause__ = cause
    return err


@pytest.fixture
def paced(monkeypatch):
    """``read_ranges`` against a ``_PacedStore`` on a fake clock, with a 3 s budget."""
    clock = _Clock()
    monkeypatch.setattr(retry, "time", clock)
    monkeypatch.setattr(retry, "_rng", random.Random(0))
    monkeypatch.setenv(retry.ENV, "3")

    def run(served: list[int], seconds_per_call: float, ranges: list[tuple[int, int]]):
        fake = _PacedStore(clock, served, seconds_per_call)
        monkeypatch.setattr(storage, "url_to_fs", lambda uri: (fake, uri.split("://", 1)[1]))
        requests = [("s3://paced/a.bin", s, e) for s, e in ranges]
        return fake, lambda: storage.read_ranges(requests)
    return clock, run


RANGES = [(100 * i, 100 * i + 50) for i in range(10)]


def test_a_slow_but_progressing_read_outlasts_the_budget(paced, caplog):
    """Ten ranges, one read per 2 s attempt: 20 s and more against a 3 s budget, and it succeeds
    (a budget per call failed it at the second attempt)."""
    clock, run = paced
    caplog.set_level(logging.WARNING, logger="common.storage")
    fake, read = run(served=[1] * 10, seconds_per_call=2.0, ranges=RANGES)
    assert read() == [DATA[s:e] for s, e in RANGES]
    assert [n for _, n in fake.calls] == list(range(10, 0, -1))  # only the ranges not yet read
    assert clock.now > 2 * 3.0 and len(_warnings(caplog)) == 9


def test_a_read_that_stops_progressing_fails_one_budget_after_its_last_progress(paced):
    clock, run = paced
    fake, read = run(served=[4, 3], seconds_per_call=1.0, ranges=RANGES)
    with pytest.raises(StoreUnavailableError) as err:
        read()
    progress_at = fake.calls[1][0]  # the second attempt read the last ranges that were read
    stalled = len(fake.calls) - 2
    assert [n for _, n in fake.calls[:3]] == [10, 6, 3] and all(n == 3 for _, n in fake.calls[2:])
    # failed at the first attempt that found a whole budget gone since then, not before
    assert clock.now - progress_at >= 3.0 and fake.calls[-2][0] - progress_at < 3.0 and stalled >= 2
    assert re.fullmatch(rf"s3://paced/a\.bin: the store kept failing for \d+ s \(503 SlowDown, "
                        rf"{len(fake.calls)} attempts, the last {stalled} without progress\): it is unavailable "
                        r"or throttling; retry later or raise ELECTRA_STORE_RETRY_SECONDS", str(err.value)), \
        str(err.value)
