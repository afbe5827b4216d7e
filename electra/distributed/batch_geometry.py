"""Batch geometry from the world size: the global batch is the preset's, the rest is derived.

The optimiser sees ``train.global_batch_size`` examples per step whatever the number of ranks
(the paper's batch; the LR schedule was tuned for it). With ``R`` ranks each rank trains on
``G / R`` examples per step, in ``accum`` micro batches of ``m``::

    G = m x R x accum

``train.micro_batch_size`` is what one device can hold, an upper bound: when it does not divide
``G / R``, the largest micro batch below it that does is used (and logged), so a preset starts
as shipped on 1, 2, 8 or 64 ranks. The only error is a global batch that cannot be split over
the ranks at all (``G`` not a multiple of ``R``): then no micro batch exists, and the message
names both numbers and only ways out that the checks after it accept, with numbers: the world
sizes nearest ``R`` that divide ``G``, and, for a new run, the multiples of ``R`` nearest ``G``.
A resume (``Resuming``) cannot change the global batch (the data position counts global
batches: ``electra.run.plan`` refuses another), so it is offered world sizes only, those
that divide the checkpoint's global batch, always including the checkpoint's own; and only that
one when ZeRO-3 is involved, which resumes on its own world size alone
(``electra.checkpoint.universal.plan_resume``).

A corpus smaller than one global batch (``unfillable``) is refused in the same way, naming the
largest global batch it fills. Nothing here imports torch: the arithmetic is checked before any
distributed start-up.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from common.config import ConfigError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Resuming:
    """What a resume fixes for the split (``electra.checkpoint.universal.resume_split``)."""
    global_batch: int  # the checkpoint's; 0 when it did not record one
    saved_world_size: int
    same_world_only: bool = False  # ZeRO-3: only ``saved_world_size`` resumes


@dataclass(frozen=True)
class BatchGeometry:
    global_batch: int
    world_size: int
    micro_batch: int
    accum: int

    @property
    def per_rank(self) -> int:
        return self.global_batch // self.world_size


def batch_geometry(global_batch: int, micro_batch: int, world_size: int, *,
                   resuming: Resuming | None = None) -> BatchGeometry:
    """The split of ``global_batch`` over ``world_size`` ranks with micro batches of at most
    ``micro_batch`` (module docstring); ``ConfigError`` when none exists."""
    if global_batch % world_size:
        raise ConfigError(unsplittable(global_batch, world_size, resuming))
    per_rank = global_batch // world_size
    micro = max(d for d in range(1, min(micro_batch, per_rank) + 1) if per_rank % d == 0)
    if micro != micro_batch:
        log.info("train.micro_batch_size %d -> %d: %d examples per rank per step (global batch %d on %d ranks)",
                 micro_batch, micro, per_rank, global_batch, world_size)
    return BatchGeometry(global_batch, world_size, micro, per_rank // micro)


def unsplittable(global_batch: int, world_size: int, resuming: Resuming | None = None) -> str:
    """The one-line error for a ``global_batch`` that ``world_size`` does not divide: the ways out
    that the next checks accept (module docstring)."""
    head = f"train.global_batch_size {global_batch} cannot be split over {world_size} ranks (not a multiple)"
    if resuming is None:
        worlds, batches = nearest_divisors(global_batch, world_size), nearest_multiples(world_size, global_batch)
        return (f"{head}; run on {_either(worlds)} ranks ({_plural(worlds, 'divisor')} of {global_batch}) or set "
                f"train.global_batch_size to {_either(batches)} ({_plural(batches, 'multiple')} of {world_size})")
    kept = resuming.global_batch or global_batch
    saved = resuming.saved_world_size
    if resuming.same_world_only:
        worlds, why = [saved], "the checkpoint's world size: ZeRO-3 resumes on no other"
    else:
        worlds = sorted(set(nearest_divisors(kept, world_size)) | {saved})
        why = f"{_plural(worlds, 'divisor')} of {kept}; the checkpoint's is {saved}"
    if kept != global_batch:
        return (f"{head}, and a resume keeps its checkpoint's global batch (the data position counts global "
                f"batches): set train.global_batch_size={kept}"
                + ("" if kept % world_size == 0 and not resuming.same_world_only
                   else f" and resume on {_either(worlds)} ranks ({why})"))
    return (f"{head}, and a resume keeps its checkpoint's global batch (the data position counts global "
            f"batches): resume on {_either(worlds)} ranks ({why})")


def unfillable(examples: int, global_batch: int, world_size: int, where: str) -> str:
    """The one-line error for a corpus of fewer train ``examples`` than one global batch (an
    epoch of the sample order is ``examples // global_batch`` steps: none): the largest global
    batch the corpus fills on ``world_size`` ranks, a multiple of it, or, with fewer examples than
    ranks, fewer ranks."""
    head = (f"{where}: {examples} train example{'s' if examples != 1 else ''} cannot fill one global batch "
            f"of {global_batch} (train.global_batch_size)")
    largest = examples // world_size * world_size
    if not largest:
        return (f"{head}, and has fewer than the {world_size} ranks: train on more text, or on {examples} "
                f"rank{'s' if examples != 1 else ''} with --global-batch-size {examples}")
    ranks = f" on {world_size} ranks" if world_size > 1 else ""
    return (f"{head}; the largest global batch it fills{ranks} is {largest}: train with --global-batch-size "
            f"{largest}, or on more text")


def nearest_divisors(n: int, k: int) -> list[int]:
    """The divisors of ``n`` nearest ``k``: the largest below it and the smallest above it (when any)."""
    below = max(d for d in range(1, min(n, k) + 1) if n % d == 0)
    above = next((d for d in range(k + 1, n + 1) if n % d == 0), None)
    return [d for d in (below, above) if d is not None and d != k]


def nearest_multiples(k: int, n: int) -> list[int]:
    """The positive multiples of ``k`` nearest ``n``: below it (when any) and above it."""
    return [m for m in ((n // k) * k, (n // k + 1) * k) if m > 0 and m != n]


def _either(values: list[int]) -> str:
    words = [str(v) for v in values]
    return " or ".join([", ".join(words[:-1]), words[-1]] if len(words) > 2 else words)


def _plural(values: list[int], noun: str) -> str:
    return f"{noun}s" if len(values) > 1 else f"a {noun}"
