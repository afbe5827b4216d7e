"""The pre-training job: what a user asks for, typed and checked once, before anything starts.

A ``PretrainJob`` names a config (a preset by name, ``large`` or ``large.json``, or a config file
at any storage location), one corpus location or several (mixed by ``data.weights``:
``electra.data.mixture``), a run directory, plus ``section.key=value`` overrides, and optionally a
checkpoint to start from (``init_from``: ``electra.checkpoint.init_from``). It is loaded by the project's strict config loader (``common.config``), like the
corpus build's config: an unknown key or a wrong type is an error naming it. The runner
(``electra.run.runner``) takes it through its phases; the command line
(``electra/train.py``) and the Prefect flow (``flows/pretrain.py``) only build one.

The command line (``electra/train.py``) is generated from this job and from the ``train``
section's dataclass by the one flag helper (``common.cli``): ``--config``, ``--data`` (repeatable),
``--out``, ``--init-from``, ``--resume-schedule``, ``--set`` from ``PretrainJob``; ``--max-steps``,
``--seed``, ... from ``TrainConfig``, each a ``train.<field>=value`` override, so a new config
field is a new flag with the same type checks, and no hand-written flag-to-key map can drift.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

from common import cli
from common import config as strict
from common import storage
from common.config import ConfigError, check
from electra.config import TrainConfig

# Flags kept under their historical names (scripts and docs use them): flag -> train field.
FLAG_ALIASES = {"micro-batch": "micro_batch_size"}


@dataclass(frozen=True)
class PretrainJob:
    config: str = field(metadata={"help": "a preset by name (tiny, mini, small, base, large) or a config JSON "
                                          "(path or URI)"})
    data: list[str] | str = field(metadata={
        "help": "corpus location: a path or s3:// gs:// https:// URI (manifest.json, tokenizer/, shards/); "
                "repeatable: corpora mixed by data.weights (one per --data, in order)"})
    out: str = field(metadata={  # DeepSpeed saves to paths
        "help": "run directory (local or shared filesystem); rerunning resumes from its latest checkpoint"})
    overrides: list[str] = field(default_factory=list, metadata={  # applied in order
        "help": "any config field, e.g. optimizer.lr=1e-4 (repeatable; wins over the flags)", "metavar": "KEY=VALUE"})
    init_from: str | None = field(default=None, metadata={
        "metavar": "LOCATION",
        "help": "start from these weights: a folder with discriminator/ and generator/ (Hugging Face; a released "
                "pair or RUN/hf), a run folder or RUN/checkpoints/step_N; the architecture is the checkpoint's, "
                "the optimiser and schedule start at step 0"})
    resume_schedule: bool = field(default=False, metadata={
        "help": "with --init-from one of our runs: continue its optimiser state and LR schedule"})

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


def add_flags(parser: argparse.ArgumentParser) -> cli.Flags:
    """The job's flags and one per ``train`` field (``--max-steps`` for ``train.max_steps``)."""
    flags = cli.Flags(parser)
    flags.fields(PretrainJob, names={"overrides": "set", "resume_schedule": "resume-schedule"})
    flags.fields(TrainConfig, section="train", names={f: (f.replace("_", "-"), alias)
                                                      for alias, f in FLAG_ALIASES.items()},
                 title="train section (each flag is train.<key>=value; the preset's value if not given)")
    return flags


def flag_overrides(args: argparse.Namespace) -> list[str]:
    """The ``train.<key>=value`` overrides the config flags given on the command line stand for."""
    return cli.as_overrides({k: v for k, v in cli.given(args).items() if k.startswith("train.")})


def job_from_args(args: argparse.Namespace) -> PretrainJob:
    """The job a parsed command line asks for: flags first, then ``--set`` (which wins)."""
    values = {k: v for k, v in cli.given(args).items() if "." not in k}
    values["overrides"] = flag_overrides(args) + list(values.get("overrides", []))
    try:
        return PretrainJob.from_dict(values)
    except ConfigError as exc:  # the loader prefixes "job: "; the message names the flag already
        raise ConfigError(str(exc).removeprefix("job: ")) from None
