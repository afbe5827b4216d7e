"""Prefect flow ``evaluate``: one checkpoint → fine-tuned GLUE/SQuAD scores, report, artifacts.

``evaluate``: checkpoint (run dir, step dir or HF export) → resolve/export the discriminator →
one Prefect task per GLUE task (per (task, seed) with ``workers`` > 1) and one for SQuAD → ``results.json``, ``report.html`` +
PNGs, GLUE submission TSVs when test files exist → a markdown table artifact. The fine-tuning
itself lives in ``electra.finetune`` and is testable without Prefect. ``out`` defaults to
``RUN/eval/step_N`` for a checkpoint ``RUN/checkpoints/step_N`` (what the event trigger and the
scan of ``flows/evaluate_new_checkpoints.py`` use).

One evaluation per output folder at a time: the flow first takes a lease on ``out``
(``common.lease``: ``out/lease.json`` with host, pid and the Prefect flow-run id, kept alive by a
heartbeat). If another live run holds it — the event-triggered run and the hourly scan reached
the same checkpoint — this run returns ``{"status": "in_progress", ...}`` at once instead of
redoing hours of work into the same folder. A holder that crashed is noticed by its pid (same
host), its flow run's final state (Prefect API) or an expired heartbeat, and is taken over.

Isolation and resume: each (task, seed) is saved as soon as it finishes
(``<out>/seeds/<task>/seed<N>.json``; SQuAD as one unit, ``task.json``) under a key of
checkpoint, resolved recipe and data-file hashes. Every GLUE and SQuAD file is parsed before the
first fine-tuning step. A task that fails (bad data: the error names file and line) does not stop
the others: every future is waited for, ``results.json`` is written with the finished tasks plus
``failed: {task: error}``, and then the flow raises ``EvaluationFailed``. A rerun on the same
``out`` reuses every saved seed and redoes only the failed or missing ones (``run_id`` in each
seed tells which run produced it).

Parallelism: ``workers`` processes (Prefect's ``ProcessPoolTaskRunner``, spawn) each fine-tune
one (task, seed) at a time with ``cores // workers`` torch threads; on a machine with several
GPUs unit k runs on GPU ``k % count``. ``workers=1`` (default) runs in-process, one unit after
another: seeds fix torch's global RNG, which threads would share. Which is faster depends on the
model: many small ones gain from processes, a Base/Large model wants all cores (or a GPU) each.
Results do not depend on ``workers``. Only I/O errors are retried (``OSError``): a bad file or a
diverging run fails fast with its message.

Provenance in ``results.json``: ``code_version`` (git commit or package version), ``data_files``
(sha256 of every data file read), the resolved ``recipe`` (with ``length_caps`` when a length
was cut to the model's positions) and ``run_id``.

CLI::

    python -m flows.evaluate --checkpoint PATH --glue-dir DIR --tasks CoLA,SST-2 \\
        [--squad-dir DIR --squad-version 1.1|2.0] [--seeds N] [--out DIR] [--workers N] [knobs]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.task_runners import ProcessPoolTaskRunner, ThreadPoolTaskRunner

from common.lease import Lease, LeaseHeld, LeaseInfo
from electra import run_layout as layout
from electra.finetune import glue_submission, report
from electra.finetune.finetune import check_task_data, finetune_glue, recipe_for_model
from electra.finetune.glue_tasks import GlueDataError, check_files, parse_task_list
from electra.finetune.results import (TaskResult, code_version, hash_files, load_task,
                                      resume_key, save_task)
from electra.finetune.sources import resolve_checkpoint
from electra.finetune.squad_data import SquadDataError
from electra.finetune.squad_finetune import (check_squad_data, finetune_squad, squad_files,
                                             squad_task_name)

EVAL_DIR = layout.EVAL
LEASE = "lease.json"


def default_out(checkpoint: str | Path) -> Path:
    """``RUN/eval/step_N`` for a checkpoint ``RUN/checkpoints/step_N``."""
    step = Path(checkpoint).resolve()
    run = layout.run_dir_of(step)
    if run is None or layout.step_of(step) is None:
        raise ValueError(f"--out is needed: {checkpoint} is not a RUN/{layout.CHECKPOINTS}/step_N folder")
    return layout.eval_dir(run, step.name)


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


def eval_lease(out: str | Path, *, flow_run_id: str | None = None) -> Lease:
    return Lease(Path(out) / LEASE, flow_run_id=flow_run_id, is_dead=_flow_run_finished,
                 note="evaluate")


def _retry_on_io(task_obj, task_run, state) -> bool:
    exc = getattr(state, "data", None)
    return isinstance(exc, OSError)


@task(retries=2, retry_delay_seconds=2, retry_condition_fn=_retry_on_io)
def resolve(checkpoint: str, export_dir: str) -> dict[str, Any]:
    r = resolve_checkpoint(checkpoint, export_dir=export_dir)
    return {"checkpoint": r.checkpoint, "model_dir": str(r.model_dir), "source": r.source,
            "step": r.step, "run_dir": str(r.run_dir) if r.run_dir else None, "meta": r.meta}


class EvaluationFailed(RuntimeError):
    """Some tasks failed; ``results.json`` holds the others and the errors."""


def _place(slot: int) -> None:
    """Unit ``slot``'s GPU when there are several (one unit per GPU at a time with workers =
    GPUs); a no-op on CPU and on one GPU."""
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() > 1:
        torch.cuda.set_device(slot % torch.cuda.device_count())


def _init_worker(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


@task(retries=2, retry_delay_seconds=2, retry_condition_fn=_retry_on_io)
def glue_seed(name: str, seed: int, slot: int = 0, *, model_dir: str, glue_dir: str,
              recipe: dict, out: str, checkpoint: str, run_id: str) -> dict:
    """One (task, seed): fine-tuned, scored and saved under ``out/seeds`` (see finetune_glue)."""
    from electra.finetune.recipe import FinetuneRecipe

    _place(slot)
    result = finetune_glue(name, model_dir=model_dir, glue_dir=glue_dir,
                           recipe=FinetuneRecipe.from_dict(recipe), out_dir=out,
                           checkpoint=checkpoint, run_id=run_id, only_seeds=[seed])
    seed_result = result.seeds[0]
    return {"seed": seed_result.seed, "metrics": seed_result.metrics, "run_id": seed_result.run_id}


@task(retries=2, retry_delay_seconds=2, retry_condition_fn=_retry_on_io)
def glue_task(name: str, *, model_dir: str, glue_dir: str, recipe: dict, out: str,
              checkpoint: str, run_id: str, slot: int = 0) -> dict:
    """A task over all its seeds (seeds already saved are reused, the others fine-tuned)."""
    from electra.finetune.recipe import FinetuneRecipe

    _place(slot)
    result = finetune_glue(name, model_dir=model_dir, glue_dir=glue_dir,
                           recipe=FinetuneRecipe.from_dict(recipe), out_dir=out,
                           checkpoint=checkpoint, run_id=run_id)
    return result.to_dict()


@task(retries=2, retry_delay_seconds=2, retry_condition_fn=_retry_on_io)
def squad_task(*, model_dir: str, squad_dir: str, version: str, recipe: dict, out: str,
               checkpoint: str, run_id: str, slot: int = 0) -> dict:
    from electra.finetune.recipe import FinetuneRecipe

    _place(slot)
    data_files = hash_files(list(squad_files(squad_dir, version)))
    key = resume_key(checkpoint=checkpoint, recipe=recipe, data_files=data_files)
    done = load_task(out, squad_task_name(version), key=key)
    if done is not None:  # SQuAD resumes as one unit (its seeds are not saved one by one)
        return done.to_dict()
    result = finetune_squad(model_dir=model_dir, squad_dir=squad_dir, version=version,
                            recipe=FinetuneRecipe.from_dict(recipe), out_dir=out)
    result.data_files = data_files
    for seed in result.seeds:
        seed.run_id = run_id
    save_task(out, result, key=key)
    return result.to_dict()


@task(retries=2, retry_delay_seconds=2, retry_condition_fn=_retry_on_io)
def write_outputs(resolved: dict, task_results: list[dict], *, glue_dir: str | None,
                  recipe: dict, out: str, failed: dict[str, str] | None = None,
                  run_id: str = "") -> dict:
    tasks = {d["task"]: TaskResult.from_dict(d) for d in task_results}
    results = report.build_results(checkpoint=resolved["checkpoint"],
                                   model_dir=resolved["model_dir"], step=resolved["step"],
                                   meta={**resolved["meta"], "source": resolved["source"]},
                                   recipe=recipe, tasks=tasks)
    from electra.finetune.loop import resolve_device, resolve_precision
    from electra.finetune.recipe import FinetuneRecipe

    rec = FinetuneRecipe.from_dict(recipe)
    results.update(failed=dict(failed or {}), run_id=run_id, code_version=code_version(),
                   precision=resolve_precision(rec, resolve_device(rec)),
                   data_files={p: h for t in tasks.values() for p, h in t.data_files.items()},
                   length_caps=recipe.get("length_caps", {}))
    submission = glue_submission.write_submission(out, tasks) if glue_dir else {}
    results["submission"] = sorted(submission)
    history, metrics_jsonl = [], None
    if resolved["run_dir"]:
        run = Path(resolved["run_dir"])
        metrics_jsonl = run / layout.METRICS
        # this run's other evaluated checkpoints, for the scores-across-checkpoints plot
        history = [report.read_results(p.parent) for p in sorted((run / EVAL_DIR).glob(
            f"*/{report.RESULTS}")) if p.parent.resolve() != Path(out).resolve()] + [results]
    curve = report.read_loss_curve(metrics_jsonl) if metrics_jsonl else None
    if curve is not None and curve.skipped:  # cut/corrupt lines: counted, shown in the report
        results["metrics_jsonl_skipped"] = curve.summary()
    report.write_report(out, results, history=history, loss_curve=curve)
    report.write_results(out, results)  # last: its presence marks a finished evaluation
    return results


@flow(name="evaluate", task_runner=ThreadPoolTaskRunner(max_workers=1))
def evaluate(checkpoint: str, out: str | None = None, glue_dir: str | None = None, tasks: str = "",
             squad_dir: str | None = None, squad_version: str = "1.1",
             seeds: int | None = None, recipe: dict | None = None, workers: int = 1) -> dict:
    """Fine-tune and score one checkpoint on the given GLUE tasks (and SQuAD).

    Returns the results, or ``{"status": "in_progress", ...}`` when another live run is
    evaluating into the same ``out`` (nothing is done then).
    """
    specs = parse_task_list(tasks)
    if specs and not glue_dir:
        raise ValueError(f"--tasks {tasks} needs --glue-dir")
    if not specs and not squad_dir:
        raise ValueError("nothing to evaluate: give --tasks with --glue-dir and/or --squad-dir")
    if workers < 1:
        raise ValueError(f"workers={workers}: must be >= 1")
    for spec in specs:  # fail before any fine-tuning when a file is missing
        check_files(spec, glue_dir)
    if squad_dir:
        missing = [str(p) for p in squad_files(squad_dir, squad_version) if not p.is_file()]
        if missing:
            raise FileNotFoundError(f"SQuAD v{squad_version} files missing: {missing} "
                                    f"(expected train-v{squad_version}.json and "
                                    f"dev-v{squad_version}.json in {squad_dir})")
    out = str(out or default_out(checkpoint))
    logger = get_run_logger()
    from prefect.runtime import flow_run

    lease = eval_lease(out, flow_run_id=flow_run.get_id())
    try:
        lease.__enter__()
    except LeaseHeld as held:
        logger.warning("not evaluating %s: %s", checkpoint, held)
        return {"status": "in_progress", "checkpoint": checkpoint, "out": out,
                "holder": held.info.describe()}
    try:
        return _evaluate(checkpoint, out, specs=specs, glue_dir=glue_dir, squad_dir=squad_dir,
                         squad_version=squad_version, seeds=seeds, recipe=recipe,
                         workers=workers, logger=logger)
    finally:
        lease.__exit__()


def _evaluate(checkpoint: str, out: str, *, specs, glue_dir, squad_dir, squad_version, seeds,
              recipe, workers: int, logger) -> dict:
    Path(out).mkdir(parents=True, exist_ok=True)
    resolved = resolve(checkpoint, str(Path(out) / "model"))
    overrides = dict(recipe or {})
    if seeds is not None:
        overrides["num_seeds"] = seeds
    recipe_obj = recipe_for_model(resolved["model_dir"], **overrides)
    rec = recipe_obj.to_dict()
    run_id = uuid.uuid4().hex[:12]
    common = dict(model_dir=resolved["model_dir"], recipe=rec, out=out,
                  checkpoint=resolved["checkpoint"], run_id=run_id)
    # Parse every data file before the first fine-tuning step: bad data fails its task at once.
    failed: dict[str, str] = {}
    for spec in specs:
        try:
            check_task_data(spec, glue_dir)
        except GlueDataError as exc:
            failed[spec.name] = f"{type(exc).__name__}: {exc}"
    squad_name = squad_task_name(squad_version)
    if squad_dir:
        try:
            check_squad_data(squad_dir, squad_version)
        except SquadDataError as exc:
            failed[squad_name] = f"{type(exc).__name__}: {exc}"
    # One unit per task in-process (its files are read and tokenised once for all seeds); one
    # per (task, seed) across worker processes, each task then assembled from its saved seeds.
    per_seed = workers > 1
    units: dict[tuple[str, int], tuple[Any, dict]] = {}
    for spec in (s for s in specs if s.name not in failed):
        if not per_seed:
            units[(spec.name, -1)] = (glue_task, dict(name=spec.name, glue_dir=glue_dir, **common))
            continue
        for seed in recipe_obj.seeds:
            units[(spec.name, seed)] = (glue_seed, dict(name=spec.name, seed=seed,
                                                        glue_dir=glue_dir, **common))
    if squad_dir and squad_name not in failed:
        units[(squad_name, -1)] = (squad_task, dict(squad_dir=squad_dir, version=squad_version,
                                                    **common))
    outcomes = _run_units(units, workers=workers, threads=recipe_obj.num_threads)
    # A failure is recorded, never allowed to discard the finished ones.
    finished = []
    for (name, seed), outcome in outcomes.items():
        if isinstance(outcome, BaseException):
            failed.setdefault(name, f"{type(outcome).__name__}: {outcome}"
                              + (f" (seed {seed})" if seed >= 0 else ""))
        elif seed < 0:
            finished.append(outcome)
    for spec in specs if per_seed else ():  # from its saved seeds (all done: nothing redone)
        if spec.name not in failed:
            finished.append(glue_task(spec.name, glue_dir=glue_dir, **common))
    results = write_outputs(resolved, finished, glue_dir=glue_dir, recipe=rec, out=out,
                            failed=failed, run_id=run_id)
    table = report.markdown_table(results)
    create_markdown_artifact(key="electra-eval", markdown=table,
                             description=f"ELECTRA fine-tuning results for {checkpoint}")
    logger.info("results for %s:\n%s", checkpoint, table)
    if failed:
        for name, error in failed.items():
            logger.error("task %s failed: %s", name, error)
        raise EvaluationFailed(f"{len(failed)} task(s) failed (results.json in {out} holds the "
                               f"others; rerun to redo only these): {failed}")
    return results


def _run_units(units: dict[tuple[str, int], tuple[Any, dict]], *, workers: int,
               threads: int | None) -> dict[tuple[str, int], Any]:
    """Run every unit; ``{key: result or the exception}``, waiting for all of them."""
    if workers == 1:  # in-process on the flow's one-thread runner
        futures = {key: fn.submit(slot=i, **kw) for i, (key, (fn, kw)) in enumerate(units.items())}
        return {key: f.result(raise_on_failure=False) for key, f in futures.items()}
    threads = threads or max(1, (os.cpu_count() or 1) // workers)
    with ProcessPoolTaskRunner(max_workers=workers, initializer=_init_worker,
                               initargs=(threads,)) as runner:
        futures = {key: runner.submit(fn, {"slot": i, **kw})
                   for i, (key, (fn, kw)) in enumerate(units.items())}
        return {key: f.result(raise_on_failure=False) for key, f in futures.items()}


def add_common_args(p: argparse.ArgumentParser) -> None:
    """Data, task and recipe flags shared by both CLIs."""
    # what to evaluate on
    p.add_argument("--glue-dir", help="folder in the official GLUE download layout")
    p.add_argument("--tasks", default="", help="comma-separated GLUE tasks, e.g. CoLA,SST-2")
    p.add_argument("--squad-dir", help="folder with train-v<V>.json and dev-v<V>.json")
    p.add_argument("--squad-version", default="1.1", choices=["1.1", "2.0"], help="SQuAD version")
    p.add_argument("--seeds", type=int, help="fine-tuning seeds per task (median reported)")
    # recipe knobs (defaults: the paper's recipe for the model's size)
    p.add_argument("--size", choices=["small", "base", "large"], help="recipe size (default: "
                   "from the model's hidden size)")
    p.add_argument("--lr", type=float, help="peak learning rate")
    p.add_argument("--layerwise-lr-decay", type=float, help="LLRD factor (1 disables)")
    p.add_argument("--llrd-variant", choices=["original", "corrected"], help="LLRD depth rule")
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
    keys = ("size", "lr", "layerwise_lr_decay", "llrd_variant", "epochs", "batch_size",
            "max_seq_len", "max_train_examples", "max_eval_examples", "precision", "device",
            "num_threads", "length_buckets")
    out = {k: getattr(args, k) for k in keys if getattr(args, k) is not None}
    if args.deepspeed:
        out["deepspeed"] = True
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m flows.evaluate", description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", required=True, help="run dir, checkpoint step dir or HF export")
    p.add_argument("--out", help="evaluation directory to write (default for a checkpoint "
                   "RUN/checkpoints/step_N: RUN/eval/step_N)")
    add_common_args(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = args.out or str(default_out(args.checkpoint))
    results = evaluate(checkpoint=args.checkpoint, out=out, glue_dir=args.glue_dir,
                       tasks=args.tasks, squad_dir=args.squad_dir,
                       squad_version=args.squad_version, seeds=args.seeds,
                       recipe=recipe_overrides(args), workers=args.workers)
    if results.get("status") == "in_progress":
        print(f"{out} is being evaluated by {results['holder']}; nothing done", file=sys.stderr)
        return 3
    print(report.markdown_table(results))
    print(json.dumps({"results": str(Path(out) / report.RESULTS)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
