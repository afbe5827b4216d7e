"""Storage by URI: every byte that build-corpus and the trainer read, write, list or publish.

A location is a string: a local path, ``file://``, ``s3://``, ``gs://``, or ``http(s)://`` for
reading. Each call resolves it through fsspec (``url_to_fs``), so the same code runs against a
laptop's disk, AWS, GCS or an on-premises S3 server; nothing here assumes the machine that calls
it is the machine that wrote the data (Ray workers and the driver share only the store). What
differs between kinds of store (how the filesystem is opened, which errors can pass, the
variables that locate it, whether it can be written) is declared per scheme in
``common.storage_schemes``, one module each; nothing below names a scheme.

Commit semantics, the same on every store:

* ``write_bytes`` is all-or-nothing for readers. On a local disk the data goes to a temporary
  file in the same folder (mode from the umask), is fsynced, checked and ``os.replace``-d into
  place; on an object store it is one PUT (S3 and GCS make an object visible only once its
  upload completes, and an interrupted multipart upload is never visible), then a HEAD checks
  the store holds exactly ``len(data)`` bytes: a proxy or gateway that stored fewer is caught
  here, and the PUT is sent again.
* There are no renames of folders (object stores have none, and a copy is not atomic). A
  multi-file output is committed by one small file written last that lists the files (a stage's
  ``_SUCCESS``, the corpus ``manifest.json``): readers trust only what it lists, never a listing.

Failures (the policy and its trade-offs: ``common.retry``). Every call retries transient errors
(throttling, 5xx, dropped connections, timeouts, short answers) with jittered exponential
backoff for up to ``ELECTRA_STORE_RETRY_SECONDS`` (default 300 s), logging each retry, then
raises ``StoreUnavailableError``; permanent ones (access denied, a missing bucket) raise
``StorageError`` at once, one line naming the object and what to check. A missing object keeps
each call's answer: ``read_bytes``/``open_input`` raise "no such file", ``size``/``info`` return
None, ``listdir``/``find`` an empty list (a missing bucket is an error there; ``exists`` says
False and ``remove`` has nothing to do). Retrying is safe: every operation here is idempotent.

Reads deliver every byte or fail. An ``open_input`` stream on an object store resumes: after a
transient error mid-stream it opens the object again (refused if its size or ETag changed) and
goes on from the position reached, each read with a budget of the same length. Its size comes
from a HEAD, so a stream that ends before that size is an error, and on S3 one that reaches it
is probed with a 1-byte ranged GET past the end (one request per stream read to its end) so
that a HEAD under-reporting the size is an error too, not a short read. ``size``/``info``
report what the HEAD says; ``du`` sums the listing. ``read_range(s)`` slices
(``data[start:end]``, clipped at the end) and an answer shorter than the object holds there is
retried, then an error. Writes cost one HEAD more, for the check above.

Credentials and endpoints come from the environment the client libraries already read (each
scheme lists its variables: ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``... for S3,
``GOOGLE_APPLICATION_CREDENTIALS`` for GCS), so an on-premises S3 needs no flag; ``worker_env``
gives them to Ray workers. Listing caches are off (the schemes' open options): s3fs and gcsfs
cache directory listings per process, and a driver with a stale cache would not see a part a
worker just wrote.
"""
from __future__ import annotations

import json
import os
import posixpath
import shutil
import tempfile
from contextlib import contextmanager
from typing import IO, Any, Callable, Iterable, Iterator

import fsspec
from fsspec.implementations.local import LocalFileSystem

from common import retry
from common.filemode import apply_umask
from common.retry import MissingObject, StorageError, StoreUnavailableError  # noqa: F401  (this API)
from common.storage_schemes import protocol, scheme  # noqa: F401  (protocol: this API)


def worker_env() -> dict[str, str]:
    """The variables that tell a client library where a store is and who we are (every declared
    scheme's, and the retry budget), as set in this process: what a Ray cluster's workers get
    (``pipelines.engine.raydata.init_ray``)."""
    from common.storage_schemes import worker_env as names

    return {k: os.environ[k] for k in (*names(), retry.ENV) if os.environ.get(k)}


def is_local(uri: str) -> bool:
    return scheme(uri).local


