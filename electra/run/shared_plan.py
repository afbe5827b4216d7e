"""The run's plan, resolved from the corpus once, on rank 0, and shared with every other rank.

Every rank needs the same ``RunPlan`` (``electra.run.plan``), and most of it comes from the
corpus: the manifest's sequence length, tokenizer, counts and per-shard entries, and the shard
check's listing. Read by every rank, that is one manifest per rank from the store, and a
manifest grows with the shards (a few hundred bytes each): per-rank start-up traffic linear in the
corpus, times the ranks. Here the corpus is read once:

1. **Before the process group** (``resolve_rank``), every rank runs the corpus-free part of the
   resolve (``settle_plan``: run directory, config, ``--init-from``, batch geometry, DeepSpeed
   config, resume plan), so the errors it finds (a bad key, a preset that does not exist, a batch
   that cannot be split, a refused resume) are found by every rank alike, each in seconds, and
   every rank stops without waiting for the others. Its store traffic does not depend on the
   corpus: it reads the run directory and the checkpoints, no manifest, no tokenizer, no listing.
2. Rank 0 also resolves the corpus (``complete_plan``), checks that the run fits the machine and
   that the corpus fills one global batch, and runs the shard check (one listing per shard
   folder), while the others start. With several ranks an error there is held, not raised: the
   others are already waiting in the process group's rendezvous and would wait for rank 0 until
   its timeout.
3. **After the process group** (``share``), rank 0 broadcasts its plan, shard check included, or
   its held error in one ``broadcast_object_list`` (``distributed.on_rank0``); every rank takes
   the plan with its own rank, or raises the error, so all of them stop with the same one line
   (rank 0 prints it, ``electra.train``).

The trade-off: the plan still carries the manifest and the shard list, so the broadcast is
linear in the shards, but over the ranks' network (NCCL or gloo, a tree or ring from rank 0), not
from the store, and not in the per-request costs and rate limits of an object store; and a
corpus error in a run of several ranks now comes after the rendezvous, not before it. A run of
one process has no group: it resolves everything at once and raises at once, as before. Rank 0's
plan is also the one answer every rank acts on (shards, precision, resume), so ranks cannot
diverge on a store that changes between their reads.
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from electra.distributed import deepspeed_glue as D
from electra.run.job import PretrainJob
from electra.run.plan import (RunPlan, Settled, check_fills_batch, check_fits_machine, complete_plan,
                                   settle_plan, world_size_from_env)

log = logging.getLogger("electra.train")


@dataclass(frozen=True)
class Resolved:
    """One rank's resolve, before the process group: the corpus-free part on every rank; rank 0's
    plan, or the error its corpus part raised, held until ``share`` can hand it to the others."""
    settled: Settled
    rank: int
    plan: RunPlan | None = None  # rank 0 (or one process)
    held: Exception | None = None  # rank 0 of several: its error, for every rank after the rendezvous


def resolve_rank(job: PretrainJob, *, rank: int, world_size: int | None = None, cuda: bool = False,
                 precision: str | None = None) -> Resolved:
    """This rank's resolve (module docstring, steps 1 and 2). Raises what ``settle_plan`` raises
    on any rank, and on one process what the corpus part raises."""
    world_size = world_size_from_env() if world_size is None else world_size
    settled = settle_plan(job, world_size=world_size, precision=precision)
    if rank != 0 and world_size > 1:
        return Resolved(settled, rank)
    try:
        plan = complete_plan(settled)
        estimate = check_fits_machine(plan, cuda=cuda)
        if estimate is not None:
            log.warning("train.allow_cpu: a GPU-sized run on a CPU: %s", estimate)
        check_fills_batch(plan)  # a corpus smaller than one global batch, from its manifests
        plan.check_shards()  # (one process: done in complete_plan already)
    except Exception as exc:  # noqa: BLE001  (any failure: the others must hear of it, not hang)
        if world_size == 1:
            raise
        return Resolved(settled, rank, held=exc)
    return Resolved(settled, rank, plan=plan)


def share(resolved: Resolved, *, broadcast=D.on_rank0) -> RunPlan:
    """Rank 0's plan on every rank, each with its own rank, or rank 0's held error raised on every
    rank (module docstring, step 3). Collective when there is a group of several ranks."""
    def rank0() -> RunPlan:
        if resolved.held is not None:
            raise resolved.held
        return resolved.plan

    plan = broadcast(rank0)
    if plan.rank == resolved.rank:
        return plan
    return dataclasses.replace(plan, rank=resolved.rank)
