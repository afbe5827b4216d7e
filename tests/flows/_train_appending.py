"""``electra/train.py`` during which its corpus is appended to, at a chosen step (no timing race).

    python tests/flows/_train_appending.py --append-after STEP SOURCE CORPUS TRAIN_ARGS...

Right after step ``STEP``, the trainer's ``after_step`` hook runs ``electra-build-corpus --source
SOURCE --out CORPUS --append`` (the real command line, in its own process) and waits for it: the
append commits while the run is alive, between two steps, as a user's append during a long run
would. The hook is the trainer's own parameter (``electra.run.trainer.TrainHooks``).
"""
from __future__ import annotations

import argparse
import subprocess
import sys

from electra.train import main
from electra.run.trainer import TrainHooks

if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--append-after", nargs=3, metavar=("STEP", "SOURCE", "CORPUS"), required=True)
    ours, rest = p.parse_known_args()
    step, source, corpus = ours.append_after

    def after_step(done: int) -> None:
        if done == int(step):
            cmd = [sys.executable, "-m", "cli.build_corpus", "--source", source, "--out", corpus, "--append"]
            out = subprocess.run(cmd, capture_output=True, text=True)
            print(f"append after step {done}: exit {out.returncode}\n{out.stdout}{out.stderr[-3000:]}", flush=True)
            if out.returncode != 0:
                raise SystemExit(f"the append failed: {out.stderr[-2000:]}")

    sys.exit(main(rest, hooks=TrainHooks(after_step=after_step)))
