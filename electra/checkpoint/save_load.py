"""Checkpoint commit protocol: DeepSpeed state + RNG + data position, committed atomically.

The run directory's layout (names, listing, ``meta.json``, ``latest``, pruning) is
``electra.checkpoint.run_layout``'s; this module writes and restores one checkpoint inside it::

    RUN_DIR/checkpoints/step_00001000/
        DeepSpeed's files         model, optimiser, scheduler; one per rank
        rng_rank{R}.json          python / numpy / torch CPU (+ CUDA) generator states, per rank
        eval_pending.json         the evaluation pin, by rank 0, when pinning is on
        sums_rank{R}.json         sha256 and size of each file rank R wrote (electra.checkpoint.sums)
        meta.json                 written LAST, by rank 0, after a barrier: the completion marker

Commit protocol: every rank writes its DeepSpeed shards and its RNG file (rank 0 also the pin,
``electra.checkpoint.eval_handoff``, when a hand-off policy is given), then the sums of the files it wrote
(``electra.checkpoint.sums``: each rank hashes its own files, once), all ranks meet at a barrier, then
rank 0 writes ``meta.json`` (atomic) and only then swaps ``latest`` (atomic), then applies the
hand-off policy (skips the oldest waiting pins over ``eval_max_pending``) and prunes to the last
``keep_last`` plus the pinned ones. A kill at any point leaves either the old ``latest`` (the new
dir has no ``meta.json`` and is ignored, then deleted at the next start) or the new one; never a
pointer to a half-written checkpoint. The pin is committed with ``meta.json``: a complete
checkpoint of a pinning run always has its pin until released.

RNG states are JSON (base64 for torch's byte tensors), never pickles. Loading goes through
``electra.checkpoint.deepspeed_states.install_safe_loader``, so DeepSpeed's own ``torch.load`` calls read
with ``weights_only=True`` and a tampered checkpoint cannot run code; every file a rank reads is
first checked against its sum (``electra.checkpoint.sums``: a damaged checkpoint stops the resume
in one line naming the file and the fix, on every rank, before DeepSpeed's load starts).

Resuming on another number of ranks (or ZeRO stage 1 <-> 2, or precision) goes through
DeepSpeed's universal checkpoint, a sibling folder ``step_NNNNNNNN.universal`` converted once
from the step dir: ``electra.checkpoint.universal`` (``plan_resume``, ``ds_config_for_resume``,
``prepare_universal``), then ``load_checkpoint(..., universal=True)``. The commit prunes the
universal folders of pruned checkpoints.
"""
from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import json
import logging
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from common.storage import write_bytes
from electra.checkpoint import sums as sums_
from electra.checkpoint import eval_handoff as handoff_
from electra.checkpoint import run_layout as layout
from electra.checkpoint import universal as universal_ckpt
from electra.checkpoint.mirror import CheckpointMirror
from electra.checkpoint.deepspeed_states import install_safe_loader, safe_load, weights_only_loads
from electra.checkpoint.run_layout import CheckpointMeta

log = logging.getLogger(__name__)

__all__ = ["CheckpointMeta", "load_checkpoint", "rng_state", "save_checkpoint", "set_rng_state"]


