"""What a node's local resources allow a shuffle: spill disk for its reduce tasks, object store
for its map tasks. Checked before they run out, so a build that cannot fit stops in one line
naming the folder, the size needed and the fix, not with ENOSPC deep in Arrow or a node whose
object store spills to disk.

Spill disk (``pipelines.engine.spill``). A reduce task of a shuffle of ``B`` bytes read by ``R``
reduce tasks receives about ``E = B / R`` bytes (its range's slice of every map file; the spill's
runs are Arrow IPC like the slices, so about as large) and keeps them on local disk until its
last partition is read. Its peak is ``E`` plus the largest merge's output while the merged runs
still exist: ``MAX_RUNS`` runs of level ``l - 1`` become one of level ``l``, so with
``n = E // budget`` runs written the largest merge writes ``budget * MAX_RUNS**L`` bytes,
``L = floor(log_MAX_RUNS n)`` (none while ``n < MAX_RUNS``; never more than ``E``):
``task_spill_bytes``. A reduce task holds one CPU, and Ray's scheduler packs tasks onto a node
before it spreads them, so a node may run ``min(R, its CPUs)`` of them at once, all at their peak
together: ``node_spill_bytes``, the bound. The room a node has for them is the free space of the
spill folder's file system plus what live spills already hold there (they count against the
bound, not against the room: a task that starts while others are half-way must not count them
twice). The fix is a disk with that room (``ELECTRA_SPILL_DIR``), or more reduce tasks: each
spills less, and a node runs no more of them at once; ``reduce_tasks_needed`` finds the smallest
``R`` that fits.

Where it is checked. The driver can read only its own node's disk: ``check_spill_room`` runs
before the reduce side and checks the driver's node (when it runs reduce tasks: a head node with
no CPUs does not), returning the bound for every node to report. Every other node checks at each
reduce task's start (``RangeSpill(expected_bytes=...)``) and before each run it writes, so a disk
filled by something else fails with the same line. The price of the bound: it assumes every task
of a node at its peak at once; a disk that fits the tasks' average but not that fails early.

Object store (the map side). A map task in flight (queued or running) pins its argument blocks,
about ``file_bytes``, in the object store of the node they were made on until it ends; its two
other copies (the sorted rows and the encoded file) are a running task's heap, not the store.
The driver keeps ``T`` tasks in flight over the whole cluster, spread over the nodes as their
blocks are (about in proportion to their CPUs), so a node of ``c`` of the cluster's ``C`` CPUs
pins about ``T c / C * file_bytes``. ``map_tasks_in_flight`` caps ``T`` so that this stays within
``STORE_SHARE`` of every node's store: the rest is for the blocks Ray Data streams meanwhile.
Fewer tasks in flight cost only parallelism where a node's store is small for its CPUs.
"""
from __future__ import annotations

import errno
import math
import os
import shutil
import socket
import tempfile
from dataclasses import dataclass
from typing import NamedTuple, Sequence

SPILL_DIR_ENV = "ELECTRA_SPILL_DIR"
# The share of a node's object store that the map tasks in flight may pin.
STORE_SHARE = 0.5


class SpillSpaceError(Exception):
    """A node's spill folder cannot hold the reduce tasks' spills: a user error (a bigger disk or
    more reduce tasks), printed as one line and never retried (the disk does not grow)."""


@dataclass(frozen=True)
class Node:
    """An alive Ray node's resources: its CPUs and its object store's bytes."""
    node_id: str
    cpus: int
    object_store_bytes: int


class SpillRoom(NamedTuple):
    """The spill bound of a shuffle: bytes per reduce task, per node (the largest over nodes),
    and where the driver's node was checked (``folder`` empty when it was not: no Ray node of
    its own, or no CPUs to run reduce tasks) with the room it has."""
    task_bytes: int
    node_bytes: int
    folder: str
    room: int


def spill_root() -> str:
    """Where reduce tasks spill: ``ELECTRA_SPILL_DIR`` if set, else the system's temp folder."""
    return os.path.join(os.environ.get(SPILL_DIR_ENV) or tempfile.gettempdir(), "electra-spill")


def cluster_nodes() -> list[Node]:
    """The alive nodes of the Ray cluster this process is connected to (``ray.nodes()``)."""
    import ray

    return [Node(str(n.get("NodeID", "")), int(n.get("Resources", {}).get("CPU", 0)),
                 int(n.get("Resources", {}).get("object_store_memory", 0)))
            for n in ray.nodes() if n.get("Alive")]


def this_node_id() -> str:
    """This process's Ray node, or "" outside Ray (or a client without a node of its own)."""
    import sys

    ray = sys.modules.get("ray")  # never start or import Ray only to ask
    try:
        return ray.get_runtime_context().get_node_id() if ray is not None and ray.is_initialized() else ""
    except Exception:  # noqa: BLE001 (a Ray client has no node: nothing to check here)
        return ""


