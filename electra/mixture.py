"""Weighted mixtures of corpora: how many examples each source gives an epoch, and which ones.

A run may train on several corpora (``--data A --data B``) with ``data.weights`` (one per corpus,
in that order; default: each corpus's share of the examples, i.e. plain concatenation). An
epoch keeps the size of the sources together, ``N = sum(N_j)`` examples, and source ``j`` gives
``T_j = N * w_j / sum(w)`` of them (largest remainders, so the ``T_j`` sum to ``N`` exactly).
With ``r_j = T_j / N_j`` (mosaic streaming's ``proportion`` and ``repeat``/``choose``):

- ``r_j >= 1``: the source is repeated. Each epoch holds ``floor(r_j)`` copies of every example
  and ``T_j mod N_j`` more, chosen afresh each epoch (below).
- ``r_j < 1``: each epoch takes ``T_j`` of the source's examples, another choice each epoch, so
  over ``1 / r_j`` epochs a down-weighted source is still seen about once.

The choice is made at shard granularity, so a chosen example's neighbours come from the same
shard and a reader opens few shards: the source's shards are permuted with
``rng(seed, epoch, source)``, taken whole while they fit, and the next one contributes its first
examples (a ``ShardSlice``). The epoch's slices then go through the sample order as shards do
(``electra.sample_order``): permuted, concatenated, block-shuffled, cut into streams, so every
global batch mixes the sources and the order keeps its guarantees: a function of (sources,
weights, seed, epoch) only, elastic across world sizes, exact on resume. Over an epoch each
source's share is exact; within one global batch it varies with the shuffle block (a block
holds neighbouring slices' examples).

Trade-offs: choosing whole shards biases a down-weighted source towards the examples at the
start of a partly taken shard in that epoch (another shard is the partial one next epoch); a
repeated shard is decoded once per copy in an epoch (a loader worker's memory bound counts
slices, not distinct shards). With one source and no weights every shard is one whole slice and
the order is the single-corpus order bit for bit.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from electra.corpus import ShardRef

# Salt of the per-source choice's generator (its seed words differ in number from the shard
# permutation's [seed, epoch] and the block shuffle's [seed, epoch, block]).
_CHOICE = 0x5EED


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
        natural = sum(s.num_examples for s in own)
        if take and not natural:
            raise ValueError(f"source {j}: {take} examples per epoch asked of a source with none")
        copies, rest = divmod(take, natural) if natural else (0, 0)
        for _ in range(copies):
            out.extend(ShardSlice(s, 0, s.num_examples, j) for s in own if s.num_examples)
        if rest:
            perm = np.random.default_rng([seed, epoch, j, _CHOICE]).permutation(count)
            for i in perm.tolist():
                n = min(own[i].num_examples, rest)
                if n:
                    out.append(ShardSlice(own[i], 0, n, j))
                rest -= n
                if not rest:
                    break
    return out
