"""``electra/train.py`` whose corpus grows at chosen steps (no timing races).

    python tests/electra/_train_growing.py --grow STEP CORPUS STAGE [--grow ...] TRAIN_ARGS...

Right after step ``STEP`` (its checkpoint written, if it is a save step) installs stage ``STAGE``
of the growing corpus ``CORPUS`` (``tests.electra._growing_corpus``) as its manifest (rank 0 of
several: one committer, which alone reads the manifest at an epoch start): the corpus
grew between that step and the next, as an append committing then would make it grow. The hook is
the trainer's own parameter (``electra.run.trainer.TrainHooks``).
"""
from __future__ import annotations

import argparse
import os
import sys

from electra.train import main
from electra.run.trainer import TrainHooks
from tests.electra._growing_corpus import install

if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--grow", nargs=3, action="append", default=[], metavar=("STEP", "CORPUS", "STAGE"))
    ours, rest = p.parse_known_args()
    plan = {int(step): (corpus, int(stage)) for step, corpus, stage in ours.grow}

    def after_step(step: int) -> None:
        # one committer, as one append is: rank 0, which alone reads the manifest at epoch starts
        if step in plan and os.environ.get("RANK", "0") == "0":
            install(*plan[step])

    sys.exit(main(rest, hooks=TrainHooks(after_step=after_step)))
