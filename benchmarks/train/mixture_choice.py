"""Which examples a weighted source gives an epoch: the previous choice against the window, side by side.

    .venv/bin/python benchmarks/train/mixture_choice.py [--shards 100,1000,10000,100000] [--rates 0.003,0.1,0.5,1.3]
        [--epochs 1000] [--timing-epochs 20] [--json OUT] [--smoke]

Both choices run in this process on the same synthetic source (``--shards`` shard references,
``--examples`` examples each, varied by a seeded rng from a quarter to twice that, so short and
long shards mix), for each take rate ``r`` (examples an epoch / the source's examples; above 1 the
source is repeated):

- **previous**: the shipped choice before the window (``previous_choice``, kept here as the
  baseline): the source's shards permuted per epoch, taken whole while they fit, then the first
  examples of one more;
- **window**: ``electra.data.mixture.epoch_slices`` (a window over rotated cycles of permuted shards).

Per epoch, for each: the time to compute the epoch's slices (the median of ``--timing-epochs``
epochs, alternating the two), the shards opened and their bytes (what a loader reads: every shard
a slice touches, whole; manifest bytes). Over ``--epochs`` epochs (the smallest shard count only:
every example is counted), the equal-chance checks the issue asks for: the mean count of the second
halves of the shards over the first halves' (1 when no position is favoured), and the
short shards' (below the median size) mean count over the long ones' (1 when size is not), and,
for a take below the source, the fewest distinct examples an epoch held over its take (1: no
example twice in an epoch). The
ratios window / previous are printed for cost, and both values for the checks. Each growth line
divides the cost at the largest shard count by the smallest's, over the ratio of the counts (1:
linear). The CPU (model, amx_bf16 / avx512_bf16) and load average are printed beside the figures.
``--smoke`` shrinks every size (the test's configuration).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks.shared.machine import finish, machine, machine_line, smoke_sizes
from electra.data.corpus import ShardRef
from electra.data.mixture import Mixture, ShardSlice, epoch_slices

SMOKE = {"shards": "40,80,160,320", "rates": "0.02,1.3", "epochs": 200, "timing_epochs": 3}


def previous_choice(own: Sequence[ShardRef], take: int, *, seed: int, epoch: int) -> list[ShardSlice]:
    """The choice before the window (one source, ``take`` examples): whole copies, then the
    source's shards permuted and taken whole while they fit, and a prefix of one more."""
    natural = sum(s.num_examples for s in own)
    copies, rest = divmod(take, natural)
    out = [ShardSlice(s, 0, s.num_examples) for _ in range(copies) for s in own if s.num_examples]
    perm = np.random.default_rng([seed, epoch, 0, 0x5EED]).permutation(len(own))
    for i in perm.tolist():
        if not rest:
            break
        n = min(own[i].num_examples, rest)
        if n:
            out.append(ShardSlice(own[i], 0, n))
        rest -= n
    return out


