"""Storage by URI: every byte that build-corpus and the trainer read, write, list or publish.

A location is a string: a local path, ``file://``, ``s3://``, ``gs://``, or ``http(s)://`` for
reading. Each call resolves it through fsspec (``url_to_fs``), so the same code runs against a
laptop's disk, AWS, GCS or an on-premises S3 server; nothing here assumes the machine that calls
it is the machine that wrote the data (Ray workers and the driver share only the store).

Commit semantics, the same on every store:

* ``write_bytes`` is all-or-nothing for readers. On a local disk the data goes to a temporary
  file in the same folder, is fsynced and ``os.replace``-d into place; on an object store it is
  one PUT (S3 and GCS make an object visible only once its upload completes, and an interrupted
  multipart upload is never visible).
* There are no renames of folders (object stores have none, and a copy is not atomic). A
  multi-file output is committed by one small file written last that lists the files (a stage's
  ``_SUCCESS``, the corpus ``manifest.json``): readers trust only what it lists, never a listing.

Credentials and endpoints come from the environment the client libraries already read:
``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``,
``AWS_DEFAULT_REGION`` (botocore, s3fs, pyarrow) and ``GOOGLE_APPLICATION_CREDENTIALS`` (gcsfs),
so an on-premises S3 needs no flag. Listing caches are off: s3fs and gcsfs cache directory
listings per process, and a driver with a stale cache would not see a part a worker just wrote.
"""
from __future__ import annotations

import json
import os
import posixpath
import tempfile
from contextlib import contextmanager
from typing import IO, Any, Iterator

import fsspec
from fsspec.implementations.local import LocalFileSystem

READ_ONLY = ("http", "https")
# Environment variables that tell a client library where a store is and who we are; a Ray
# cluster's workers get the driver's values (pipelines.engine.raydata.init_ray).
STORE_ENV = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
             "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION", "AWS_REGION", "GOOGLE_APPLICATION_CREDENTIALS")
_NO_LISTING_CACHE = {"s3": {"use_listings_cache": False}, "gs": {"use_listings_cache": False},
                     "gcs": {"use_listings_cache": False}}


class StorageError(OSError):
    """A location that cannot be used (missing bucket or key, read-only store, failed I/O)."""


def protocol(uri: str) -> str:
    """``file`` for local paths, else the URI scheme (``s3``, ``gs``, ``https``, ...)."""
    uri = str(uri)
    if "://" not in uri:
        return "file"
    return uri.split("://", 1)[0].lower()


def is_local(uri: str) -> bool:
    return protocol(uri) in ("file", "local")


def url_to_fs(uri: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem of ``uri`` and the path inside it (listing caches off)."""
    uri = str(uri)
    try:
        return fsspec.core.url_to_fs(uri, **_NO_LISTING_CACHE.get(protocol(uri), {}))
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
def read_bytes(uri: str) -> bytes:
    fs, path = url_to_fs(uri)
    try:
        return fs.cat_file(path)
    except FileNotFoundError as exc:
        raise StorageError(f"{uri}: no such file") from exc


def read_text(uri: str) -> str:
    return read_bytes(uri).decode("utf-8")


def read_json(uri: str) -> Any:
    text = read_text(uri)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise StorageError(f"{uri}:{exc.lineno}: invalid JSON: {exc.msg}") from exc


@contextmanager
def open_input(uri: str, block_size: int | None = None) -> Iterator[IO[bytes]]:
    """A binary file object for streaming reads (ranged GETs on object stores)."""
    fs, path = url_to_fs(uri)
    kwargs = {"block_size": block_size} if block_size and not isinstance(fs, LocalFileSystem) else {}
    try:
        f = fs.open(path, "rb", **kwargs)
    except FileNotFoundError as exc:
        raise StorageError(f"{uri}: no such file") from exc
    with f:
        yield f


def exists(uri: str) -> bool:
    fs, path = url_to_fs(uri)
    return fs.exists(path)


def size(uri: str) -> int | None:
    """Size in bytes, or None when the location does not exist."""
    fs, path = url_to_fs(uri)
    try:
        return int(fs.size(path))
    except FileNotFoundError:
        return None


def info(uri: str) -> dict[str, Any] | None:
    """The store's metadata of one object (size, mtime or ETag), or None when it does not exist."""
    fs, path = url_to_fs(uri)
    try:
        return fs.info(path)
    except FileNotFoundError:
        return None


def listdir(uri: str) -> list[str]:
    """Names (not paths) directly under ``uri``; empty when it does not exist."""
    fs, path = url_to_fs(uri)
    try:
        entries = fs.ls(path, detail=False)
    except FileNotFoundError:
        return []
    return sorted(posixpath.basename(str(e).rstrip("/")) for e in entries)


def find(uri: str) -> list[str]:
    """Every file below ``uri``, as paths relative to it (``/``-separated), sorted."""
    fs, path = url_to_fs(uri)
    root = path.rstrip("/")
    try:
        found = fs.find(root)
    except FileNotFoundError:
        return []
    return sorted(str(p)[len(root):].lstrip("/") for p in found if str(p) != root)


def du(uri: str) -> int:
    """Total bytes of every file below ``uri``."""
    fs, path = url_to_fs(uri)
    try:
        return int(sum(fs.du(path, total=False).values()))
    except FileNotFoundError:
        return 0


# ------------------------------------------------------------------------------ writing
def _writable(uri: str) -> None:
    if protocol(uri) in READ_ONLY:
        raise StorageError(f"{uri}: {protocol(uri)}:// is read-only here; write to a path, s3:// or gs://")


def write_bytes(uri: str, data: bytes) -> None:
    """Write ``data`` so that readers see either the previous object or all of the new one."""
    _writable(uri)
    if is_local(uri):
        _write_local(local_path(uri), data)
        return
    fs, path = url_to_fs(uri)
    try:
        fs.pipe_file(path, data)
    except FileNotFoundError as exc:  # the bucket does not exist
        raise StorageError(f"{uri}: cannot write ({exc})") from exc


def _write_local(path: str, data: bytes) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
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
    try:
        fs.rm(path, recursive=recursive)
    except FileNotFoundError:
        pass


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
    try:
        present = fs.exists(bucket)
    except PermissionError as exc:
        raise StorageError(f"{uri}: no access to bucket {bucket!r} ({exc})") from exc
    if not present:
        where = os.environ.get("AWS_ENDPOINT_URL", "") if protocol(uri) == "s3" else ""
        raise StorageError(f"{uri}: bucket {bucket!r} does not exist" + (f" at {where}" if where else ""))
