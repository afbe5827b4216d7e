"""One store read of each corpus shard per node: a cache folder the node's loader processes share.

Without it every loader worker reads the shards its streams touch from the store, so ranks of a
node that share streams (more ranks than streams), or workers sharing a rank's piece of a stream,
fetch the same shards once each. Here, as in mosaic streaming, the node's first process to need a
shard downloads it into a local folder and the node's other processes read that copy.

**Folder** ``<root>/<corpus>/<run>``: ``root`` is ``data.node_cache``, a path (node-local; used
always) or ``"auto"``: ``/dev/shm/electra-shards-<uid>`` (RAM, not disk I/O; else the same name in
the temp folder), used only where two of the node's consumers share shards (several ranks on the
node, or workers splitting a rank's rows). ``<corpus>`` digests the plan's shard list; ``<run>`` is
the host's name and a digest of what names the run to all its ranks and to no other live run
(``MASTER_ADDR``, ``MASTER_PORT``, which the run binds, ``TORCHELASTIC_RUN_ID``; without a
launcher, the process id). Folders are 0700 and their owner is checked.

**One download.** An entry is one position of the epoch's shard order (a shard a mixture repeats
has one per copy, as it is decoded once per copy), ``e<epoch>-<position>-<sha256>``. A reader
takes an exclusive ``fcntl.flock`` on ``<entry>.lock``; if ``<entry>.tar`` exists with the
manifest's size it opens it, else it reads the shard with ``read_shard`` (sha256, bytes and
examples checked while it streams, as without the cache), copying the bytes to
``.<entry>.tar.tmp``, and renames the copy into place once the check passed; then it unlocks and
whoever waited finds the file. *Trust*: a copy gets its name only through that rename, after its
bytes matched the manifest's sha256, and only this user can write in the folder; readers check
byte and example counts again while parsing but do not recompute the sha256. A writer that dies
mid-download leaves only the temp file (the kernel drops its lock); the next reader overwrites it.
A failed check publishes nothing, so every rank that needs a corrupt shard reads it and names it
(``CorruptShardError``). A copy that cannot be written (folder full): a warning, a direct read.

**Release by count.** The sample order is pure, so each rank computes at the start of a pass over
an epoch how many of the node's consumers, (rank, loader worker) pairs, read each entry: the
node's ranks are consecutive, ``RANK - LOCAL_RANK`` on, ``LOCAL_WORLD_SIZE`` (torchrun) or
``LOCAL_SIZE`` (DeepSpeed's launcher) of them (unset: the rank alone), each with its plan, worker
split and steps. That costs each rank one pass over the node's share of the epoch's positions. A
consumer done with an entry (where its ``ShardCache`` evicts it) adds one to a counter in the lock
file, under the lock; the one that reaches the count deletes the copy and the lock file while
holding it (a process then granted the lock on the removed file sees the path no longer names it
and starts over).

**Bound.** A copy lives from its first consumer's read to its last one's release: the folder holds
the union of the node's consumers' working sets (each a loader worker's bound in ``electra.data``,
in raw shard bytes; shared shards once) plus what the fastest consumer reads ahead of the slowest,
a few steps' shards (ranks advance in lock-step; the loader queues a few steps). A wrong count (a
consumer that never comes) cannot change a batch; the copies it keeps stay until the run ends.

**Run lifetime.** Each rank process holds a shared flock on ``<run>/.electra-node-cache.lock``
while it lives. The first to join gets it exclusively and empties the folder (a killed run of the
same name left it); joining removes other runs' folders whose lock nobody holds; a clean exit
(``atexit``, or a multiprocessing child's end) by the last holder removes the folder. A ``kill -9``
leaves its copies in flight (a few steps' shards, RAM under /dev/shm) until the node's next run
with the cache starts, or a reboot.

Trade-offs: each consumer still decodes its shards (a local read instead of a network read); a
lock serialises one entry's first read, never two entries'; the count assumes the node's ranks
run one plan with one worker count, which one config gives them.
"""
from __future__ import annotations

