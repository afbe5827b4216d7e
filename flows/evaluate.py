"""Prefect flows ``evaluate`` and ``evaluate-new-checkpoints``: ordering, fan-out, artifacts.

``evaluate``: checkpoint (run dir, step dir or HF export) → resolve/export the discriminator →
one Prefect task per GLUE task and one for SQuAD (``.submit`` fan-out) → ``results.json``,
``report.html`` + PNGs, GLUE submission TSVs when test files exist → a markdown table artifact.
The fine-tuning itself lives in ``electra.finetune`` and is testable without Prefect.

Isolation and resume: each (task, seed) is saved as soon as it finishes
(``<out>/seeds/<task>/seed<N>.json``; SQuAD as one unit, ``task.json``) under a key of checkpoint,
resolved recipe and data-file hashes. Every GLUE file is parsed before the first fine-tuning
step. A task that fails (bad data: the error names file and line) does not stop the others: every future is waited for, ``results.json`` is written with the
finished tasks plus ``failed: {task: error}``, and then the flow raises ``EvaluationFailed``. A
rerun on the same ``out`` reuses every saved seed and redoes only the failed or missing ones
(``run_id`` in each seed tells which run produced it).

Provenance in ``results.json``: ``code_version`` (git commit or package version), ``data_files``
(sha256 of every data file read), the resolved ``recipe`` (with ``length_caps`` when a length
was cut to the model's positions) and ``run_id``.

``evaluate-new-checkpoints``: scan ``RUNS/*/checkpoints/step_*`` and evaluate each complete
checkpoint that has no ``RUN/eval/step_*/results.json`` yet. ``results.json`` is written last and
atomically, so a crashed evaluation is resumed by the next scan and a second scan does nothing.
A checkpoint whose results record failed tasks is not retried by the scan (bad data would fail
again every hour); fix the data and run ``evaluate`` on it, which redoes only those tasks.

Task runner: a thread pool with ONE worker by default. Seeds fix torch's global RNG, which
threads share, so concurrent fine-tuning in one process would make runs irreproducible (and two
cores gain nothing from it); on a cluster, run the flow with a process/Dask/Ray task runner to
spread tasks over machines. Only I/O errors are retried (``OSError``): a bad file or a diverging
run fails fast with its message.

CLI::

    python -m flows.evaluate --checkpoint PATH --glue-dir DIR --tasks CoLA,SST-2 \\
        [--squad-dir DIR --squad-version 1.1|2.0] [--seeds N] --out DIR [recipe knobs]
    python -m flows.evaluate_new_checkpoints --runs DIR --glue-dir DIR --tasks ... [knobs]
"""
from __future__ import annotations

import argparse
import json
import sys
import uuid
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.task_runners import ThreadPoolTaskRunner

from electra.finetune import glue_submission, report
from electra.finetune.finetune import check_task_data, finetune_glue, recipe_for_model
from electra.finetune.glue_tasks import GlueDataError, check_files, parse_task_list
from electra.finetune.results import (TaskResult, code_version, hash_files, load_task,
                                      resume_key, save_task)
from electra.finetune.sources import CheckpointError, resolve_checkpoint, step_dirs
from electra.finetune.squad_finetune import finetune_squad, squad_files, squad_task_name

EVAL_DIR = "eval"


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


@task(retries=2, retry_delay_seconds=2, retry_condition_fn=_retry_on_io)
def glue_task(name: str, *, model_dir: str, glue_dir: str, recipe: dict, out: str,
              checkpoint: str, run_id: str) -> dict:
    from electra.finetune.recipe import FinetuneRecipe

    result = finetune_glue(name, model_dir=model_dir, glue_dir=glue_dir,
                           recipe=FinetuneRecipe.from_dict(recipe), out_dir=out,
                           checkpoint=checkpoint, run_id=run_id)
    return result.to_dict()


@task(retries=2, retry_delay_seconds=2, retry_condition_fn=_retry_on_io)
def squad_task(*, model_dir: str, squad_dir: str, version: str, recipe: dict, out: str,
               checkpoint: str, run_id: str) -> dict:
    from electra.finetune.recipe import FinetuneRecipe

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
    results.update(failed=dict(failed or {}), run_id=run_id, code_version=code_version(),
                   data_files={p: h for t in tasks.values() for p, h in t.data_files.items()},
                   length_caps=recipe.get("length_caps", {}))
    submission = glue_submission.write_submission(out, tasks) if glue_dir else {}
    results["submission"] = sorted(submission)
    history, metrics_jsonl = [], None
    if resolved["run_dir"]:
        run = Path(resolved["run_dir"])
        metrics_jsonl = run / "metrics.jsonl"
        # this run's other evaluated checkpoints, for the scores-across-checkpoints plot
        history = [report.read_results(p.parent) for p in sorted((run / EVAL_DIR).glob(
            f"*/{report.RESULTS}")) if p.parent.resolve() != Path(out).resolve()] + [results]
    report.write_report(out, results, history=history, metrics_jsonl=metrics_jsonl)
    report.write_results(out, results)  # last: its presence marks a finished evaluation
    return results


