"""``electra-evaluate-new`` (``python -m cli.evaluate_new_checkpoints``): evaluate every checkpoint
under a runs folder that has no results yet (the hourly scan, once, from the command line).

    python -m cli.evaluate_new_checkpoints --runs RUNS_DIR [--tasks CoLA,MRPC] [--glue-dir DIR]

The flags: ``--runs`` (``ScanRequest``) and the evaluation job's data, task and recipe flags
(``evaluation.evaluation_job``; not ``--checkpoint``, ``--out`` or ``--reference``, which the
scan decides per checkpoint). A runs folder that does not exist, a bad task or data folder (a
GLUE folder lacking a task: the ``--tasks`` it can do), or a recipe value out of range is one
``evaluate-new-checkpoints: error:`` line with exit status 2, before Prefect starts. Then, still
before the server, the first line on stderr says what waits (``evaluation.preview.scan_line``:
how many checkpoints, which, tasks × seeds each); the progress lines follow as for
``electra-evaluate``. Prints the outcome as JSON on stdout.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import dataclass, field

from cli._errors import fail
from common.config import ConfigError
from evaluation.evaluation_job import EvaluationJob, add_flags, job_values
from evaluation.glue_tasks import GlueDataError
from evaluation.pending import RunsFolderMissing, pending_checkpoints
from evaluation.preview import scan_line
from flows.runtime import RuntimeUnavailable, prefect_runtime

PROG = "evaluate-new-checkpoints"
PER_CHECKPOINT = ("checkpoint", "out", "reference")  # the scan decides these


@dataclass(frozen=True)
class ScanRequest:
    runs: str = field(metadata={"help": "folder holding run directories (RUN/checkpoints/step_N)"})


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="electra-evaluate-new",
                                description="evaluate checkpoints that have no results yet")
    flags = add_flags(p, skip=PER_CHECKPOINT)
    flags.fields(ScanRequest)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    values = job_values(args)
    try:  # the same checks an evaluation makes, once, before Prefect starts
        pending = pending_checkpoints(values["runs"])
        job = EvaluationJob.check_data(**{k: v for k, v in values.items() if k != "runs"})
        line = scan_line(values["runs"], pending, job)
    except (RunsFolderMissing, ConfigError, GlueDataError) as exc:
        return fail(PROG, exc)
    print(f"{PROG}: {line}", file=sys.stderr, flush=True)  # before the server: within seconds
    from flows.evaluate_new_checkpoints import evaluate_new_checkpoints  # imports Prefect

    # progress of the fine-tuning (per task and seed, step, loss, ETA) on the terminal
    logging.getLogger("evaluation").setLevel(logging.INFO)
    try:
        with prefect_runtime(PROG):
            outcome = evaluate_new_checkpoints(**values)
    except RuntimeUnavailable as exc:
        return fail(PROG, exc)
    print(json.dumps(outcome, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
