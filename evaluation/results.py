"""Named results of fine-tuning: one ``SeedResult`` per run, one ``TaskResult`` per task.

The reported score of a task is the MEDIAN over seeds of each metric (the paper reports medians
of many fine-tuning runs from one checkpoint, because single runs of small GLUE tasks swing by
several points). The "median seed" — the run whose primary score is the median (the lower middle
for an even count) — is the model whose test predictions go into a GLUE submission.

Resume: every finished (task, seed) is written at once, atomically, to
``<eval dir>/seeds/<task>/seed<N>.json`` together with a ``key``: the sha256 of the checkpoint,
the resolved recipe and the sha256 of every data file the task reads. A rerun reuses a seed file
only when its key matches, so a finished seed is never redone for the same checkpoint, recipe
and data, and changing any of them (fixing a broken file included) redoes it. Unreadable seed
files count as absent: the worst case of a crash mid-write is one seed redone.

Reference: ``TaskResult.baseline`` holds the score of the task's trivial predictor (majority
class, constant, always-no-answer; ``baselines``) on the same dev sets, so a median can be read
against what learning nothing scores. Older files lack it and load with ``baseline`` None.

Provenance: ``code_version`` (the git commit, ``+dirty`` when the tree has local changes, else
the installed package version) and ``sha256_file`` for the data files a task reads.
"""
from __future__ import annotations

import hashlib
import json
import math
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from common.storage import write_bytes

from . import metrics

from .eval_layout import SEEDS as SEEDS_DIR  # noqa: E402  (the folder's names, defined once)


@dataclass
class SeedResult:
    seed: int
    metrics: dict[str, float]  # percent
    predictions: str  # prediction file, relative to the evaluation directory
    test_predictions: str | None = None
    train_loss: list[float] = field(default_factory=list)  # mean per epoch
    steps: int = 0
    seconds: float = 0.0
    run_id: str = ""  # the evaluation run that produced it (a resumed run reuses older seeds)


@dataclass
class TaskResult:
    task: str
    primary: str  # the metric the median seed and the GLUE average use
    seeds: list[SeedResult]
    num_train: int = 0
    num_eval: dict[str, int] = field(default_factory=dict)
    data_files: dict[str, str] = field(default_factory=dict)  # path -> sha256
    # {split: {"path", "skipped", "rows"}}: malformed QQP/MNLI rows skipped, as the original does
    skipped_rows: dict[str, Any] = field(default_factory=dict)
    # what a predictor that ignores its input scores on the same dev sets (``baselines``):
    # {"name", "prediction", "metrics": {metric: percent}}; None in results from before it
    baseline: dict[str, Any] | None = None

    @property
    def median(self) -> dict[str, float]:
        return median_metrics([s.metrics for s in self.seeds])

    def median_seed(self) -> SeedResult:
        # NaN ranks below every number, so the median seed does not depend on seed order.
        ranked = sorted(self.seeds, key=lambda s: (not math.isnan(v := s.metrics[self.primary]),
                                                   -math.inf if math.isnan(v) else v, s.seed))
        return ranked[(len(ranked) - 1) // 2]

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task, "primary": self.primary, "median": self.median,
                "metrics": sorted(self.median), "num_train": self.num_train,
                "num_eval": self.num_eval, "data_files": self.data_files,
                "skipped_rows": self.skipped_rows, "baseline": self.baseline,
                "seeds": [asdict(s) for s in self.seeds]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TaskResult:
        return cls(task=d["task"], primary=d["primary"],
                   seeds=[SeedResult(**s) for s in d["seeds"]],
                   num_train=d.get("num_train", 0), num_eval=d.get("num_eval", {}),
                   data_files=d.get("data_files", {}), skipped_rows=d.get("skipped_rows", {}),
                   baseline=d.get("baseline"))


def median_metrics(runs: list[dict[str, float]]) -> dict[str, float]:
    """Median of every metric present in all runs."""
    if not runs:
        return {}
    keys = set(runs[0]).intersection(*runs[1:])
    return {k: float(metrics.median([r[k] for r in runs])) for k in sorted(keys)}


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def hash_files(paths: list[Path]) -> dict[str, str]:
    """``{path: sha256}`` of the files a task reads, in the order given."""
    return {str(p): sha256_file(p) for p in paths}


def resume_key(*, checkpoint: str, recipe: dict[str, Any], data_files: dict[str, str]) -> str:
    """Identity of a (task, seed) computation: checkpoint, resolved recipe, data contents."""
    blob = json.dumps({"checkpoint": checkpoint, "recipe": recipe,
                       "data": sorted(data_files.values())}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def seed_path(out_dir: str | Path, task: str, seed: int) -> Path:
    return Path(out_dir) / SEEDS_DIR / task / f"seed{seed}.json"


def save_seed(out_dir: str | Path, task: str, result: SeedResult, *, key: str) -> Path:
    """Write one finished seed atomically (readers see the old file or the whole new one)."""
    path = seed_path(out_dir, task, result.seed)
    write_bytes(str(path), json.dumps({"key": key, "result": asdict(result)}, indent=1,
                                      sort_keys=True).encode())
    return path


def load_seed(out_dir: str | Path, task: str, seed: int, *, key: str) -> SeedResult | None:
    """The stored seed when it was computed with the same key; None otherwise."""
    path = seed_path(out_dir, task, seed)
    try:
        stored = json.loads(path.read_text())
        if stored.get("key") != key:
            return None
        return SeedResult(**stored["result"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # absent or cut: the seed is simply redone


def task_path(out_dir: str | Path, task: str) -> Path:
    return Path(out_dir) / SEEDS_DIR / task / "task.json"


def save_task(out_dir: str | Path, result: TaskResult, *, key: str) -> Path:
    """A whole finished task (for tasks resumed as one unit, e.g. SQuAD), atomically."""
    path = task_path(out_dir, result.task)
    write_bytes(str(path), json.dumps({"key": key, "result": result.to_dict()}, indent=1,
                                      sort_keys=True).encode())
    return path


def load_task(out_dir: str | Path, task: str, *, key: str) -> TaskResult | None:
    try:
        stored = json.loads(task_path(out_dir, task).read_text())
        return TaskResult.from_dict(stored["result"]) if stored.get("key") == key else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def code_version() -> str:
    """Git commit of this checkout (``+dirty`` with local changes), else the package version."""
    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                                text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=root, capture_output=True, text=True, timeout=10).stdout
        return f"git:{commit}" + ("+dirty" if dirty.strip() else "")
    except (OSError, subprocess.SubprocessError):
        from importlib import metadata

        for name in ("electra-system",):
            try:
                return f"package:{name}=={metadata.version(name)}"
            except metadata.PackageNotFoundError:
                continue
        return "unknown"
