"""The evaluation job: which checkpoint, on which tasks and data, with which recipe — checked once.

An ``EvaluationJob`` is loaded by the project's strict config loader (``common.config``), like
the pre-training job: an unknown key or a wrong type is an error naming it, and a user error (an
unknown task, a data folder that does not exist, nothing to evaluate) is one line before any
model is loaded. The runner (``evaluation.evaluation_runner``) takes it through its phases;
the command line and the Prefect flows (``flows/evaluate.py``) only build one.

Where the data is, from one documented place. ``glue_dir`` / ``squad_dir`` given explicitly win;
otherwise the environment variables ``ELECTRA_GLUE_DIR`` and ``ELECTRA_SQUAD_DIR`` name them. The
deployments served by ``make serve`` carry no data paths at all: the worker inherits these
variables, and ``infra/serve.sh`` refuses to start when ``ELECTRA_GLUE_DIR`` is missing.

Tasks: ``tasks=None`` means ``DEFAULT_TASKS`` when a GLUE folder is known — the four GLUE tasks
with the smallest training sets (CoLA, MRPC, STS-B, RTE: 2.5k-8.5k rows each), so a checkpoint is
scored in well under an hour on a CPU. SST-2, QNLI, QQP and MNLI have 67k-393k training rows,
hours each on a CPU; ask for them by name (``--tasks ...``, or the deployment's ``tasks``
parameter). ``tasks=""`` evaluates no GLUE task (SQuAD only).

``request``: the part of the job that decides the numbers (recipe overrides, seeds, SQuAD
version). An evaluation folder holds the results of one request; another request on the same
checkpoint is refused with a one-line error rather than mixed into it or overwriting it.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping

from common import cli
from common import config as strict
from common.config import ConfigError, check

from electra.checkpoint import run_layout as layout

from . import eval_layout
from .glue_tasks import TaskSpec, get_task
from .recipe import FinetuneRecipe

GLUE_DIR_ENV = "ELECTRA_GLUE_DIR"
SQUAD_DIR_ENV = "ELECTRA_SQUAD_DIR"
DEFAULT_TASKS = ("CoLA", "MRPC", "STS-B", "RTE")
# Recipe fields with no flag of their own: the job's ``seeds`` sets num_seeds; length_caps is
# recorded by the run, not asked for.
RECIPE_WITHOUT_FLAGS = ("num_seeds", "length_caps")
# Flags kept under their historical names (scripts use them): field -> flag names.
RECIPE_FLAG_NAMES = {"num_threads": ("threads", "num-threads")}


@dataclass(frozen=True)
class EvaluationJob:
    checkpoint: str = field(metadata={  # evaluation.sources
        "help": "run dir (its newest checkpoint), checkpoint step dir or HF export"})
    out: str | None = field(default=None, metadata={  # None: eval_layout.default_out
        "help": "evaluation folder (default: RUN/eval/step_N for a checkpoint of a run, <folder>/eval for an "
                "HF export)"})
    glue_dir: str | None = field(default=None, metadata={
        "help": f"folder in the official GLUE download layout (default: ${GLUE_DIR_ENV})"})
    tasks: str | None = field(default=None, metadata={  # "": none
        "help": f"comma-separated GLUE tasks (default: {','.join(DEFAULT_TASKS)}, the four with the smallest "
                "training sets; '' for none)"})
    squad_dir: str | None = field(default=None, metadata={  # unset: no SQuAD
        "help": f"folder with train-v<V>.json and dev-v<V>.json (default: ${SQUAD_DIR_ENV})"})
    squad_version: Literal["1.1", "2.0"] = field(default="1.1", metadata={"help": "SQuAD version"})
    seeds: int | None = field(default=None, metadata={
        "help": "fine-tuning seeds per task (median reported; default: the recipe's 10)"})
    recipe: dict = field(default_factory=dict)  # FinetuneRecipe overrides
    workers: int = field(default=1, metadata={
        "help": "processes fine-tuning (task, seed) units in parallel, each with cores/workers threads (one "
                "per GPU on GPUs)"})
    reference: str | None = field(default=None, metadata={
        "help": "evaluation folder of the model at random initialisation, shown beside every score (default: "
                "RUN/eval/random_init when it exists)"})

    def validate(self) -> None:
        check(bool(self.checkpoint), "checkpoint must name a run, a checkpoint or an HF export")
        check(self.workers >= 1, f"workers={self.workers}: must be >= 1")
        check(self.seeds is None or self.seeds >= 1, f"seeds={self.seeds}: must be >= 1")

    @property
    def task_specs(self) -> list[TaskSpec]:
        """The GLUE tasks, in the given order, without duplicates (GlueDataError names an
        unknown one and lists the known ones)."""
        names = DEFAULT_TASKS if self.tasks is None and self.glue_dir else (self.tasks or "").split(",")
        seen: dict[str, TaskSpec] = {}
        for name in (n.strip() for n in names):
            if name:
                spec = get_task(name)
                seen.setdefault(spec.name, spec)
        return list(seen.values())

    @property
    def request(self) -> dict[str, Any]:
        """What decides the numbers besides the checkpoint and the data (module docstring)."""
        overrides = dict(self.recipe)
        if self.seeds is not None:
            overrides["num_seeds"] = self.seeds
        # threads and workers change the speed, not the numbers
        overrides.pop("num_threads", None)
        return {"recipe": dict(sorted(overrides.items())), "squad_version": self.squad_version
                if self.squad_dir else None}

    @property
    def target(self) -> Path:
        return eval_layout.resolve_target(self.checkpoint)

    @property
    def out_dir(self) -> Path:
        return Path(self.out) if self.out else eval_layout.default_out(self.checkpoint)

    @classmethod
    def load(cls, *, env: Mapping[str, str] | None = None, **values: Any) -> EvaluationJob:
        """The job from keyword values (None = not given), data folders from ``env`` (default
        ``os.environ``) where not given; every user error here is one ``ConfigError`` line."""
        job, origin = cls._build(env, values)
        job._check_data(origin)
        job._check_checkpoint()
        target = eval_layout.resolve_target(job.checkpoint)
        if target != Path(job.checkpoint).resolve():  # a run folder: its newest checkpoint, once
            job = dataclasses.replace(job, checkpoint=str(target))
        return job

    @classmethod
    def check_data(cls, *, env: Mapping[str, str] | None = None, **values: Any) -> EvaluationJob:
        """``load``'s checks of the tasks and data folders alone, for a request that names no
        checkpoint yet (the scan: every checkpoint it finds gets these values); the job, its
        checkpoint a placeholder."""
        job, origin = cls._build(env, {**values, "checkpoint": "(each checkpoint found)"})
        job._check_data(origin)
        return job

    @classmethod
    def _build(cls, env: Mapping[str, str] | None, values: dict[str, Any]) -> tuple[EvaluationJob, dict[str, str]]:
        env = os.environ if env is None else env
        values = {k: v for k, v in values.items() if v is not None}
        origin = {}
        for key, var in (("glue_dir", GLUE_DIR_ENV), ("squad_dir", SQUAD_DIR_ENV)):
            if key not in values and env.get(var):
                values[key], origin[key] = env[var], f"${var}"
        return strict.from_dict(cls, values, where="evaluation job"), origin

    def _check_data(self, origin: dict[str, str]) -> None:
        specs = self.task_specs
        if specs and not self.glue_dir:
            raise ConfigError(f"--tasks {','.join(s.name for s in specs)} needs a GLUE folder: "
                              f"--glue-dir DIR or ${GLUE_DIR_ENV}")
        if not specs and not self.squad_dir:
            raise ConfigError("nothing to evaluate: give --tasks with --glue-dir (or "
                              f"${GLUE_DIR_ENV}) and/or --squad-dir")
        for key, given in (("glue_dir", self.glue_dir if specs else None),
                           ("squad_dir", self.squad_dir)):
            if given and not Path(given).is_dir():
                name = origin.get(key, "--" + key.replace("_", "-"))
                raise ConfigError(f"{name}={given}: no such folder (it should hold the official "
                                  f"{'GLUE download: CoLA/, MRPC/, ...' if key == 'glue_dir' else 'SQuAD train/dev JSON files'})")
        if specs and self.glue_dir:
            self._check_task_folders(specs, origin.get("glue_dir", "--glue-dir"))

    def _check_checkpoint(self) -> None:
        target = self.target
        # a checkpoint step dir that is gone is the runner's to record (pruned, skipped)
        if not target.exists() and layout.step_of(target) is None:
            raise ConfigError(f"--checkpoint {self.checkpoint}: no such file or folder")
        if layout.checkpoints_dir(target).is_dir() and not (target / layout.HF).is_dir():
            raise ConfigError(f"--checkpoint {self.checkpoint}: a run folder with no complete "
                              "checkpoint and no hf/ export yet; nothing to evaluate")

    def _check_task_folders(self, specs: list[TaskSpec], name: str) -> None:
        """Every asked task's train and dev files present, else one line naming the missing
        tasks and the ``--tasks`` that evaluates what the folder has: the asked tasks present,
        else every task it holds (a folder holding SST-2 alone, asked for the default four:
        ``--tasks SST-2``), besides the official download. Before any fine-tuning: a missing task
        would otherwise fail only after the others ran. A file that is present but malformed
        fails its task alone, in the runner's plan."""
        from .glue_tasks import TASKS, GlueDataError, check_files

        def has(spec: TaskSpec) -> str | None:  # None: its files are there; else why not
            try:
                check_files(spec, self.glue_dir)
                return None
            except GlueDataError as exc:
                return str(exc)

        missing = {spec.name: why for spec in specs if (why := has(spec)) is not None}
        if not missing:
            return
        asked = "" if self.tasks is not None else "the default --tasks; "
        download = "point it at the official GLUE download (CoLA/, MRPC/, ...)"
        present = [s.name for s in specs if s.name not in missing]
        held = [spec.name for spec in TASKS.values() if has(spec) is None]
        if present:
            way = f"evaluate the tasks it has with --tasks {','.join(present)}"
        elif held:
            way = (f"it holds {', '.join(held)}: evaluate {'it' if len(held) == 1 else 'them'} with "
                   f"--tasks {','.join(held)}, or {download}")
        else:
            folders = sorted(p.name + "/" for p in Path(self.glue_dir).iterdir() if p.is_dir())[:5]
            way = (f"it holds no GLUE task ({'folders: ' + ', '.join(folders) if folders else 'no folders'}); "
                   f"{download}")
        first = next(iter(missing.values()))
        raise ConfigError(f"{name}={self.glue_dir} lacks {', '.join(missing)} ({asked}{first}); {way}")

    @property
    def step_dir(self) -> Path | None:
        """The checkpoint as ``RUN/checkpoints/step_N`` when it is one (existing or not)."""
        target = self.target
        if layout.run_dir_of(target) is not None and layout.step_of(target) is not None:
            return target
        return None


def add_flags(parser: argparse.ArgumentParser, *, skip: tuple[str, ...] = ()) -> cli.Flags:
    """The job's flags (``common.cli``: one per ``EvaluationJob`` field but ``skip``) and one per
    recipe field (``--lr`` sets ``recipe.lr``)."""
    flags = cli.Flags(parser)
    flags.fields(EvaluationJob, skip=skip)
    flags.fields(FinetuneRecipe, section="recipe", skip=RECIPE_WITHOUT_FLAGS, names=RECIPE_FLAG_NAMES,
                 defaults=False, title="fine-tuning recipe (default: the paper's recipe for the model's size)")
    return flags


def job_values(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword values a parsed command line gives ``EvaluationJob.load`` (and the flows):
    the flags given, the recipe ones as the ``recipe`` mapping (always present, maybe empty)."""
    values = cli.nested(cli.given(args))
    values.setdefault("recipe", {})
    return values
