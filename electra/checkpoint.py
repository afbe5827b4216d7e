"""Checkpoint commit protocol: DeepSpeed state + RNG + data position, committed atomically.

The run directory's layout (names, listing, ``meta.json``, ``latest``, pruning) is
``electra.run_layout``'s; this module writes and restores one checkpoint inside it::

    RUN_DIR/checkpoints/step_00001000/
        DeepSpeed's files         model, optimiser, scheduler; one per rank
        rng_rank{R}.json          python / numpy / torch CPU (+ CUDA) generator states, per rank
        meta.json                 written LAST, by rank 0, after a barrier: the completion marker

Commit protocol: every rank writes its DeepSpeed shards and its RNG file, all ranks meet at a
barrier, then rank 0 writes ``meta.json`` (atomic) and only then swaps ``latest`` (atomic), then
prunes to the last ``keep_last``. A kill at any point leaves either the old ``latest`` (the new
dir has no ``meta.json`` and is ignored, then deleted at the next start) or the new one; never a
pointer to a half-written checkpoint.

RNG states are JSON (base64 for torch's byte tensors), never pickles. Loading goes through
``electra.deepspeed_states.install_safe_loader``, so DeepSpeed's own ``torch.load`` calls read
with ``weights_only=True`` and a tampered checkpoint cannot run code.
"""
from __future__ import annotations

import base64
import json
import logging
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from common.storage import write_bytes
from electra import run_layout as layout
from electra.deepspeed_states import install_safe_loader
from electra.run_layout import CheckpointMeta

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
                    barrier, before_commit=None) -> Path:
    """Write one checkpoint with the commit protocol above; every rank calls it.

    ``before_commit`` runs after the shards are written and before ``meta.json`` (tests use it
    to kill the process at the worst moment)."""
    root = layout.checkpoints_dir(run_dir)
    step_dir = layout.step_dir(run_dir, meta.step)
    if rank == 0 and step_dir.exists():  # a leftover of an interrupted write of this same step
        shutil.rmtree(step_dir)
    barrier()
    engine.save_checkpoint(str(root), tag=step_dir.name, save_latest=False)
    write_bytes(str(step_dir / f"rng_rank{rank}.json"), json.dumps(rng_state()).encode())
    barrier()  # every rank's shards are on disk before the checkpoint is declared complete
    if before_commit is not None:
        before_commit()
    if rank == 0:
        write_bytes(str(step_dir / layout.META), meta.to_json())
        write_bytes(str(root / layout.LATEST), (step_dir.name + "\n").encode())
        layout.prune(run_dir, keep_last)
    barrier()
    return step_dir


def load_checkpoint(engine, step_dir: Path, *, rank: int) -> CheckpointMeta:
    """Restore DeepSpeed state and this rank's RNG from a complete checkpoint."""
    meta = CheckpointMeta.read(step_dir)
    install_safe_loader(engine)
    path, _ = engine.load_checkpoint(str(step_dir.parent), tag=step_dir.name, load_optimizer_states=True,
                                     load_lr_scheduler_states=True)
    if path is None:
        raise RuntimeError(f"{step_dir}: DeepSpeed could not load this checkpoint")
    rng_file = step_dir / f"rng_rank{rank}.json"
    if rng_file.is_file():
        set_rng_state(json.loads(rng_file.read_text()))
    else:  # e.g. resumed on more ranks than saved: training continues, not bitwise
        log.warning("%s missing: RNG not restored for rank %d", rng_file, rank)
    return meta
