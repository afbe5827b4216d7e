"""``electra/train.py`` with test hooks, for fault injection at a chosen point (no timing races).

    python tests/electra/_train_with_hooks.py [--kill-after-step N] [--kill-in-checkpoint N]
        [--kill-in-save N] [--kill-in-resume] [--kill-group] TRAIN_ARGS...

SIGKILLs the process right after step N (after its checkpoint, if N is a save step), inside the
checkpoint commit of step N (DeepSpeed's files and the sums written, ``meta.json`` not), inside
the save of step N (DeepSpeed's files written, the RNG file, sums and barrier not), or in the
resume (DeepSpeed's load of the checkpoint done, no step run). ``--kill-group``: SIGKILL the
whole process group instead (the deepspeed launcher and all its ranks, as a node failure would;
start the command in its own session). The hooks are the trainer's own parameters
(``electra.run.trainer.TrainHooks``); nothing is read from the environment inside the trainer.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys

from electra.train import main
from electra.run.trainer import TrainHooks


def _kill(group: bool) -> None:
    if group:
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def kill_at(target: int | None, group: bool = False):
    if target is None:
        return None
    return lambda step: _kill(group) if step == target else None


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--kill-after-step", type=int)
    p.add_argument("--kill-in-checkpoint", type=int)
    p.add_argument("--kill-in-save", type=int)
    p.add_argument("--kill-in-resume", action="store_true")
    p.add_argument("--kill-group", action="store_true")
    ours, rest = p.parse_known_args()
    g = ours.kill_group
    sys.exit(main(rest, hooks=TrainHooks(after_step=kill_at(ours.kill_after_step, g),
                                         before_commit=kill_at(ours.kill_in_checkpoint, g),
                                         in_save=kill_at(ours.kill_in_save, g),
                                         in_resume=(lambda step: _kill(g)) if ours.kill_in_resume else None)))
