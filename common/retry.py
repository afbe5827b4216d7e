"""How a store operation fails: transient errors retried within a time budget, permanent ones at once.

Every call in ``common.storage`` runs its store requests through ``call``; a stream opened by
``storage.open_input`` on an object store is a ``ResumableInput``, which on a transient error
mid-stream opens the object again (refusing it if its size or ETag changed: the bytes would
not continue the same object) and reads on from the position it had reached, each read or
seek with a budget of its own. An error is

* **transient** when the store or the path to it may answer differently a moment later: HTTP
  500/502/503/504 and 429/408; the error codes and client-library errors a storage scheme
  declares can pass (``common.storage_schemes``: S3's ``SlowDown``, ``Throttling``,
  ``RequestTimeout``, ``InternalError``, ``ServiceUnavailable``..., botocore's and aiohttp's
  connection errors); a connection refused, reset, aborted or closed before an answer; a
  timeout; a body shorter than its ``Content-Length``; and ``Mismatch``, what the storage layer raises when a store answered but its answer is
  short (a write that left fewer bytes, a ranged read that came back short). These are
  retried: exponential backoff with full jitter (a delay drawn uniformly from ``[0, cap)``,
  the cap doubling from ``FIRST_DELAY_S`` to ``MAX_DELAY_S``), so that many workers throttled
  at once do not come back in lockstep, until the budget (``ELECTRA_STORE_RETRY_SECONDS``,
  default 300 s, read at each call) is spent; then ``StoreUnavailableError``, which a runner
  can tell from a permanent error and retry the whole stage later. The budget bounds a stall,
  not a call: an operation made of many requests (``storage.read_ranges``) starts it again
  whenever an attempt completes one of them (``Attempts.progressed``), so it fails only when
  none of its requests made progress for a whole budget, however long it runs in all.
* **permanent** otherwise, and raised at once: access denied (``StorageError`` naming the
  credentials to check), a missing bucket (``StorageError``), a missing object
  (``FileNotFoundError``, which each storage call turns into its own answer: an error, None,
  an empty listing), and anything else unchanged.

What s3fs raises, found by experiment (s3fs 2026.9, aiobotocore 3.10, through tests/_s3proxy.py
in front of moto): S3 errors come as builtins made by ``s3fs.errors.translate_boto_error``,
the botocore ``ClientError`` (code, HTTP status) as ``__cause__``: 503 is ``OSError(EBUSY)``
with code ``SlowDown`` on GET/PUT/LIST but ``"503"`` on HEAD (its answer has no body); 403 is
``PermissionError`` (code ``"403"`` on HEAD, ``AccessDenied`` otherwise); a missing key a bare
``FileNotFoundError``; a missing bucket ``FileNotFoundError`` caused by ``NoSuchBucket``.
Connection failures come untranslated, and not as ``OSError``: refused is botocore's
``EndpointConnectionError`` (caused by aiohttp's ``ClientConnectorError``, caused by
``ConnectionRefusedError``), closed before an answer ``ConnectionClosedError`` (caused by
``ServerDisconnectedError``), stalled ``ReadTimeoutError``, a body cut short aiohttp's
``ClientPayloadError``. So classification walks the cause chain for codes and types, never
message text.

Trade-offs. The client libraries keep their own retries inside each attempt: botocore
(``legacy`` mode) sends a request up to 5 times, and s3fs repeats a call that failed with
``SlowDown`` or a connection error 5 times on top. Measured through a proxy answering 503: one
attempt takes ~9 s for a HEAD (5 requests) and ~40-45 s for a GET/PUT/LIST (25 requests), so
short blips never reach this layer, the first warning of an outage comes that late, and the
budget can be overrun by one attempt (``AWS_MAX_ATTEMPTS``/``AWS_RETRY_MODE`` tune botocore's
share). The budget is wall time, not a count: what a build needs is to ride out an outage of
some length, whatever the latency of each request. Retrying a write re-sends it whole, which
is safe because every write here is one idempotent PUT of a complete object.

Counts above this layer. What retries a whole operation (a stage attempt:
``pipelines.orchestration.runner``; a shard read from its start: ``electra.data.corpus.read_shard``; a
Ray task: the shuffle's map files, the tokenizer's training; a Prefect task: the publish, an
evaluation unit) sees the store fail only as ``StoreUnavailableError``, after a whole budget
without progress: a store that fails a share of all requests but answers the rest is ridden out
here, however long (``S3Proxy.chaos`` in the tests: 15% 503, 3% dropped, cut and stalled reads),
and what those layers count is outages. Where the operation is long and keeps what it did (a
stage's journalled blocks, a read's position), outages spread over hours of progress could still
use a count up, so an attempt that got further than every one before it starts the count again:
``n`` attempts from the last progress, and since progress is finite, the retries end. Where the
operation is short or keeps nothing (one map file, a tokenizer, the publish, a unit), a plain
count stays: ``n`` failures there are ``n`` budgets without progress.
"""
from __future__ import annotations

