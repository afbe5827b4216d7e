"""The pre-training job: what a user asks for, typed and checked once, before anything starts.

A ``PretrainJob`` names a config (a preset by name, ``large`` or ``large.json``, or a config file
at any storage location), one corpus location or several (mixed by ``data.weights``:
``electra.mixture``), a run directory, plus ``section.key=value`` overrides, and optionally a
checkpoint to start from (``init_from``: ``electra.init_from``). It is loaded by the project's strict config loader (``common.config``), like the
corpus build's config: an unknown key or a wrong type is an error naming it. The runner
(``electra.pretrain_runner``) takes it through its phases; the command line
(``electra/train.py``) and the Prefect flow (``flows/pretrain.py``) only build one.

The command line's config flags (``--max-steps``, ``--seed``, ...) are generated from the
``train`` section's dataclass by ``config_flags``: each becomes a ``train.<field>=value``
override, so a new config field is a new flag with the same type checks, and no hand-written
flag-to-key map can drift.
"""
from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

from common import config as strict
from common import storage
from common.config import ConfigError, check
from electra.config import TrainConfig

# Flags kept under their historical names (scripts and docs use them): flag -> train field.
FLAG_ALIASES = {"micro-batch": "micro_batch_size"}


@dataclass(frozen=True)
class PretrainJob:
    config: str  # a preset name (electra/configs) or a config location
    data: list[str] | str  # corpus location(s): path, s3://, gs://, https://; several are mixed
    out: str  # the run directory: a local or shared-filesystem path (DeepSpeed saves to paths)
    overrides: list[str] = field(default_factory=list)  # section.key=value, applied in order
    # Start from this checkpoint's weights (a Hugging Face pair folder, a run, a step folder)
    init_from: str | None = None
    # With init_from naming one of our checkpoints: continue its optimiser state and LR schedule
    resume_schedule: bool = False

    @property
    def corpora(self) -> list[str]:
        """The corpus locations, in the order given (their weights follow it)."""
        return [self.data] if isinstance(self.data, str) else list(self.data)

    def validate(self) -> None:
        check(bool(self.config), "config must name a preset or a config file")
        check(bool(self.corpora) and all(self.corpora), "data must name a corpus location")
        check(not self.resume_schedule or bool(self.init_from),
              "--resume-schedule continues the schedule of --init-from's checkpoint: give --init-from too")
        check(bool(self.out), "out must name a run directory")
        check(storage.is_local(self.out),
              f"--out {self.out}: the run directory must be a local or shared-filesystem path (DeepSpeed "
              "writes checkpoints with torch.save to paths); train into a local folder and copy the run "
              "to the store afterwards")

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, source: str = "job") -> PretrainJob:
        return strict.from_dict(cls, d, where=source)


def _flag_type(annotation: Any) -> dict[str, Any]:
    """argparse keywords for a config field's annotation (the loader type-checks the value again)."""
    typ = annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):  # X | None: the flag takes an X
        typ = next(t for t in typing.get_args(annotation) if t is not type(None))
    if typ is bool:
        return {"action": argparse.BooleanOptionalAction}
    if typing.get_origin(typ) is Literal:
        return {"choices": list(typing.get_args(typ))}
    return {"type": typ if typ in (int, float, str) else str}


def config_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per ``train`` field (``--max-steps`` for ``train.max_steps``), default None."""
    hints = typing.get_type_hints(TrainConfig)
    aliases = {v: k for k, v in FLAG_ALIASES.items()}
    group = parser.add_argument_group("train section (each flag is train.<key>=value)")
    for f in dataclasses.fields(TrainConfig):
        names = [f"--{f.name.replace('_', '-')}"] + ([f"--{aliases[f.name]}"] if f.name in aliases else [])
        group.add_argument(*names, dest=f"train.{f.name}", default=None, **_flag_type(hints[f.name]),
                           help=f"train.{f.name} (preset's value if not given; default {f.default!r})")


def flag_overrides(args: argparse.Namespace) -> list[str]:
    """The ``train.<key>=value`` overrides the config flags given on the command line stand for."""
    import json

    out = []
    for f in dataclasses.fields(TrainConfig):
        value = getattr(args, f"train.{f.name}", None)
        if value is not None:
            out.append(f"train.{f.name}={json.dumps(value) if not isinstance(value, str) else value}")
    return out


def job_from_args(args: argparse.Namespace) -> PretrainJob:
    """The job a parsed command line asks for: flags first, then ``--set`` (which wins)."""
    try:
        return PretrainJob.from_dict({"config": args.config, "data": args.data, "out": args.out,
                                      "overrides": flag_overrides(args) + list(args.set),
                                      "init_from": getattr(args, "init_from", None),
                                      "resume_schedule": bool(getattr(args, "resume_schedule", False))})
    except ConfigError as exc:  # the loader prefixes "job: "; the message names the flag already
        raise ConfigError(str(exc).removeprefix("job: ")) from None
