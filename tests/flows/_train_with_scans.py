"""``electra/train.py`` whose ``after_step`` hook runs the evaluation scan at chosen steps.

    python tests/flows/_train_with_scans.py --scan-after 20,50 --scan-args JSON --scan-log FILE TRAIN_ARGS...

The scan (``flows.evaluate_new_checkpoints``, against the Prefect API in ``PREFECT_API_URL``)
runs in the trainer's process, synchronously, right after the checkpoint of those steps is
committed: evaluation "falls behind" at exactly the chosen steps, with no timing race. Each
scan's outcome is appended to ``--scan-log`` as one JSON line ``{"after_step", "outcome"}``.
"""
from __future__ import annotations

import argparse
import json
import sys

from electra.train import main
from electra.run.trainer import TrainHooks


def scan_at(steps: set[int], kwargs: dict, log_path: str):
    def hook(step: int) -> None:
        if step not in steps:
            return
        from flows.evaluate_new_checkpoints import evaluate_new_checkpoints

        outcome = evaluate_new_checkpoints(**kwargs)
        with open(log_path, "a") as f:
            f.write(json.dumps({"after_step": step, "outcome": outcome}) + "\n")
    return hook


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--scan-after", required=True)
    p.add_argument("--scan-args", required=True)
    p.add_argument("--scan-log", required=True)
    ours, rest = p.parse_known_args()
    steps = {int(s) for s in ours.scan_after.split(",")}
    sys.exit(main(rest, hooks=TrainHooks(after_step=scan_at(steps, json.loads(ours.scan_args),
                                                            ours.scan_log))))
