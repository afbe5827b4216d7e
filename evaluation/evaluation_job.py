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

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping

from common import config as strict
from common.config import ConfigError, check

from electra import run_layout as layout

from . import eval_layout
from .glue_tasks import TaskSpec, get_task

GLUE_DIR_ENV = "ELECTRA_GLUE_DIR"
SQUAD_DIR_ENV = "ELECTRA_SQUAD_DIR"
DEFAULT_TASKS = ("CoLA", "MRPC", "STS-B", "RTE")


@dataclass(frozen=True)
class EvaluationJob:
    checkpoint: str  # run dir, checkpoint step dir, or HF export (evaluation.sources)
    out: str | None = None  # None: eval_layout.default_out
    glue_dir: str | None = None  # None: $ELECTRA_GLUE_DIR
    tasks: str | None = None  # None: DEFAULT_TASKS when a GLUE folder is known; "": none
    squad_dir: str | None = None  # None: $ELECTRA_SQUAD_DIR (unset: no SQuAD)
    squad_version: Literal["1.1", "2.0"] = "1.1"
    seeds: int | None = None  # fine-tuning seeds per task (None: the recipe's 10)
    recipe: dict = field(default_factory=dict)  # FinetuneRecipe overrides
    workers: int = 1  # processes fine-tuning (task, seed) units in parallel
    # an evaluation folder of the same model at random initialisation, shown beside every score
    # (None: RUN/eval/random_init when the checkpoint's run has one)
    reference: str | None = None

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
        env = os.environ if env is None else env
        values = {k: v for k, v in values.items() if v is not None}
        origin = {}
        for key, var in (("glue_dir", GLUE_DIR_ENV), ("squad_dir", SQUAD_DIR_ENV)):
            if key not in values and env.get(var):
                values[key], origin[key] = env[var], f"${var}"
        job = strict.from_dict(cls, values, where="evaluation job")
        job._check_inputs(origin)
        target = eval_layout.resolve_target(job.checkpoint)
        if target != Path(job.checkpoint).resolve():  # a run folder: its newest checkpoint, once
            job = dataclasses.replace(job, checkpoint=str(target))
        return job

    def _check_inputs(self, origin: dict[str, str]) -> None:
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
        target = self.target
        # a checkpoint step dir that is gone is the runner's to record (pruned, skipped)
        if not target.exists() and layout.step_of(target) is None:
            raise ConfigError(f"--checkpoint {self.checkpoint}: no such file or folder")
        if layout.checkpoints_dir(target).is_dir() and not (target / layout.HF).is_dir():
            raise ConfigError(f"--checkpoint {self.checkpoint}: a run folder with no complete "
                              "checkpoint and no hf/ export yet; nothing to evaluate")

    @property
    def step_dir(self) -> Path | None:
        """The checkpoint as ``RUN/checkpoints/step_N`` when it is one (existing or not)."""
        target = self.target
        if layout.run_dir_of(target) is not None and layout.step_of(target) is not None:
            return target
        return None