import atexit
import dataclasses
import fcntl
import hashlib
import json
import logging
import multiprocessing.util
import os
import re
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from electra.corpus import CopyWriteError, CorruptShardError, ShardRef, parse_verified_copy, read_shard
from electra.sample_order import StreamPlan
from pipelines import schema

log = logging.getLogger(__name__)

AUTO = "auto"
OWNER = ".electra-node-cache.lock"  # held shared by every live rank process of the run
_TRASH = ".trash-"  # a run folder being removed: renamed first, so its name is free at once
_CORPUS_NAME = re.compile(r"[0-9a-f]{16}")
_TRASH_NAME = re.compile(r"\.trash-.+-[0-9a-f]{12}-[0-9]+")


def auto_root() -> str:
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK | os.X_OK) \
        else tempfile.gettempdir()
    return os.path.join(base, f"electra-shards-{os.getuid()}")


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


def run_name(env: Mapping[str, str] = os.environ) -> str:
    if "MASTER_PORT" in env:
        ident = ["launcher", env.get("MASTER_ADDR", ""), env["MASTER_PORT"], env.get("TORCHELASTIC_RUN_ID", "")]
    else:
        ident = ["process", str(os.getpid())]
    host = re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname())[:64] or "host"
    return f"{host}-{hashlib.sha256(json.dumps(ident).encode()).hexdigest()[:12]}"


# ------------------------------------------------------------------------------ locks and folders
def _same_file(fd: int, path: str) -> bool:
    try:
        return os.path.samestat(os.stat(path), os.fstat(fd))
    except FileNotFoundError:
        return False


@contextmanager
def locked(path: str) -> Iterator[int]:
    """An exclusive flock on ``path`` that still names the locked file once granted (its last
    user deletes it while holding the lock)."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if _same_file(fd, path):
                break
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    try:
        yield fd
    finally:
        os.close(fd)  # releases the lock


def private_folder(path: str) -> None:
    """Create ``path`` (0700) if needed; refuse one another user could write in (module docstring: trust)."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.stat(path)
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise PermissionError(f"{path}: owned by uid {st.st_uid} with mode {st.st_mode & 0o777:o}; the node "
                              f"cache needs a folder only uid {os.getuid()} can write (data.node_cache)")


def _remove_run(folder: str) -> None:
    """Remove a run folder whose owner lock the caller holds exclusively: renamed first (atomic),
    so a new run of that name starts in a fresh folder while the old one is deleted."""
    trash = os.path.join(os.path.dirname(folder), f"{_TRASH}{os.path.basename(folder)}-{os.getpid()}")
    try:
        os.rename(folder, trash)
    except OSError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def _sweep(root: str, keep: str) -> None:
    """Remove the run folders under ``root`` that no live process holds (module docstring)."""
    try:  # only names this module makes: an explicit root may hold other things
        corpora = [os.path.join(root, name) for name in os.listdir(root) if _CORPUS_NAME.fullmatch(name)]
    except FileNotFoundError:
        return
    for corpus in corpora:
        try:
            runs = os.listdir(corpus)
        except (NotADirectoryError, FileNotFoundError):
            continue
        for name in runs:
            folder = os.path.join(corpus, name)
            if _TRASH_NAME.fullmatch(name):  # a sweeper killed while deleting
                shutil.rmtree(folder, ignore_errors=True)
                continue
            if folder == keep:
                continue
            owner = os.path.join(folder, OWNER)
            try:
                fd = os.open(owner, os.O_RDWR)  # never created here: a folder without one is not ours
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if _same_file(fd, owner):
                    log.info("node cache: removing %s, left by a run that is gone", folder)
                    _remove_run(folder)
            except BlockingIOError:
                pass  # a live run
            finally:
                os.close(fd)
        if corpus != os.path.dirname(keep):
            with suppress(OSError):
                os.rmdir(corpus)  # if empty