def source(shards: int, examples: int, seed: int = 0) -> tuple[ShardRef, ...]:
    sizes = np.random.default_rng(seed).integers(max(1, examples // 4), 2 * examples + 1, shards)
    return tuple(ShardRef(f"mem://s{i}", int(n), 300 * int(n), f"s{i}") for i, n in enumerate(sizes))


def window_choice(own: Sequence[ShardRef], take: int, *, seed: int, epoch: int) -> list[ShardSlice]:
    return epoch_slices(own, Mixture((len(own),), (take,)), seed=seed, epoch=epoch)


CHOICES = {"previous": previous_choice, "window": window_choice}


def epoch_cost(own: tuple[ShardRef, ...], take: int, epochs: int) -> dict[str, dict[str, float]]:
    """Median seconds per epoch and mean shards/bytes opened per epoch, the two alternating."""
    seconds: dict[str, list[float]] = {k: [] for k in CHOICES}
    opened: dict[str, list[tuple[int, int]]] = {k: [] for k in CHOICES}
    for e in range(epochs):
        for name, choose in CHOICES.items():
            t0 = time.perf_counter()
            slices = choose(own, take, seed=7, epoch=e)
            seconds[name].append(time.perf_counter() - t0)
            touched = {s.shard for s in slices}
            opened[name].append((len(touched), sum(s.bytes for s in touched)))
            assert sum(s.num_examples for s in slices) == take, (name, e)
    return {name: {"ms_per_epoch": 1e3 * statistics.median(seconds[name]),
                   "shards_per_epoch": float(np.mean([o[0] for o in opened[name]])),
                   "mb_per_epoch": float(np.mean([o[1] for o in opened[name]])) / 1e6} for name in CHOICES}


def equal_chance(own: tuple[ShardRef, ...], take: int, epochs: int) -> dict[str, dict[str, float]]:
    """How often each example is chosen over ``epochs`` epochs, summarised (module docstring)."""
    out = {}
    median = statistics.median(s.num_examples for s in own)
    for name, choose in CHOICES.items():
        counts = {s.uri: np.zeros(s.num_examples) for s in own}
        distinct = 1.0  # the fewest distinct examples an epoch took, over its take (below 1: repeats)
        for e in range(epochs):
            slices = choose(own, take, seed=7, epoch=e)
            for sl in slices:
                counts[sl.uri][sl.start:sl.start + sl.num_examples] += 1
            if take < sum(s.num_examples for s in own):
                held = {(sl.uri, i) for sl in slices for i in range(sl.start, sl.start + sl.num_examples)}
                distinct = min(distinct, len(held) / take)
        first = np.concatenate([c[:len(c) // 2] for c in counts.values()]).mean()
        second = np.concatenate([c[len(c) // 2:] for c in counts.values()]).mean()
        short = np.concatenate([counts[s.uri] for s in own if s.num_examples < median]).mean()
        long = np.concatenate([counts[s.uri] for s in own if s.num_examples >= median]).mean()
        out[name] = {"second_over_first_half": float(second / first) if first else float("inf"),
                     "short_over_long_shards": float(short / long) if long else float("inf"),
                     "per_epoch_rate": float(np.concatenate(list(counts.values())).mean() / epochs),
                     "min_distinct_share": distinct}
    return out


def report(rows: list[dict], chance: dict, args) -> list[str]:
    lines = [f"{'shards':>8} {'rate':>5}  {'ms/epoch prev':>13} {'window':>8} {'ratio':>6}  "
             f"{'shards/epoch prev':>17} {'window':>8}  {'MB/epoch prev':>13} {'window':>8} {'ratio':>6}"]
    for r in rows:
        p, w = r["previous"], r["window"]
        lines.append(f"{r['shards']:>8} {r['rate']:>5}  {p['ms_per_epoch']:>13.3f} {w['ms_per_epoch']:>8.3f} "
                     f"{w['ms_per_epoch'] / p['ms_per_epoch']:>6.2f}  {p['shards_per_epoch']:>17.1f} "
                     f"{w['shards_per_epoch']:>8.1f}  {p['mb_per_epoch']:>13.2f} {w['mb_per_epoch']:>8.2f} "
                     f"{w['mb_per_epoch'] / p['mb_per_epoch']:>6.2f}")
    for rate in args.rates:
        mine = [r for r in rows if r["rate"] == rate]
        scale = mine[-1]["shards"] / mine[0]["shards"]
        growth = {k: (mine[-1][k]["ms_per_epoch"] / mine[0][k]["ms_per_epoch"]) / scale for k in CHOICES}
        lines.append(f"growth of ms/epoch at rate {rate}, {mine[0]['shards']} -> {mine[-1]['shards']} shards "
                     f"(1 = linear): previous {growth['previous']:.2f}, window {growth['window']:.2f}")
    lines.append(f"equal chance over {args.epochs} epochs, {args.shards[0]} shards (1.00 = none favoured):")
    for rate, res in chance.items():
        for name, v in res.items():
            lines.append(f"  rate {rate} {name:>8}: second/first half {v['second_over_first_half']:.3f}, "
                         f"short/long shards {v['short_over_long_shards']:.3f}, per-epoch rate "
                         f"{v['per_epoch_rate']:.4f}, fewest distinct an epoch {v['min_distinct_share']:.3f}")
    return lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shards", default="100,1000,10000,100000", help="shard counts of the source, comma-separated")
    ap.add_argument("--examples", type=int, default=200, help="mean examples per shard")
    ap.add_argument("--rates", default="0.003,0.1,0.5,1.3", help="examples an epoch over the source's, comma-separated")
    ap.add_argument("--epochs", type=int, default=1000, help="epochs counted for the equal-chance checks")
    ap.add_argument("--timing-epochs", type=int, default=20, help="epochs timed per size and rate")
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes (seconds)")
    args = ap.parse_args(argv)
    smoke_sizes(args, SMOKE)
    args.shards = [int(x) for x in str(args.shards).split(",")]
    args.rates = [float(x) for x in str(args.rates).split(",")]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    before = machine()
    print(machine_line(before), flush=True)
    rows, chance = [], {}
    for n in args.shards:
        own = source(n, args.examples)
        natural = sum(s.num_examples for s in own)
        for rate in args.rates:
            rows.append({"shards": n, "rate": rate, **epoch_cost(own, round(rate * natural), args.timing_epochs)})
            print(f"  {n} shards, rate {rate}: done", file=sys.stderr, flush=True)
    own = source(args.shards[0], args.examples)
    natural = sum(s.num_examples for s in own)
    for rate in args.rates:
        chance[rate] = equal_chance(own, round(rate * natural), args.epochs)
    print("\n".join(report(rows, chance, args)), flush=True)
    finish({"machine": before, "args": vars(args), "rows": rows,
            "equal_chance": {str(k): v for k, v in chance.items()}}, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
