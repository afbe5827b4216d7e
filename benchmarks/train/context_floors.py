"""Context-free floors of a corpus, and how far a run's generator and discriminator get below them.

    .venv/bin/python benchmarks/train/context_floors.py --corpus CORPUS [--runs RUN_DIR ...] [--json OUT]

A falling loss does not show that a model uses context. A generator that ignores its input and
predicts the corpus's unigram distribution scores the **unigram entropy** of the maskable tokens;
one that sees only the previous token scores the **bigram conditional entropy** H(x_t | x_t-1). A
discriminator that says the base rate p of replaced tokens everywhere scores the **binary
entropy** H(p), p = mask_prob x replaced share (the run's ``eval_replaced_frac``). The gaps
between a run's validation losses and these floors are what it learned from context, in nats per
prediction (generator) or per token (discriminator): a gap near 0 is a model that has not yet left
the context-free plateau, whatever its loss curve looks like.

Estimates are plug-in counts over the train split's real tokens ([CLS], [SEP], [PAD], [MASK]
excluded, as the masking excludes them; pairs never cross an example's boundary or a special
token). Plug-in entropy is biased low by about (bins seen - 1) / (2 x count), negligible for the
unigram and noticeable for bigrams of a small corpus (a wide vocabulary sees many pairs once): the
bigram figure is a bound for orientation, the unigram one is the floor to compare with. The gaps
compare a train-split floor with validation losses; both splits are draws from the same documents.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from electra.data.corpus import check_shards, open_corpus, read_shard
from pipelines import schema


def plug_in_entropy(counts: np.ndarray) -> float:
    """Entropy in nats of the distribution proportional to ``counts`` (zeros ignored)."""
    c = counts[counts > 0].astype(np.float64)
    p = c / c.sum()
    return float(-(p * np.log(p)).sum())


def binary_entropy(p: float) -> float:
    """H(p) in nats: the loss of a classifier that predicts probability ``p`` everywhere."""
    if not 0.0 < p < 1.0:
        return 0.0
    return -(p * math.log(p) + (1 - p) * math.log(1 - p))


def corpus_floors(corpus: str, split: str = "train") -> dict:
    """Unigram entropy, bigram conditional entropy H(next | previous) and counts of ``split``."""
    # open_corpus checks seq_len against a config; here the manifest's own value is the one to pass
    manifest = schema.Manifest.parse(schema.read_manifest_bytes(corpus), corpus)
    info = open_corpus(corpus, seq_len=manifest.seq_len)
    special = np.array(sorted(info.manifest.tokenizer.special_tokens.values()), np.int64)
    vocab = info.vocab_size
    unigram = np.zeros(vocab, np.int64)
    pair_codes = []
    shards, _ = check_shards(info, split)
    for shard in shards:
        ex = read_shard(shard)
        tokens = ex.tokens.astype(np.int64)
        real = ~np.isin(tokens, special)
        unigram += np.bincount(tokens[real], minlength=vocab)
        # a pair (t, t+1) counts when both are real tokens of the same example
        if len(tokens) < 2:
            continue
        same = np.ones(len(tokens) - 1, bool)
        same[ex.offsets[1:-1] - 1] = False
        ok = same & real[:-1] & real[1:]
        pair_codes.append(tokens[:-1][ok] * vocab + tokens[1:][ok])
    codes = np.concatenate(pair_codes) if pair_codes else np.zeros(0, np.int64)
    _, pair_counts = np.unique(codes, return_counts=True)
    first = np.bincount(codes // vocab, minlength=vocab) if len(codes) else np.zeros(vocab, np.int64)
    return {"split": split, "tokens": int(unigram.sum()), "pairs": int(len(codes)),
            "types": int((unigram > 0).sum()), "unigram_entropy": plug_in_entropy(unigram),
            "bigram_conditional_entropy": plug_in_entropy(pair_counts) - plug_in_entropy(first)}


def run_gaps(run_dir: str | Path, floors: dict) -> list[dict]:
    """Per validation record of a run: its losses and their gaps below the context-free floors."""
    run = Path(run_dir)
    mask_prob = json.loads((run / "config.json").read_text())["objective"]["mask_prob"]
    rows = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec.get("kind") != "eval" or rec.get("eval_gen_loss") is None:
            continue
        row = {"step": rec["step"], "gen_loss": rec["eval_gen_loss"],
               "gen_gap": floors["unigram_entropy"] - rec["eval_gen_loss"]}
        replaced = rec.get("eval_replaced_frac")
        if rec.get("eval_disc_loss") and replaced:  # MLM runs log a zero discriminator loss
            floor = binary_entropy(mask_prob * replaced)
            row.update(disc_loss=rec["eval_disc_loss"], disc_floor=floor, disc_gap=floor - rec["eval_disc_loss"])
        rows.append(row)
    return rows


def _report(floors: dict, runs: dict[str, list[dict]]) -> str:
    lines = [f"{floors['split']}: {floors['tokens']:,} tokens, {floors['types']:,} types; context-free generator "
             f"(unigram) {floors['unigram_entropy']:.3f} nats, previous token only "
             f"{floors['bigram_conditional_entropy']:.3f} nats (plug-in, biased low)"]
    for name, rows in runs.items():
        lines.append(f"\n{name}\n{'step':>7} {'gen loss':>9} {'below unigram':>14} {'disc loss':>10} "
                     f"{'constant':>9} {'below constant':>15}")
        for r in rows:
            disc = (f"{r['disc_loss']:10.4f} {r['disc_floor']:9.4f} {r['disc_gap']:15.4f}" if "disc_gap" in r
                    else f"{'-':>10} {'-':>9} {'-':>15}")
            lines.append(f"{r['step']:7d} {r['gen_loss']:9.3f} {r['gen_gap']:14.3f} {disc}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", required=True, help="corpus directory or URI (build-corpus output)")
    p.add_argument("--runs", nargs="*", default=[], help="run directories trained on this corpus")
    p.add_argument("--json", help="also write the floors and gaps here")
    args = p.parse_args(argv)
    floors = corpus_floors(args.corpus)
    runs = {r: run_gaps(r, floors) for r in args.runs}
    print(_report(floors, runs))
    if args.json:
        Path(args.json).write_text(json.dumps({"corpus": args.corpus, "floors": floors, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
