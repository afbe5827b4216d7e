"""Named results of fine-tuning: one ``SeedResult`` per run, one ``TaskResult`` per task.

The reported score of a task is the MEDIAN over seeds of each metric (the paper reports medians
of many fine-tuning runs from one checkpoint, because single runs of small GLUE tasks swing by
several points). The "median seed" — the run whose primary score is the median (the lower middle
for an even count) — is the model whose test predictions go into a GLUE submission.
"""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class SeedResult:
    seed: int
    metrics: dict[str, float]  # percent
    predictions: str  # prediction file, relative to the evaluation directory
    test_predictions: str | None = None
    train_loss: list[float] = field(default_factory=list)  # mean per epoch
    steps: int = 0
    seconds: float = 0.0


@dataclass
class TaskResult:
    task: str
    primary: str  # the metric the median seed and the GLUE average use
    seeds: list[SeedResult]
    num_train: int = 0
    num_eval: dict[str, int] = field(default_factory=dict)

    @property
    def median(self) -> dict[str, float]:
        return median_metrics([s.metrics for s in self.seeds])

    def median_seed(self) -> SeedResult:
        ranked = sorted(self.seeds, key=lambda s: (s.metrics[self.primary], s.seed))
        return ranked[(len(ranked) - 1) // 2]

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task, "primary": self.primary, "median": self.median,
                "metrics": sorted(self.median), "num_train": self.num_train,
                "num_eval": self.num_eval, "seeds": [asdict(s) for s in self.seeds]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TaskResult:
        return cls(task=d["task"], primary=d["primary"],
                   seeds=[SeedResult(**s) for s in d["seeds"]],
                   num_train=d.get("num_train", 0), num_eval=d.get("num_eval", {}))


def median_metrics(runs: list[dict[str, float]]) -> dict[str, float]:
    """Median of every metric present in all runs."""
    if not runs:
        return {}
    keys = set(runs[0]).intersection(*runs[1:])
    return {k: float(statistics.median(r[k] for r in runs)) for k in sorted(keys)}
