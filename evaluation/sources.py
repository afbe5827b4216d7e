"""What to fine-tune: resolve a checkpoint path to an HF discriminator folder.

Accepted inputs (checked in this order):

1. a discriminator folder (``config.json`` + ``model.safetensors`` + ``tokenizer.json``);
2. an HF export folder (``discriminator/`` inside, as ``export_hf`` writes it);
3. a checkpoint step dir ``RUN/checkpoints/step_NNNNNNNN`` (has ``meta.json``): its own
   ``hf/discriminator`` if the trainer exported it, else an export made now with
   ``electra.hf_export.export_checkpoint(step_dir, out_dir)`` when the trainer package has it,
   else — for the checkpoint the run stands for only — the run's final export ``RUN/hf``;
4. a run dir: the checkpoint it stands for, as in 3; a run with no complete checkpoint but an
   ``hf/`` export uses that.

Which checkpoint a step dir or run dir names is ``electra.run_layout.resolve_checkpoint``'s rule
(the one the trainer resumes from and ``electra-export`` exports); this module only turns that
checkpoint into a model folder. A step that cannot be turned into a model raises
``CheckpointError`` naming what was looked for; never does an older checkpoint's score get
attached silently to another model.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from electra import run_layout as layout
from electra.run_layout import HF

__all__ = ["CheckpointError", "ResolvedCheckpoint", "resolve_checkpoint"]

DISC = "discriminator"


class CheckpointError(ValueError):
    pass


@dataclass
class ResolvedCheckpoint:
    checkpoint: str  # what the user named (absolute)
    model_dir: Path  # the discriminator folder to load
    source: str  # "hf-folder" | "step-export" | "exported-now" | "run-hf"
    step: int | None = None
    run_dir: Path | None = None
    meta: dict[str, Any] = field(default_factory=dict)


def _is_model_dir(p: Path) -> bool:
    return (p / "config.json").is_file() and (p / "model.safetensors").is_file()


def _read_meta(step_dir: Path) -> dict[str, Any]:
    try:
        return layout.read_meta(step_dir)
    except ValueError as exc:  # names the file
        raise CheckpointError(str(exc)) from exc


def resolve_checkpoint(path: str | Path, *, export_dir: str | Path) -> ResolvedCheckpoint:
    """Find (or make, under ``export_dir``) the discriminator folder for ``path``."""
    path = Path(path).resolve()
    if _is_model_dir(path):
        return ResolvedCheckpoint(str(path), path, "hf-folder")
    if _is_model_dir(path / DISC):
        return ResolvedCheckpoint(str(path), path / DISC, "hf-folder")
    try:
        step_dir = layout.resolve_checkpoint(path)
    except layout.NoCheckpoint:
        step_dir = None
    if step_dir is not None:
        resolved = _resolve_step(step_dir, Path(export_dir))
        resolved.checkpoint = str(path)  # what was named: a run dir stays the run dir
        return resolved
    if _is_model_dir(path / HF / DISC):  # a run with no complete checkpoint, but its export
        return ResolvedCheckpoint(str(path), path / HF / DISC, "run-hf", run_dir=path)
    raise CheckpointError(
        f"{path}: not a checkpoint; expected a discriminator folder (config.json + "
        f"model.safetensors), an HF export (discriminator/), a step dir (meta.json) or a run "
        f"dir (checkpoints/step_*/ or hf/discriminator/)")


def _resolve_step(step_dir: Path, export_dir: Path) -> ResolvedCheckpoint:
    meta = _read_meta(step_dir)
    step = int(meta["step"]) if "step" in meta else layout.step_of(step_dir)
    run_dir = layout.run_dir_of(step_dir)
    common = dict(checkpoint=str(step_dir), step=step, run_dir=run_dir, meta=meta)
    if _is_model_dir(step_dir / HF / DISC):
        return ResolvedCheckpoint(model_dir=step_dir / HF / DISC, source="step-export", **common)
    exporter = _exporter()
    if exporter is not None:
        out = export_dir / step_dir.name
        if not _is_model_dir(out / DISC):
            exporter(step_dir, out)
        return ResolvedCheckpoint(model_dir=out / DISC, source="exported-now", **common)
    if run_dir is not None and _is_model_dir(run_dir / HF / DISC) and \
            layout.find_latest(run_dir) == step_dir:
        return ResolvedCheckpoint(model_dir=run_dir / HF / DISC, source="run-hf", **common)
    raise CheckpointError(
        f"{step_dir}: no HF export ({step_dir / HF / DISC} missing), "
        f"electra.hf_export.export_checkpoint unavailable, and it is not the run's newest "
        f"checkpoint (whose export RUN/hf/ could stand in)")


def _exporter():
    try:
        from electra import hf_export
    except ImportError:
        return None
    return getattr(hf_export, "export_checkpoint", None)