import http
import http.client
import io
import logging
import os
import random
import time
from typing import Any, Callable, TypeVar

from fsspec.exceptions import FSTimeoutError

from common import storage_schemes

T = TypeVar("T")
ENV = "ELECTRA_STORE_RETRY_SECONDS"
DEFAULT_BUDGET_S = 300.0
FIRST_DELAY_S = 0.5
MAX_DELAY_S = 20.0
log = logging.getLogger("common.storage")
_rng = random.Random()

TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
# The connection, not the request, failed, whatever the store; each scheme adds its client
# library's own types (common.storage_schemes).
_TRANSIENT_TYPES = (ConnectionError, TimeoutError, http.client.IncompleteRead, FSTimeoutError)
_PERMANENT_TYPES = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError)


class StorageError(OSError):
    """A location that cannot be used (missing bucket or key, read-only store, failed I/O)."""


class StoreUnavailableError(StorageError):
    """The store kept failing with transient errors for the whole retry budget: retry later."""


class MissingObject(StorageError):
    """The object does not exist (a read of it: "no such file")."""


class Mismatch(Exception):
    """The store answered, but not with what it should hold (a short write or read): retried like
    a transient error; when it persists, the message becomes the ``StorageError``'s."""


# ------------------------------------------------------------------------------ classification
def ray_cause(exc: BaseException) -> BaseException | None:
    """The error raised in a Ray task when ``exc`` is Ray's wrapper of it (a ``RayTaskError``,
    which carries it as ``cause``); else None."""
    cause = getattr(exc, "cause", None)
    return cause if type(exc).__name__.startswith("RayTaskError") and isinstance(cause, BaseException) else None


def chain(exc: BaseException):
    """``exc`` and what it wraps, outermost first: for Ray's wrapper the error raised in the task,
    else the ``__cause__``, else the ``__context__`` (unless suppressed)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = ray_cause(exc) or exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)


def _http(exc: BaseException) -> tuple[int | None, str]:
    """(HTTP status, error code) of a botocore ``ClientError``-like or HTTP-status exception."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return status, str(response.get("Error", {}).get("Code") or "")
    status = getattr(exc, "status", None)  # aiohttp.ClientResponseError, HTTP filesystems
    if not isinstance(status, int):
        status = getattr(exc, "code", None)  # gcsfs.HttpError
    return (status, "") if isinstance(status, int) and 100 <= status < 600 else (None, "")


def codes(exc: BaseException) -> list[tuple[int | None, str]]:
    """Every (status, code) pair along the cause chain of ``exc``."""
    return [sc for e in chain(exc) if (sc := _http(e)) != (None, "")]


def label(exc: BaseException) -> str:
    """A short one-line name of the error: ``503 SlowDown``, ``ConnectionClosedError: ...``."""
    if isinstance(exc, Mismatch):
        return str(exc)
    for e in chain(exc):  # the same order as ``transient``: the outermost telling error names it
        status, code = _http(e)
        if status is not None and code and code != str(status):
            return f"{status} {code}"
        if status is not None:
            try:
                return f"{status} {http.HTTPStatus(status).phrase}"
            except ValueError:
                return str(status)
        if code:
            return code
        if isinstance(e, _transient_types()):
            exc = e
            break
    text = " ".join(str(exc).split())
    text = text if len(text) <= 160 else text[:157] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _transient_types() -> tuple[type, ...]:
    return (*_TRANSIENT_TYPES, *storage_schemes.transient_types())


def transient(exc: BaseException) -> bool:
    if isinstance(exc, Mismatch):
        return True
    if isinstance(exc, (StorageError, *_PERMANENT_TYPES)):
        return False
    for e in chain(exc):
        status, code = _http(e)
        if status is not None or code:
            return status in TRANSIENT_STATUS or code in storage_schemes.transient_codes()
        if isinstance(e, _transient_types()):
            return True
    return False


