"""Completion-marked stage outputs: a rerun skips finished work, a killed run leaves no half-output.

Every stage of the corpus pipeline writes its output into ``work/<stage>-<key>/`` where ``key``
hashes the stage's config section together with the key of its input. The output is produced in
a private temporary folder and renamed into place only after the stage wrote ``_SUCCESS`` (a JSON
file with the stage's statistics). Renaming a folder is atomic on POSIX file systems, so a reader
sees either no output or a complete one; a SIGKILL at any point leaves at most a stale ``.tmp``
folder, which the next run deletes. Because the key covers everything upstream, changing a
filter threshold reruns filtering and every later stage, and nothing before it.
"""
from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

SUCCESS = "_SUCCESS"


@dataclass
class StageResult:
    name: str
    key: str
    path: Path
    stats: dict[str, Any] = field(default_factory=dict)
    cached: bool = False


def stage_dir(work_dir: str | Path, name: str, key: str) -> Path:
    return Path(work_dir) / f"{name}-{key}"


def run_cached(work_dir: str | Path, name: str, key: str,
               produce: Callable[[Path], dict[str, Any]]) -> StageResult:
    """Return the finished output of stage ``name`` for ``key``, producing it if needed.

    ``produce(tmp_dir)`` writes the output into ``tmp_dir`` and returns its statistics.
    """
    work = Path(work_dir)
    final = stage_dir(work, name, key)
    marker = final / SUCCESS
    if marker.is_file():
        return StageResult(name, key, final, json.loads(marker.read_text()), cached=True)
    work.mkdir(parents=True, exist_ok=True)
    for stale in work.glob(f".{name}-{key}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = work / f".{name}-{key}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    start = time.perf_counter()
    stats = dict(produce(tmp))
    stats.setdefault("seconds", round(time.perf_counter() - start, 3))
    (tmp / SUCCESS).write_text(json.dumps(stats, indent=2, sort_keys=True))
    if final.exists():  # an incomplete leftover (no marker): replace it
        shutil.rmtree(final)
    os.rename(tmp, final)
    return StageResult(name, key, final, stats, cached=False)


def prune(work_dir: str | Path, keep: set[Path]) -> list[Path]:
    """Delete stage outputs of earlier configs (anything not in ``keep``); return what went."""
    removed = []
    for p in Path(work_dir).iterdir():
        if p.is_dir() and p not in keep:
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed
