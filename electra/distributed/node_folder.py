"""A run's folder on a node, shared by the run's processes there: its name, its locks, its lifetime.

The node cache (``electra.data.node_cache``) and the checkpoint mirror (``electra.checkpoint.mirror``)
keep their copies in ``<root>/<digest>/<run>``. ``<digest>`` names what is copied (a corpus's shard
list, a checkpoint's folder: 16 hex digits); ``<run>`` is the host's name and a digest of what
names the run to all its ranks and to no other live run (``MASTER_ADDR``, ``MASTER_PORT``, which
the run binds, ``TORCHELASTIC_RUN_ID``; without a launcher, the process id). Folders are 0700
and their owner is checked: only this user can publish a copy there.

**Entries** are guarded by an exclusive ``flock`` on ``<entry>.lock`` (``locked``); the lock file
also counts the readers done with the entry (``release``), and the last one deletes the copy and
the lock file while holding it (a process then granted the lock on the removed file sees the path
no longer names it and starts over).

**Run lifetime.** Each rank process holds a shared flock on ``<run>/.electra-node-cache.lock``
while it lives (its forked loader workers share it). The first to join gets it exclusively and
empties the folder (a killed run of the same name left it); a clean exit (``atexit``, or a
multiprocessing child's end) by the last holder removes the folder. A ``kill -9`` leaves its
copies in flight (a few steps' shards) and its lock to the kernel, which drops it with the last
process holding it: ``sweep`` removes every run folder under a root whose lock nobody holds,
whatever its digest or run, and never one whose lock is held (a live run). Joining sweeps the
folder's root; the node cache also sweeps both of ``auto``'s roots at every start
(``electra.data.node_cache_space``), so a run that falls back from ``/dev/shm`` to the disk, or that
needs no cache, still clears a killed run's copies from ``/dev/shm``. A folder is renamed before
it is deleted, so its name is free at once; a sweeper killed while deleting leaves a ``.trash-``
folder, which the next sweep deletes.
"""
from __future__ import annotations

import atexit
import fcntl
import hashlib
import json
import logging
import multiprocessing.util
import os
import re
import shutil
import socket
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path

log = logging.getLogger(__name__)

OWNER = ".electra-node-cache.lock"  # held shared by every live rank process of the run
_TRASH = ".trash-"  # a run folder being removed: renamed first, so its name is free at once
_DIGEST_NAME = re.compile(r"[0-9a-f]{16}")
_TRASH_NAME = re.compile(r"\.trash-.+-[0-9a-f]{12}-[0-9]+")


def run_name(env: Mapping[str, str] = os.environ) -> str:
    if "MASTER_PORT" in env:
        ident = ["launcher", env.get("MASTER_ADDR", ""), env["MASTER_PORT"], env.get("TORCHELASTIC_RUN_ID", "")]
    else:
        ident = ["process", str(os.getpid())]
    host = re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname())[:64] or "host"
    return f"{host}-{hashlib.sha256(json.dumps(ident).encode()).hexdigest()[:12]}"


# ------------------------------------------------------------------------------ locks
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


# ------------------------------------------------------------------------------ folders
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


def sweep(root: str, keep: str = "") -> None:
    """Remove the run folders under ``root`` that no live process holds (module docstring)."""
    try:  # only names this module makes: an explicit root may hold other things
        if os.stat(root).st_uid != os.getuid():
            return
        corpora = [os.path.join(root, name) for name in os.listdir(root) if _DIGEST_NAME.fullmatch(name)]
    except OSError:  # none yet, or not ours to read
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
        sweep(root, keep=folder)
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
