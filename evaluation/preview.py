"""What an evaluation will do, said before anything starts: the command line's first line.

A CLI run spends its first minutes (on a busy machine) starting a private Prefect server,
exporting the checkpoint and tokenising the data before the first progress line. Everything the
user needs to know that the right thing is starting is known in milliseconds from the job and
a few small files (``sources.peek_checkpoint``: JSON and the safetensors header, no weights):
which checkpoint and step, the model's size and so its paper recipe, the tasks × seeds, where
the results go. ``preview`` works that out (and refuses what would fail later: a path that is
no checkpoint, a recipe value out of range, as one ``CheckpointError`` / ``ConfigError`` line);
``Preview.line`` is the line. The ETA follows once fine-tuning has a pace (``evaluation.eta``).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from common.config import ConfigError

from .eta import describe
from .evaluation_job import EvaluationJob
from .recipe import FinetuneRecipe, recipe_for_shape, recipe_for_size
from .sources import CheckpointPeek, peek_checkpoint
from .squad_finetune import squad_task_name


@dataclass(frozen=True)
class Preview:
    job: EvaluationJob
    peek: CheckpointPeek
    recipe: FinetuneRecipe

    @property
    def squad(self) -> str | None:
        return squad_task_name(self.job.squad_version) if self.job.squad_dir else None

    def what(self) -> str:
        """"step 20 of run RUN (12 layers, hidden 256, 13.5 M parameters: the small recipe):
        4 tasks × 10 seeds (CoLA, MRPC, STS-B, RTE)"."""
        tasks = [s.name for s in self.job.task_specs]
        named = ", ".join(tasks + ([self.squad] if self.squad else []))
        return (f"{checkpoint_words(self.peek)} ({model_words(self.peek, self.recipe)}): "
                f"{describe(tasks, self.recipe.num_seeds, self.squad)} ({named})")

    def line(self) -> str:
        """The first line of a run: ``what`` and where the results go."""
        return f"{self.what()} -> {self.job.out_dir}; the ETA follows the first fine-tuning steps"


def overrides(job: EvaluationJob) -> dict:
    """The recipe overrides the job asks for (its ``seeds`` as ``num_seeds``), as the runner
    applies them."""
    return {**job.recipe, **({"num_seeds": job.seeds} if job.seeds else {})}


def preview(job: EvaluationJob) -> Preview:
    """The job's preview; ``CheckpointError`` / ``ConfigError`` for what would fail later."""
    peek = peek_checkpoint(job.target)
    asked = overrides(job)
    with naming_flags(asked):
        recipe = (recipe_for_shape(peek.shape.hidden, peek.shape.positions, **asked) if peek.shape is not None
                  else recipe_for_size(asked.pop("size", None) or "small", **asked))  # checks the values
    return Preview(job, peek, recipe)


@contextmanager
def naming_flags(asked: dict):
    """A recipe value out of range, as one line that starts with the flags given ("--lr 0: ...")."""
    try:
        yield
    except ConfigError as exc:
        flag = {"num_seeds": "seeds", "num_threads": "threads"}
        given = " ".join(f"--{flag.get(key, key).replace('_', '-')} {value}" for key, value in asked.items())
        raise ConfigError(f"{given}: {exc}" if given else str(exc)) from exc


def checkpoint_words(peek: CheckpointPeek) -> str:
    if peek.step is not None and peek.run_dir is not None:
        return f"step {peek.step} of run {peek.run_dir}"
    return str(peek.checkpoint)


def model_words(peek: CheckpointPeek, recipe: FinetuneRecipe) -> str:
    shape = peek.shape
    if shape is None:
        return "not readable yet; the run says why"
    parameters = f", {millions(shape.parameters)} parameters" if shape.parameters else ""
    export = "" if peek.exported else "; exported first"
    return f"{shape.layers} layers, hidden {shape.hidden}{parameters}: the {recipe.size} recipe{export}"


def millions(n: int) -> str:
    """13_548_800 -> '13.5 M', 52_866 -> '0.053 M' (the paper counts models in millions)."""
    return f"{n / 1e6:.3g} M"


def scan_line(runs: str | Path, pending: list[tuple[Path, Path]], job: EvaluationJob) -> str:
    """``electra-evaluate-new``'s first line: how many checkpoints wait, which, and what each
    gets (``job``: ``EvaluationJob.check_data``'s); ``ConfigError`` for a bad recipe value,
    checked once for all."""
    asked = overrides(job)
    with naming_flags(asked):
        recipe = recipe_for_size(asked.pop("size", None) or "small", **asked)
    squad = squad_task_name(job.squad_version) if job.squad_dir else None
    tasks = [s.name for s in job.task_specs]
    if not pending:
        return f"no checkpoint without results under {runs}; nothing to evaluate"
    shown = ", ".join(f"{step.parent.parent.name}/{step.name}" for step, _ in pending[:3])
    more = f" and {len(pending) - 3} more" if len(pending) > 3 else ""
    named = ", ".join(tasks + ([squad] if squad else []))
    return (f"{len(pending)} checkpoint(s) without results under {runs} ({shown}{more}; newest first in each run), "
            f"each on {describe(tasks, recipe.num_seeds, squad)} ({named})")