def url_to_fs(uri: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem of ``uri`` and the path inside it (opened with its scheme's options)."""
    uri = str(uri)
    try:
        return fsspec.core.url_to_fs(uri, **scheme(uri).open_options)
    except (ImportError, ValueError) as exc:  # "Install s3fs to access S3", unknown protocol
        raise StorageError(f"{uri}: cannot open this kind of location ({exc})") from exc


def join(base: str, *parts: str) -> str:
    """``base/part/...``; a URI keeps its scheme, a local path stays a local path."""
    base = str(base)
    clean = [str(p).strip("/") for p in parts if str(p).strip("/")]
    if is_local(base) and "://" not in base:
        return os.path.join(base, *clean)
    return posixpath.join(base.rstrip("/"), *clean) if clean else base


def local_path(uri: str) -> str:
    """The OS path of a local location (``file://`` stripped); an error for remote ones."""
    if not is_local(uri):
        raise StorageError(f"{uri}: not a local path")
    return str(uri)[len("file://"):] if str(uri).startswith("file://") else str(uri)


def full_uri(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """A path returned by ``fs`` (``find``, ``glob``) as a URI that ``url_to_fs`` opens again."""
    return path if isinstance(fs, LocalFileSystem) else fs.unstrip_protocol(path)


# ------------------------------------------------------------------------------ reading
def _absent(exc: BaseException) -> bool:
    """A missing object or folder (answered per call); a missing bucket is an error instead."""
    return isinstance(exc, FileNotFoundError) and not retry.missing_bucket(exc)


def read_bytes(uri: str) -> bytes:
    fs, path = url_to_fs(uri)
    try:
        return retry.call("read_bytes", uri, lambda: fs.cat_file(path))
    except FileNotFoundError as exc:
        raise MissingObject(f"{uri}: no such file") from exc


def read_text(uri: str) -> str:
    return read_bytes(uri).decode("utf-8")


def read_json(uri: str) -> Any:
    text = read_text(uri)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise StorageError(f"{uri}:{exc.lineno}: invalid JSON: {exc.msg}") from exc


def read_range(uri: str, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of one object, as ``data[start:end]`` (one ranged GET on a store)."""
    return read_ranges([(uri, start, end)])[0]


def read_ranges(requests: list[tuple[str, int, int]]) -> list[bytes]:
    """``data[start:end]`` of each ``(uri, start, end)``, in order; on an object store the ranged
    GETs run concurrently (``cat_ranges``). All URIs must be on the same store.

    A range past the end is clipped as slicing clips it (the object's size is looked up only
    when an answer is short); an answer shorter than the object holds there is retried, then an
    error. Failed ranges are retried, ranges already read are not. The retry budget is per
    stall, not per call: it starts again after every attempt that read some range, so thousands
    of ranges may take longer than the budget in all, and the call fails only when an attempt
    finds that no range was read for a whole budget (``retry.Attempts.progressed``)."""
    for uri, start, end in requests:
        if not 0 <= int(start) <= int(end):
            raise ValueError(f"{uri}: byte range [{start}, {end}) is not 0 <= start <= end")
    out: list[bytes | None] = [b"" if int(s) == int(e) else None for _, s, e in requests]
    if all(o is not None for o in out):
        return [bytes(o) for o in out]
    fs, _ = url_to_fs(requests[0][0])
    paths = [url_to_fs(uri)[1] for uri, _, _ in requests]
    attempts = retry.Attempts("read_ranges", requests[0][0])
    while pending := [i for i, o in enumerate(out) if o is None]:
        failed = requests[pending[0]][0]  # the URI a failure of the whole batch is reported under
        try:
            got = fs.cat_ranges([paths[i] for i in pending], [int(requests[i][1]) for i in pending],
                                [int(requests[i][2]) for i in pending], on_error="return")
            failure = None
            for i, data in zip(pending, got):
                uri, start, end = requests[i]
                try:
                    out[i] = _checked_range(uri, int(start), int(end), data)
                except Exception as exc:  # noqa: BLE001 (the first failure decides, below)
                    failure, failed = (exc, uri) if failure is None else (failure, failed)
            if len(pending) > sum(out[i] is None for i in pending):
                attempts.progressed()  # some ranges were read: the budget starts again
            if failure is not None:
                raise failure
        except Exception as exc:  # noqa: BLE001 (classified by Attempts.failed)
            try:
                attempts.failed(exc, failed)
            except FileNotFoundError as missing:
                raise MissingObject(f"{failed}: no such file") from missing
    return [bytes(o) for o in out]


def _checked_range(uri: str, start: int, end: int, data: bytes | BaseException) -> bytes:
    if isinstance(data, BaseException):
        if not retry.out_of_range(data):
            raise data
        data = b""  # the range starts at or past the end (S3: 416): slicing gives b""
    if len(data) > end - start:
        raise retry.Mismatch(f"asked for bytes [{start}, {end}) and got {len(data)}")
    if len(data) < end - start:
        held = size(uri)
        want = max(0, min(end, held if held is not None else 0) - start)
        if len(data) != want:
            raise retry.Mismatch(f"read {len(data)} bytes of [{start}, {end}) but the store holds {want} there")
    return bytes(data)


@contextmanager
def open_input(uri: str, block_size: int | None = None) -> Iterator[IO[bytes]]:
    """A binary file object for streaming reads (ranged GETs on object stores) that resumes
    after transient errors (module docstring); local files are opened as they are."""
    fs, path = url_to_fs(uri)
    kwargs = {"block_size": block_size} if block_size and not isinstance(fs, LocalFileSystem) else {}
    try:
        f = retry.call("open_input", uri, lambda: fs.open(path, "rb", **kwargs))
    except FileNotFoundError as exc:
        raise MissingObject(f"{uri}: no such file") from exc
    if not isinstance(fs, LocalFileSystem) and getattr(f, "size", None) is not None and f.seekable():
        f = retry.ResumableInput(uri, fs, path, kwargs, f, probe_end=scheme(uri).probe_end)
    with f:
        yield f


def exists(uri: str) -> bool:
    fs, path = url_to_fs(uri)
    return retry.call("exists", uri, lambda: fs.exists(path))


def size(uri: str) -> int | None:
    """Size in bytes (what the store's metadata says), or None when the location does not exist."""
    got = info(uri)
    return None if got is None else int(got["size"])


def info(uri: str) -> dict[str, Any] | None:
    """The store's metadata of one object (size, mtime or ETag), or None when it does not exist."""
    fs, path = url_to_fs(uri)

    def attempt():
        try:
            return fs.info(path)
        except FileNotFoundError as exc:
            if _absent(exc):
                return None
            raise
    return retry.call("info", uri, attempt)


def listdir(uri: str) -> list[str]:
    """Names (not paths) directly under ``uri``; empty when it does not exist."""
    fs, path = url_to_fs(uri)

    def attempt():
        try:
            return fs.ls(path, detail=False)
        except FileNotFoundError as exc:
            if _absent(exc):
                return []
            raise
    return sorted(posixpath.basename(str(e).rstrip("/")) for e in retry.call("listdir", uri, attempt))


def find(uri: str) -> list[str]:
    """Every file below ``uri``, as paths relative to it (``/``-separated), sorted."""
    fs, path = url_to_fs(uri)
    root = path.rstrip("/")

    def attempt():
        try:
            return fs.find(root)
        except FileNotFoundError as exc:
            if _absent(exc):
                return []
            raise
    return sorted(str(p)[len(root):].lstrip("/") for p in retry.call("find", uri, attempt) if str(p) != root)


def lists_by_prefix(uri: str) -> bool:
    """Whether ``uri``'s store narrows a listing to a key prefix on its side (S3, GCS: one
    request per page of matching keys), so that a folder can be listed a slice at a time."""
    return _lists_by_prefix(url_to_fs(uri)[0])


def _lists_by_prefix(fs: fsspec.AbstractFileSystem) -> bool:
    import inspect

    return "prefix" in inspect.signature(getattr(type(fs), "_find", type(fs).find)).parameters


def list_sizes(uri: str, prefix: str = "") -> dict[str, int]:
    """Every file below ``uri`` whose listing gives a size, as ``{relative path: bytes}`` (no
    request per file; an http index often gives none: ask ``info`` by name); empty when the
    folder does not exist. ``prefix``: only names starting with it (asked of the store where it
    ``lists_by_prefix``, else filtered here)."""
    fs, path = url_to_fs(uri)
    root = path.rstrip("/")
    narrowed = bool(prefix) and _lists_by_prefix(fs)

    def attempt():
        try:
            return fs.find(root, detail=True, prefix=prefix) if narrowed else fs.find(root, detail=True)
        except FileNotFoundError as exc:
            if _absent(exc):
                return {}
            raise
    found = retry.call("list", uri, attempt)
    out = {str(p)[len(root):].lstrip("/"): int(i["size"]) for p, i in found.items()
           if str(p) != root and i.get("type", "file") == "file" and i.get("size") is not None}
    return {k: v for k, v in out.items() if k.startswith(prefix)} if prefix and not narrowed else out


def du(uri: str) -> int:
    """Total bytes of every file below ``uri``, as the listing says (fsspec's ``du`` would ask
    for each file's metadata in turn: a HEAD per object)."""
    fs, path = url_to_fs(uri)

    def attempt():
        try:
            return int(sum(int(i.get("size") or 0) for i in fs.find(path, detail=True).values()))
        except FileNotFoundError as exc:
            if _absent(exc):
                return 0
            raise
    return retry.call("du", uri, attempt)


# ------------------------------------------------------------------------------ writing
def _writable(uri: str) -> None:
    if not scheme(uri).writable:
        from common.storage_schemes import schemes

        stores = [f"{s.names[0]}://" for s in schemes() if s.writable and not s.local]
        where = ", ".join(["a path", *stores[:-1]]) + (f" or {stores[-1]}" if stores else "")
        raise StorageError(f"{uri}: {protocol(uri)}:// is read-only here; write to {where}")


def write_bytes(uri: str, data: bytes) -> None:
    """Write ``data`` so that readers see either the previous object or all of the new one, and
    check that the store holds exactly ``len(data)`` bytes (retried, then an error)."""
    _writable(uri)
    if is_local(uri):
        retry.call("write_bytes", uri, lambda: _write_local(local_path(uri), data))
        return
    fs, path = url_to_fs(uri)

    def attempt():
        fs.pipe_file(path, data)
        held = fs.info(path).get("size")
        if held != len(data):  # a proxy or gateway that stores a cut body still answers 200
            raise retry.Mismatch(f"wrote {len(data)} bytes but the store holds {held}")
    try:
        retry.call("write_bytes", uri, attempt)
    except FileNotFoundError as exc:
        raise StorageError(f"{uri}: cannot write ({exc})") from exc


def write_file(uri: str, local: str) -> None:
    """Upload the local file ``local`` to ``uri`` as ``write_bytes`` writes bytes (all or nothing,
    the stored size checked, retried), without holding it in memory: a store gets it in parts
    (the client's multipart upload), a local path a copy renamed into place."""
    _writable(uri)
    want = os.path.getsize(local)
    if is_local(uri):
        def copy(out: IO[bytes]) -> None:
            with open(local, "rb") as src:
                shutil.copyfileobj(src, out, 8 << 20)
        retry.call("write_file", uri, lambda: _write_local(local_path(uri), copy, want))
        return
    fs, path = url_to_fs(uri)

    def attempt() -> None:
        fs.put_file(local, path)
        held = fs.info(path).get("size")
        if held != want:
            raise retry.Mismatch(f"wrote {want} bytes but the store holds {held}")
    try:
        retry.call("write_file", uri, attempt)
    except FileNotFoundError as exc:
        raise StorageError(f"{uri}: cannot write ({exc})") from exc


def _write_local(path: str, data: bytes | Callable[[IO[bytes]], None], want: int | None = None) -> None:
    """``data`` (bytes, or a function writing ``want`` bytes to a file) into a temporary file
    beside ``path``, synced and renamed into place."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            apply_umask(f.fileno())  # mkstemp makes 0600 whatever the umask; publish as open() would
            if callable(data):
                data(f)
            else:
                f.write(data)
                want = len(data)
            f.flush()
            os.fsync(f.fileno())
            held = os.fstat(f.fileno()).st_size
        if held != want:
            raise retry.Mismatch(f"wrote {want} bytes but the store holds {held}")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_text(uri: str, text: str) -> None:
    write_bytes(uri, text.encode("utf-8"))


def write_json(uri: str, obj: Any, *, indent: int | None = 2) -> None:
    write_text(uri, json.dumps(obj, indent=indent, sort_keys=True) + "\n")


def remove(uri: str, *, recursive: bool = False) -> None:
    """Delete a file (or a whole folder with ``recursive``); a missing location is fine."""
    fs, path = url_to_fs(uri)

    def attempt():
        try:
            fs.rm(path, recursive=recursive)
        except FileNotFoundError:
            pass
    retry.call("remove", uri, attempt)


def remove_files(uris: Iterable[str], *, per_request: int = 1000) -> int:
    """Delete files named one by one (all on one store), ``per_request`` at a time (S3's bulk
    delete takes 1,000 keys a request), with no listing; missing ones are fine. For a folder of
    many known files: ``remove(recursive=True)`` lists the folder first and holds the whole
    listing (about a kilobyte per object on S3). Returns how many were asked for."""
    count = 0
    chunk: list[str] = []

    def flush() -> None:
        fs, _ = url_to_fs(chunk[0])
        paths = [url_to_fs(u)[1] for u in chunk]

        def attempt():
            try:
                fs.rm(paths)
            except FileNotFoundError:  # a local filesystem stops at the first missing one
                for p in paths:
                    try:
                        fs.rm(p)
                    except FileNotFoundError:
                        pass
        retry.call("remove", chunk[0], attempt)
        chunk.clear()

    for uri in uris:
        chunk.append(uri)
        count += 1
        if len(chunk) >= per_request:
            flush()
    if chunk:
        flush()
    return count


# ------------------------------------------------------------------------------ checks
def check_output(uri: str) -> None:
    """Fail before any work when ``uri`` cannot be written: read-only scheme, missing bucket."""
    _writable(uri)
    if is_local(uri):
        path = local_path(uri)
        if os.path.exists(path) and not os.path.isdir(path):
            raise StorageError(f"{uri}: exists and is not a folder")
        return
    fs, path = url_to_fs(uri)
    bucket = path.split("/", 1)[0]
    try:  # the bucket's own metadata (S3: HEAD bucket): s3fs's exists() says False on any error
        retry.call("check_output", uri, lambda: fs.info(bucket))
    except FileNotFoundError as exc:
        where = retry.endpoint_of(scheme(uri))
        raise StorageError(f"{uri}: bucket {bucket!r} does not exist" + (f" at {where}" if where else "")) from exc
