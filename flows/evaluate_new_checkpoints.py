"""Prefect flow ``evaluate-new-checkpoints``: the scan behind the event trigger.

The command line is ``cli/evaluate_new_checkpoints.py`` (``electra-evaluate-new --runs RUNS_DIR``).

Normally a checkpoint is evaluated because the trainer's ``electra.checkpoint.committed`` event
triggered the ``evaluate`` deployment (``prefect.yaml``). This scan, deployed hourly, catches
what no event started (no Prefect API when training, server down, a queue that fell behind):
every checkpoint ``evaluation.pending`` lists (no results, no recorded skip; newest first in
each run) is evaluated by the ``evaluate`` flow (a subflow).

The runs folder: the deployment's ``runs`` parameter, which ``prefect.yaml`` sets to
``$ELECTRA_RUNS_DIR`` (``make serve`` makes it absolute and creates it; default
``<repository>/runs``). A folder that does not exist ends the run ``Failed`` with the cause and
what to set as the state's message and as an error in the run's logs on the server (the UI and
``prefect flow-run inspect`` show them; ``--watch`` of Prefect 3.8.8 prints only the state's
name), not only as a traceback in the worker's terminal.

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

if __name__ == "__main__":  # the old entry `python -m flows.evaluate_new_checkpoints`: before the imports below
    from flows._script import point_to_command

    point_to_command("evaluate_new_checkpoints")

from prefect import flow, get_run_logger
from prefect.logging.handlers import APILogWorker
from prefect.states import Failed
from prefect.task_runners import ThreadPoolTaskRunner

from common.lease import Lease
from evaluation import eval_layout
from evaluation.evaluation_runner import EvaluationConflict
from evaluation.pending import RunsFolderMissing, pending_checkpoints
from evaluation.sources import CheckpointError
from flows.evaluate import _flow_run_finished, evaluate


@flow(name="evaluate-new-checkpoints", task_runner=ThreadPoolTaskRunner(max_workers=1))
def evaluate_new_checkpoints(runs: str, glue_dir: str | None = None, tasks: str | None = None,
                             squad_dir: str | None = None, squad_version: str = "1.1",
                             seeds: int | None = None, recipe: dict | None = None,
                             workers: int = 1) -> dict:
    """Evaluate every checkpoint under ``runs`` that has no results yet.

    ``runs``: the folder holding run directories (absolute; a relative one is relative to the
    worker's working directory, the repository); the other parameters are the ``evaluate``
    flow's, applied to every checkpoint (``glue_dir``/``squad_dir`` None: the worker's
    ``$ELECTRA_GLUE_DIR``/``$ELECTRA_SQUAD_DIR``). A runs folder that does not exist: the run
    ends ``Failed`` with the cause as its state message.

    Returns ``{"evaluated": [step dirs], "in_progress": {step dir: holder}, "skipped": {step
    dir: reason}}``; any other failure is raised after the remaining checkpoints.
    """
    logger = get_run_logger()
    evaluated, busy, skipped, failed = [], {}, {}, {}
    try:
        pending = pending_checkpoints(runs)
    except RunsFolderMissing as exc:  # the cause where --watch and the UI show it
        logger.error("%s", exc)
        # sent now, before the final state: whoever reads the run's logs once it ended (the UI,
        # a client) finds the line, not a batch still queued when the process exits
        APILogWorker.drain_all(timeout=30)
        return Failed(message=str(exc))
    for step, out in pending:
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
