"""The "no pre-training" baseline: a randomly initialised model exported like a checkpoint.

    python -m electra.random_init --config mini --data CORPUS --out DIR \
        [--seed N] [--set section.key=value ...]

writes ``DIR/discriminator`` and ``DIR/generator`` in Hugging Face format with the corpus tokenizer,
so ``python -m cli.evaluate --checkpoint DIR`` fine-tunes it exactly as it fine-tunes a
pre-trained export: same recipe, same heads, same code path. What pre-training buys is then the
difference between the two rows, with nothing else changed.

The weights are the trainer's own initialisation: its resolve phase (preset, ``--set``, the
sequence length and vocabulary size taken from the corpus) and its build of the model and
objective (``electra.run.runner.build_objective``: the same seeding, ``train.seed`` unless
``--seed`` is given; the objective sets the discriminator bias when the config asks for the
prior). With the default seed the export therefore
equals step 0 of a pre-training run of that config on that corpus, the exact starting point the
pre-trained rows moved away from.
"""
from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

from electra.run.job import PretrainJob
from electra.run.plan import RunPlan, resolve

log = logging.getLogger(__name__)


def random_init_plan(config: str | Path, corpus: str, out_dir: str | Path,
                     overrides: list[str] | tuple[str, ...] = ()) -> RunPlan:
    """The run plan exactly as the trainer resolves it on ``corpus`` for one rank
    (``electra.run.plan.resolve``: sequence length and vocabulary size from the corpus)."""
    return resolve(PretrainJob(str(config), str(corpus), str(out_dir), list(overrides)), world_size=1)


def export_random_init(config: str | Path, corpus: str, out_dir: str | Path, *, seed: int | None = None,
                       overrides: list[str] | tuple[str, ...] = ()) -> Path:
    """Build the model from ``seed`` (default ``train.seed``) and export it with the corpus tokenizer."""
    from electra.checkpoint.hf_export import export_hf
    from electra.run.runner import build_objective

    extra = [f"train.seed={seed}"] if seed is not None else []
    plan = random_init_plan(config, corpus, out_dir, [*overrides, *extra])
    # The trainer's own build (seeding, model, objective, which owns part of the initialisation:
    # the discriminator bias at the prior), so the default seed gives the run's step 0.
    model = build_objective(plan).model
    with tempfile.TemporaryDirectory(prefix="tokenizer-") as tok:
        plan.corpus.copy_tokenizer(tok)
        export_hf(model, plan.cfg.model, out_dir, tokenizer_dir=tok)
    log.info("random initialisation (seed %d) of %s exported to %s", plan.cfg.train.seed, config, out_dir)
    return Path(out_dir)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m electra.random_init", description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True, help="a preset by name (tiny, mini, small, base, large) or a config JSON")
    p.add_argument("--data", required=True, help="corpus location (its tokenizer and vocabulary size are used)")
    p.add_argument("--out", required=True, help="export folder to write (discriminator/, generator/)")
    p.add_argument("--seed", type=int, help="initialisation seed (default: train.seed, the trainer's step 0)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override (repeatable)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    export_random_init(args.config, args.data, args.out, seed=args.seed, overrides=args.set)
    return 0


if __name__ == "__main__":
    sys.exit(main())
