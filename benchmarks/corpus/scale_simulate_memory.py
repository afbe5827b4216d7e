"""Resident memory of a process and of this process's Ray workers, read from ``/proc``: the
memory figures of a simulated shuffle (``scale_simulate.py``).

Why sample at all: ``ru_maxrss`` (what the shuffle reports for its map tasks as
``map_task_peak_rss`` and what the reduce function reads) is the worker's peak over every task it
ran (workers are reused: generation, map and reduce tasks of that size's fresh Ray), and it
counts shared pages: the Ray object store's (which a worker touches more of as more blocks pass
through it, up to the store's size) and the page cache of the spill runs a reduce task
memory-maps. ``MemorySampler`` (a thread of the driver) samples every 0.1 s the private memory
(``RssAnon``) of each of this Ray's workers, by the task its process title names, and of the
driver: the figure a task's own heap reaches.

``benchmarks/shared/memory.py`` reads only this process's ``VmHWM``/``VmRSS``, in rounded MB;
these figures need any process's parts (private, file, shared), in bytes.
"""
from __future__ import annotations

import os
import time
from typing import Any

_STATUS = {"VmRSS:": "rss", "RssAnon:": "anon", "RssFile:": "file", "RssShmem:": "shmem", "VmHWM:": "hwm"}


def process_memory(pid: int | str = "self") -> dict[str, int]:
    """Resident memory of a process in bytes: ``rss`` (VmRSS), its parts ``anon`` (private heap),
    ``file`` (mapped files: the spill's runs) and ``shmem`` (shared memory: Ray's object store),
    and ``hwm`` (VmHWM, the peak of rss)."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key = line.split(None, 1)[0] if line.strip() else ""
            if key in _STATUS:
                out[_STATUS[key]] = int(line.split()[1]) << 10
    return out


def task_kind(title: str) -> str | None:
    """The kind of task a process runs, from its title: the shuffle's map and reduce functions,
    the simulation's input generator (``scale_simulate._generate``), an idle worker, another Ray
    task; ``None`` for a process that is not a Ray worker."""
    for needle, kind in (("write_map_files", "map"), ("stream_map_file", "map"), ("_reduce_batch", "reduce"),
                         ("_generate", "generate"),
                         ("IDLE", "idle")):
        if needle in title:
            return kind
    return "other" if title.startswith("ray::") else None


class MemorySampler:
    """Samples the memory of this process's Ray workers (its descendants titled ``ray::...``) and
    of itself every ``interval`` seconds, and keeps the peak of each part per kind of task the
    worker was running (its process title: ``ray::write_map_files``, ``ray::...(_reduce_batch)``,
    ...). A sampled peak is a lower bound; ``anon`` is what a task holds privately, without the
    object store's shared pages or the page cache of files it maps, which ``ru_maxrss`` counts."""

    def __init__(self, interval: float = 0.1):
        import threading

        self.interval = interval
        self.peaks: dict[str, dict[str, int]] = {}
        self.samples = 0
        self._workers: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="memory-sampler", daemon=True)

    def __enter__(self) -> "MemorySampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _refresh(self) -> None:
        parents: dict[int, int] = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat") as f:
                        parents[int(name)] = int(f.read().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    pass
        me, mine = os.getpid(), []
        for pid in parents:
            p, seen = parents.get(pid), 0
            while p and p != me and seen < 16:
                p, seen = parents.get(p), seen + 1
            if p == me:
                mine.append(pid)
        self._workers = mine

    def _note(self, kind: str, mem: dict[str, int]) -> None:
        peak = self.peaks.setdefault(kind, {})
        for k, v in mem.items():
            if k != "hwm":
                peak[k] = max(peak.get(k, 0), v)

    def _loop(self) -> None:
        last_refresh = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            if now - last_refresh > 1.0:
                self._refresh()
                last_refresh = now
            self._note("driver", process_memory())
            for pid in self._workers:
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        kind = task_kind(f.read().split(b"\0", 1)[0].decode(errors="replace"))
                    if kind:
                        self._note(kind, process_memory(pid))
                except (OSError, ValueError):
                    pass
            self.samples += 1
            self._stop.wait(self.interval)