_JOINED: dict[str, tuple[int, int]] = {}  # run folder -> (owner lock fd held shared, pid that joined)
_JOIN_LOCK = threading.Lock()


def join(folder: str) -> None:
    """Hold ``folder``'s owner lock (shared) for this process's life, emptying the folder first when
    no live process holds it, and sweep the root of dead runs' folders (module docstring)."""
    with _JOIN_LOCK:
        if folder in _JOINED and _JOINED[folder][1] == os.getpid():
            return
        root = os.path.dirname(os.path.dirname(folder))
        private_folder(os.path.dirname(folder))
        _sweep(root, keep=folder)
        owner = os.path.join(folder, OWNER)
        while True:
            private_folder(folder)
            try:
                fd = os.open(owner, os.O_RDWR | os.O_CREAT, 0o600)
            except FileNotFoundError:
                continue  # removed by a sweeper in between
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if _same_file(fd, owner):
                    for name in set(os.listdir(folder)) - {OWNER}:  # no live holder: a dead run's leftovers
                        Path(folder, name).unlink(missing_ok=True)
            except BlockingIOError:
                pass  # live peers hold it
            fcntl.flock(fd, fcntl.LOCK_SH)
            if _same_file(fd, owner):
                break
            os.close(fd)
        if not _JOINED:  # at exit: of the interpreter, or of a multiprocessing child (which skips atexit)
            atexit.register(_leave_all)
            multiprocessing.util.Finalize(None, _leave_all, exitpriority=0)
        _JOINED[folder] = (fd, os.getpid())


def leave(folder: str) -> None:
    """Let go of ``folder``; the last live holder removes it. Run at exit for every joined folder."""
    with _JOIN_LOCK:
        fd, pid = _JOINED.pop(folder, (None, None))
    if fd is None or pid != os.getpid():
        return  # a forked child inherited the table: the folder is its parent's to leave
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if _same_file(fd, os.path.join(folder, OWNER)):
            _remove_run(folder)
            with suppress(OSError):
                os.rmdir(os.path.dirname(folder))  # if empty
    except BlockingIOError:
        pass  # other ranks of the run still read
    finally:
        os.close(fd)


def _leave_all() -> None:
    for folder in list(_JOINED):
        leave(folder)


def _publish(tmp: str, final: str) -> None:
    os.replace(tmp, final)


# ------------------------------------------------------------------------------ the cache
@dataclass(frozen=True)
class NodeCache:
    """A run's cache folder on this node and the node's ranks (module docstring). A value, so
    DataLoader workers receive it with their dataset; ``open`` joins the folder."""
    folder: str
    node: NodeRanks

    @classmethod
    def open(cls, setting: str | None, plan: StreamPlan, *, num_workers: int = 0,
             env: Mapping[str, str] = os.environ) -> NodeCache | None:
        """The cache for ``data.node_cache = setting`` (module docstring), or None where shards are
        read from the store directly: ``setting`` None, or ``"auto"`` where no two consumers of the
        node read the same region: one rank whose ``num_workers`` loader workers serve whole
        streams each (they share only the shards on the borders of their regions)."""
        if setting is None:
            return None
        node = NodeRanks.from_env(plan.rank, plan.world_size, env)
        shared_piece = num_workers > 1 and len(plan.segments()) < num_workers  # workers split its rows
        if setting == AUTO and node.count < 2 and not shared_piece:
            return None
        root = auto_root() if setting == AUTO else setting
        folder = os.path.join(os.path.abspath(root), corpus_name(plan.shards), run_name(env))
        if setting == AUTO:
            private_folder(root)
        join(folder)
        return cls(folder, node)

    def uses(self, plan: StreamPlan, epoch: int, num_workers: int, start: int, stop: int,
             ordered: tuple[list, np.ndarray]) -> np.ndarray:
        """For each position of the epoch's shard order (``ordered``: ``plan.ordered_shards``), how
        many of the node's consumers (rank, loader worker) read it at steps ``[start, stop)``."""
        counts = np.zeros(len(ordered[0]), np.int64)
        workers = max(1, num_workers)
        for rank in self.node.ranks:
            peer = plan if rank == plan.rank else dataclasses.replace(plan, rank=rank)
            for worker in range(workers):
                segments = peer.segments(worker, workers)
                if segments:
                    counts[peer.schedule(epoch, segments, start, stop, ordered=ordered).order] += 1
        return counts

    def consumer(self, shards: Sequence[ShardRef], uses: np.ndarray, epoch: int) -> Consumer:
        return Consumer(self.folder, shards, uses, epoch)


