"""What the runner checks around a stage attempt: its outputs before the marker, its failure
before a retry.

Outputs. A stage's record lists every object it wrote with its size: the data parts in its
cache, its quarantine parts, the shards of the shard stage. Each object was already checked by
the task that wrote it (``storage.write_bytes`` compares the stored size, ``parts`` the Parquet
row count); ``check_outputs`` checks them again together, with one listing per folder (no request
per object; per slice of at most ``LIST_GROUP`` names by key prefix where the store lists by
prefix, so the driver never holds a whole big folder's listing), right before the completion
marker, so a marker never promises an object that is missing or has another size (deleted by a
lifecycle rule, overwritten by a second writer).

Failures. A stage attempt is retried (keeping its finished writer blocks: ``pipelines.engine.block_journal``)
when it failed for a reason that can pass:
the store stayed unavailable past the storage layer's own retries
(``storage.StoreUnavailableError``), or Ray lost a worker, a node or an object (a node that
died, a worker killed for memory). Anything else (bad config, a permanent store error such as a
403, a bug) fails at once: retrying would only repeat it.
"""
from __future__ import annotations

import os
from typing import Any

from common import storage
from common.retry import chain, ray_cause
from pipelines.engine.part_list import PartList

_RAY_TRANSIENT = ("WorkerCrashedError", "NodeDiedError", "ObjectLostError", "OwnerDiedError",
                  "ObjectReconstructionFailedError", "ObjectFetchTimedOutError", "RaySystemError",
                  "ActorDiedError", "ActorUnavailableError", "LocalRayletDiedError", "OutOfMemoryError",
                  "ReferenceCountingAssertionError", "TaskUnschedulableError")


class OutputMismatch(storage.StorageError):
    """An object a stage listed is missing from the store or has another size."""


# Objects per listing when the store lists by key prefix: a listing's entries are held at once
# (~1.3 KB each in s3fs), so a folder of 300,000 parts is checked a slice of names at a time.
LIST_GROUP = 10_000


def listing_groups(names: list[str], limit: int = LIST_GROUP) -> dict[str, list[str]]:
    """``names`` grouped by their first ``c + l`` characters (``c``: the length of their common
    prefix), ``l`` the smallest with no group over ``limit`` names (a group of one name never is):
    prefixes of one length, so listing each group's prefix lists every object once (unless a
    name shorter than the prefixes begins another name: that listing also holds the other's)."""
    names = sorted(names)
    if len(names) <= limit:
        return {"": names}
    common = len(os.path.commonprefix(names))
    for extra in range(1, max(map(len, names)) - common + 1):
        groups: dict[str, list[str]] = {}
        for name in names:
            groups.setdefault(name[:common + extra], []).append(name)
        if max(map(len, groups.values())) <= limit:
            return groups
    return {name: [name] for name in names}  # unreachable for distinct names


def check_outputs(expected: dict[str, dict[str, int]]) -> int:
    """``expected`` = {folder: {relative name: bytes}}; raises ``OutputMismatch`` naming the first
    object that is missing or of another size. Returns the number of objects checked. One listing
    per folder, or per ``listing_groups`` prefix of at most ``LIST_GROUP`` names where the store
    lists by prefix."""
    checked = 0
    for folder, files in expected.items():
        if not files:
            continue
        groups = listing_groups(list(files), LIST_GROUP) if storage.lists_by_prefix(folder) else {"": sorted(files)}
        for prefix, names in sorted(groups.items()):
            present = storage.list_sizes(folder, prefix)
            for name in names:
                got, size = present.get(name), files[name]
                if got is None:
                    raise OutputMismatch(f"{storage.join(folder, name)}: written by this stage but not on the store")
                if got != size:
                    raise OutputMismatch(f"{storage.join(folder, name)}: the stage wrote {size} bytes, the store "
                                         f"holds {got}")
                checked += 1
    return checked


def transient(exc: BaseException) -> bool:
    """Whether a stage attempt that raised ``exc`` may succeed when run again."""
    for e in chain(exc):
        if isinstance(e, storage.StoreUnavailableError):
            return True
        if type(e).__module__.startswith("ray") and type(e).__name__ in _RAY_TRANSIENT:
            return True
    return False


def unwrapped(exc: BaseException) -> BaseException:
    """The error raised in our code when ``exc`` is Ray's wrapper of it: its message is the one
    to show, without Ray's task header."""
    while (cause := ray_cause(exc)) is not None:
        exc = cause
    return exc


def expected_outputs(corpus: str, cache: str, rejected: str, record: dict[str, Any]) -> dict[str, dict[str, int]]:
    """The objects a stage's record lists, by folder, with their sizes."""
    out: dict[str, dict[str, int]] = {}
    for folder, listed in ((storage.join(cache, "data"), record.get("files")), (rejected, record.get("rejected"))):
        if listed:
            listed = PartList.of(listed)
            out[folder] = dict(zip(listed.names.to_pylist(), listed.column("bytes").tolist()))
    for s in record.get("product", {}).get("shards", []):
        folder, _, name = s["path"].rpartition("/")
        out.setdefault(storage.join(corpus, folder), {})[name] = int(s["bytes"])
    return out
