"""A lease on a folder: "this job is being done by X", visible to every process that can see it.

Long jobs that several schedulers may start (an evaluation triggered by an event, the hourly
scan, a person at the CLI) claim their output folder first. The lease is a small JSON file
(``owner`` token, host, pid, optional Prefect flow-run id, acquired and heartbeat times) beside
the output. A second claimant sees it held and backs off instead of redoing hours of work into
the same folder.

Acquire is check-then-write under an exclusive ``fcntl.flock`` on a sibling ``.lock`` file, so
two processes racing for the same lease get exactly one winner (flock also works across hosts
on NFSv4 through the lock manager). The lease file itself is replaced atomically, so a reader
never sees half of it.

A held lease is STALE, and may be taken over, when:
  * its heartbeat is older than ``ttl`` seconds (the owner died without releasing; the owner's
    heartbeat thread refreshes it every ``ttl / 3``), or
  * its owner ran on this host and that pid no longer exists (a crash is noticed at once,
    without waiting for the ttl), or
  * the caller's ``is_dead(info)`` says so (e.g. the owner's Prefect flow run is in a final
    state; this module knows nothing of Prefect).

Trade-offs: the ttl must exceed the longest pause of the owner's heartbeat thread (a GIL-bound
step does not stop it; a suspended machine does); a pid reused by another process on the same
host keeps a dead lease alive until its heartbeat expires, never longer. ``clock`` is injectable
so staleness is tested without waiting.
"""
from __future__ import annotations

import fcntl
import json
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

DEFAULT_TTL = 900.0  # seconds without a heartbeat before a lease is presumed dead


@dataclass
class LeaseInfo:
    owner: str  # random token of the holder
    host: str
    pid: int
    acquired: float
    heartbeat: float
    flow_run_id: str | None = None
    note: str = ""

    def describe(self) -> str:
        run = f", flow run {self.flow_run_id}" if self.flow_run_id else ""
        return f"{self.host} pid {self.pid}{run} (since {time.ctime(self.acquired)})"


class LeaseHeld(RuntimeError):
    """Another live holder has the lease."""

    def __init__(self, path: Path, info: LeaseInfo):
        super().__init__(f"{path} is held by {info.describe()}")
        self.path, self.info = path, info


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


class Lease:
    """``with Lease(folder / "lease.json"):`` holds the lease (with a heartbeat) for the block."""

    def __init__(self, path: str | Path, *, ttl: float = DEFAULT_TTL, flow_run_id: str | None = None,
                 note: str = "", clock: Callable[[], float] = time.time,
                 is_dead: Callable[[LeaseInfo], bool] | None = None):
        self.path = Path(path)
        self.ttl, self.flow_run_id, self.note = ttl, flow_run_id, note
        self.clock, self.is_dead = clock, is_dead
        self.owner = uuid.uuid4().hex
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    # -- reading -----------------------------------------------------------------------------
    def read(self) -> LeaseInfo | None:
        """The current holder, or None when free (an unreadable file counts as free: it can
        only be a leftover, since writes are atomic)."""
        try:
            return LeaseInfo(**json.loads(self.path.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def stale(self, info: LeaseInfo) -> str | None:
        """Why ``info`` no longer holds the lease, or None when it is live."""
        age = self.clock() - info.heartbeat
        if age > self.ttl:
            return f"no heartbeat for {age:.0f} s (ttl {self.ttl:.0f} s)"
        if info.host == socket.gethostname() and not _pid_alive(info.pid):
            return f"pid {info.pid} on {info.host} has exited"
        if self.is_dead is not None and self.is_dead(info):
            return "its owner reports finished"
        return None

    def holder(self) -> LeaseInfo | None:
        """The live holder, or None when the lease is free or stale."""
        info = self.read()
        return info if info is not None and self.stale(info) is None else None

    # -- holding -----------------------------------------------------------------------------
    def acquire(self) -> LeaseInfo:
        """Take the lease or raise ``LeaseHeld``; a stale lease is taken over."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(self.path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            current = self.read()
            if current is not None and current.owner != self.owner and self.stale(current) is None:
                raise LeaseHeld(self.path, current)
            now = self.clock()
            info = LeaseInfo(owner=self.owner, host=socket.gethostname(), pid=os.getpid(),
                             acquired=now, heartbeat=now, flow_run_id=self.flow_run_id,
                             note=self.note)
            self._write(info)
        return info

    def refresh(self) -> bool:
        """Renew the heartbeat; False (and nothing written) when the lease is no longer ours."""
        with open(self.path.with_name(self.path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            info = self.read()
            if info is None or info.owner != self.owner:
                return False
            info.heartbeat = self.clock()
            self._write(info)
        return True

    def release(self) -> None:
        """Give the lease back (only if it is still ours)."""
        self._stop.set()
        if self._beat is not None:
            self._beat.join()
            self._beat = None
        with open(self.path.with_name(self.path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            info = self.read()
            if info is not None and info.owner == self.owner:
                self.path.unlink(missing_ok=True)

    def _write(self, info: LeaseInfo) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{self.owner}.tmp")
        tmp.write_text(json.dumps(asdict(info)))
        os.replace(tmp, self.path)

    def _heartbeat(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            try:
                if not self.refresh():
                    return  # taken over (we were presumed dead): nothing left to renew
            except OSError:
                continue  # a transient filesystem error: the next beat retries

    def __enter__(self) -> Lease:
        self.acquire()
        self._stop.clear()
        self._beat = threading.Thread(target=self._heartbeat, name=f"lease:{self.path}",
                                      daemon=True)
        self._beat.start()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
