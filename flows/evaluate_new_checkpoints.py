"""CLI of the ``evaluate-new-checkpoints`` flow (defined in ``flows/evaluate.py``).

    python -m flows.evaluate_new_checkpoints --runs RUNS_DIR --glue-dir DIR --tasks CoLA,SST-2 ...

Evaluates every complete checkpoint under ``RUNS_DIR/*/checkpoints/`` that has no
``RUN/eval/step_*/results.json`` yet; a second call with nothing new does nothing. An
interrupted evaluation is resumed (finished seeds are kept); one whose results record failed
tasks is left for a manual ``python -m flows.evaluate`` after the data is fixed. The trainer
can call this after saving a checkpoint; ``prefect.yaml`` deploys the same flow on a schedule.
"""
from __future__ import annotations

import argparse
import json
import sys

from flows.evaluate import add_common_args, evaluate_new_checkpoints, recipe_overrides


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m flows.evaluate_new_checkpoints",
                                description="evaluate checkpoints that have no results yet")
    p.add_argument("--runs", required=True, help="folder holding run directories")
    add_common_args(p)
    args = p.parse_args(argv)
    outcome = evaluate_new_checkpoints(runs=args.runs, glue_dir=args.glue_dir, tasks=args.tasks,
                                    squad_dir=args.squad_dir, squad_version=args.squad_version,
                                    seeds=args.seeds, recipe=recipe_overrides(args))
    print(json.dumps(outcome, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