def denied(exc: BaseException) -> bool:
    denied_codes = storage_schemes.denied_codes()
    return isinstance(exc, PermissionError) or any(s == 403 or c in denied_codes for s, c in codes(exc))


def missing_bucket(exc: BaseException) -> bool:
    return any(c == "NoSuchBucket" for _, c in codes(exc))


def out_of_range(exc: BaseException) -> bool:
    """A ranged read that starts at or past the end of the object (S3: 416 InvalidRange)."""
    return any(s == 416 or c == "InvalidRange" for s, c in codes(exc))


def precondition_failed(exc: BaseException) -> bool:
    """A read pinned to an ETag (s3fs sends ``If-Match``) found another version of the object."""
    return any(s == 412 or c == "PreconditionFailed" for s, c in codes(exc))


def permanent(uri: str, exc: BaseException) -> BaseException:
    """The error to raise for a permanent failure of ``uri``: one line naming the fix where we know it."""
    scheme = storage_schemes.scheme(uri)
    if denied(exc):
        if scheme.local:
            return StorageError(f"{uri}: permission denied; check the file's owner and mode")
        creds = ", ".join(scheme.credentials)
        what = f"the credentials ({creds})" if creds else "the credentials"
        return StorageError(f"{uri}: access denied ({label(exc)}); check {what} and the bucket policy")
    if missing_bucket(exc):
        bucket = uri.split("://", 1)[1].split("/", 1)[0]
        endpoint = endpoint_of(scheme)
        at = f" at {endpoint}" if endpoint else ""
        hint = f" (or {scheme.endpoint_env[-1]})" if scheme.endpoint_env else ""
        return StorageError(f"{uri}: bucket {bucket!r} does not exist{at}; create it or correct the URI{hint}")
    return exc


def endpoint_of(scheme: storage_schemes.Scheme) -> str:
    """Where the store of ``scheme`` is, as its variables say ("" when they say nothing)."""
    return next((os.environ[v] for v in scheme.endpoint_env if os.environ.get(v)), "")


# ------------------------------------------------------------------------------ the budget
def budget_seconds() -> float:
    """``ELECTRA_STORE_RETRY_SECONDS`` (read at each call, so a test or a job can change it)."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return DEFAULT_BUDGET_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also NaN
        raise ValueError(f"{ENV}={raw!r}: not a number of seconds; set it to e.g. {DEFAULT_BUDGET_S:.0f}")
    return value


class Attempts:
    """The attempts at one operation, sharing one budget that progress renews.

    ``failed(exc)`` is called from an ``except`` block: it returns, after sleeping the backoff
    delay, when another attempt is worth making, and raises otherwise (the permanent error, or
    ``StoreUnavailableError`` once the budget is spent). ``progressed()`` is called by an
    operation of many requests when an attempt completed some of them: the budget starts again.
    The backoff keeps growing across it: the requests still pending are the ones that keep
    failing, and a throttling store gets no burst of fast retries from them.
    """

    def __init__(self, op: str, uri: str):
        self.op, self.uri = op, uri
        self.budget = budget_seconds()
        self.start = time.monotonic()
        self.count = 0
        self.progressed_at = 0  # the number of the last attempt that completed some requests

    def progressed(self) -> None:
        """The attempt under way completed some of the operation's requests: the budget starts again."""
        self.start = time.monotonic()
        self.progressed_at = self.count + 1

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def failed(self, exc: BaseException, uri: str | None = None) -> None:
        uri = uri or self.uri
        self.count += 1
        if not transient(exc):
            out = exc if isinstance(exc, StorageError) else permanent(uri, exc)
            if out is exc:
                raise exc
            raise out from exc
        elapsed = self.elapsed
        if elapsed >= self.budget:
            tried = f"{self.count} attempts" if not self.progressed_at else \
                f"{self.count} attempts, the last {self.count - self.progressed_at} without progress"
            spent = f"{tried} in {elapsed:.0f} s"
            if isinstance(exc, Mismatch):
                raise StorageError(f"{uri}: {exc} ({spent})") from exc
            raise StoreUnavailableError(
                f"{uri}: the store kept failing for {elapsed:.0f} s ({label(exc)}, {tried}): "
                f"it is unavailable or throttling; retry later or raise {ENV}") from exc
        cap = min(MAX_DELAY_S, FIRST_DELAY_S * 2 ** (self.count - 1))
        delay = min(_rng.uniform(0, cap), self.budget - elapsed)
        log.warning("%s %s: %s (attempt %d); retrying in %.1f s", self.op, uri, label(exc), self.count, delay)
        time.sleep(delay)


