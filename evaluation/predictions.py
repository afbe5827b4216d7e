"""Prediction files: one JSONL file per task and seed, from which every score recomputes.

Layout inside an evaluation directory: ``predictions/<task>/seed<N>.jsonl``. Each line is one
evaluated example:

* GLUE: ``{"split", "id", "prediction", "label", "probabilities"}`` — the class name (or STS-B
  score) predicted, the gold label, and for classification the model's probability of every
  class (``{class name: p}``, softmax of the logits), so ``recompute_metrics`` needs nothing but
  the file and ``ensemble_rows`` can average the seeds' probabilities (regression: their scores)
  into one prediction per example.
* SQuAD: ``{"split", "id", "prediction", "best_text", "na_prob", "answers"}`` — the submitted
  answer (``""`` when the no-answer probability exceeds the threshold), the best non-empty span,
  the no-answer probability and the gold texts (empty for unanswerable questions).

Files are written atomically (temp file + rename): a crashed run never leaves a half file that a
later scan would mistake for a finished one.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable

from common.storage import write_bytes

from .squad_metrics import NA_THRESHOLD, squad_evaluate
from .task_spec import TaskSpec
from .tasks import get_task

from .eval_layout import PREDICTIONS as PREDICTIONS_DIR  # noqa: E402  (defined once)


def prediction_path(eval_dir: str | Path, task: str, seed: int) -> Path:
    return Path(eval_dir) / PREDICTIONS_DIR / task / f"seed{seed}.jsonl"


def write_predictions(path: str | Path, rows: Iterable[dict[str, Any]]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows)
    write_bytes(str(path), text.encode("utf-8"))
    return path


def read_predictions(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    rows = []
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: not a JSON line ({exc})") from exc
    return rows


def glue_rows(split: str, guids: list[str], preds: list, labels: list,
              probabilities: list[dict[str, float]] | None = None) -> list[dict[str, Any]]:
    rows = [{"split": split, "id": g, "prediction": p, "label": y}
            for g, p, y in zip(guids, preds, labels)]
    if probabilities is not None:
        if len(probabilities) != len(rows):
            raise ValueError(f"{split}: {len(probabilities)} probability rows for {len(rows)} "
                             f"predictions")
        for row, probs in zip(rows, probabilities):
            row["probabilities"] = probs
    return rows


def class_probabilities(class_names: tuple[str, ...] | list[str],
                        logits) -> list[dict[str, float]]:
    """Softmax of each row of ``logits`` as ``{class name: probability}`` (max-shifted, stable)."""
    out = []
    for row in logits:
        values = [float(v) for v in row]
        if len(values) != len(class_names):
            raise ValueError(f"{len(values)} logits for {len(class_names)} classes")
        top = max(values)
        exps = [math.exp(v - top) for v in values]
        total = sum(exps)
        out.append({c: e / total for c, e in zip(class_names, exps)})
    return out


def ensemble_rows(paths: list[str | Path]) -> list[dict[str, Any]]:
    """One row per (split, id) averaging the seeds' files: class probabilities, or scores.

    Every file must hold the same (split, id) set; the ensembled prediction is the class with
    the highest mean probability (ties: the first class in the files' order) or the mean score.
    """
    if not paths:
        raise ValueError("no prediction files to ensemble")
    runs = [{(r["split"], r["id"]): r for r in read_predictions(p)} for p in paths]
    for path, run in zip(paths[1:], runs[1:]):
        if run.keys() != runs[0].keys():
            raise ValueError(f"{path}: its (split, id) set differs from {paths[0]}'s")
    out = []
    for key, first in runs[0].items():
        row = {k: v for k, v in first.items() if k not in ("prediction", "probabilities")}
        if "probabilities" in first:
            classes = list(first["probabilities"])
            mean = {c: sum(run[key]["probabilities"][c] for run in runs) / len(runs)
                    for c in classes}
            row["probabilities"] = mean
            row["prediction"] = max(classes, key=lambda c: mean[c])
        elif isinstance(first["prediction"], (int, float)):
            row["prediction"] = sum(float(run[key]["prediction"]) for run in runs) / len(runs)
        else:
            raise ValueError(f"{paths[0]}: row {key} has neither probabilities nor a score")
        out.append(row)
    return out


def recompute_metrics(task: str, path: str | Path, *,
                      na_threshold: float = NA_THRESHOLD) -> dict[str, float]:
    """The task's metric dict in percent (as the paper reports), from a prediction file alone.

    Fine-tuning computes its reported scores through this very function, so a score in
    ``results.json`` and one recomputed later from the file cannot disagree.
    """
    rows = read_predictions(path)
    if task.startswith("SQuAD"):
        return squad_metrics_from_rows(rows, v2=task.endswith("2.0"), na_threshold=na_threshold)
    return glue_metrics_from_rows(task, rows)


def glue_metrics_from_rows(task: TaskSpec | str, rows: list[dict[str, Any]]) -> dict[str, float]:
    """A GLUE-like task's metric dict in percent from prediction rows (a file's, or an
    ensemble's), scored as the task declares (``TaskSpec.score``)."""
    spec = get_task(task) if isinstance(task, str) else task
    per_split: dict[str, tuple[list, list]] = {}
    for r in rows:
        preds, labels = per_split.setdefault(r["split"], ([], []))
        preds.append(r["prediction"])
        labels.append(r["label"])
    return {k: 100.0 * v for k, v in spec.score(per_split).items()}


def squad_metrics_from_rows(rows: list[dict[str, Any]], *, v2: bool,
                            na_threshold: float = NA_THRESHOLD) -> dict[str, float]:
    """EM/F1 in percent; for 2.0 also the best-threshold scores (``na_prob`` holds the
    answerability logit and ``na_threshold`` cuts it, as ELECTRA's null-odds file does)."""
    golds = {r["id"]: list(r["answers"]) for r in rows}
    texts = {r["id"]: r["best_text"] for r in rows}
    na = {r["id"]: float(r["na_prob"]) for r in rows} if v2 else None
    scores = squad_evaluate(golds, texts, na_probs=na, na_prob_thresh=na_threshold)
    out = {"exact": scores.exact, "f1": scores.f1}
    if v2:
        out.update(best_exact=scores.best_exact, best_f1=scores.best_f1,
                   best_f1_thresh=scores.best_f1_thresh)
    return {k: float(v) for k, v in out.items() if v is not None}
