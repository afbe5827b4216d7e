"""Trivial baselines beside every fine-tuning score: what a model that learned nothing gets.

A dev score alone does not say whether a model learned anything: on MRPC about two thirds of the
dev pairs are paraphrases, so predicting "paraphrase" everywhere already scores in the high 60s,
and a fine-tuning run that collapsed to one class reports exactly that. Each task therefore gets
the score of a predictor that ignores its input, computed from the same data the model saw:

* classification: the MAJORITY CLASS of the training set (ties: the first label in the task's
  label order, so the choice never depends on row order), predicted for every dev example of
  every evaluation split and scored by the very code that scores the model
  (``predictions.glue_metrics_from_rows``). The training set, not dev, picks the class: a
  baseline chosen on dev would peek at the answers. Accuracy and F1 of a constant predictor are
  well defined; Matthews correlation is 0, as for any constant.
* regression (STS-B): a CONSTANT, the training mean (the least-squares constant). Pearson and
  Spearman correlations of a constant are undefined; ``metrics`` defines them as 0.0 (no
  information), and the baseline's name says "constant" so a 0.0 reads as what it is.
* SQuAD: ALWAYS NO ANSWER, scored by the official rules of the version. On 2.0 this earns every
  unanswerable question, so EM/F1 equal their share of the dev set (up to gold answers that
  normalise to the empty string, which the official scorer also credits); on 1.1 every question
  has an answer and the baseline scores 0.

The result is ``{"name": str, "prediction": label | float | "", "metrics": {metric: percent}}``,
stored as ``TaskResult.baseline``. It costs one pass over labels already in memory, so it is
recomputed on every run (resumed ones included) rather than saved with the seeds.
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

from .glue_tasks import GlueExample
from .predictions import glue_metrics_from_rows
from .squad_metrics import squad_evaluate
from .task_spec import TaskSpec


def majority_label(task: TaskSpec, labels: Sequence[str]) -> str:
    """The most frequent label; ties go to the first in ``task.labels`` (never to row order)."""
    if not labels:
        raise ValueError(f"{task.name}: no training labels to take a majority of")
    counts = Counter(labels)
    return max(task.labels, key=lambda lab: (counts.get(lab, 0), -task.labels.index(lab)))


def glue_baseline(task: TaskSpec, train: Sequence[GlueExample],
                  eval_sets: dict[str, Sequence[GlueExample]]) -> dict[str, Any]:
    """The majority-class (classification) or training-mean (regression) baseline of a task."""
    if task.kind == "regression":
        values = [float(e.label) for e in train]
        if not values:
            raise ValueError(f"{task.name}: no training labels to take a mean of")
        prediction: Any = sum(values) / len(values)
        name = f"constant (training mean {prediction:.2f})"
    else:
        prediction = majority_label(task, [e.label for e in train])
        name = f"majority class '{prediction}'"
    rows = [{"split": split, "prediction": prediction, "label": e.label}
            for split, examples in eval_sets.items() for e in examples]
    if not rows:
        return {"name": name, "prediction": prediction, "metrics": {}}
    return {"name": name, "prediction": prediction,
            "metrics": glue_metrics_from_rows(task, rows)}


def squad_no_answer_baseline(dev: Sequence[Any], *, version: str) -> dict[str, Any]:
    """"Always no answer" on SQuAD dev examples (``SquadExample``: ``qid``, ``answers``)."""
    golds = {e.qid: list(e.answers) for e in dev}
    if not golds:
        return {"name": "always no answer", "prediction": "", "metrics": {}}
    scores = squad_evaluate(golds, {q: "" for q in golds}, version=version)
    return {"name": "always no answer", "prediction": "",
            "metrics": {"exact": float(scores.exact), "f1": float(scores.f1)}}


def average_primary(tasks: dict[str, dict[str, Any]], names: Sequence[str]) -> float | None:
    """Mean of the baselines' primary scores over ``names`` (results.json task dicts); None
    unless every one of those tasks has a baseline with its primary metric."""
    values = []
    for name in names:
        t = tasks.get(name) or {}
        value = ((t.get("baseline") or {}).get("metrics") or {}).get(t.get("primary"))
        if value is None:
            return None
        values.append(float(value))
    return sum(values) / len(values) if values else None
