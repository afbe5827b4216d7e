"""One unit of an evaluation: a task (every seed in one process, its data tokenised once) or one
(task, seed) when ``workers`` > 1; SQuAD is always one unit. ``run_unit`` is a module function of
a picklable ``UnitContext`` and ``Unit`` so that worker processes and Prefect tasks can run it;
each seed is saved as it finishes, so a rerun redoes only what is missing."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .finetune import finetune_glue
from .recipe import FinetuneRecipe
from .results import hash_files, load_task, resume_key, save_task
from .squad_finetune import finetune_squad, squad_files


@dataclass(frozen=True)
class UnitContext:
    """What every unit needs, picklable for worker processes."""

    model_dir: str
    recipe: dict
    out: str
    checkpoint: str
    run_id: str
    glue_dir: str | None
    squad_dir: str | None
    squad_version: str


@dataclass(frozen=True)
class Unit:
    task: str
    seed: int | None = None  # None: every seed of the task (SQuAD: always one unit)

    @property
    def is_squad(self) -> bool:
        return self.task.startswith("SQuAD")

    def describe(self) -> str:
        return self.task if self.seed is None else f"{self.task} seed {self.seed}"


def run_unit(ctx: UnitContext, unit: Unit, slot: int = 0) -> dict[str, Any]:
    """Fine-tune one unit; a ``TaskResult`` dict (a per-seed unit: the task with that seed)."""
    _place(slot)
    recipe = FinetuneRecipe.from_dict(ctx.recipe)
    if unit.is_squad:
        data_files = hash_files(list(squad_files(ctx.squad_dir, ctx.squad_version)))
        key = resume_key(checkpoint=ctx.checkpoint, recipe=ctx.recipe, data_files=data_files)
        done = load_task(ctx.out, unit.task, key=key)
        if done is not None:  # SQuAD resumes as one unit (its seeds are not saved one by one)
            return done.to_dict()
        result = finetune_squad(model_dir=ctx.model_dir, squad_dir=ctx.squad_dir,
                                version=ctx.squad_version, recipe=recipe, out_dir=ctx.out)
        result.data_files = data_files
        for seed in result.seeds:
            seed.run_id = ctx.run_id
        save_task(ctx.out, result, key=key)
        return result.to_dict()
    result = finetune_glue(unit.task, model_dir=ctx.model_dir, glue_dir=ctx.glue_dir,
                           recipe=recipe, out_dir=ctx.out, checkpoint=ctx.checkpoint,
                           run_id=ctx.run_id,
                           only_seeds=None if unit.seed is None else [unit.seed])
    return result.to_dict()


def _place(slot: int) -> None:
    """Unit ``slot``'s GPU when there are several; a no-op on CPU and on one GPU."""
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() > 1:
        torch.cuda.set_device(slot % torch.cuda.device_count())