class Consumer:
    """One loader worker's reads through the node cache in one pass over an epoch: the
    ``electra.corpus.ShardSource`` of its ``ShardCache``. ``downloads`` and ``bytes_downloaded``
    count the shards it read from the store."""

    def __init__(self, folder: str, shards: Sequence[ShardRef], uses: np.ndarray, epoch: int):
        self.folder, self.shards, self.uses, self.epoch = folder, list(shards), uses, epoch
        self.downloads = self.bytes_downloaded = 0
        self._lock = threading.Lock()

    def downloaded_so_far(self) -> int:
        with self._lock:
            return self.bytes_downloaded

    def _entry(self, index: int) -> str:
        return os.path.join(self.folder, f"e{self.epoch}-{index}-{self.shards[index].sha256}")

    def read(self, index: int) -> schema.Examples:
        shard = self.shards[index]
        if self.uses[index] < 1:  # counted for no consumer of the node: never left behind
            return self._download(shard, None)
        entry = self._entry(index)
        with locked(entry + ".lock"):
            copy = self._open_copy(entry + ".tar", shard)
            if copy is None:
                return self._download(shard, entry)
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

    def _download(self, shard: ShardRef, entry: str | None) -> schema.Examples:
        """Read ``shard`` from the store (verified) and, for an ``entry``, publish its copy."""
        examples = None if entry is None else self._download_copy(shard, entry)
        if examples is None:
            examples = read_shard(shard)
        with self._lock:
            self.downloads += 1
            self.bytes_downloaded += shard.bytes
        return examples

    def _download_copy(self, shard: ShardRef, entry: str) -> schema.Examples | None:
        """The examples, their verified bytes published as ``entry``'s copy; None (nothing read
        yet, or a partial read) when the copy cannot be written. Store errors are raised."""
        tmp = Path(self.folder, f".{os.path.basename(entry)}.tar.tmp")
        try:
            try:
                out = open(tmp, "wb", buffering=0)  # truncates what a writer that died left; mode per umask
            except OSError as exc:
                raise CopyWriteError(f"cannot create {tmp} ({exc})") from exc
            with out:  # unbuffered: a full folder fails in a write, inside read_shard, as CopyWriteError
                examples = read_shard(shard, copy_to=out)
            _publish(str(tmp), entry + ".tar")
            return examples
        except CopyWriteError as exc:
            log.warning("%s: no copy in the node cache (%s); reading it from the store", shard.uri, exc)
            return None
        finally:
            tmp.unlink(missing_ok=True)  # published: gone already; otherwise never left behind

    def release(self, index: int) -> None:
        """This consumer is done with ``index`` for the pass; the last one deletes the copy."""
        if self.uses[index] < 1:
            return
        release(self._entry(index), ".tar", int(self.uses[index]))


def release(entry: str, suffix: str, uses: int) -> None:
    """One more of the ``uses`` readers of ``entry`` is done (a count in ``<entry>.lock``, under
    its lock); the last deletes the copy ``<entry><suffix>`` and the lock file."""
    with locked(entry + ".lock") as fd:
        done = int(os.pread(fd, 32, 0).strip() or b"0") + 1
        if done >= uses:
            Path(entry + suffix).unlink(missing_ok=True)
            Path(entry + ".lock").unlink(missing_ok=True)
        else:
            os.pwrite(fd, b"%020d" % done, 0)
