"""Sources: files, directories, globs and URIs → the sorted input files, their stable names and
a fingerprint of their identity for the ingest stage's cache key.

Ids are stable and location-independent: ``"{name}:{offset}"`` where ``name`` is the file's
path from its source folder (``resolve_sources``: e.g. ``raw/a.txt``) and ``offset``
the byte offset of the document's first byte in the decompressed stream (Parquet:
``"{name}:row{N}"``; WARC: the offset of the record; UTF-16/32: the offset in the file's UTF-8
transcoding); ``uid`` is a 63-bit blake2b of the id. The same corpus read from another
mount, bucket or URL therefore keeps the same uids, hence the same dedup survivors (smallest
uid) and the same validation split (a hash of the uid).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from common import retry, storage
from common.hashing import digest


class SourceError(FileNotFoundError):
    """A source path that does not exist or matches no file."""


@dataclass(frozen=True)
class Sources:
    """The resolved input files, their stable names, and their identity for the cache key."""
    files: tuple[str, ...]  # full paths or URIs, sorted
    names: tuple[str, ...]  # per file: its path from its source's folder, that folder's name first
    fingerprint: str  # hash of (name, size, mtime or ETag) of every file
    # Per file: its size in bytes from the listing (None where the store gave none). The planner
    # splits by it and the readers hold every read to it (``ingest.listed``), so no file needs a
    # metadata call of its own.
    sizes: tuple[int | None, ...] = ()

    @functools.cached_property
    def _by_file(self) -> dict[str, str]:
        return dict(zip(self.files, self.names))

    @functools.cached_property
    def _size_by_file(self) -> dict[str, int | None]:
        return dict(zip(self.files, self.sizes))

    def name(self, path: str) -> str:
        """The stable, location-independent name of a file (the prefix of its documents' ids)."""
        return self._by_file[path]

    def size(self, path: str) -> int | None:
        """The file's size from the listing; None when the listing gave none."""
        return self._size_by_file.get(path)


def resolve_sources(sources: list[str] | str) -> Sources:
    """Expand files, directories, globs and URIs into a sorted file list with stable names.

    A file's name is its path from its *source folder*, starting with that folder's own name:
    the folder itself for a directory source, the part before the first wildcard for a glob,
    the parent folder for a single file. So ``/data/raw``, ``/data/raw/*.txt`` and
    ``s3://b/x/raw`` all name ``.../raw/a.txt`` ``raw/a.txt``, and adding files or other sources
    never renames a file (ids, and with them dedup survivors and the validation split, stay).
    Two different files with the same name are an error naming both.

    Fails with ``SourceError`` naming the source before any work starts. One listing per source
    (``find``/``glob`` with details) gives every file's size and modification stamp for the
    fingerprint, so a bucket of many files costs a few LIST calls, not one HEAD per file; the
    sizes are kept (``Sources.sizes``) for the planner and for checking what the reads deliver.
    """
    if isinstance(sources, str):
        sources = [sources]
    if not sources:
        raise SourceError("no sources given")
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    owner: dict[str, str] = {}
    for source in sources:
        for uri, (name, info) in _resolve_one(str(source)).items():
            if owner.setdefault(name, uri) != uri:
                raise SourceError(f"{source}: {uri} and {owner[name]} would both be named {name!r}; "
                                  "give their folders different names or one common parent source")
            found[uri] = (name, info)
    files = sorted(found)
    names = tuple(found[f][0] for f in files)
    items, sizes = [], []
    for f, name in zip(files, names):
        info = found[f][1]
        stamp = info.get("ETag") or info.get("etag") or info.get("mtime") or info.get("LastModified") or ""
        items.append([name, info.get("size"), str(stamp)])
        sizes.append(None if info.get("size") is None else int(info["size"]))
    return Sources(tuple(files), names, digest(items), tuple(sizes))


def _resolve_one(source: str) -> dict[str, tuple[str, dict[str, Any]]]:
    try:
        fs, path = storage.url_to_fs(source)
    except storage.StorageError as exc:
        raise SourceError(str(exc)) from exc
    # Listings go through the storage layer's retries: fsspec's isdir/isfile answer False on any
    # error, so a throttled store would read as a missing source. A permanent error (access
    # denied, no bucket) is the storage layer's one-line StorageError.
    if any(ch in path for ch in "*?["):
        folder = path[:min(path.find(ch) for ch in "*?[" if ch in path)].rsplit("/", 1)[0]
        found = {}
        matches = retry.call("glob", source, lambda: fs.glob(path, detail=True))
        for match, info in sorted(matches.items()):
            if _hidden(PurePosixPath(match).name):
                continue
            found.update(_walk(fs, match, source) if info.get("type") == "directory" else {match: info})
    else:
        info = storage.info(source)
        if info is None:
            raise SourceError(f"{source}: no such file or directory")
        if info.get("type") == "directory":
            folder, found = path.rstrip("/"), _walk(fs, path, source)
        else:
            folder, found = path.rsplit("/", 1)[0], {path: info}
    if not found:
        raise SourceError(f"{source}: matches no files")
    base = folder.rsplit("/", 1)[0] + "/" if "/" in folder else ""
    return {storage.full_uri(fs, p): (p[len(base):], info) for p, info in found.items()}


def _walk(fs, root: str, source: str) -> dict[str, dict[str, Any]]:
    root_parts = len(PurePosixPath(root).parts)
    out = {}
    for path, info in retry.call("find", source, lambda: fs.find(root, detail=True)).items():
        rel = PurePosixPath(path).parts[root_parts:]
        if not any(_hidden(part) for part in rel):
            out[path] = info
    return out


def _hidden(name: str) -> bool:
    return name.startswith(".")
