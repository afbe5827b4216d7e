"""``electra-evaluate`` (``python -m cli.evaluate``): one checkpoint → GLUE/SQuAD scores and a report.

    python -m cli.evaluate --checkpoint RUN [--tasks CoLA,MRPC] [--glue-dir DIR] [--seeds N] [--lr X ...]

The flags are generated from the job (``evaluation.evaluation_job``: ``EvaluationJob`` and one
per fine-tuning recipe field). The job is loaded and its inputs checked before Prefect or any
model starts: an unknown task, a folder that does not exist, a GLUE folder lacking an asked task
(with the ``--tasks`` that evaluates the ones it has), results of another request in the folder,
a path that is no checkpoint, a recipe value out of range. Each is one ``evaluate: error:`` line,
exit status 2. Then, still before the server, the first line on stderr says what will run
(``evaluation.preview``: the checkpoint and step, the model's size and recipe, tasks × seeds,
the folder); results already there for the same request are printed at once, without a server.
Then the ``evaluate`` flow (``flows/evaluate.py``) runs under the run's Prefect server
(``flows.runtime``); its progress lines (stderr) end with the whole evaluation's ETA
(``evaluation.eta``). Prefect is imported only then: the checks and the first line come in
seconds.

Exit status: 0 evaluated (the scores printed, with the report's path); 1 some tasks failed
during the run (what finished is printed and in the report; the line after it names the failed
tasks and the ``--tasks`` that leaves them out); 2 a user error; 3 another run is evaluating
into the same folder; 4 the checkpoint was skipped (deleted before its turn).
"""
from __future__ import annotations

import argparse
import logging
import os
import sys

from cli._errors import fail, quiet_user_errors
from common.config import ConfigError
from evaluation import eval_layout, report
from evaluation.evaluation_job import EvaluationJob, add_flags, job_values
from evaluation.evaluation_runner import EvaluationConflict, EvaluationFailed, EvaluationRunner
from evaluation.glue_tasks import GlueDataError
from evaluation.preview import Preview, preview
from evaluation.sources import CheckpointError
from flows.runtime import RuntimeUnavailable, prefect_runtime

PROG = "evaluate"
USER_ERRORS = (ConfigError, GlueDataError, EvaluationConflict, CheckpointError)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="electra-evaluate", description=__doc__.split("\n")[0].split(": ", 1)[1])
    add_flags(p)
    return p


def one_line(exc: BaseException) -> str | None:
    """The line to log instead of a traceback for what this CLI reports itself (else None)."""
    return str(exc) if isinstance(exc, (*USER_ERRORS, EvaluationFailed)) else None


def print_results(results: dict) -> None:
    """The recipe, the score table (beside the references') and the report's path."""
    references = {name: report.read_results(folder) for name, folder in results.get("reference_dirs", {}).items()}
    print(report.summary_text(results, os.path.join(results["eval_dir"], eval_layout.REPORT),
                              references=references or None))


def main(argv: list[str] | None = None) -> int:
    values = job_values(build_parser().parse_args(argv))
    # what the check below finds (already evaluated, skipped) is said once, by this CLI's lines
    evaluation_log = logging.getLogger("evaluation")
    level = evaluation_log.level
    evaluation_log.setLevel(logging.ERROR)
    try:  # user errors: one line, before Prefect or any model starts
        job = EvaluationJob.load(**values)
        plan = preview(job)
        early = EvaluationRunner(job).check()
    except USER_ERRORS as exc:
        return fail(PROG, exc)
    finally:
        evaluation_log.setLevel(level)
    if early is not None:  # no server needed: the results are there, or the checkpoint is gone
        return print_early(plan, early)
    print(f"{PROG}: {plan.line()}", file=sys.stderr, flush=True)  # before the server: within seconds
    from flows.evaluate import evaluate  # imports Prefect (seconds): after the first line

    quiet_user_errors(one_line, ray=False)
    # Progress of the fine-tuning (per task and seed, step, loss, ETA) on the terminal.
    logging.getLogger("evaluation").setLevel(logging.INFO)
    try:
        with prefect_runtime(PROG):
            results = evaluate(**values)
    except (RuntimeUnavailable, *USER_ERRORS) as exc:
        return fail(PROG, exc)
    except EvaluationFailed as exc:  # what finished is kept: print it before the line that says why
        if eval_layout.is_finished(job.out_dir):
            print_results(report.read_results(job.out_dir))
        return fail(PROG, exc, status=1)
    status = results.get("status")
    if status == "in_progress":
        print(f"{results['out']} is being evaluated by {results['holder']}; nothing done", file=sys.stderr)
        return 3
    if status == "skipped":
        print(f"{results['checkpoint']} was not evaluated: {results['reason']}", file=sys.stderr)
        return 4
    print_results(results)
    return 0


def print_early(plan: Preview, early: dict) -> int:
    """What the check before the server found: results of this request (printed, status 0), or
    a checkpoint gone before its evaluation (status 4, recorded in RUN/eval/skipped.jsonl)."""
    if early.get("status") == "skipped":
        print(f"{early['checkpoint']} was not evaluated: {early['reason']}", file=sys.stderr)
        return 4
    print(f"{PROG}: {plan.what()}: already evaluated in {plan.job.out_dir}", file=sys.stderr)
    print_results(early)
    return 0


if __name__ == "__main__":
    sys.exit(main())
