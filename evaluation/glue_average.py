"""The GLUE average: one primary score per task, averaged as the ELECTRA paper does on dev sets.

Each task contributes its primary score (``TaskSpec.primary``: Matthews for CoLA, Spearman for
STS-B, accuracy for the rest, MNLI-matched accuracy for MNLI), averaged over the tasks that were
run and declare ``in_glue_average`` — WNLI does not (the paper leaves it out because its dev set
is adversarial and every model scores the majority-class baseline), and SQuAD, not a GLUE task,
has no spec at all. An average over a subset is not the paper's number, so
``glue_average_tasks`` names the tasks it covers and ``paper_glue_average`` is defined only when
all eight of the paper's tasks (``paper_scores.GLUE_TASKS``) are present; the label of an average
(``glue_average_label``) says which it is.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .paper_scores import GLUE_TASKS as PAPER_GLUE_TASKS
from .tasks import TASKS


def glue_average_tasks(task_scores: dict[str, float] | Sequence[str]) -> list[str]:
    """The tasks ``glue_average`` covers, the paper's first in its order, then by name."""
    order = {t: i for i, t in enumerate(PAPER_GLUE_TASKS)}
    kept = [t for t in task_scores if t in TASKS and TASKS[t].in_glue_average]
    return sorted(kept, key=lambda t: (order.get(t, len(order)), t))


def glue_average(task_scores: dict[str, float]) -> float | None:
    """Mean primary score over the averaged tasks present; None if there are none."""
    kept = [task_scores[t] for t in glue_average_tasks(task_scores)]
    return float(np.mean(kept)) if kept else None


def paper_glue_average(task_scores: dict[str, float]) -> float | None:
    """The paper's GLUE score: the mean over its eight tasks, None unless all eight are present."""
    if not all(t in task_scores for t in PAPER_GLUE_TASKS):
        return None
    return float(np.mean([task_scores[t] for t in PAPER_GLUE_TASKS]))


def glue_average_label(tasks: Sequence[str]) -> str:
    """How to print an average over ``tasks``: the paper's name only for the paper's 8 tasks."""
    if set(tasks) == set(PAPER_GLUE_TASKS):
        return "GLUE score (paper's 8-task average)"
    return f"GLUE average over {len(tasks)} task{'s' * (len(tasks) != 1)}: {', '.join(tasks)}"
