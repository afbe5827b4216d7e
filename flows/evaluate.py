"""Prefect flow ``evaluate``: one checkpoint → fine-tuned GLUE/SQuAD scores, report, artifacts.

The command line is ``cli/evaluate.py`` (``electra-evaluate``). The flow only orders the
evaluation runner's phases (``evaluation.evaluation_runner.PHASES``, where the folder layout,
resume, merging, failure isolation and the checkpoint hand-off live): ``check`` (already
evaluated, or the checkpoint gone: returned at once), the folder's lease, ``check`` again, one
evaluation slot, then the rest of the list (``claim`` a pinned checkpoint, ``resolve``, ``plan``,
``run``: every unit as a Prefect task, ``publish``, which releases the pin).

One concurrency limit for every evaluation: the Prefect global concurrency limit
``electra-evaluate`` (created with 1 slot on first use; ``prefect gcl update electra-evaluate
--limit N`` for more). Event-triggered runs, the scan's subflows and CLI runs against the same
Prefect server (``PREFECT_API_URL``) all take a slot, so a scan can no longer bypass the
deployment's queue. A crashed holder's slot comes back when its lease expires (Prefect renews it
while the run lives, 300 s). A CLI run with no server configured takes none (its folder lease
still keeps two runs off one checkpoint).

Parallelism inside one evaluation: ``workers`` processes (``ProcessPoolTaskRunner``, spawn)
each fine-tune one (task, seed) at a time with ``cores // workers`` torch threads; on several
GPUs unit k runs on GPU ``k % count``. ``workers=1`` (default) runs in-process, one unit after
another. Results do not depend on ``workers``. Only I/O errors are retried (``OSError``).
"""
from __future__ import annotations

if __name__ == "__main__":  # the old entry `python -m flows.evaluate`: before the imports below
    from flows._script import point_to_command

    point_to_command("evaluate")

import os
import uuid
from contextlib import contextmanager
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.task_runners import ProcessPoolTaskRunner, ThreadPoolTaskRunner

from common.lease import LeaseHeld, LeaseInfo
from evaluation import report
from evaluation.evaluation_job import EvaluationJob
from evaluation.evaluation_runner import (PHASES, EvaluationConflict, EvaluationFailed,  # noqa: F401
                                          EvaluationRunner, Unit, UnitContext, run_unit)

EVAL_LIMIT = "electra-evaluate"  # the global concurrency limit every evaluation takes a slot of


def _flow_run_finished(info: LeaseInfo) -> bool:
    """True when the lease holder's Prefect flow run is in a final state (it crashed or ended
    without releasing). Unknown (no id, another server, API down) is False: pid and heartbeat
    still decide."""
    if not info.flow_run_id:
        return False
    try:
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:
            state = client.read_flow_run(uuid.UUID(info.flow_run_id)).state
        return bool(state and state.is_final())
    except Exception:  # noqa: BLE001 - not provably finished
        return False


