"""What this driver's tasks have reported writing: files, bytes and quarantine parts, counted as
their results reach the driver.

The stage heartbeat (``pipelines.orchestration.progress``) prints it while a stage runs. It used
to list the stage's folders on the store every beat instead; at 10 TB a stage's cache and
quarantine hold ~600,000 objects, and each beat then cost ~600 LIST requests and, in s3fs's
listing entries (~1.2 KB an object), ~0.7 GB on the driver. Every task that writes already
returns what it wrote (the writers' summaries, a shuffle's map files, dedup's marks, the shards),
so counting here costs nothing and no request.

Trade-off: a file counts once its task's result has reached the driver, which is right after the
task ends (results are consumed as they arrive), not the moment the object is on the store. The
counts are process-wide totals; a reader takes the difference between two ``total()`` calls.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class Written:
    files: int = 0  # data parts, scratch files (shuffles, marks, the tokenizer's sample), shards
    bytes: int = 0
    quarantined: int = 0  # quarantine parts (their bytes are not in ``bytes``)

    def __sub__(self, other: Written) -> Written:
        return Written(self.files - other.files, self.bytes - other.bytes, self.quarantined - other.quarantined)


_lock = threading.Lock()
_total = Written()


def add(*, files: int = 0, nbytes: int = 0, quarantined: int = 0) -> None:
    """Count what a task reported writing (called where its result reaches the driver)."""
    global _total
    with _lock:
        _total = Written(_total.files + int(files), _total.bytes + int(nbytes), _total.quarantined + int(quarantined))


def total() -> Written:
    """Everything counted so far in this process."""
    return _total
