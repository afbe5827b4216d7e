"""Prefect flow ``evaluate-new-checkpoints``: the scan behind the event trigger.

    python -m flows.evaluate_new_checkpoints --runs RUNS_DIR [--tasks CoLA,MRPC] [--glue-dir DIR]

Normally a checkpoint is evaluated because the trainer's ``electra.checkpoint.committed`` event
triggered the ``evaluate`` deployment (``prefect.yaml``). This scan, deployed hourly, catches
what no event started (no Prefect API when training, server down, a queue that fell behind):
every complete checkpoint under ``RUNS_DIR/*/checkpoints/`` with no ``RUN/eval/step_N/
results.json`` and no recorded skip (``RUN/eval/skipped.jsonl``) is evaluated by the
``evaluate`` flow (a subflow), NEWEST FIRST in each run: when evaluation is slower than
checkpointing, the freshest model is scored first, and the trainer's pins
(``train.keep_until_evaluated``, ``electra.eval_handoff``) keep the older pending ones on disk
until they are evaluated or the trainer's policy skips them with a reason.

Idempotent and overlap-safe:
  * ``results.json`` is written last and atomically, so a crashed evaluation is resumed by the
    next scan (finished seeds are kept) and a second scan with nothing new does nothing;
  * a checkpoint whose evaluation is in progress elsewhere (a live lease on its folder) is
    reported ``in_progress`` and left alone; ``evaluate`` takes the lease atomically, so two
    scans racing to one checkpoint evaluate it once, and every evaluation takes a slot of the
    one ``electra-evaluate`` concurrency limit, as event-triggered runs do;
  * a checkpoint deleted before its turn is recorded in ``skipped.jsonl`` by ``evaluate`` and
    reported under ``skipped``, never a crash; results of another request in the folder
    (``EvaluationConflict``) are reported under ``skipped`` too;
  * a checkpoint whose results record failed tasks is not retried (bad data would fail again
    every hour); fix the data and run ``evaluate`` on it, which redoes only those tasks.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from prefect import flow, get_run_logger
from prefect.task_runners import ThreadPoolTaskRunner

from common.lease import Lease
from electra import eval_handoff as handoff
from electra import run_layout as layout
from evaluation import eval_layout
from evaluation.evaluation_runner import EvaluationConflict
from evaluation.sources import CheckpointError
from flows.evaluate import _flow_run_finished, add_common_args, evaluate, recipe_overrides


def pending_checkpoints(runs: str | Path) -> list[tuple[Path, Path]]:
    """(step dir, eval dir) for every complete checkpoint with neither results nor a recorded
    skip, newest first within each run."""
    if not Path(runs).is_dir():
        raise FileNotFoundError(f"--runs {runs}: no such folder (the folder holding run directories)")
    todo = []
    for run in sorted(p for p in Path(runs).iterdir() if layout.checkpoints_dir(p).is_dir()):
        skipped = handoff.skipped(run)
        for step in reversed(layout.step_dirs(run)):
            out = layout.eval_dir(run, step.name)
            if not eval_layout.is_finished(out) and layout.step_of(step) not in skipped:
                todo.append((step, out))
    return todo


@flow(name="evaluate-new-checkpoints", task_runner=ThreadPoolTaskRunner(max_workers=1))
def evaluate_new_checkpoints(runs: str, glue_dir: str | None = None, tasks: str | None = None,
                             squad_dir: str | None = None, squad_version: str = "1.1",
                             seeds: int | None = None, recipe: dict | None = None,
                             workers: int = 1) -> dict:
    """Evaluate every checkpoint under ``runs`` that has no results yet.

    Returns ``{"evaluated": [step dirs], "in_progress": {step dir: holder}, "skipped": {step
    dir: reason}}``; any other failure is raised after the remaining checkpoints.
    """
    logger = get_run_logger()
    evaluated, busy, skipped, failed = [], {}, {}, {}
    for step, out in pending_checkpoints(runs):
        holder = Lease(out / eval_layout.LEASE, is_dead=_flow_run_finished).holder()
        if holder is not None:
            logger.info("%s is being evaluated by %s; left alone", step, holder.describe())
            busy[str(step)] = holder.describe()
            continue
        logger.info("evaluating %s -> %s", step, out)
        try:
            outcome = evaluate(checkpoint=str(step), out=str(out), glue_dir=glue_dir, tasks=tasks,
                               squad_dir=squad_dir, squad_version=squad_version, seeds=seeds,
                               recipe=recipe, workers=workers)
        except (CheckpointError, EvaluationConflict) as exc:
            logger.warning("skipped %s: %s", step, exc)
            skipped[str(step)] = str(exc)
            continue
        except Exception as exc:  # noqa: BLE001 - reported below, after the other checkpoints
            logger.error("evaluation of %s failed: %r", step, exc)
            failed[str(step)] = repr(exc)
            continue
        status = outcome.get("status")
        if status == "in_progress":  # lost the race for the lease
            busy[str(step)] = outcome["holder"]
        elif status == "skipped":  # deleted before its turn: recorded in skipped.jsonl
            skipped[str(step)] = outcome["reason"]
        else:
            evaluated.append(str(step))
    logger.info("%d checkpoint(s) evaluated, %d in progress elsewhere, %d skipped",
                len(evaluated), len(busy), len(skipped))
    if failed:
        raise RuntimeError(f"{len(failed)} checkpoint evaluation(s) failed: {failed}")
    return {"evaluated": evaluated, "in_progress": busy, "skipped": skipped}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m flows.evaluate_new_checkpoints",
                                description="evaluate checkpoints that have no results yet")
    p.add_argument("--runs", required=True, help="folder holding run directories")
    add_common_args(p)
    args = p.parse_args(argv)
    outcome = evaluate_new_checkpoints(runs=args.runs, glue_dir=args.glue_dir, tasks=args.tasks,
                                       squad_dir=args.squad_dir,
                                       squad_version=args.squad_version, seeds=args.seeds,
                                       recipe=recipe_overrides(args), workers=args.workers)
    print(json.dumps(outcome, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
