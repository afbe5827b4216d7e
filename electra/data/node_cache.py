"""One store read of each corpus shard per node: a cache folder the node's loader processes share.

Without it every loader worker reads the shards its streams touch from the store, so ranks of a
node that share streams (more ranks than streams), or workers sharing a rank's piece of a stream,
fetch the same shards once each. Here, as in mosaic streaming, the node's first process to need a
shard downloads it into a local folder and the node's other processes read that copy.

**Folder** ``<root>/<corpus>/<run>``: ``root`` is ``data.node_cache``, a path (node-local; used
always) or ``"auto"``, used only where two of the node's consumers share shards (several ranks on
the node, or workers splitting a rank's rows): ``/dev/shm/electra-shards-<uid>`` (RAM, not disk
I/O) where what the node's loaders hold at once fits there with a reserve to spare, else the same
name in the temp folder, said in one line (``electra.data.node_cache_space``). ``<corpus>`` digests
the plan's shard list; ``<run>`` names the run (``electra.distributed.node_folder``: names, 0700 folders,
locks, and the run's lifetime: the folder goes with the run's last process, or, after a
``kill -9``, at the node's next start with the cache set).

**One download.** An entry is one position of the epoch's shard order (a shard a mixture repeats
has one per copy, as it is decoded once per copy), ``e<epoch>-<position>-<sha256>``. A reader
takes an exclusive ``fcntl.flock`` on ``<entry>.lock``; if ``<entry>.tar`` exists with the
manifest's size it opens it, else it reads the shard with ``read_shard`` (sha256, bytes and
examples checked while it streams, as without the cache), copying the bytes to
``.<entry>.tar.tmp``, and renames the copy into place once the check passed; then it unlocks and
whoever waited finds the file. *Trust*: a copy gets its name only through that rename, after its
bytes matched the manifest's sha256, and only this user can write in the folder; readers check
byte and example counts again while parsing but do not recompute the sha256. A writer that dies
mid-download leaves only the temp file (the kernel drops its lock); the next reader deletes it.
A failed check publishes nothing, so every rank that needs a corrupt shard reads it and names it
(``CorruptShardError``). *Room*: no copy starts that would leave less than a reserve of its
filesystem free, and one stops writing before its rest would (another process took the room;
``electra.data.node_cache_space``); such a shard, or one whose copy cannot be written, is read from the
store outside the entry's lock, with one warning per rank (a marker file in the folder).

**Release by count.** The sample order is pure, so each rank computes at the start of a pass over
an epoch how many of the node's consumers, (rank, loader worker) pairs, read each entry: the
node's ranks are consecutive, ``RANK - LOCAL_RANK`` on, ``LOCAL_WORLD_SIZE`` (torchrun) or
``LOCAL_SIZE`` (DeepSpeed's launcher) of them (unset: the rank alone), each with its plan, worker
split and steps. That costs each rank one pass over the shuffle blocks of the node's share of the
epoch, positions mapped only where a block straddles two shards (``electra.data.shard_schedule``). A
consumer done with an entry (where its ``ShardCache`` evicts it) adds one to a counter in the lock
file, under the lock; the one that reaches the count deletes the copy and the lock file while
holding it (a process then granted the lock on the removed file sees the path no longer names it
and starts over).

**Bound.** A copy lives from its first consumer's read to its last one's release: the folder holds
the union of the node's consumers' working sets (each a loader worker's bound in ``electra.data.stream``,
in raw shard bytes; shared shards once) plus what the fastest consumer reads ahead of the slowest
(ranks advance in lock-step; the loader queues a few steps): ``auto`` computes it from the plan
(``node_cache_space.loaders_need``). A wrong count (a consumer that never comes) cannot change a
batch; the copies it keeps stay until the run ends.

Trade-offs: each consumer still decodes its shards (a local read instead of a network read); a
lock serialises one entry's first read, never two entries'; the count assumes the node's ranks
run one plan with one worker count, which one config gives them.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from electra.data import node_cache_space as space
from electra.data.corpus import CopyWriteError, CorruptShardError, ShardRef, parse_verified_copy, read_shard
from electra.distributed.node_folder import join, locked, private_folder, release, run_name, sweep
from electra.data.sample_order import StreamPlan
from pipelines import schema

log = logging.getLogger(__name__)

AUTO = "auto"


@dataclass(frozen=True)
class NodeRanks:
    """The ranks of this node: ``first`` .. ``first + count - 1``."""
    first: int
    count: int

    @property
    def ranks(self) -> range:
        return range(self.first, self.first + self.count)

    @classmethod
    def from_env(cls, rank: int, world_size: int, env: Mapping[str, str] = os.environ) -> NodeRanks:
        size, local = env.get("LOCAL_WORLD_SIZE", env.get("LOCAL_SIZE")), env.get("LOCAL_RANK")
        if size is None or local is None:
            return cls(rank, 1)
        try:
            count, first = int(size), rank - int(local)
        except ValueError:
            raise ValueError(f"LOCAL_RANK={local!r}, LOCAL_WORLD_SIZE={size!r}: not numbers") from None
        if not (count >= 1 and 0 <= first <= rank < first + count <= world_size):
            raise ValueError(f"LOCAL_RANK={local} of LOCAL_WORLD_SIZE={size} does not fit rank {rank} of "
                             f"{world_size}: the node cache needs each node's ranks to be consecutive")
        return cls(first, count)


def corpus_name(shards: Sequence[ShardRef]) -> str:
    return hashlib.sha256(json.dumps([[s.uri, s.sha256] for s in shards]).encode()).hexdigest()[:16]


def _publish(tmp: str, final: str) -> None:
    os.replace(tmp, final)


# ------------------------------------------------------------------------------ the cache
_SAID: set[str] = set()  # auto's choices this process has reported


@dataclass(frozen=True)
class NodeCache:
    """A run's cache folder on this node, the node's ranks and this rank (module docstring). A
    value, so DataLoader workers receive it with their dataset; ``open`` joins the folder."""
    folder: str
    node: NodeRanks
    rank: int = 0

    @classmethod
    def open(cls, setting: str | None, plan: StreamPlan, *, num_workers: int = 0, prefetch: int = space.PREFETCH,
             env: Mapping[str, str] = os.environ) -> NodeCache | None:
        """The cache for ``data.node_cache = setting`` (module docstring), or None where shards are
        read from the store directly: ``setting`` None, or ``"auto"`` where no two consumers of the
        node read the same region: one rank whose ``num_workers`` loader workers serve whole
        streams each (they share only the shards on the borders of their regions). ``prefetch``:
        the loader's ``data.prefetch_shards``, for ``auto``'s bound."""
        if setting is None:
            return None
        for root in space.auto_roots():  # a killed run's copies, wherever auto put them
            sweep(root)
        node = NodeRanks.from_env(plan.rank, plan.world_size, env)
        shared_piece = num_workers > 1 and len(plan.segments()) < num_workers  # workers split its rows
        if setting == AUTO and node.count < 2 and not shared_piece:
            return None
        root = setting
        if setting == AUTO:
            root, why = space.choose_root(plan, node.ranks, num_workers, prefetch)
            if why and root not in _SAID:
                _SAID.add(root)
                log.log(logging.WARNING if plan.rank == node.first else logging.DEBUG, "node cache: %s", why)
            private_folder(root)
        folder = os.path.join(os.path.abspath(root), corpus_name(plan.shards), run_name(env))
        join(folder)
        return cls(folder, node, plan.rank)

    def uses(self, plan: StreamPlan, epoch: int, num_workers: int, start: int, stop: int,
             ordered: tuple[list, np.ndarray]) -> np.ndarray:
        """For each position of the epoch's shard order (``ordered``: ``plan.ordered_shards``), how
        many of the node's consumers (rank, loader worker) read it at steps ``[start, stop)``."""
        counts = np.zeros(len(ordered[0]), np.int64)
        for sched in space.node_schedules(plan, self.node.ranks, epoch, num_workers, start, stop, ordered):
            counts[sched.order] += 1
        return counts

    def consumer(self, shards: Sequence[ShardRef], uses: np.ndarray, epoch: int) -> Consumer:
        return Consumer(self.folder, shards, uses, epoch, rank=self.rank)


