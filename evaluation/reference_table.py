"""The median table of an evaluation with its reference columns (markdown and HTML share it).

Every median is shown beside what it should be read against: the task's trivial ``baseline``
(stored in results.json by fine-tuning, ``baselines``), the same task and metric in each other
evaluation passed as ``references`` (e.g. ``{"random_init": <results.json of the same model at
random initialisation>}``, one column per entry) and the published number for the recipe's size
(``paper_scores``; a released model's number where the paper has none, marked †).

The average row compares like with like: the baseline's and each reference's averages are taken
over exactly the tasks the checkpoint's average covers (a reference lacking one of them gets no
average rather than one over fewer tasks), and the paper's GLUE score appears only when the
average covers the paper's eight tasks. Missing values print as a dash, never as 0.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import baselines, paper_scores
from .glue_average import glue_average_label, glue_average_tasks


def average_label(results: dict[str, Any]) -> str:
    # Older results.json files lack the task list: label them with every GLUE task they hold.
    tasks = results.get("glue_average_tasks") or glue_average_tasks(results["tasks"])
    return glue_average_label(tasks)


@dataclass
class Row:
    """One line of the median table: the checkpoint's median and what to read it against."""

    task: str
    metric: str
    median: float | None
    low: float | None = None
    high: float | None = None
    n: int = 0
    baseline: float | None = None
    references: list[float | None] = field(default_factory=list)  # one per reference label
    paper: paper_scores.Reference | None = None


@dataclass
class ReferenceTable:
    """The median table with its reference columns, shared by the markdown and HTML forms."""

    rows: list[Row]
    average: Row | None
    reference_labels: list[str]
    paper_label: str
    baseline_names: dict[str, str]

    def notes(self) -> list[str]:
        """What the reference columns are: each baseline's predictor, each paper source."""
        out = []
        if self.baseline_names:
            out.append("baseline (a predictor that ignores its input, scored on the same dev "
                       "sets): " + "; ".join(f"{t}: {n}" for t, n in self.baseline_names.items()))
        sources: dict[str, None] = {}
        for r in self.rows + ([self.average] if self.average else []):
            if r.paper is not None:
                mark = "" if r.paper.from_paper else "† "
                sources[f"{mark}{r.paper.model}: {r.paper.source}"] = None
        if sources:
            out.append(f"{self.paper_label} (dev medians): " + "; ".join(sources)
                       + ("; † a released model's number where the paper has none"
                          if any(s.startswith("†") for s in sources) else ""))
        return out


def reference_table(results: dict[str, Any],
                    references: dict[str, dict] | None = None) -> ReferenceTable:
    """Rows of ``results`` with the baseline, every reference evaluation and the paper.

    A reference's score is its median of the same task and metric (absent: None). The average
    row compares like with like: each reference's average is taken over the SAME tasks as the
    checkpoint's (None if it lacks one), and the paper's GLUE score is shown only when the
    average covers the paper's eight tasks.
    """
    references = dict(references or {})
    size = (results.get("recipe") or {}).get("size")
    rows, names = [], {}
    for task, r in results["tasks"].items():
        if r.get("baseline"):
            names[task] = r["baseline"]["name"]
        for metric in r["metrics"]:
            values = [s["metrics"][metric] for s in r["seeds"] if metric in s["metrics"]]
            rows.append(Row(
                task, metric, r["median"].get(metric), min(values, default=None),
                max(values, default=None), len(values),
                ((r.get("baseline") or {}).get("metrics") or {}).get(metric),
                [_median_of(ref, task, metric) for ref in references.values()],
                paper_scores.reference(size, task, metric)))
    average = None
    if results.get("glue_average") is not None:
        tasks = results.get("glue_average_tasks") or glue_average_tasks(results["tasks"])
        average = Row(
            average_label(results), "primary", results["glue_average"],
            baseline=baselines.average_primary(results["tasks"], tasks),
            references=[_average_of(ref, tasks) for ref in references.values()],
            paper=(paper_scores.glue_average(size)
                   if set(tasks) == set(paper_scores.GLUE_TASKS) else None))
    return ReferenceTable(rows, average, [k.replace("_", " ") for k in references],
                          f"paper ({size})" if size else "paper", names)


def _median_of(ref: dict[str, Any], task: str, metric: str) -> float | None:
    return ((ref.get("tasks") or {}).get(task) or {}).get("median", {}).get(metric)


def _average_of(ref: dict[str, Any], tasks: list[str]) -> float | None:
    values = []
    for task in tasks:
        t = (ref.get("tasks") or {}).get(task)
        value = t["median"].get(t["primary"]) if t else None
        if value is None:
            return None
        values.append(value)
    return sum(values) / len(values) if values else None


def num(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def paper_cell(ref: paper_scores.Reference | None) -> str:
    # one decimal: as printed in the source
    return "—" if ref is None else f"{ref.value:.1f}" + ("" if ref.from_paper else "†")
