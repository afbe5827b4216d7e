"""Prefect flow ``evaluate``: one checkpoint → fine-tuned GLUE/SQuAD scores, report, artifacts.

    python -m flows.evaluate --checkpoint RUN [--tasks CoLA,MRPC] [--glue-dir DIR] [--seeds N]

The flow only orders the evaluation runner's phases (``evaluation.evaluation_runner``,
where the folder layout, resume, merging, failure isolation and the checkpoint hand-off live):
``check`` (already evaluated, or the checkpoint gone: returned at once), the folder's lease,
``claim`` (a pinned checkpoint), one evaluation slot, ``resolve``, ``plan``, every unit as a
Prefect task, ``publish`` (which releases the pin).

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

import argparse
import os
import sys
import uuid
from contextlib import contextmanager
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.task_runners import ProcessPoolTaskRunner, ThreadPoolTaskRunner

from common.lease import LeaseHeld, LeaseInfo
from evaluation import eval_layout, report
from evaluation.evaluation_job import DEFAULT_TASKS, GLUE_DIR_ENV, SQUAD_DIR_ENV, EvaluationJob
from evaluation.evaluation_runner import (EvaluationConflict, EvaluationFailed,  # noqa: F401
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
    """One slot of ``EVAL_LIMIT``, the limit created with 1 slot when missing. Only against a
    Prefect server (``PREFECT_API_URL``): a CLI run without one starts its own temporary server,
    whose slot leases live in that process's memory — a crash there would leave the slot taken
    in the shared database for good, and there is no queue to share anyway."""
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
            early = runner.check()  # finished meanwhile?
            if early is not None:
                return early
            with evaluation_slot(logger):
                # claimed only once it runs: a claimed checkpoint is exempt from the trainer's
                # skip policy, so one waiting for the slot would hold disk past eval_max_pending
                early = runner.claim() or runner.resolve()
                if early is not None:
                    return early
                results = runner.publish(_run_units(runner, runner.plan()))
    except LeaseHeld as held:
        return runner.in_progress(held)
    table = report.markdown_table(results)
    create_markdown_artifact(key="electra-eval", markdown=table,
                             description=f"ELECTRA fine-tuning results for {job.target}")
    logger.info("results for %s in %s", job.target, runner.out)
    runner.raise_failures()
    return results


def add_common_args(p: argparse.ArgumentParser) -> None:
    """Data, task and recipe flags shared by both CLIs."""
    p.add_argument("--glue-dir", help=f"folder in the official GLUE download layout (default: ${GLUE_DIR_ENV})")
    p.add_argument("--tasks", help=f"comma-separated GLUE tasks (default: {','.join(DEFAULT_TASKS)}, "
                   "the four with the smallest training sets; '' for none)")
    p.add_argument("--squad-dir", help=f"folder with train-v<V>.json and dev-v<V>.json (default: ${SQUAD_DIR_ENV})")
    p.add_argument("--squad-version", default="1.1", choices=["1.1", "2.0"], help="SQuAD version")
    p.add_argument("--seeds", type=int, help="fine-tuning seeds per task (median reported; default 10)")
    # recipe knobs (defaults: the paper's recipe for the model's size)
    p.add_argument("--size", choices=["small", "base", "large"], help="recipe size (default: "
                   "from the model's hidden size)")
    p.add_argument("--lr", type=float, help="peak learning rate")
    p.add_argument("--layerwise-lr-decay", type=float, help="LLRD factor (1 disables)")
    p.add_argument("--llrd-variant", choices=["original", "corrected"], help="LLRD depth rule")
    p.add_argument("--optimizer", choices=["original", "adamw"], help="original: ELECTRA's "
                   "AdamWeightDecay, no bias correction (default); adamw: torch.optim.AdamW")
    p.add_argument("--epochs", type=float, help="epochs for every task (default: per task)")
    p.add_argument("--batch-size", type=int, help="training batch size (paper: 32)")
    p.add_argument("--max-seq-len", type=int, help="GLUE max sequence length (paper: 128)")
    p.add_argument("--max-train-examples", type=int, help="cap training examples (smoke runs)")
    p.add_argument("--max-eval-examples", type=int, help="cap dev examples (smoke runs)")
    p.add_argument("--precision", choices=["auto", "fp32", "bf16"],
                   help="bf16 autocast, fp32, or auto (default: bf16 where native: GPU, AMX CPU)")
    p.add_argument("--length-buckets", type=int, help="training batches drawn from chunks of "
                   "N batches sorted by length (default 50; 1: plain random batches)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], help="where to fine-tune")
    p.add_argument("--threads", type=int, dest="num_threads",
                   help="torch CPU threads (1 is fastest for tiny models on a busy machine)")
    p.add_argument("--deepspeed", action="store_true", help="single-process DeepSpeed engine")
    p.add_argument("--workers", type=int, default=1, help="processes fine-tuning (task, seed) "
                   "units in parallel, each with cores/workers threads (one per GPU on GPUs)")


def recipe_overrides(args: argparse.Namespace) -> dict[str, Any]:
    keys = ("size", "lr", "layerwise_lr_decay", "llrd_variant", "optimizer", "epochs",
            "batch_size", "max_seq_len", "max_train_examples", "max_eval_examples", "precision",
            "device", "num_threads", "length_buckets")
    out = {k: getattr(args, k) for k in keys if getattr(args, k) is not None}
    if args.deepspeed:
        out["deepspeed"] = True
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m flows.evaluate", description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", required=True, help="run dir (its newest checkpoint), "
                   "checkpoint step dir or HF export")
    p.add_argument("--out", help="evaluation folder (default: RUN/eval/step_N for a checkpoint "
                   "of a run, <folder>/eval for an HF export)")
    p.add_argument("--reference", help="evaluation folder of the model at random initialisation, "
                   "shown beside every score (default: RUN/eval/random_init when it exists)")
    add_common_args(p)
    return p


def main(argv: list[str] | None = None) -> int:
    from common.config import ConfigError
    from evaluation.glue_tasks import GlueDataError
    from evaluation.sources import CheckpointError

    args = build_parser().parse_args(argv)
    values = dict(checkpoint=args.checkpoint, out=args.out, glue_dir=args.glue_dir,
                  tasks=args.tasks, squad_dir=args.squad_dir, squad_version=args.squad_version,
                  seeds=args.seeds, recipe=recipe_overrides(args), workers=args.workers,
                  reference=args.reference)
    try:  # user errors: one line, before Prefect or any model starts
        EvaluationRunner(EvaluationJob.load(**values)).check()
    except (ConfigError, GlueDataError, EvaluationConflict, CheckpointError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    _log_to_console()
    try:
        results = evaluate(**values)
    except (ConfigError, GlueDataError, EvaluationConflict, CheckpointError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except EvaluationFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    status = results.get("status")
    if status == "in_progress":
        print(f"{results['out']} is being evaluated by {results['holder']}; nothing done", file=sys.stderr)
        return 3
    if status == "skipped":
        print(f"{results['checkpoint']} was not evaluated: {results['reason']}", file=sys.stderr)
        return 4
    references = {name: report.read_results(folder)
                  for name, folder in results.get("reference_dirs", {}).items()}
    print(report.summary_text(results, os.path.join(results["eval_dir"], eval_layout.REPORT),
                              references=references or None))
    return 0


def _log_to_console() -> None:
    """Progress of the fine-tuning (``evaluation``: per task and seed, step, loss, ETA) on
    the terminal: Prefect's console handler prints it once the level lets it through."""
    import logging

    logging.getLogger("evaluation").setLevel(logging.INFO)


if __name__ == "__main__":
    sys.exit(main())
