"""Reading DeepSpeed checkpoint files safely: weights-only loads and the full fp32 state dict.

DeepSpeed's own loader calls ``torch.load(weights_only=False)``, which unpickles arbitrary
objects: a tampered checkpoint could run code. ``install_safe_loader`` wraps the engine's
checkpoint engine so its loads use ``weights_only=True`` with an allow-list of the few DeepSpeed
classes its optimiser files hold (loss scalers, the ZeRO stage enum, fragment addresses);
``checkpoint_state_dict`` (the offline reader behind ``electra.checkpoint.hf_export.export_checkpoint``)
patches ``torch.load`` the same way for the duration of the read (``weights_only_loads``), because
DeepSpeed's ``zero_to_fp32`` calls it directly; so do the universal-checkpoint conversion and load
(``electra.checkpoint.universal``, whose DeepSpeed code calls ``torch.load`` itself too). Each of
these loads first checks the file against the sum written at save (``electra.checkpoint.sums``).

Where the fp32 master weights live depends on the optimiser DeepSpeed chose: without ZeRO the
model-states file holds them whole; with ZeRO they are partitioned over the ranks' optimiser
files (``zero_to_fp32`` gathers them); bf16 with ZeRO-1 is DeepSpeed's ``BF16_Optimizer``, whose
``bf16_zero_pp_rank_*`` files ``zero_to_fp32`` does not read (``_bf16_optimizer_state_dict``
reassembles them from the per-parameter fragment maps). The training-time DeepSpeed glue (process
group, config, engine) is ``electra.distributed.deepspeed_glue``.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import torch

from electra.checkpoint.sums import verify

__all__ = ["checkpoint_state_dict", "install_safe_loader", "safe_globals_list", "safe_load", "weights_only_loads"]


def safe_globals_list() -> list:
    """The DeepSpeed classes its checkpoint files pickle, allowed in weights-only loads."""
    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    return [LossScaler, DynamicLossScaler, ZeroStageEnum, fragment_address]


# ``redirect(path)``: a context manager giving the file to read for ``path`` (the node's copy,
# ``electra.checkpoint.mirror.CheckpointMirror.local``); None reads ``path`` itself.
Redirect = Callable[[str], AbstractContextManager[str]]


def _load(load, f, redirect: Redirect | None, *args, **kwargs):
    """``load`` of ``f`` (through ``redirect``), the bytes first checked against the sum written at
    save when ``f`` is a file of a checkpoint with sums (``electra.checkpoint.sums.verify``)."""
    if not isinstance(f, (str, os.PathLike)):
        return load(f, *args, **kwargs)
    if redirect is None:
        verify(f)
        return load(f, *args, **kwargs)
    with redirect(f) as local:
        verify(local, as_path=f)
        return load(local, *args, **kwargs)


class _SafeLoad:
    """Delegates to DeepSpeed's checkpoint engine, but loads with ``weights_only=True`` (through
    ``redirect`` when one is set)."""

    def __init__(self, inner):
        self._inner = inner
        self.redirect: Redirect | None = None

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def load(self, path: str, map_location=None):
        with torch.serialization.safe_globals(safe_globals_list()):
            return _load(torch.load, path, self.redirect, map_location=map_location, weights_only=True)


def install_safe_loader(engine, redirect: Redirect | None = None) -> None:
    """Weights-only loads for ``engine``'s checkpoint engine, read through ``redirect`` (until the
    next call sets another)."""
    if not isinstance(engine.checkpoint_engine, _SafeLoad):
        engine.checkpoint_engine = _SafeLoad(engine.checkpoint_engine)
    engine.checkpoint_engine.redirect = redirect


def safe_load(path: str | Path, *, mmap: bool = False):
    """``torch.load`` of a DeepSpeed file on the CPU, weights-only (``mmap``: tensors read lazily)."""
    with torch.serialization.safe_globals(safe_globals_list()):
        return torch.load(path, map_location="cpu", mmap=mmap, weights_only=True)


@contextmanager
def weights_only_loads(redirect: Redirect | None = None, *, mmap: bool = False):
    """Make every ``torch.load`` inside (e.g. DeepSpeed's zero_to_fp32) use ``weights_only=True``,
    reading files through ``redirect`` when given; ``mmap``: files given by path are mapped, so
    only the bytes of the tensors used are read (a reader after shapes reads next to nothing)."""
    original = torch.load

    def safe(f, *args, **kwargs):
        kwargs["weights_only"] = True
        if mmap and isinstance(f, (str, os.PathLike)):
            kwargs["mmap"] = True
        with torch.serialization.safe_globals(safe_globals_list()):
            return _load(original, f, redirect, *args, **kwargs)

    torch.load = safe
    try:
        yield
    finally:
        torch.load = original


def checkpoint_state_dict(step_dir: str | Path) -> dict[str, torch.Tensor]:
    """The wrapped module's full fp32 state dict from a DeepSpeed checkpoint directory (module
    docstring: where the masters live for each optimiser), read with weights-only loads."""
    step_dir = Path(step_dir)
    with weights_only_loads():
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
