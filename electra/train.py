"""ELECTRA pre-training on DeepSpeed, streaming the corpus shards; resumes exactly, on any number of ranks.

    deepspeed [--num_gpus N | --hostfile H] electra/train.py --config large --data CORPUS --out RUN_DIR \
        [--data CORPUS2 ... --set data.weights=[1,3]] [--init-from LOCATION [--resume-schedule]] \
        [--max-steps N] [--save-every N] [--seed N] [--micro-batch N] [--set section.key=value ...]
    deepspeed [...] --module electra.train --config ...   # the same, as a module
    python -m electra.train ...  |  electra-train ...       # one process, the same code path

``--config`` is a preset by name (``tiny``, ``mini``, ``small``, ``base``, ``large``; ``.json``
optional) or a config file. This file is only the command line: the job it builds
(``electra.run.job``) goes through the runner's phases (``electra.run.runner``).
User errors (a bad key, a missing corpus, an impossible batch split, a corpus smaller than one
batch, a refused resume, a checkpoint damaged after its save) are printed as one line on stderr,
by rank 0 only, with exit status 2; ``--debug`` shows the traceback instead. They are found
before any distributed start-up, except, with several ranks, those of the corpus (only rank 0
reads it, and its error reaches the other ranks once the process group exists,
``electra.run.shared_plan``) and a damaged checkpoint (found in the resume's load, where the ranks
agree on it: ``electra.checkpoint.sums``).

Run as a file, Python puts this file's folder (``electra/``) first on ``sys.path``, where the
package's module names (``config``, ``data``, ``model``, ...) would shadow top-level modules of
the same name for every import that follows; that entry is dropped. ``electra`` itself is
importable because the project is installed (editable); no path is added.
"""
from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, "") and sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import argparse  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402

from electra.run.job import add_flags, job_from_args  # noqa: E402

log = logging.getLogger("electra.train")
PROG = "electra-train"


def build_parser() -> argparse.ArgumentParser:
    """The job's flags (``electra.run.job.add_flags``, generated from its dataclasses) and
    the process's own: ``--debug`` and the launcher's ``--local_rank``."""
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    add_flags(p)
    p.add_argument("--debug", action="store_true", help="show the traceback of a user error")
    p.add_argument("--local_rank", type=int, default=-1, help="set by the deepspeed launcher")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def user_errors() -> tuple[type[BaseException], ...]:
    """What the resolve phase raises for a user's mistake (a key, a path, a corpus, a resume)."""
    from common import storage
    from electra.data.corpus import CorruptShardError

    return (ValueError, FileNotFoundError, PermissionError, CorruptShardError, storage.StorageError)


def main(argv: list[str] | None = None, *, hooks=None) -> int:
    args = parse_args(argv)  # --help and usage errors before the heavy imports
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from electra.distributed import deepspeed_glue as D
    from electra.run.runner import PHASES, PretrainRunner
    from electra.run.trainer import TrainHooks

    D.quiet_deepspeed()  # before anything imports DeepSpeed

    runner = PretrainRunner(job=None, hooks=hooks or TrainHooks())
    try:
        runner.job = job_from_args(args)
        runner.resolve()
        # with several ranks rank 0's corpus errors (it alone reads the corpus) come in prepare
        runner.prepare()
    except user_errors() as exc:
        if args.debug:
            raise
        if os.environ.get("RANK", "0") == "0":  # every rank finds the same error: say it once
            print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    from electra.checkpoint.sums import DamagedCheckpoint
    from electra.data.corpus import CorruptShardError, ShardReadError
    from electra.data.corpus_growth import CorpusGrowthError

    try:
        for phase in PHASES[PHASES.index("prepare") + 1:]:
            getattr(runner, phase)()
    # found at an epoch start / in the resume's load, on every rank alike (the ranks agree): one line
    except (CorpusGrowthError, DamagedCheckpoint) as exc:
        if args.debug:
            raise
        if os.environ.get("RANK", "0") == "0":
            print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except (CorruptShardError, ShardReadError) as exc:  # mid-epoch, on the rank that read the shard
        if args.debug:
            raise
        print(f"{PROG}: error: {original_message(exc)}", file=sys.stderr)
        return 2  # the launcher stops the other ranks, which may wait on this one in a collective
    D.shutdown()
    return 0


def original_message(exc: BaseException) -> str:
    """The error's own line. An error raised in a DataLoader worker reaches the main process
    re-raised by torch with the worker's traceback as its message, ending with the original
    ``module.Class: message`` line: that line, without the class."""
    text = str(exc).strip()
    if "Original Traceback" not in text:
        return text
    last = text.splitlines()[-1]
    name = f"{type(exc).__module__}.{type(exc).__qualname__}: "
    return last[len(name):] if last.startswith(name) else last


if __name__ == "__main__":
    sys.exit(main())
