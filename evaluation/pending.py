"""Which checkpoints still wait for their evaluation: what the hourly scan evaluates.

Every complete checkpoint under ``RUNS/*/checkpoints/`` with no ``RUN/eval/step_N/results.json``
and no recorded skip (``RUN/eval/skipped.jsonl``, ``electra.checkpoint.eval_handoff``) is pending. NEWEST
FIRST in each run: when evaluation is slower than checkpointing, the freshest model is scored
first, and the trainer's pins keep the older pending ones on disk until they are evaluated or
the trainer's policy skips them with a reason. The listing reads only folder names and the
skip log, so an hourly scan of many runs costs milliseconds (benchmarks/evaluate/eval_scan.py).
"""
from __future__ import annotations

from pathlib import Path

from electra.checkpoint import eval_handoff as handoff
from electra.checkpoint import run_layout as layout

from . import eval_layout

RUNS_DIR_ENV = "ELECTRA_RUNS_DIR"  # the scan deployment's runs folder (prefect.yaml, infra/serve.sh)


class RunsFolderMissing(FileNotFoundError):
    """The runs folder does not exist; ``str()`` is one line naming it and what to set."""


def check_runs(runs: str | Path) -> Path:
    """``runs`` as a folder, or ``RunsFolderMissing`` naming it (and where a relative one points,
    which for a deployment is the worker's working directory) and the fix."""
    folder = Path(runs).expanduser()
    if not folder.is_dir():
        absolute = folder.resolve()
        shown = f"{runs} ({absolute})" if str(runs) != str(absolute) else str(absolute)
        raise RunsFolderMissing(
            f"runs folder {shown}: no such folder; set --runs (the CLI) or the deployment's runs parameter "
            f"(make serve: ${RUNS_DIR_ENV}) to the folder holding your run directories")
    return folder


def pending_checkpoints(runs: str | Path) -> list[tuple[Path, Path]]:
    """(step dir, eval dir) for every complete checkpoint with neither results nor a recorded
    skip, newest first within each run."""
    folder = check_runs(runs)
    todo = []
    for run in sorted(p for p in folder.iterdir() if layout.checkpoints_dir(p).is_dir()):
        skipped = handoff.skipped(run)
        for step in reversed(layout.step_dirs(run)):
            out = layout.eval_dir(run, step.name)
            if not eval_layout.is_finished(out) and layout.step_of(step) not in skipped:
                todo.append((step, out))
    return todo