def rng_state() -> dict[str, Any]:
    py = random.getstate()
    np_state = np.random.get_state()
    state = {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])],
        "torch": _b64(torch.get_rng_state()),
    }
    if torch.cuda.is_available():
        state["cuda"] = [_b64(s) for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(_unb64(state["torch"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([_unb64(s) for s in state["cuda"]])


def _b64(t: torch.Tensor) -> str:
    return base64.b64encode(t.numpy().tobytes()).decode()


def _unb64(s: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(s)), dtype=torch.uint8).clone()


def save_checkpoint(engine, run_dir: str | Path, meta: CheckpointMeta, *, rank: int, keep_last: int,
                    barrier, before_commit=None, handoff: handoff_.Policy | None = None, in_save=None) -> Path:
    """Write one checkpoint with the commit protocol above; every rank calls it.

    ``in_save`` runs right after DeepSpeed wrote this rank's files, before the RNG file, the sums
    and the barrier; ``before_commit`` after the shards, the pin and the sums are written and
    before ``meta.json`` (tests use them to kill the process at the worst moments). ``handoff``:
    pin the checkpoint until its evaluation releases it, with this skip policy
    (``electra.checkpoint.eval_handoff``)."""
    root = layout.checkpoints_dir(run_dir)
    step_dir = layout.step_dir(run_dir, meta.step)
    if rank == 0 and step_dir.exists():  # a leftover of an interrupted write of this same step
        shutil.rmtree(step_dir)
    if rank == 0:  # a universal conversion of an older write of this step would shadow the new one
        shutil.rmtree(universal_ckpt.universal_dir(step_dir), ignore_errors=True)
    barrier()
    with sums_.recording(engine) as written:  # each file this rank's DeepSpeed saves, hashed once
        engine.save_checkpoint(str(root), tag=step_dir.name, save_latest=False)
    if in_save is not None:
        in_save()
    rng = json.dumps(rng_state()).encode()
    write_bytes(str(step_dir / f"rng_rank{rank}.json"), rng)
    written[f"rng_rank{rank}.json"] = {"sha256": hashlib.sha256(rng).hexdigest(), "size": len(rng)}
    if rank == 0 and handoff is not None:  # before meta.json: committed with the checkpoint
        handoff_.pin(step_dir)
    sums_.write_sums(step_dir, rank, written, extras=rank == 0)  # before the barrier: a commit has them all
    barrier()  # every rank's shards and sums are on disk before the checkpoint is declared complete
    if before_commit is not None:
        before_commit()
    if rank == 0:
        write_bytes(str(step_dir / layout.META), dataclasses.replace(meta, sums=True).to_json())
        write_bytes(str(root / layout.LATEST), (step_dir.name + "\n").encode())
        if handoff is not None:
            handoff_.apply_policy(run_dir, max_pending=handoff.max_pending, keep_every=handoff.keep_every,
                                  save_every=handoff.save_every)
        layout.prune(run_dir, keep_last)  # pinned checkpoints stay
        universal_ckpt.prune_orphans(run_dir)
    barrier()
    return step_dir


def load_checkpoint(engine, step_dir: Path, *, rank: int, universal: bool = False,
                    mirror: CheckpointMirror | None = None, after_load=None) -> CheckpointMeta:
    """Restore DeepSpeed state and this rank's RNG from a complete checkpoint; every rank calls it.

    ``universal=False``: DeepSpeed's own files in ``step_dir`` (same world size, ZeRO stage and
    precision as saved, or ZeRO-0 on any world size). ``universal=True``: the converted sibling
    ``step_dir.universal`` (``electra.checkpoint.universal.prepare_universal`` made it), into an
    engine built with ``checkpoint.load_universal`` (``ds_config_for_resume``); the plan says which
    (``plan_resume(...).universal``). Either way: module, fp32 masters, Adam moments and step,
    param groups, LR scheduler and global step; on the universal path the frozen parameters and
    buffers, which DeepSpeed leaves as initialised there, are copied from the model states.
    RNG comes from ``step_dir/rng_rank{rank}.json`` when that file exists (a rank beyond the
    saved world size has none: a warning, training continues, not bitwise). ``mirror``: the node's
    mirror of the folder loaded (``CheckpointMirror.open`` by every rank before this call), through
    which the files every rank loads are read once per node; closed here, loaded or not.

    Every file this rank reads is checked against the sums written at save first (and the ranks
    agree): ``electra.checkpoint.sums.DamagedCheckpoint`` on every rank, before DeepSpeed's load,
    when any is damaged. ``after_load`` runs once DeepSpeed's load is done (a test hook)."""
    try:
        return _load(engine, Path(step_dir), rank=rank, universal=universal,
                     redirect=None if mirror is None else mirror.local, after_load=after_load)
    finally:
        if mirror is not None:
            install_safe_loader(engine)  # no redirect past this load: the mirror goes
            mirror.close()


def _load(engine, step_dir: Path, *, rank: int, universal: bool, redirect, after_load) -> CheckpointMeta:
    meta = CheckpointMeta.read(step_dir)
    if sums_.has_sums(step_dir):  # what this rank reads, checked before anything parses it
        sums_.agree(sums_.check(_reads(step_dir, rank, universal), redirect))
    elif rank == 0:
        log.warning("%s has no checkpoint sums (written before they existed): its files cannot be checked",
                    step_dir)
    if bool(engine.load_universal_checkpoint()) != universal:
        raise RuntimeError(f"{step_dir}: universal={universal} but the engine was built with checkpoint."
                           f"load_universal={engine.load_universal_checkpoint()} (use ds_config_for_resume)")
    if not universal:  # a layout DeepSpeed would refuse or mis-load: say so in one line, first
        _check_direct_load(engine, step_dir)
    load_dir = universal_ckpt.universal_dir(step_dir) if universal else step_dir
    if universal and not universal_ckpt.is_converted(step_dir):
        raise FileNotFoundError(f"{load_dir}: no universal checkpoint (prepare_universal converts it)")
    install_safe_loader(engine, redirect)
    # The universal loaders call torch.load themselves, not through the checkpoint engine.
    with weights_only_loads(redirect) if universal else contextlib.nullcontext():
        path, _ = engine.load_checkpoint(str(load_dir.parent), tag=load_dir.name, load_optimizer_states=True,
                                         load_lr_scheduler_states=True)
    if path is None:
        raise RuntimeError(f"{load_dir}: DeepSpeed could not load this checkpoint")
    if after_load is not None:
        after_load()
    if universal:
        _restore_unoptimised(engine.module, load_dir, redirect)
    rng_file = step_dir / f"rng_rank{rank}.json"
    if rng_file.is_file():
        set_rng_state(json.loads(sums_.read_checked(rng_file)))
    else:  # e.g. resumed on more ranks than saved: training continues, not bitwise
        log.warning("%s missing: RNG not restored for rank %d", rng_file, rank)
    return meta


def _reads(step_dir: Path, rank: int, universal: bool) -> list[Path]:
    """The checkpoint files this rank reads: the model states (every rank), on a direct load its
    own partition (the files its sums list), and its RNG file."""
    if universal:
        states = sorted(universal_ckpt.universal_dir(step_dir).glob("*model_states.pt"))
    else:
        own = sums_.own_files(step_dir, rank)
        states = sorted({*step_dir.glob("mp_rank_*_model_states.pt"),
                         *(step_dir / n for n in own if n.endswith(".pt"))})
    rng = step_dir / f"rng_rank{rank}.json"
    return [*states, *([rng] if rng.is_file() else [])]


def _check_direct_load(engine, step_dir: Path) -> None:
    import torch.distributed as dist

    world = dist.get_world_size() if dist.is_initialized() else 1
    precision = "bf16" if engine.bfloat16_enabled() else "fp16" if engine.fp16_enabled() else "fp32"
    plan = universal_ckpt.plan_resume(step_dir, world_size=world, zero_stage=engine.zero_optimization_stage(),
                                      precision=precision)  # ResumeRefused for what cannot resume at all
    if plan.universal:
        raise universal_ckpt.ResumeRefused(
            f"{step_dir.name} was saved on {plan.saved_world_size} rank(s) with ZeRO-{plan.saved_zero_stage} "
            f"{plan.saved_precision}; resuming on {world} rank(s) with ZeRO-{plan.zero_stage} {precision} needs "
            "a universal load: plan_resume -> prepare_universal -> engine from ds_config_for_resume -> "
            f"load_checkpoint(universal=True) (offline conversion: {universal_ckpt.CONVERT_COMMAND} {step_dir})")


def _restore_unoptimised(module: torch.nn.Module, load_dir: Path, redirect) -> None:
    """Frozen parameters and buffers from the model states: a universal load sets only what the
    optimiser holds (from the fp32 masters) and leaves the rest as the fresh model had it."""
    wanted = {n for n, p in module.named_parameters(remove_duplicate=False) if not p.requires_grad}
    wanted |= {n for n, _ in module.named_buffers(remove_duplicate=False)}
    if not wanted:
        return
    path = load_dir / "mp_rank_00_model_states.pt"
    with contextlib.nullcontext(path) if redirect is None else redirect(path) as local:
        sums_.verify(local, as_path=path)  # checked when DeepSpeed loaded it: remembered, not hashed again
        saved = safe_load(local, mmap=True)["module"]
        module.load_state_dict({k: v for k, v in saved.items() if k in wanted}, strict=False)
