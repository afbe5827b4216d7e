"""Run-directory checkpoints: DeepSpeed state + RNG + data position, committed atomically.

Layout under ``RUN_DIR/checkpoints/``::

    step_00001000/            DeepSpeed's files (model, optimiser, scheduler; one per rank)
        rng_rank{R}.json      python / numpy / torch CPU (+ CUDA) generator states, per rank
        meta.json             written LAST, by rank 0, after a barrier: the completion marker
    latest                    text file naming the newest complete step dir, replaced atomically

Commit protocol: every rank writes its DeepSpeed shards and its RNG file, all ranks meet at a
barrier, then rank 0 writes ``meta.json`` (atomic) and only then swaps ``latest`` (atomic), then
prunes to the last ``keep_last``. A kill at any point leaves either the old ``latest`` (the new
dir has no ``meta.json`` and is ignored, then deleted at the next start) or the new one; never a
pointer to a half-written checkpoint. If ``latest`` itself is missing or points at an incomplete
dir, the newest dir that has ``meta.json`` is used.

RNG states are JSON (base64 for torch's byte tensors), never pickles. DeepSpeed's own loader
calls ``torch.load(weights_only=False)``; :func:`install_safe_loader` swaps in a loader that uses
``weights_only=True`` with an allow-list of the few DeepSpeed classes its optimiser files hold,
so a tampered checkpoint cannot run code.
"""
from __future__ import annotations

import base64
import json
import logging
import random
import shutil
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from common.storage import write_bytes

log = logging.getLogger(__name__)

CHECKPOINTS = "checkpoints"
LATEST = "latest"
META = "meta.json"


@dataclass
class CheckpointMeta:
    step: int
    tokens_seen: int
    data_position: dict[str, int]
    manifest_sha256: str
    tokenizer_sha256: str
    config_hash: str
    wall_time: float  # seconds of training so far (summed over restarts)
    world_size: int = 1
    # What the data stream is a function of (seq_len, tokenizer, shard list): resume refuses a
    # corpus that differs in it. "" in checkpoints written before it existed.
    data_sha256: str = ""
    saved_at: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))

    @classmethod
    def read(cls, step_dir: Path) -> CheckpointMeta:
        path = step_dir / META
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, TypeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: unreadable checkpoint meta ({exc})") from exc


def step_name(step: int) -> str:
    return f"step_{step:08d}"


def is_complete(step_dir: Path) -> bool:
    return (step_dir / META).is_file()


def find_latest(run_dir: str | Path) -> Path | None:
    """The checkpoint to resume from: ``latest`` if it names a complete dir, else the newest one."""
    root = Path(run_dir) / CHECKPOINTS
    pointer = root / LATEST
    if pointer.is_file():
        target = root / pointer.read_text().strip()
        if is_complete(target):
            return target
        log.warning("%s names %s, which is incomplete; falling back to the newest complete one", pointer, target)
    complete = [d for d in _step_dirs(root) if is_complete(d)]
    return complete[-1] if complete else None


def _step_dirs(root: Path) -> list[Path]:
    return sorted(d for d in root.glob("step_*") if d.is_dir())


def clean_incomplete(run_dir: str | Path) -> list[Path]:
    """Delete step dirs a kill left without ``meta.json`` (rank 0, before training starts)."""
    removed = []
    for d in _step_dirs(Path(run_dir) / CHECKPOINTS):
        if not is_complete(d):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
            log.warning("removed incomplete checkpoint %s (interrupted write)", d)
    return removed


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
    root = Path(run_dir) / CHECKPOINTS
    name = step_name(meta.step)
    step_dir = root / name
    if rank == 0 and step_dir.exists():  # a leftover of an interrupted write of this same step
        shutil.rmtree(step_dir)
    barrier()
    engine.save_checkpoint(str(root), tag=name, save_latest=False)
    write_bytes(str(step_dir / f"rng_rank{rank}.json"), json.dumps(rng_state()).encode())
    barrier()  # every rank's shards are on disk before the checkpoint is declared complete
    if before_commit is not None:
        before_commit()
    if rank == 0:
        write_bytes(str(step_dir / META), (json.dumps(asdict(meta), indent=2) + "\n").encode())
        write_bytes(str(root / LATEST), (name + "\n").encode())
        prune(root, keep_last)
    barrier()
    return step_dir


def prune(root: Path, keep_last: int) -> None:
    complete = [d for d in _step_dirs(root) if is_complete(d)]
    for d in complete[: max(0, len(complete) - keep_last)]:
        shutil.rmtree(d, ignore_errors=True)


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


def _safe_globals() -> list:
    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    return [LossScaler, DynamicLossScaler, ZeroStageEnum, fragment_address]


