"""Weighted mixtures of corpora: how many examples each source gives an epoch, and which ones.

A run may train on several corpora (``--data A --data B``) with ``data.weights`` (one per corpus,
in that order; default: each corpus's share of the examples, i.e. plain concatenation). An
epoch keeps the size of the sources together, ``N = sum(N_j)`` examples, and source ``j`` gives
``T_j = N * w_j / sum(w)`` of them (largest remainders, so the ``T_j`` sum to ``N`` exactly).
With ``r_j = T_j / N_j`` (mosaic streaming's ``proportion`` and ``repeat``/``choose``):

- ``r_j >= 1``: the source is repeated. Each epoch holds ``floor(r_j)`` copies of every example
  and ``R_j = T_j mod N_j`` more, chosen as below.
- ``r_j < 1``: each epoch takes ``R_j = T_j`` of the source's examples, chosen as below.

**The choice: a window over cycles.** Source ``j``'s examples are laid out once: its shards in
the order of a permutation drawn from ``rng(seed, j)``, concatenated, then rotated by an offset
drawn from the same generator (uniform over ``[0, N_j)``: the layout starts inside a shard). The
layout repeats end to end, each repetition a *cycle*, and epoch ``e`` takes positions
``[e * R_j, (e + 1) * R_j)`` of that endless stream: whole shards in the middle, a suffix and a
prefix of a shard at the window's ends. Three properties follow, for every shard size and every
position in a shard:

- *equal chance*: the rotation is uniform, so in any epoch every example lies in the window with
  the same chance ``R_j / N_j`` (no prefix of a shard, no short shard, is favoured);
- *once per cycle, never twice an epoch*: consecutive epochs take consecutive windows, so over
  ``N_j / R_j`` epochs every example is trained once, and a window shorter than a cycle (``R_j <
  N_j``, always the case) meets no example twice, also where it runs into the next cycle;
- *few shards*: a window opens about ``R_j / (shard size) + 2`` shards, as whole-shard choices do,
  so a down-weighted source costs its share of the reading, not all of it.

The layout is drawn once per source and seed, not per cycle: a fresh one per cycle would let a
window that crosses into the next cycle meet, in the new one's head, examples of the old one's
tail (a source weighted to 0.9 of its size trained 13% of an epoch twice that way). The price is
that the windows of later cycles are the first cycle's, shifted by ``N_j mod R_j``: which
examples share an epoch varies less than with independent draws; the order within the epoch is
drawn afresh each epoch anyway (below).

Mosaic streaming (``get_shard_sampling``) cuts shards into granules of ``sampling_granularity``
examples, takes random granules and then random examples inside each chosen shard: at granularity
1 every shard is opened every epoch; at the shard's size the choice favours short shards. The
window gets the equal chance at whole-shard cost; the price is that the examples of a shard are
taken together within an epoch (they are still spread over the epoch by the shuffle below).

The epoch's slices (``ShardSlice``: a contiguous range of a shard) then go through the sample
order as shards do (``electra.data.sample_order``): permuted, concatenated, block-shuffled, cut into
streams, so every global batch mixes the sources and the order keeps its guarantees: a function
of (sources, weights, seed, epoch) only, elastic across world sizes, exact on resume. Over an
epoch each source's share is exact; within one global batch it varies with the shuffle block (a
block holds neighbouring slices' examples).

Cost: a window needs the source's layout (a permutation and a cumulative sum, linear in its
shards, as any per-epoch shard permutation); a repeated shard is decoded once per copy in an epoch (a loader
worker's memory bound counts slices, not distinct shards). With one source and no weights every
shard is one whole slice and the order is the single-corpus order bit for bit.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from electra.data.corpus import ShardRef

# Which choice makes an epoch of a mixture (1: whole shards and a prefix, before 2026-12; 2: the
# window over cycles). Part of a mixture's data identity, so a checkpoint of another order is
# refused on resume instead of continuing from a position in a different stream.
ORDER_VERSION = 2
# A source repeated more than this many times per epoch is said once at start (electra.data.corpus_set):
# a model shown the same few examples that often memorises them (the paper's corpora are seen
# about 40 times over a whole run), and it usually means a weight meant for a larger corpus.
REPEAT_WARNING = 10.0
# Salt of a source's cycle generator (its seed words differ in number from the shard
# permutation's [seed, epoch] and the block shuffle's [seed, epoch, block]).
_CYCLE = 0xC1C1E


class ShardSlice(NamedTuple):
    """Examples ``[start, start + num_examples)`` of ``shard``, from source ``source``."""
    shard: ShardRef
    start: int
    num_examples: int
    source: int = 0

    @property
    def uri(self) -> str:
        return self.shard.uri

    @property
    def bytes(self) -> int:
        return self.shard.bytes


@dataclass(frozen=True)
class Mixture:
    """How the plan's shards (the sources' shards, source after source) make up an epoch."""
    shard_counts: tuple[int, ...]  # shards of each source
    takes: tuple[int, ...]  # examples each source gives each epoch

    def __post_init__(self) -> None:
        if len(self.shard_counts) != len(self.takes) or not self.takes:
            raise ValueError(f"mixture: {len(self.shard_counts)} sources' shards but {len(self.takes)} takes")
        if min(self.takes) < 0 or min(self.shard_counts) < 0:
            raise ValueError(f"mixture: negative shard counts or takes {self.shard_counts} {self.takes}")

    @property
    def num_sources(self) -> int:
        return len(self.takes)


def takes_for(sizes: Sequence[int], weights: Sequence[float] | None) -> tuple[int, ...]:
    """Examples per epoch of each source: ``sum(sizes)`` split in proportion to ``weights``
    (None: the sizes themselves), rounded by largest remainder (ties to the earlier source)."""
    sizes = [int(s) for s in sizes]
    if weights is None:
        return tuple(sizes)
    if len(weights) != len(sizes):
        raise ValueError(f"{len(weights)} weights for {len(sizes)} sources")
    if min(weights) < 0 or sum(weights) <= 0:
        raise ValueError(f"weights {list(weights)}: each must be >= 0 and their sum positive")
    total, wsum = sum(sizes), float(sum(weights))
    exact = [total * w / wsum for w in weights]
    takes = [int(np.floor(x)) for x in exact]
    order = sorted(range(len(sizes)), key=lambda j: (-(exact[j] - takes[j]), j))
    for j in order[:total - sum(takes)]:
        takes[j] += 1
    for j, (n, t) in enumerate(zip(sizes, takes)):
        if t and not n:
            raise ValueError(f"source {j} has weight {weights[j]} but no examples")
    return tuple(takes)


def weight_for_repeat(j: int, sizes: Sequence[int], weights: Sequence[float], repeat: float) -> float:
    """The weight of source ``j`` at which it gives an epoch ``repeat`` times its own examples, the
    others' weights kept: ``N w / (S - w_j + w) = repeat n_j`` solved for ``w`` (``N``: all
    sources' examples, ``S``: the weights' sum). Needs ``N > repeat n_j``, which any source
    repeated more than ``repeat`` times satisfies."""
    total, n, rest = sum(sizes), sizes[j], sum(weights) - weights[j]
    return repeat * n * rest / (total - repeat * n)


def epoch_slices(shards: Sequence[ShardRef], mixture: Mixture | None, *, seed: int, epoch: int) -> list[ShardSlice]:
    """The slices making up ``epoch``, source after source (module docstring); unpermuted."""
    if mixture is None:
        return [ShardSlice(s, 0, s.num_examples) for s in shards]
    if sum(mixture.shard_counts) != len(shards):
        raise ValueError(f"mixture counts {sum(mixture.shard_counts)} shards, the plan has {len(shards)}")
    out: list[ShardSlice] = []
    first = 0
    for j, (count, take) in enumerate(zip(mixture.shard_counts, mixture.takes)):
        own = shards[first:first + count]
        first += count
        sizes = np.fromiter((s.num_examples for s in own), np.int64, len(own))
        natural = int(sizes.sum())
        if take and not natural:
            raise ValueError(f"source {j}: {take} examples per epoch asked of a source with none")
        copies, rest = divmod(take, natural) if natural else (0, 0)
        for _ in range(copies):
            out.extend(ShardSlice(s, 0, s.num_examples, j) for s in own if s.num_examples)
        if rest:
            out.extend(window(own, j, seed=seed, start=epoch * rest, length=rest, sizes=sizes))
    return out


def window(own: Sequence[ShardRef], source: int, *, seed: int, start: int, length: int,
           sizes: np.ndarray | None = None) -> list[ShardSlice]:
    """The slices holding positions ``[start, start + length)`` (``length`` at most the source's
    examples) of source ``source``'s endless stream of cycles (module docstring); ``own``: the
    source's shards (``sizes``: their example counts, when the caller has them)."""
    if sizes is None:
        sizes = np.fromiter((s.num_examples for s in own), np.int64, len(own))
    rng = np.random.default_rng([seed, source, _CYCLE])
    perm = rng.permutation(len(own))
    bounds = np.concatenate([[0], np.cumsum(sizes[perm])])
    natural = int(bounds[-1])
    if not 0 < length <= natural:
        raise ValueError(f"source {source}: a window of {length} examples over {natural}")
    a = (start + int(rng.integers(natural))) % natural  # the window in the layout, wrapping once
    pieces = [(a, min(a + length, natural))] + ([(0, a + length - natural)] if a + length > natural else [])
    out: list[ShardSlice] = []
    for x, y in pieces:
        k = int(np.searchsorted(bounds, x, side="right")) - 1
        while x < y:
            n = min(y, int(bounds[k + 1])) - x
            if n:
                out.append(ShardSlice(own[int(perm[k])], x - int(bounds[k]), n, source))
            x += n
            k += 1
    return out
