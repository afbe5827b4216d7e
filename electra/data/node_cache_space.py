"""Where the node cache keeps its copies and how much room they may take: the folder
``data.node_cache = "auto"`` picks, what the node's loaders hold at once, and the free space every
node-local copy leaves (``electra.data.node_cache``, ``electra.checkpoint.mirror``).

**Why.** ``/dev/shm`` is RAM: a copy there costs no disk I/O. But it is often small (Docker gives
a container 64 MB unless told otherwise) and it is not ours alone: NCCL's shared-memory transport
and proxies, and the DataLoader (the tensors its workers hand to their rank), allocate there too,
and fail when it is full (a worker dies with a bus error, NCCL cannot map a segment).

**The reserve.** No copy is started that would leave less than ``RESERVE`` of its filesystem
free (``room``), and a copy being written stops as soon as the rest of it would cut into that
reserve (``BoundedCopy``: checked at the first write and every ``CHECK_EVERY`` bytes, since another
process may have taken the room after the first check). A refused copy costs a store read of that
shard by each of the node's consumers, as without the cache; it never fills the filesystem.
A fraction rather than a number of bytes, so one rule fits a 64 MB container and a host whose
``/dev/shm`` is half its RAM; on a small filesystem that leaves little in bytes, which is why
``auto`` does not use a small ``/dev/shm`` at all (next).

**Small.** ``auto`` caches in ``SHM/electra-shards-<uid>`` only where what the node's loaders hold
at once (``loaders_need``) fits in what the reserve leaves of it; otherwise in the same name
under the temp folder (``DISK``; the page cache keeps hot copies in RAM anyway, at the cost of
disk writes), said in one line by the node's first rank. What they hold:

- *copies*: the union of the node's consumers' working sets (the loader worker bound of
  ``electra.data.stream``, shared shards once), computed from the plan: for each (rank, loader worker)
  of the node its exact schedule in the first epoch (``StreamPlan.schedule``: the first and last
  step of each entry). An entry's copy lives from the step its first consumer reads it
  (``prefetch`` entries ahead along that consumer's schedule, and ``LEAD`` steps earlier still:
  a loader worker runs up to ``LOADER_QUEUE`` steps ahead of its rank, a rank one step ahead of
  another) to the last step its last consumer uses it; the peak over steps of the bytes alive.
  The cost is the pass over the node's share of the epoch that ``NodeCache.uses`` makes at each
  epoch's start, made once more at start (kept: a start at the beginning of the first epoch reuses
  it for its counts).
- *queued batches*: a rank's loader workers hand it their rows through shared memory,
  ``LOADER_QUEUE`` parts each in flight, together ``LOADER_QUEUE`` steps of the rank's rows:
  ``LOADER_QUEUE x rows per rank x seq_len`` int64 ids and segment ids per rank (none without
  workers).

The decision compares that with the filesystem's *size*, not its free space: every rank of the
node must pick the same folder (the release counts assume the node's consumers share it), and the
size is the same whenever each rank looks, while the free space moves as the ranks start. What
others hold at a given moment is the per-copy check's business.

Trade-offs: the first epoch stands for all (others permute the same shards; their peak differs by
which shards meet in a step, a difference the per-copy check absorbs); ``LEAD`` and
``LOADER_QUEUE`` come from the loader's settings, not from measuring a node, so the bound assumes
only what the loader's queue and the ranks' collectives enforce (no consumer more than ``LEAD``
steps ahead of another) and is loose where the consumers keep pace; NCCL's needs are not
computed (they depend on its transport and channels) and live in the reserve; the choice is made
once, at start: a /dev/shm that other jobs fill later is the per-copy check's to handle.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections.abc import Sequence
from typing import BinaryIO, NamedTuple

import numpy as np

from electra.data.sample_order import ShardSchedule, StreamPlan

SHM = "/dev/shm"  # RAM-backed; a module setting, so tests point it at a small tmpfs
DISK: str | None = None  # the fallback's parent folder; None: tempfile.gettempdir()
RESERVE = 0.10  # of a node-local copy's filesystem, left free by every copy
CHECK_EVERY = 1 << 20  # bytes a copy writes between checks of the reserve
LOADER_QUEUE = 4  # steps of rows each DataLoader worker queues (electra.data.stream's prefetch_factor)
LEAD = LOADER_QUEUE + 1  # steps a consumer may run ahead of the node's slowest (module docstring)
PREFETCH = 2  # data.prefetch_shards's default, for a caller that does not give its own


def auto_roots() -> tuple[str, str]:
    """``auto``'s two possible roots: in ``SHM`` and in the temp folder."""
    name = f"electra-shards-{os.getuid()}"
    return os.path.join(SHM, name), os.path.join(DISK or tempfile.gettempdir(), name)


def shm_usable() -> bool:
    return os.path.isdir(SHM) and os.access(SHM, os.W_OK | os.X_OK)


def auto_root() -> str:
    """The RAM root where there is one (the checkpoint mirror's ``auto``: it checks each copy)."""
    shm, disk = auto_roots()
    return shm if shm_usable() else disk


def size(n: float) -> str:
    return f"{n / 2**20:.1f} MB" if n >= 2**20 else f"{n / 2**10:.1f} kB"