class Consumer:
    """One loader worker's reads through the node cache in one pass over an epoch: the
    ``electra.data.corpus.ShardSource`` of its ``ShardCache``. ``downloads`` and ``bytes_downloaded``
    count the shards it read from the store; ``refused`` the copies it could not make."""

    def __init__(self, folder: str, shards: Sequence[ShardRef], uses: np.ndarray, epoch: int, *, rank: int = 0):
        self.folder, self.shards, self.uses, self.epoch, self.rank = folder, list(shards), uses, epoch, rank
        self.downloads = self.bytes_downloaded = self.refused = 0
        self._lock = threading.Lock()

    def downloaded_so_far(self) -> int:
        with self._lock:
            return self.bytes_downloaded

    def _entry(self, index: int) -> str:
        return os.path.join(self.folder, f"e{self.epoch}-{index}-{self.shards[index].sha256}")

    def read(self, index: int) -> schema.Examples:
        shard = self.shards[index]
        if self.uses[index] < 1:  # counted for no consumer of the node: never left behind
            return self._download(shard)
        entry = self._entry(index)
        with locked(entry + ".lock"):
            copy = self._open_copy(entry + ".tar", shard)
            if copy is None and (examples := self._download_copy(shard, entry)) is not None:
                return examples
        if copy is None:  # no copy could be made: read outside the lock, beside the node's other readers
            return self._download(shard)
        with copy:  # parsed outside the lock: nobody deletes a copy a counted consumer still needs
            try:
                return parse_verified_copy(copy, shard)
            except CorruptShardError as exc:
                raise CorruptShardError(f"{entry}.tar: the node cache's copy of {shard.uri} is damaged "
                                        f"({exc}); remove {self.folder}") from exc

    @staticmethod
    def _open_copy(path: str, shard: ShardRef):
        with suppress(FileNotFoundError):
            copy = open(path, "rb")
            if os.fstat(copy.fileno()).st_size == shard.bytes:
                return copy
            copy.close()
            log.warning("%s: not the manifest's %d bytes; reading %s again", path, shard.bytes, shard.uri)
            os.unlink(path)
        return None

    def _download(self, shard: ShardRef) -> schema.Examples:
        examples = read_shard(shard)
        self._count(shard)
        return examples

    def _count(self, shard: ShardRef) -> None:
        with self._lock:
            self.downloads += 1
            self.bytes_downloaded += shard.bytes

    def _download_copy(self, shard: ShardRef, entry: str) -> schema.Examples | None:
        """The examples read from the store (verified), their bytes published as ``entry``'s copy;
        None (nothing read yet, or a partial read) when the copy cannot be made (module docstring:
        room). Store errors are raised."""
        tmp = Path(self.folder, f".{os.path.basename(entry)}.tar.tmp")
        try:
            tmp.unlink(missing_ok=True)  # what a writer that died left: not counted against the room
            space.room(self.folder, shard.bytes)
            out = open(tmp, "wb", buffering=0)  # mode per umask
        except OSError as exc:  # no room (space.NoRoom), or no file to write
            self._refuse(shard, exc)
            return None
        try:
            with out:  # unbuffered: a refused or failed write fails inside read_shard, as CopyWriteError
                examples = read_shard(shard, copy_to=space.BoundedCopy(out, self.folder, shard.bytes))
            _publish(str(tmp), entry + ".tar")
        except CopyWriteError as exc:
            self._refuse(shard, exc)
            return None
        finally:
            tmp.unlink(missing_ok=True)  # published: gone already; otherwise never left behind
        self._count(shard)
        return examples

    def _refuse(self, shard: ShardRef, exc: Exception) -> None:
        """Count a copy not made; warn once per rank (the first of its workers and passes to create
        the marker), the rest at debug level."""
        self.refused += 1
        try:
            os.close(os.open(os.path.join(self.folder, f".refused-r{self.rank}"), os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            log.debug("%s: no copy in the node cache (%s)", shard.uri, exc)
            return
        except OSError:
            pass
        log.warning("node cache: no copy of %s in %s (%s); rank %d reads the shards it cannot copy from the "
                    "store (said once per rank)", shard.uri, self.folder, exc, self.rank)

    def release(self, index: int) -> None:
        """This consumer is done with ``index`` for the pass; the last one deletes the copy."""
        if self.uses[index] < 1:
            return
        release(self._entry(index), ".tar", int(self.uses[index]))
