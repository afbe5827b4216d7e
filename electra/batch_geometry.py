"""Batch geometry from the world size: the global batch is the preset's, the rest is derived.

The optimiser sees ``train.global_batch_size`` examples per step whatever the number of ranks
(the paper's batch; the LR schedule was tuned for it). With ``R`` ranks each rank trains on
``G / R`` examples per step, in ``accum`` micro batches of ``m``::

    G = m x R x accum

``train.micro_batch_size`` is what one device can hold, an upper bound: when it does not divide
``G / R``, the largest micro batch below it that does is used (and logged), so a preset starts
as shipped on 1, 2, 8 or 64 ranks. The only error is a global batch that cannot be split over
the ranks at all (``G`` not a multiple of ``R``): then no micro batch exists, and the message
names both numbers and the two ways out.

Nothing here imports torch: the arithmetic is checked before any distributed start-up.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from common.config import ConfigError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchGeometry:
    global_batch: int
    world_size: int
    micro_batch: int
    accum: int

    @property
    def per_rank(self) -> int:
        return self.global_batch // self.world_size


def batch_geometry(global_batch: int, micro_batch: int, world_size: int) -> BatchGeometry:
    """The split of ``global_batch`` over ``world_size`` ranks with micro batches of at most
    ``micro_batch`` (module docstring); ``ConfigError`` when none exists."""
    if global_batch % world_size:
        raise ConfigError(f"train.global_batch_size {global_batch} cannot be split over {world_size} ranks "
                          f"(not a multiple); set train.global_batch_size to a multiple of {world_size} "
                          "or run on a number of ranks that divides it")
    per_rank = global_batch // world_size
    micro = max(d for d in range(1, min(micro_batch, per_rank) + 1) if per_rank % d == 0)
    if micro != micro_batch:
        log.info("train.micro_batch_size %d -> %d: %d examples per rank per step (global batch %d on %d ranks)",
                 micro_batch, micro, per_rank, global_batch, world_size)
    return BatchGeometry(global_batch, world_size, micro, per_rank // micro)