@flow(name="evaluate", task_runner=ThreadPoolTaskRunner(max_workers=1))
def evaluate(checkpoint: str, out: str, glue_dir: str | None = None, tasks: str = "",
             squad_dir: str | None = None, squad_version: str = "1.1",
             seeds: int | None = None, recipe: dict | None = None) -> dict:
    """Fine-tune and score one checkpoint on the given GLUE tasks (and SQuAD)."""
    specs = parse_task_list(tasks)
    if specs and not glue_dir:
        raise ValueError(f"--tasks {tasks} needs --glue-dir")
    if not specs and not squad_dir:
        raise ValueError("nothing to evaluate: give --tasks with --glue-dir and/or --squad-dir")
    for spec in specs:  # fail before any fine-tuning when a file is missing
        check_files(spec, glue_dir)
    if squad_dir:
        missing = [str(p) for p in squad_files(squad_dir, squad_version) if not p.is_file()]
        if missing:
            raise FileNotFoundError(f"SQuAD v{squad_version} files missing: {missing} "
                                    f"(expected train-v{squad_version}.json and "
                                    f"dev-v{squad_version}.json in {squad_dir})")
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
    # Parse every GLUE file before the first fine-tuning step: bad data fails its task at once.
    failed: dict[str, str] = {}
    for spec in specs:
        try:
            check_task_data(spec, glue_dir)
        except GlueDataError as exc:
            failed[spec.name] = f"{type(exc).__name__}: {exc}"
    futures = {t.name: glue_task.submit(t.name, glue_dir=glue_dir, **common)
               for t in specs if t.name not in failed}
    if squad_dir:
        futures[squad_task_name(squad_version)] = squad_task.submit(
            squad_dir=squad_dir, version=squad_version, **common)
    # Wait for every task; a failure is recorded, never allowed to discard the finished ones.
    finished = []
    for name, future in futures.items():
        outcome = future.result(raise_on_failure=False)
        if isinstance(outcome, BaseException):
            failed[name] = f"{type(outcome).__name__}: {outcome}"
        else:
            finished.append(outcome)
    results = write_outputs(resolved, finished, glue_dir=glue_dir, recipe=rec, out=out,
                            failed=failed, run_id=run_id)
    table = report.markdown_table(results)
    create_markdown_artifact(key="electra-eval", markdown=table,
                             description=f"ELECTRA fine-tuning results for {checkpoint}")
    logger = get_run_logger()
    logger.info("results for %s:\n%s", checkpoint, table)
    if failed:
        for name, error in failed.items():
            logger.error("task %s failed: %s", name, error)
        raise EvaluationFailed(f"{len(failed)} task(s) failed (results.json in {out} holds the "
                               f"others; rerun to redo only these): {failed}")
    return results


def pending_checkpoints(runs: str | Path) -> list[tuple[Path, Path]]:
    """(step dir, eval dir) for every complete checkpoint without results, oldest first."""
    todo = []
    for run in sorted(p for p in Path(runs).iterdir() if (p / "checkpoints").is_dir()):
        for step in step_dirs(run):
            eval_dir = run / EVAL_DIR / step.name
            if not (eval_dir / report.RESULTS).is_file():
                todo.append((step, eval_dir))
    return todo


@flow(name="evaluate-new-checkpoints", task_runner=ThreadPoolTaskRunner(max_workers=1))
def evaluate_new_checkpoints(runs: str, glue_dir: str | None = None, tasks: str = "",
                             squad_dir: str | None = None, squad_version: str = "1.1",
                             seeds: int | None = None, recipe: dict | None = None) -> dict:
    """Evaluate every checkpoint under ``runs`` that has no results yet.

    Returns ``{"evaluated": [step dirs], "skipped": {step dir: reason}}``. A checkpoint that
    cannot be turned into a model (``CheckpointError``) is skipped with its reason; any other
    failure is raised after the remaining checkpoints have been evaluated.
    """
    logger = get_run_logger()
    evaluated, skipped, failed = [], {}, {}
    for step, eval_dir in pending_checkpoints(runs):
        logger.info("evaluating %s -> %s", step, eval_dir)
        try:
            evaluate(checkpoint=str(step), out=str(eval_dir), glue_dir=glue_dir, tasks=tasks,
                     squad_dir=squad_dir, squad_version=squad_version, seeds=seeds,
                     recipe=recipe)
            evaluated.append(str(step))
        except CheckpointError as exc:
            logger.warning("skipped %s: %s", step, exc)
            skipped[str(step)] = str(exc)
        except Exception as exc:  # noqa: BLE001 - reported below, after the other checkpoints
            logger.error("evaluation of %s failed: %r", step, exc)
            failed[str(step)] = repr(exc)
    logger.info("%d new checkpoint(s) evaluated, %d skipped", len(evaluated), len(skipped))
    if failed:
        raise RuntimeError(f"{len(failed)} checkpoint evaluation(s) failed: {failed}")
    return {"evaluated": evaluated, "skipped": skipped}


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
    p.add_argument("--precision", choices=["fp32", "bf16"], help="bf16 autocast or fp32")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], help="where to fine-tune")
    p.add_argument("--threads", type=int, dest="num_threads",
                   help="torch CPU threads (1 is fastest for tiny models on a busy machine)")
    p.add_argument("--deepspeed", action="store_true", help="single-process DeepSpeed engine")


def recipe_overrides(args: argparse.Namespace) -> dict[str, Any]:
    keys = ("size", "lr", "layerwise_lr_decay", "llrd_variant", "epochs", "batch_size",
            "max_seq_len", "max_train_examples", "max_eval_examples", "precision", "device",
            "num_threads")
    out = {k: getattr(args, k) for k in keys if getattr(args, k) is not None}
    if args.deepspeed:
        out["deepspeed"] = True
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m flows.evaluate", description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", required=True, help="run dir, checkpoint step dir or HF export")
    p.add_argument("--out", required=True, help="evaluation directory to write")
    add_common_args(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    results = evaluate(checkpoint=args.checkpoint, out=args.out, glue_dir=args.glue_dir,
                       tasks=args.tasks, squad_dir=args.squad_dir,
                       squad_version=args.squad_version, seeds=args.seeds,
                       recipe=recipe_overrides(args))
    print(report.markdown_table(results))
    print(json.dumps({"results": str(Path(args.out) / report.RESULTS)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
