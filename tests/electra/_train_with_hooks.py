"""``electra/train.py`` with test hooks, for fault injection at a chosen step (no timing races).

    python tests/electra/_train_with_hooks.py [--kill-after-step N] [--kill-in-checkpoint N] TRAIN_ARGS...

SIGKILLs the process right after step N (after its checkpoint, if N is a save step), or inside
the checkpoint commit of step N (DeepSpeed's files written, ``meta.json`` not). The hooks are
the trainer's own parameters (``electra.trainer.TrainHooks``); nothing is read from the
environment inside the trainer.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys

from electra.train import main
from electra.trainer import TrainHooks


def kill_at(target: int | None):
    if target is None:
        return None
    return lambda step: os.kill(os.getpid(), signal.SIGKILL) if step == target else None


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--kill-after-step", type=int)
    p.add_argument("--kill-in-checkpoint", type=int)
    ours, rest = p.parse_known_args()
    sys.exit(main(rest, hooks=TrainHooks(after_step=kill_at(ours.kill_after_step),
                                         before_commit=kill_at(ours.kill_in_checkpoint))))