@contextmanager
def evaluation_slot(logger):
    """One slot of ``EVAL_LIMIT``, the limit created with 1 slot when missing, on the server the
    run talks to. Evaluations queued on a shared server (``make serve``, deployments) take turns;
    a CLI run on its private server (``flows.runtime``: a database of its own, removed after the
    run) takes an uncontended slot there, which a crash cannot leave taken for anyone else."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.concurrency.sync import concurrency
    from prefect.exceptions import ObjectAlreadyExists, ObjectNotFound
    from prefect.settings import PREFECT_API_URL

    if not PREFECT_API_URL.value():
        yield
        return
    with get_client(sync_client=True) as client:
        try:
            client.read_global_concurrency_limit_by_name(EVAL_LIMIT)
        except ObjectNotFound:
            try:
                client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=EVAL_LIMIT, limit=1))
            except ObjectAlreadyExists:  # another evaluation created it first
                pass
    logger.info("waiting for an evaluation slot (%s)", EVAL_LIMIT)
    with concurrency(EVAL_LIMIT, occupy=1, strict=True, raise_on_lease_renewal_failure=False):
        yield


def _retry_on_io(task_obj, task_run, state) -> bool:
    return isinstance(getattr(state, "data", None), OSError)


# A plain count: the store's failures reach a unit only as whole retry budgets without progress
# (common.retry), and a unit retried keeps nothing of the failed try.
@task(retries=2, retry_delay_seconds=2, retry_condition_fn=_retry_on_io, cache_policy=NO_CACHE,
      task_run_name="{unit.task}")
def unit_task(context: UnitContext, unit: Unit, slot: int = 0) -> dict:
    """One unit (a task over its seeds, or one (task, seed)): fine-tuned, scored and saved."""
    return run_unit(context, unit, slot)


def _init_worker(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def _run_units(runner: EvaluationRunner, units: list[Unit]) -> dict[Unit, Any]:
    """Every unit as a Prefect task; ``{unit: result or the exception}``, all waited for."""
    ctx, workers = runner.context, runner.job.workers
    if workers == 1:  # in-process on the flow's one-thread runner
        futures = {u: unit_task.submit(ctx, u, i) for i, u in enumerate(units)}
        return {u: f.result(raise_on_failure=False) for u, f in futures.items()}
    threads = runner.recipe.num_threads or max(1, (os.cpu_count() or 1) // workers)
    with ProcessPoolTaskRunner(max_workers=workers, initializer=_init_worker,
                               initargs=(threads,)) as pool:
        futures = {u: pool.submit(unit_task, {"context": ctx, "unit": u, "slot": i})
                   for i, u in enumerate(units)}
        return {u: f.result(raise_on_failure=False) for u, f in futures.items()}


@flow(name="evaluate", task_runner=ThreadPoolTaskRunner(max_workers=1))
def evaluate(checkpoint: str, out: str | None = None, glue_dir: str | None = None,
             tasks: str | None = None, squad_dir: str | None = None, squad_version: str = "1.1",
             seeds: int | None = None, recipe: dict | None = None, workers: int = 1,
             reference: str | None = None) -> dict:
    """Fine-tune and score one checkpoint on GLUE tasks (default: CoLA, MRPC, STS-B, RTE from
    $ELECTRA_GLUE_DIR) and SQuAD.

    Returns the results (also when they existed already), ``{"status": "skipped", ...}`` for a
    checkpoint deleted before its evaluation, or ``{"status": "in_progress", ...}`` when another
    live run is evaluating into the same folder (nothing is done then).
    """
    from prefect.runtime import flow_run

    logger = get_run_logger()
    job = EvaluationJob.load(checkpoint=checkpoint, out=out, glue_dir=glue_dir, tasks=tasks,
                             squad_dir=squad_dir, squad_version=squad_version, seeds=seeds,
                             recipe=recipe, workers=workers, reference=reference)
    runner = EvaluationRunner(job, flow_run_id=flow_run.get_id(), is_dead=_flow_run_finished)
    early = runner.check()
    if early is not None:
        return early
    try:
        with runner.lease():
            outcome = runner.drive(PHASES[:1])  # finished meanwhile?
            if outcome is None:
                with evaluation_slot(logger):
                    # claimed only once it runs: a claimed checkpoint is exempt from the trainer's
                    # skip policy, so one waiting for the slot would hold disk past eval_max_pending
                    outcome = runner.drive(PHASES[1:], run_units=lambda units: _run_units(runner, units))
    except LeaseHeld as held:
        return runner.in_progress(held)
    if not runner.published:
        return outcome
    results = outcome
    table = report.markdown_table(results)
    create_markdown_artifact(key="electra-eval", markdown=table,
                             description=f"ELECTRA fine-tuning results for {job.target}")
    logger.info("results for %s in %s", job.target, runner.out)
    runner.raise_failures()
    return results