def call(op: str, uri: str, fn: Callable[[], T]) -> T:
    """``fn()``, retried on transient errors within the budget (see ``Attempts``)."""
    attempts = Attempts(op, uri)
    while True:
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 (classified by Attempts.failed, re-raised if permanent)
            attempts.failed(exc)


# ------------------------------------------------------------------------------ streams
class ResumableInput(io.BufferedIOBase):
    """An object store's file whose reads survive transient errors: the object is opened again
    and read from the position reached, within one budget per call (``Attempts``)."""

    def __init__(self, uri: str, fs: Any, path: str, kwargs: dict, f: Any, *, probe_end: bool = False):
        super().__init__()
        self.path = self.uri = uri  # named in readers' error messages (text_stream.GuardedRaw)
        self._fs, self._path, self._kwargs, self._f = fs, path, kwargs, f
        self._size, self._etag = f.size, _etag(f)
        self._pos = 0
        self._end_checked = not probe_end

    def __getattr__(self, name: str) -> Any:  # size, details, ... of the file underneath
        f = self.__dict__.get("_f")
        if f is None:
            raise AttributeError(name)
        return getattr(f, name)

    def _reopen(self) -> None:
        try:
            f = self._fs.open(self._path, "rb", **self._kwargs)
        except FileNotFoundError as exc:
            raise StorageError(f"{self.uri}: deleted while being read") from exc
        if f.size != self._size or (self._etag and _etag(f) and _etag(f) != self._etag):
            f.close()
            raise StorageError(f"{self.uri}: changed while being read ({self._size} -> {f.size} bytes); "
                               "read it again")
        f.seek(self._pos)
        self._f = f

    def _io(self, op: str, fn):
        attempts = None
        while True:
            try:
                if self._f is None:
                    self._reopen()
                out = fn(self._f)
                self._pos = self._f.tell()
                return out
            except StorageError:
                raise
            except Exception as exc:  # noqa: BLE001 (classified by Attempts.failed)
                if precondition_failed(exc):  # s3fs pins reads to the ETag it opened
                    raise StorageError(f"{self.uri}: changed while being read; read it again") from exc
                if out_of_range(exc) and self._pos < self._size:
                    raise StorageError(f"{self.uri}: the store reported {self._size} bytes but the object ends "
                                       f"before {self._pos + 1}; a proxy or gateway may be altering "
                                       "responses") from exc
                attempts = attempts or Attempts(op, self.uri)
                if transient(exc):  # the connection underneath is suspect: open the object again
                    f, self._f = self._f, None
                    try:
                        if f is not None:
                            f.close()
                    except Exception:  # noqa: BLE001 (closing a broken reader; a new one follows)
                        pass
                attempts.failed(exc)

    def _read(self, op: str, n: int) -> bytes:
        n = -1 if n is None else n
        data = self._io(op, lambda f: f.read1(n) if op == "read1" and hasattr(f, "read1") else f.read(n))
        if n < 0 or len(data) < n:
            self._check_end()
        return data

    def _check_end(self) -> None:
        """At the end of a stream: the store's reported size must be where the object ends."""
        if self._pos != self._size:
            raise StorageError(f"{self.uri}: the store reported {self._size} bytes but the object ended at "
                               f"{self._pos}; a proxy or gateway may be altering responses")
        if self._end_checked:
            return

        def one_more_byte() -> bytes:
            try:
                return self._fs.cat_file(self._path, start=self._size, end=self._size + 1)
            except Exception as exc:
                if out_of_range(exc):
                    return b""
                raise

        if call("read", self.uri, one_more_byte):
            raise StorageError(f"{self.uri}: the store reported {self._size} bytes (HEAD Content-Length) but "
                               "the object is longer; a proxy or gateway may be altering responses")
        self._end_checked = True

    def read(self, n: int = -1) -> bytes:
        return self._read("read", n)

    def read1(self, n: int = -1) -> bytes:
        return self._read("read1", n)

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)

    def seek(self, pos: int, whence: int = 0) -> int:
        return self._io("seek", lambda f: f.seek(pos, whence))

    def tell(self) -> int:
        return self._pos

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def close(self) -> None:
        f, self._f = self.__dict__.get("_f"), None
        if f is not None:
            f.close()
        super().close()


def _etag(f: Any) -> str | None:
    return (getattr(f, "details", None) or {}).get("ETag")