class _SafeLoad:
    """Delegates to DeepSpeed's checkpoint engine, but loads with ``weights_only=True``."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def load(self, path: str, map_location=None):
        with torch.serialization.safe_globals(_safe_globals()):
            return torch.load(path, map_location=map_location, weights_only=True)


def install_safe_loader(engine) -> None:
    if not isinstance(engine.checkpoint_engine, _SafeLoad):
        engine.checkpoint_engine = _SafeLoad(engine.checkpoint_engine)


@contextmanager
def _weights_only_loads():
    """Make every ``torch.load`` inside (e.g. DeepSpeed's zero_to_fp32) use ``weights_only=True``."""
    original = torch.load

    def safe(f, *args, **kwargs):
        kwargs["weights_only"] = True
        with torch.serialization.safe_globals(_safe_globals()):
            return original(f, *args, **kwargs)

    torch.load = safe
    try:
        yield
    finally:
        torch.load = original


def checkpoint_state_dict(step_dir: str | Path) -> dict[str, torch.Tensor]:
    """The wrapped module's full fp32 state dict from a DeepSpeed checkpoint directory.

    With ZeRO (any stage) the fp32 master weights live partitioned in the optimiser files and
    DeepSpeed's ``zero_to_fp32`` gathers them; bf16 with ZeRO-1 is DeepSpeed's ``BF16_Optimizer``
    (``bf16_zero_pp_rank_*`` files, which ``zero_to_fp32`` does not read): see
    :func:`_bf16_optimizer_state_dict`. Without ZeRO the model-states file holds them whole.
    """
    step_dir = Path(step_dir)
    with _weights_only_loads():
        if list(step_dir.glob("bf16_zero_pp_rank_*optim_states.pt")):
            return _bf16_optimizer_state_dict(step_dir)
        if list(step_dir.glob("*zero_pp_rank_*optim_states.pt")):
            from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

            return get_fp32_state_dict_from_zero_checkpoint(str(step_dir.parent), tag=step_dir.name)
        states = sorted(step_dir.glob("mp_rank_*_model_states.pt"))
        if not states:
            raise FileNotFoundError(f"{step_dir}: no DeepSpeed model states (mp_rank_*_model_states.pt)")
        return {k: v.float() for k, v in torch.load(states[0], map_location="cpu")["module"].items()}


def _bf16_optimizer_state_dict(step_dir: Path) -> dict[str, torch.Tensor]:
    """fp32 masters of a ``BF16_Optimizer`` checkpoint: each rank file holds its flat fp32 partition
    per group and, per parameter name, where its fragment lies in that partition; a parameter is
    its fragments in rank order. Shared (tied) names take their source's tensor; parameters the
    optimiser does not hold (frozen) keep the model-states value."""
    states = torch.load(step_dir / "mp_rank_00_model_states.pt", map_location="cpu")
    module, shared = states["module"], states.get("shared_params") or {}
    rank_files = sorted(step_dir.glob("bf16_zero_pp_rank_*_mp_rank_00_optim_states.pt"),
                        key=lambda f: int(f.name.split("_")[4]))
    pieces: dict[str, list[torch.Tensor]] = {}
    for f in rank_files:
        osd = torch.load(f, map_location="cpu")["optimizer_state_dict"]
        for flat, mapping in zip(osd["single_partition_of_fp32_groups"], osd["param_slice_mappings"]):
            for name, frag in mapping.items():
                pieces.setdefault(name, []).append(flat.narrow(0, frag.start, frag.numel))
    out = {name: torch.cat(p).view(module[name].shape).clone() for name, p in pieces.items()}
    for name, t in module.items():
        if name not in out:
            out[name] = out[shared[name]] if shared.get(name) in out else t.float()
    return out


def export_checkpoint(step_dir: str | Path, out_dir: str | Path) -> Path:
    """Export any complete checkpoint of a run as ``out_dir/{discriminator,generator}`` (HF format).

    Needs the run's ``config.json`` (written by the trainer at start) and uses the run's copy of
    the corpus tokenizer (``RUN/tokenizer``) when present.
    """
    from electra.config import ElectraConfig
    from electra.hf_export import export_hf
    from electra.model import ElectraForPretraining

    step_dir = Path(step_dir)
    if not is_complete(step_dir):
        raise FileNotFoundError(f"{step_dir}: not a complete checkpoint (no {META})")
    run_dir = step_dir.parent.parent
    cfg = ElectraConfig.from_dict(json.loads((run_dir / "config.json").read_text()))
    model = ElectraForPretraining(cfg.model)
    prefix = "model."  # the engine wraps ElectraObjective, which holds the model as .model
    state = {k[len(prefix):]: v for k, v in checkpoint_state_dict(step_dir).items() if k.startswith(prefix)}
    model.load_state_dict(state, strict=True)
    tokenizer_dir = run_dir / "tokenizer"
    export_hf(model, cfg.model, out_dir, tokenizer_dir=tokenizer_dir if tokenizer_dir.is_dir() else None)
    return Path(out_dir)