def node_cpus() -> int:
    """CPUs of this node: Ray's count for it in a Ray worker or driver (``--num-cpus`` may differ
    from the machine's), else the machine's."""
    node = this_node_id()
    if node:
        try:
            for n in cluster_nodes():
                if n.node_id == node:
                    return max(1, n.cpus)
        except Exception:  # noqa: BLE001 (the GCS did not answer: the machine's count is the bound)
            pass
    return os.cpu_count() or 1


# --- spill disk -------------------------------------------------------------------------------

def task_spill_bytes(expected_bytes: int, budget: int, fan_in: int) -> int:
    """Peak local disk of one reduce task spilling ``expected_bytes`` with runs of ``budget``
    bytes merged ``fan_in`` at a time: its bytes plus its largest merge's output."""
    expected_bytes, budget = max(0, int(expected_bytes)), max(1, int(budget))
    runs = expected_bytes // budget
    if runs < fan_in:
        return expected_bytes
    largest = budget
    while largest * fan_in <= runs * budget:
        largest *= fan_in
    return expected_bytes + min(expected_bytes, largest)


def node_spill_bytes(total_bytes: int, ranges: int, cpus: int, budget: int, fan_in: int) -> int:
    """Peak spill of one node of ``cpus`` CPUs for a shuffle of ``total_bytes`` read by ``ranges``
    reduce tasks: ``min(ranges, cpus)`` tasks at once, each at its peak."""
    ranges = max(1, int(ranges))
    return min(ranges, max(1, int(cpus))) * task_spill_bytes(-(-int(total_bytes) // ranges), budget, fan_in)


def reduce_tasks_needed(total_bytes: int, cpus: int, room: int, budget: int, fan_in: int,
                        at_least: int = 1) -> int | None:
    """The fewest reduce tasks (at least ``at_least``) whose spills fit ``room`` bytes on a node
    of ``cpus`` CPUs; None if none does (no room at all)."""
    def fits(r: int) -> bool:
        return node_spill_bytes(total_bytes, r, cpus, budget, fan_in) <= room

    at_least, cpus = max(1, int(at_least)), max(1, int(cpus))
    for r in range(at_least, cpus):  # a node runs all r tasks: about the whole shuffle, flat in r
        if fits(r):
            return r
    lo, hi = max(at_least, cpus), max(at_least, cpus, int(total_bytes))
    if not fits(hi):  # cpus tasks of one byte each do not fit
        return None
    while lo < hi:  # cpus tasks at once, each spilling less as r grows: monotone
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid + 1, hi)
    return lo


def free_bytes(folder: str) -> int:
    """Free bytes of the file system holding ``folder`` (or its nearest existing parent: the
    spill folder is made when a task first spills)."""
    path = os.path.abspath(folder)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return int(shutil.disk_usage(path).free)


def live_spill_bytes(root: str) -> int:
    """Bytes of the run files under ``root`` (``spill_root()``) whose process is alive: what
    running spills hold, counted in the bound and so added back to the room."""
    total = 0
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return 0
    for entry in entries:
        # a named spill's folder is <tag>.<pid>.<random>, an unnamed one's range-<pid>.<random>
        parts = entry.name.removeprefix("range-").split(".") if entry.name.startswith("range-") \
            else entry.name.split(".")[1:]
        pid = parts[0] if len(parts) == 2 else ""
        if not entry.is_dir() or not pid.isdigit() or not _alive(int(pid)):
            continue
        try:
            files = list(os.scandir(entry.path))
        except FileNotFoundError:  # its spill closed meanwhile
            continue
        for f in files:
            try:
                total += f.stat().st_size if f.is_file() else 0
            except FileNotFoundError:  # removed by its merge meanwhile
                pass
    return total


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


def spill_room(root: str) -> int:
    """The bytes the reduce tasks of this node may spill under ``root``: free space plus what live
    spills hold there."""
    return free_bytes(root) + live_spill_bytes(root)


# A map task's spill (a map file of reduce tasks x shuffle.slice_mb) shrinks with fewer reduce
# tasks or smaller slices: the opposite of a reduce task's.
MAP_SIDE_FIX = "or smaller map files: a smaller --set shuffle.slice_mb=MB (or fewer shuffle.reduce_tasks)"


def no_room(folder: str, *, need: int, why: str, room: int, reduce_tasks: int | None,
            fix: str | None = None) -> SpillSpaceError:
    """The one line of a spill that does not fit: the node and folder, the size needed and why,
    the room, and the fixes (``reduce_tasks``: the fewest that fit, None if unknown; ``fix``
    instead of more reduce tasks, for a map task's spill)."""
    more = (f"--set shuffle.reduce_tasks={reduce_tasks}" if reduce_tasks
            else "--set shuffle.reduce_tasks=N with a larger N")
    return SpillSpaceError(
        f"spill folder {folder} on node {socket.gethostname()} needs {human_bytes(need)} ({why}) but has "
        f"{human_bytes(room)} free; set {SPILL_DIR_ENV} to a folder on a bigger disk, "
        + (fix or f"or use more reduce tasks: {more}"))


def at_once(tasks: int, task_bytes: int) -> str:
    """Why a node needs its bound, for ``no_room``."""
    return (f"{tasks} reduce task{'s' * (tasks != 1)} at once x {human_bytes(task_bytes)}: a task's range of "
            f"the shuffle plus its largest merge")


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` is a write that found the disk full (Arrow's OSError carries the errno in
    its message only)."""
    return isinstance(exc, OSError) and (exc.errno == errno.ENOSPC or "No space left" in str(exc))


def check_spill_room(total_bytes: int, ranges: int, nodes: Sequence[Node], *, budget: int, fan_in: int,
                     node_id: str | None = None, folder: str | None = None) -> SpillRoom:
    """Before a shuffle's reduce side: raises ``SpillSpaceError`` if the driver's node (``node_id``,
    default this process's) runs reduce tasks and its spill folder (``folder``, default
    ``spill_root()``) has no room for its share (``node_spill_bytes``; ``budget`` and ``fan_in``
    are the spill's: the reduce tasks' memory and ``spill.MAX_RUNS``); returns the bound. Other
    nodes are checked by their tasks as they start (``RangeSpill(expected_bytes=...)``): the
    driver cannot read their disks."""
    ranges = max(1, int(ranges))
    task = task_spill_bytes(-(-int(total_bytes) // ranges), budget, fan_in)
    per_node = max((node_spill_bytes(total_bytes, ranges, n.cpus, budget, fan_in) for n in nodes if n.cpus > 0),
                   default=0)
    node_id = this_node_id() if node_id is None else node_id
    mine = next((n for n in nodes if n.node_id == node_id and n.cpus > 0), None) if node_id else None
    if mine is None or not total_bytes:
        return SpillRoom(task, per_node, "", 0)
    folder = folder or spill_root()
    need, room = node_spill_bytes(total_bytes, ranges, mine.cpus, budget, fan_in), spill_room(folder)
    if need > room:
        fix = reduce_tasks_needed(total_bytes, mine.cpus, room, budget, fan_in, at_least=ranges + 1)
        raise no_room(folder, need=need, why=at_once(min(ranges, mine.cpus), task), room=room, reduce_tasks=fix)
    return SpillRoom(task, per_node, folder, room)


# --- object store -----------------------------------------------------------------------------

def map_tasks_per_node(cpus: int, object_store_bytes: int, file_bytes: int, *, per_cpu: int = 2,
                       share: float = STORE_SHARE) -> int:
    """Map tasks in flight on one node of ``cpus`` CPUs: ``per_cpu`` per CPU, fewer where their
    blocks (``file_bytes`` each) would pin more than ``share`` of its object store; at least one."""
    by_store = int(share * object_store_bytes) // max(1, int(file_bytes))
    return max(1, min(per_cpu * max(1, int(cpus)), by_store))


def map_tasks_in_flight(nodes: Sequence[Node], file_bytes: int, *, per_cpu: int = 2, at_least: int = 16,
                        share: float = STORE_SHARE) -> int:
    """Map tasks the driver keeps in flight over ``nodes``: ``per_cpu`` per CPU of the cluster (at
    least ``at_least``; that alone when no node has CPUs), fewer where the tasks, spread over the
    nodes by CPUs, would pin more than ``share`` of some node's object store; at least one."""
    workers = [n for n in nodes if n.cpus > 0]
    cpus = sum(n.cpus for n in workers)
    if not cpus:
        return at_least
    by_store = min(math.floor(share * n.object_store_bytes * cpus / (n.cpus * max(1, int(file_bytes))))
                   for n in workers)
    return max(1, min(max(at_least, per_cpu * cpus), by_store))


def store_pinned_per_node(in_flight: int, nodes: Sequence[Node], file_bytes: int) -> int:
    """The most object store bytes ``in_flight`` map tasks pin on one node, spread by CPUs."""
    cpus = sum(n.cpus for n in nodes if n.cpus > 0)
    return max((in_flight * n.cpus * int(file_bytes) // cpus for n in nodes if n.cpus > 0), default=0) if cpus else 0


def human_bytes(n: int) -> str:
    """``n`` bytes in binary units, three significant figures (``2.1 GiB``)."""
    n, unit = float(n), "B"
    for bigger in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024:
            break
        n, unit = n / 1024, bigger
    return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
