"""ELECTRA pre-training on DeepSpeed, streaming the corpus shards; resumes exactly.

    deepspeed [--num_gpus N | --hostfile H] electra/train.py --config electra/configs/large.json \
        --data CORPUS --out RUN_DIR [--max-steps N] [--save-every N] [--seed N] \
        [--micro-batch N] [--set section.key=value ...]
    deepspeed [...] --module electra.train --config ...   # the same, as a module
    python electra/train.py ...  |  python -m electra.train ...   # one process, the same code path

This file is only the command line: arguments and ``main``. The run itself (config resolution,
corpus, engine, steps, checkpoints, export) is ``electra.trainer``; see its docstring.

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

log = logging.getLogger("electra.train")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="electra/train.py", description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True, help="preset or run config JSON (electra/configs/*.json)")
    p.add_argument("--data", required=True,
                   help="corpus location: a path or s3:// gs:// https:// URI (manifest.json, tokenizer/, shards/)")
    p.add_argument("--out", required=True,
                   help="run directory (local or shared filesystem); rerunning resumes from its latest checkpoint")
    p.add_argument("--max-steps", type=int, help="train.max_steps")
    p.add_argument("--save-every", type=int, help="train.save_every")
    p.add_argument("--seed", type=int, help="train.seed")
    p.add_argument("--micro-batch", type=int, help="train.micro_batch_size (per rank)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any config field, e.g. optimizer.lr=1e-4 (repeatable)")
    p.add_argument("--local_rank", type=int, default=-1, help="set by the deepspeed launcher")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)  # --help and usage errors before the heavy imports
    from electra import distributed as D
    from electra.trainer import Trainer

    trainer = Trainer(args)
    trainer.run()
    if trainer.rank0:
        log.info("done: step %d, %d tokens, run dir %s", trainer.step, trainer.tokens_seen, trainer.run_dir)
    D.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
