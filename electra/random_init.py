"""The "no pre-training" baseline: a randomly initialised model exported like a checkpoint.

    python -m electra.random_init --config electra/configs/mini.json --data CORPUS --out DIR \
        [--seed N] [--set section.key=value ...]

writes ``DIR/discriminator`` and ``DIR/generator`` in Hugging Face format with the corpus tokenizer,
so ``python -m flows.evaluate --checkpoint DIR`` fine-tunes it exactly as it fine-tunes a
pre-trained export: same recipe, same heads, same code path. What pre-training buys is then the
difference between the two rows, with nothing else changed.

The weights are the trainer's own initialisation: the same config resolution (preset, ``--set``,
the vocabulary size taken from the corpus) and the same seeding (``train.seed`` unless ``--seed``
is given) before ``ElectraForPretraining`` and its objective are built (the objective sets the
discriminator bias when the config asks for the prior). With the default seed the export therefore
equals step 0 of a pre-training run of that config on that corpus, the exact starting point the
pre-trained rows moved away from.
"""
from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

from common import storage
from electra.config import ElectraConfig, load_config
from electra.corpus import CorpusInfo, open_corpus
from pipelines.schema import TOKENIZER_FILES

log = logging.getLogger(__name__)


def random_init_config(config: str | Path, corpus: str,
                       overrides: list[str] | tuple[str, ...] = ()) -> tuple[ElectraConfig, CorpusInfo]:
    """The config exactly as the trainer resolves it on ``corpus`` (``trainer.resolve_run_config``:
    vocabulary size from the corpus, whose seq_len must match), and the opened corpus."""
    from electra.distributed import effective_precision
    from electra.trainer import resolve_run_config

    requested = load_config(config, overrides)
    info = open_corpus(corpus, seq_len=requested.data.seq_len)
    cfg = resolve_run_config(requested, corpus_vocab_size=info.vocab_size,
                             precision=effective_precision(requested.train.precision))
    return cfg, info


def export_random_init(config: str | Path, corpus: str, out_dir: str | Path, *, seed: int | None = None,
                       overrides: list[str] | tuple[str, ...] = ()) -> Path:
    """Build the model from ``seed`` (default ``train.seed``) and export it with the corpus tokenizer."""
    from electra.hf_export import export_hf
    from electra.model import ElectraForPretraining
    from electra.objective import ElectraObjective, SpecialTokens
    from electra.trainer import seed_everything

    cfg, info = random_init_config(config, corpus, overrides)
    seed = cfg.train.seed if seed is None else seed
    seed_everything(seed)  # the trainer's own seeding, so the default seed gives its step 0
    model = ElectraForPretraining(cfg.model)
    # The objective owns part of the initialisation (the discriminator bias at the prior), as in
    # the trainer, which builds it right after the model.
    ElectraObjective(model, cfg.objective, SpecialTokens.from_manifest(info.manifest.tokenizer.special_tokens),
                     cfg.data.seq_len)
    with tempfile.TemporaryDirectory(prefix="tokenizer-") as tok:
        for name in TOKENIZER_FILES:  # by name: a remote corpus cannot be listed
            try:
                data = storage.read_bytes(storage.join(info.tokenizer_uri, name))
            except storage.StorageError:  # the optional files; tokenizer.json was read by open_corpus
                continue
            (Path(tok) / name).write_bytes(data)
        export_hf(model, cfg.model, out_dir, tokenizer_dir=tok)
    log.info("random initialisation (seed %d) of %s exported to %s", seed, config, out_dir)
    return Path(out_dir)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m electra.random_init", description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True, help="preset or run config JSON (electra/configs/*.json)")
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
