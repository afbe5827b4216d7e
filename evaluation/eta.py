"""The whole evaluation's ETA: the fine-tuning steps still to go at the pace of those done.

Before the first step the runner's plan knows how many optimizer steps every (task, seed) will
take: ``recipe.total_steps`` of the training rows the plan counted (``planned_steps``: the cap
``max_train_examples``, MRPC/STS-B twice for both orders, the task's epochs). It hands them to a
``JobClock`` (``activate``); ``loop.train`` reports each planned run's start, progress and end to
the active clock under the run's label (``"CoLA seed 3"``), and the clock answers with the text
its progress lines end with: the whole evaluation's ETA.

The pace is the planned steps done over the wall-clock time since the first one started, so
model loading, tokenising and prediction between runs are in it. Trade-off: tasks differ in
sequence length and size, so the first task's pace is only a guide for the others (hence "~");
it settles as tasks finish. Seeds a rerun finds saved are ``skip``-ped (nothing to go). SQuAD's
steps are known only after its tokenisation: it is left out of the estimate, and the text says
so. Only the process running the units holds the clock: with ``workers`` > 1 the units run in
worker processes, whose progress lines show each run's own ETA only.
"""
from __future__ import annotations

import time

from .recipe import FinetuneRecipe, total_steps
from .task_spec import TaskSpec

_active: JobClock | None = None  # one evaluation at a time per process (the runner's plan sets it)


def planned_steps(task: TaskSpec, train_rows: int, recipe: FinetuneRecipe) -> int:
    """The optimizer steps one seed of ``task`` takes (``loop.train``'s count) on ``train_rows``
    rows of its training file."""
    rows = min(train_rows, recipe.max_train_examples) if recipe.max_train_examples is not None else train_rows
    return total_steps(rows * (2 if task.both_orders else 1), recipe.batch_size, recipe.epochs or task.epochs)


class JobClock:
    """The planned runs (label -> steps, in order) and the steps done; ``what`` names the whole
    ("4 tasks × 10 seeds"); ``unplanned`` what runs besides, not estimated (" + SQuAD 1.1")."""

    def __init__(self, steps: dict[str, int], what: str, unplanned: str = ""):
        self.planned, self.what, self.unplanned = dict(steps), what, unplanned
        self.done: dict[str, int] = {}  # label -> steps done so far (all of them once finished)
        self.finished: set[str] = set()  # finished or skipped (saved by an earlier run)
        self.start: float | None = None

    def begin(self, label: str) -> None:
        if label in self.planned and self.start is None:
            self.start = time.perf_counter()

    def skip(self, label: str) -> None:
        """A run with nothing to do (its seed was saved by an earlier run)."""
        if label in self.planned:
            self.planned[label] = 0
            self.finished.add(label)

    def advance(self, label: str, step: int) -> str | None:
        """``label`` is at ``step``: the whole evaluation's ETA, or None (not a planned run)."""
        if label not in self.planned:
            return None
        self.done[label] = step
        eta = self._eta()
        return None if eta is None else f"all {self.what}: ETA ~{eta}{self.unplanned}"

    def finish(self, label: str, steps: int) -> str | None:
        """``label`` trained its ``steps``: how many runs are done and the ETA for the rest
        (None: not a planned run, or the last one)."""
        if label not in self.planned:
            return None
        self.done[label], self.planned[label] = steps, steps
        self.finished.add(label)
        eta = self._eta()
        if eta is None or len(self.finished) == len(self.planned):
            return None
        return (f"{len(self.finished)} of {len(self.planned)} ({self.what}) done, "
                f"ETA ~{eta} for the rest{self.unplanned}")

    def _eta(self) -> str | None:
        done = sum(self.done.values())
        if self.start is None or done == 0:
            return None
        pace = (time.perf_counter() - self.start) / done  # seconds per step, all overheads in
        left = sum(max(0, steps - self.done.get(label, 0)) for label, steps in self.planned.items()
                   if label not in self.finished)
        return duration(left * pace)


def duration(seconds: float) -> str:
    """0.2 -> '1 s', 45 -> '45 s', 750 -> '12 min', 7500 -> '2.1 h' (an estimate: two digits at
    most)."""
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    for limit, scale, unit in ((5400, 60, "min"), (172800, 3600, "h")):
        if seconds < limit:
            value = seconds / scale
            return f"{value:.2g} {unit}" if value < 10 else f"{value:.0f} {unit}"
    return f"{seconds / 86400:.2g} days"


def activate(clock: JobClock | None) -> None:
    """Make ``clock`` the one ``loop.train`` reports to (None: no whole-evaluation ETA)."""
    global _active
    _active = clock


def active() -> JobClock | None:
    return _active


def describe(tasks: list[str], seeds: int, squad: str | None = None) -> str:
    """"4 tasks × 10 seeds", "1 task × 2 seeds + SQuAD 1.1", "SQuAD 2.0 × 10 seeds"."""
    plural = lambda n, word: f"{n} {word}{'' if n == 1 else 's'}"  # noqa: E731
    if not tasks:
        return f"{squad} × {plural(seeds, 'seed')}" if squad else "nothing"
    return f"{plural(len(tasks), 'task')} × {plural(seeds, 'seed')}" + (f" + {squad}" if squad else "")


def clock_for(plan: dict[str, int], seeds: list[int], squad: str | None) -> JobClock | None:
    """The clock of a plan ``{task: steps per seed}`` over ``seeds``; None when nothing GLUE is
    planned (SQuAD's steps are not known before its tokenisation)."""
    if not plan:
        return None
    steps = {f"{task} seed {seed}": per_seed for task, per_seed in plan.items() for seed in seeds}
    return JobClock(steps, describe(list(plan), len(seeds)), f" + {squad}" if squad else "")
