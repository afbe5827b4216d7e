"""What to fine-tune: resolve a checkpoint path to an HF discriminator folder.

Accepted inputs (checked in this order):

1. a discriminator folder (``config.json`` + ``model.safetensors`` + ``tokenizer.json``);
2. an HF export folder (``discriminator/`` inside, as ``export_hf`` writes it);
3. a checkpoint step dir ``RUN/checkpoints/step_NNNNNNNN`` (has ``meta.json``): its own
   ``hf/discriminator`` if the trainer exported it, else an export made now with
   ``electra.checkpoint.hf_export.export_checkpoint(step_dir, out_dir)`` when the trainer package has it,
   else — for the checkpoint the run stands for only — the run's final export ``RUN/hf``;
4. a run dir: the checkpoint it stands for, as in 3; a run with no complete checkpoint but an
   ``hf/`` export uses that.

Which checkpoint a step dir or run dir names is ``electra.checkpoint.run_layout.resolve_checkpoint``'s rule
(the one the trainer resumes from and ``electra-export`` exports); this module only turns that
checkpoint into a model folder. A step that cannot be turned into a model raises
``CheckpointError`` naming what was looked for; never does an older checkpoint's score get
attached silently to another model.

``peek_checkpoint`` answers the same question without loading or exporting anything (JSON files
and the safetensors header only, milliseconds): which checkpoint, its step, the model's shape and
parameter count. The command line says that in its first line, before the Prefect server starts,
and a path that is no checkpoint is refused there, not minutes later in the flow.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from electra.checkpoint import run_layout as layout
from electra.checkpoint.run_layout import HF

__all__ = ["CheckpointError", "CheckpointPeek", "ModelShape", "ResolvedCheckpoint", "peek_checkpoint",
           "resolve_checkpoint"]

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


@dataclass(frozen=True)
class ModelShape:
    """The discriminator's size, from a config file (no weights loaded)."""

    layers: int
    hidden: int
    positions: int  # max_position_embeddings: the recipe's lengths are capped to it
    parameters: int | None  # the discriminator's (with its head); None when not known cheaply


@dataclass(frozen=True)
class CheckpointPeek:
    """What ``resolve_checkpoint`` will find, known without exporting (``peek_checkpoint``)."""

    checkpoint: Path
    step: int | None = None
    run_dir: Path | None = None
    shape: ModelShape | None = None  # None: a checkpoint gone or not yet readable (the runner decides)
    exported: bool = True  # False: a step dir the runner exports first (``exported-now``)


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
    raise _not_a_checkpoint(path)


def _not_a_checkpoint(path: Path) -> CheckpointError:
    return CheckpointError(
        f"{path}: not a checkpoint; expected a discriminator folder (config.json + "
        f"model.safetensors), an HF export (discriminator/), a step dir (meta.json) or a run "
        f"dir (checkpoints/step_*/ or hf/discriminator/)")


def peek_checkpoint(path: str | Path) -> CheckpointPeek:
    """``resolve_checkpoint``'s answer for ``path`` (its order of forms) without exporting:
    ``CheckpointError`` where it would fail whatever happens meanwhile. A step dir that is gone
    or incomplete is not an error here: the runner records why it was not evaluated."""
    path = Path(path).resolve()
    for folder in (path, path / DISC):
        if _is_model_dir(folder):
            return CheckpointPeek(path, shape=_hf_shape(folder))
    run_dir = layout.run_dir_of(path)
    if run_dir is not None and layout.step_of(path) is not None and not layout.is_complete(path):
        return CheckpointPeek(path, step=layout.step_of(path), run_dir=run_dir)  # gone: the runner's
    try:
        step_dir = layout.resolve_checkpoint(path)
    except layout.NoCheckpoint:
        step_dir = None
    if step_dir is None:
        if _is_model_dir(path / HF / DISC):
            return CheckpointPeek(path, run_dir=path, shape=_hf_shape(path / HF / DISC))
        raise _not_a_checkpoint(path)
    meta = _read_meta(step_dir)
    step = int(meta["step"]) if "step" in meta else layout.step_of(step_dir)
    run_dir = layout.run_dir_of(step_dir)
    peek = dict(checkpoint=step_dir, step=step, run_dir=run_dir)
    if _is_model_dir(step_dir / HF / DISC):
        return CheckpointPeek(**peek, shape=_hf_shape(step_dir / HF / DISC))
    if _exporter() is not None and run_dir is not None and (run_dir / layout.CONFIG).is_file():
        return CheckpointPeek(**peek, shape=_run_shape(run_dir / layout.CONFIG), exported=False)
    if run_dir is not None and _is_model_dir(run_dir / HF / DISC) and layout.find_latest(run_dir) == step_dir:
        return CheckpointPeek(**peek, shape=_hf_shape(run_dir / HF / DISC))
    return CheckpointPeek(**peek, exported=False)  # resolve names what is missing


def _read_json(path: Path) -> dict[str, Any]:
    import json

    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: unreadable model config ({exc})") from exc
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: not a model config (a JSON object)")
    return data


def _hf_shape(model_dir: Path) -> ModelShape:
    """From an HF ``config.json``; the parameters from the safetensors header (shapes only)."""
    cfg = _read_json(model_dir / "config.json")
    try:
        shape = dict(layers=int(cfg["num_hidden_layers"]), hidden=int(cfg["hidden_size"]),
                     positions=int(cfg["max_position_embeddings"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{model_dir / 'config.json'}: cannot read the model's shape ({exc!r})") from exc
    try:
        from safetensors import safe_open

        with safe_open(str(model_dir / "model.safetensors"), framework="np") as f:
            parameters = sum(_numel(f.get_slice(k).get_shape()) for k in f.keys())
    except Exception:  # noqa: BLE001 - the count is a courtesy; loading the weights will say what is wrong
        parameters = None
    return ModelShape(**shape, parameters=parameters)


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _run_shape(config: Path) -> ModelShape:
    """From the trainer's ``RUN/config.json`` (what the export rebuilds the model from)."""
    from electra.config import ElectraConfig
    from electra.run.summary import parameter_counts

    try:
        model = ElectraConfig.from_dict(_read_json(config), source=str(config)).model
    except ValueError as exc:  # ConfigError is one; names the file and key
        raise CheckpointError(str(exc)) from exc
    return ModelShape(layers=model.num_layers, hidden=model.hidden_size,
                      positions=model.max_position_embeddings, parameters=parameter_counts(model)[1])


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
        f"electra.checkpoint.hf_export.export_checkpoint unavailable, and it is not the run's newest "
        f"checkpoint (whose export RUN/hf/ could stand in)")


def _exporter():
    try:
        from electra.checkpoint import hf_export
    except ImportError:
        return None
    return getattr(hf_export, "export_checkpoint", None)