# ------------------------------------------------------------------------------ the reserve
class NoRoom(OSError):
    """A copy that would leave less than ``RESERVE`` of its filesystem free."""


def room(folder: str, nbytes: int) -> None:
    """Raise ``NoRoom`` unless ``nbytes`` more in ``folder`` leave ``RESERVE`` of its filesystem free."""
    disk = shutil.disk_usage(folder)
    if disk.free - nbytes < RESERVE * disk.total:
        raise NoRoom(f"{size(nbytes)} would leave less than {RESERVE:.0%} of {folder}'s filesystem free "
                     f"({size(disk.free)} of {size(disk.total)} free)")


class BoundedCopy:
    """The file a copy of ``nbytes`` is written to; a write is refused (``NoRoom``) once the rest of
    the copy would cut into the reserve. Seekable as ``electra.data.corpus.read_shard`` needs."""

    def __init__(self, file: BinaryIO, folder: str, nbytes: int):
        self.file, self.folder, self.nbytes = file, folder, nbytes
        self._written = self._checked = 0

    def write(self, data: bytes) -> int | None:
        if self._written + len(data) > self._checked:
            room(self.folder, max(self.nbytes - self._written, len(data)))
            self._checked = self._written + max(CHECK_EVERY, len(data))
        written = self.file.write(data)
        self._written += written or 0
        return written

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        if (offset, whence) == (0, os.SEEK_SET):  # a new attempt: the whole copy to come
            self._written = self._checked = 0
        return self.file.seek(offset, whence)

    def truncate(self, at: int | None = None) -> int:
        return self.file.truncate(at)


# ------------------------------------------------------------------------------ what the loaders hold
_MEMO: list = [None, None]  # the last (key, schedules): a start's bound and its first counts share one pass


def node_schedules(plan: StreamPlan, ranks: Sequence[int], epoch: int, workers: int, start: int, stop: int,
                   ordered) -> list[ShardSchedule]:
    """The schedule at steps ``[start, stop)`` of each (rank of ``ranks``, loader worker) that
    reads anything (``ordered``: ``plan.ordered_shards(epoch)``)."""
    key = (plan, tuple(ranks), epoch, workers, start, stop)
    if _MEMO[0] == key:
        return _MEMO[1]
    out, workers = [], max(1, workers)
    for rank in ranks:
        peer = plan if rank == plan.rank else dataclasses.replace(plan, rank=rank)
        for worker in range(workers):
            segments = peer.segments(worker, workers)
            if segments:
                out.append(peer.schedule(epoch, segments, start, stop, ordered=ordered))
    _MEMO[:] = key, out
    return out


class Need(NamedTuple):
    """What the node's loaders hold at once (module docstring), in bytes."""
    copies: int
    queued: int

    @property
    def total(self) -> int:
        return self.copies + self.queued


def loaders_need(plan: StreamPlan, ranks: Sequence[int], workers: int, prefetch: int = PREFETCH) -> Need:
    """The peak of the node's copies over the first epoch, and its loaders' queued batches."""
    steps = plan.steps_per_epoch
    ordered = plan.ordered_shards(0)
    born = np.full(len(ordered[0]), steps, np.int64)
    dies = np.full(len(ordered[0]), -1, np.int64)
    for sched in node_schedules(plan, ranks, 0, workers, 0, steps, ordered):
        ahead = np.arange(len(sched.order)) - prefetch  # entry i is read once entry i - prefetch is in use
        read_at = np.where(ahead >= 0, sched.first[np.maximum(ahead, 0)], 0)
        np.minimum.at(born, sched.order, read_at)
        np.maximum.at(dies, sched.order, sched.last)
    used = np.flatnonzero(dies >= 0)
    alive = np.zeros(steps + 1, np.int64)
    sizes = np.array([ordered[0][i].shard.bytes for i in used.tolist()], np.int64)
    np.add.at(alive, np.maximum(born[used] - LEAD, 0), sizes)
    np.add.at(alive, dies[used] + 1, -sizes)
    copies = int(np.cumsum(alive).max()) if len(used) else 0
    queued = len(ranks) * LOADER_QUEUE * plan.per_rank * plan.seq_len * 2 * 8 if workers > 0 else 0
    return Need(copies, queued)


def choose_root(plan: StreamPlan, ranks: Sequence[int], workers: int, prefetch: int = PREFETCH) -> tuple[str, str]:
    """``auto``'s root for this node, and why, when it is not ``SHM`` (module docstring), else ''."""
    shm, disk = auto_roots()
    if not shm_usable():
        return disk, f"{SHM} is not a folder this user can write in; caching shards in {disk}"
    need, total = loaders_need(plan, ranks, workers, prefetch), shutil.disk_usage(SHM).total
    if need.total <= (1 - RESERVE) * total:
        return shm, ""
    return disk, (f"{SHM} has {size(total)}, less than what this node's loaders hold at once, {size(need.total)} "
                  f"({size(need.copies)} of shard copies for {len(ranks)} rank(s) x {max(1, workers)} worker(s), "
                  f"{size(need.queued)} of queued batches), plus the {RESERVE:.0%} of it kept free for NCCL and "
                  f"others; caching shards in {disk} instead")
