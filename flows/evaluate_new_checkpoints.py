"""Prefect flow ``evaluate-new-checkpoints``: the safety-net scan behind the event trigger.

    python -m flows.evaluate_new_checkpoints --runs RUNS_DIR --glue-dir DIR --tasks CoLA,SST-2 ...

Normally a checkpoint is evaluated because the trainer's ``electra.checkpoint.committed`` event
triggered the ``evaluate`` deployment (``prefect.yaml``). This scan, deployed hourly, catches
what no event started (no Prefect API when training, server down): every complete checkpoint
under ``RUNS_DIR/*/checkpoints/`` with no ``RUN/eval/step_*/results.json`` yet is evaluated by
the ``evaluate`` flow (a subflow, in this process), oldest first.

Idempotent and overlap-safe:
  * ``results.json`` is written last and atomically, so a crashed evaluation is resumed by the
    next scan (finished seeds are kept) and a second scan with nothing new does nothing;
  * a checkpoint whose evaluation is in progress elsewhere (a live lease on its eval folder:
    the event-triggered run, another scan, a CLI run) is reported ``in_progress`` and left
    alone; ``evaluate`` itself takes the lease atomically, so two scans racing to the same
    checkpoint still evaluate it once;
  * a checkpoint whose results record failed tasks is not retried (bad data would fail again
    every hour); fix the data and run ``evaluate`` on it, which redoes only those tasks.
``prefect.yaml`` also gives the scan deployment a concurrency limit of 1 that cancels a new run
while one is still going (an hourly scan can last longer than an hour).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from prefect import flow, get_run_logger
from prefect.task_runners import ThreadPoolTaskRunner

from electra.finetune import report
from electra.finetune.sources import CheckpointError
from electra.run_layout import CHECKPOINTS, step_dirs
from flows.evaluate import (EVAL_DIR, add_common_args, eval_lease, evaluate,
                            recipe_overrides)


def pending_checkpoints(runs: str | Path) -> list[tuple[Path, Path]]:
    """(step dir, eval dir) for every complete checkpoint without results, oldest first."""
    todo = []
    for run in sorted(p for p in Path(runs).iterdir() if (p / CHECKPOINTS).is_dir()):
        for step in step_dirs(run):
            eval_dir = run / EVAL_DIR / step.name
            if not (eval_dir / report.RESULTS).is_file():
                todo.append((step, eval_dir))
    return todo


@flow(name="evaluate-new-checkpoints", task_runner=ThreadPoolTaskRunner(max_workers=1))
def evaluate_new_checkpoints(runs: str, glue_dir: str | None = None, tasks: str = "",
                             squad_dir: str | None = None, squad_version: str = "1.1",
                             seeds: int | None = None, recipe: dict | None = None,
                             workers: int = 1) -> dict:
    """Evaluate every checkpoint under ``runs`` that has no results yet.

    Returns ``{"evaluated": [step dirs], "in_progress": {step dir: holder}, "skipped": {step
    dir: reason}}``. A checkpoint that cannot be turned into a model (``CheckpointError``) is
    skipped with its reason; any other failure is raised after the remaining checkpoints.
    """
    logger = get_run_logger()
    evaluated, busy, skipped, failed = [], {}, {}, {}
    for step, eval_dir in pending_checkpoints(runs):
        holder = eval_lease(eval_dir).holder()
        if holder is not None:
            logger.info("%s is being evaluated by %s; left alone", step, holder.describe())
            busy[str(step)] = holder.describe()
            continue
        logger.info("evaluating %s -> %s", step, eval_dir)
        try:
            outcome = evaluate(checkpoint=str(step), out=str(eval_dir), glue_dir=glue_dir,
                               tasks=tasks, squad_dir=squad_dir, squad_version=squad_version,
                               seeds=seeds, recipe=recipe, workers=workers)
        except CheckpointError as exc:
            logger.warning("skipped %s: %s", step, exc)
            skipped[str(step)] = str(exc)
            continue
        except Exception as exc:  # noqa: BLE001 - reported below, after the other checkpoints
            logger.error("evaluation of %s failed: %r", step, exc)
            failed[str(step)] = repr(exc)
            continue
        if outcome.get("status") == "in_progress":  # lost the race for the lease
            busy[str(step)] = outcome["holder"]
        else:
            evaluated.append(str(step))
    logger.info("%d new checkpoint(s) evaluated, %d in progress elsewhere, %d skipped",
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
