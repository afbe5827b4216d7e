"""``results.json`` and ``report.html`` (+ PNG plots) of an evaluation directory.

``results.json``: the checkpoint evaluated (path, step, its ``meta.json``), the model folder and
recipe used, per task the metric names, every seed's scores and prediction file, the medians, and
the GLUE average of the medians (``metrics.glue_average``) with the tasks it covers, and the
paper's 8-task GLUE score only when all eight are present. It is written LAST and atomically,
so its presence marks a finished evaluation (the new-checkpoint scanner relies on this).

``report.html`` is a static page: the median table, the per-seed table, ``seeds.png`` (every
seed's primary score with the median marked, per task) and, when other checkpoints of the same
run have been evaluated, ``checkpoints.png``: the pre-training loss curves from the run's
``metrics.jsonl`` beside each task's median score and the GLUE average across steps, so a
falling loss can be checked against rising downstream scores. Plots use matplotlib's Agg
backend (no display needed).
"""
from __future__ import annotations

import html
import json
import logging
import time
from pathlib import Path
from typing import Any

from common.storage import write_bytes

from .metrics import glue_average, glue_average_label, glue_average_tasks, paper_glue_average
from .results import TaskResult

RESULTS = "results.json"
REPORT = "report.html"
FORMAT_VERSION = 1
LOSS_KEYS = ("loss", "gen_loss", "disc_loss")


def build_results(*, checkpoint: str, model_dir: str, step: int | None, meta: dict,
                  recipe: dict, tasks: dict[str, TaskResult]) -> dict[str, Any]:
    medians = {t: r.median.get(r.primary) for t, r in tasks.items()}
    scored = {t: v for t, v in medians.items() if v is not None}
    return {"format_version": FORMAT_VERSION, "checkpoint": checkpoint, "model_dir": model_dir,
            "step": step, "checkpoint_meta": meta, "recipe": recipe,
            "tasks": {t: r.to_dict() for t, r in tasks.items()},
            "glue_average": glue_average(scored),
            "glue_average_tasks": glue_average_tasks(scored),
            "paper_glue_average": paper_glue_average(scored),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def write_results(eval_dir: str | Path, results: dict[str, Any]) -> Path:
    path = Path(eval_dir) / RESULTS
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes(str(path), (json.dumps(results, indent=2, sort_keys=True) + "\n").encode())
    return path


def read_results(eval_dir: str | Path) -> dict[str, Any]:
    path = Path(eval_dir) / RESULTS
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: unreadable results ({exc})") from exc


def markdown_table(results: dict[str, Any]) -> str:
    """Median per task and metric (percent), seeds count, and the GLUE average."""
    lines = ["| task | metric | median | seeds | min | max |", "|---|---|---|---|---|---|"]
    for task, r in results["tasks"].items():
        for metric in r["metrics"]:
            values = [s["metrics"][metric] for s in r["seeds"]]
            lines.append(f"| {task} | {metric} | {r['median'][metric]:.2f} | {len(values)} | "
                         f"{min(values):.2f} | {max(values):.2f} |")
    avg = results.get("glue_average")
    if avg is not None:
        lines.append(f"| **{_average_label(results)}** | primary | {avg:.2f} | | | |")
    return "\n".join(lines) + "\n"


def _average_label(results: dict[str, Any]) -> str:
    # Older results.json files lack the task list: label them with every GLUE task they hold.
    tasks = results.get("glue_average_tasks") or glue_average_tasks(results["tasks"])
    return glue_average_label(tasks)


def read_loss_curve(metrics_jsonl: Path,
                    skipped: list[str] | None = None) -> dict[str, list[tuple[int, float]]]:
    """``{key: [(step, value)]}`` for the loss keys present in a run's metrics.jsonl.

    A last line without its newline that does not parse was cut by a killed trainer: it is
    ignored, logged and appended to ``skipped`` (``"file:line: reason"``). A bad complete line is
    corruption, not a cut, and stays an error naming file and line.
    """
    curves: dict[str, list[tuple[int, float]]] = {}
    if not metrics_jsonl.is_file():
        return curves
    text = metrics_jsonl.read_text(errors="replace")
    lines = text.splitlines()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            if lineno == len(lines) and not text.endswith("\n"):
                where = f"{metrics_jsonl}:{lineno}: cut last line ignored ({exc})"
                logging.getLogger(__name__).warning("%s", where)
                if skipped is not None:
                    skipped.append(where)
                continue
            raise ValueError(f"{metrics_jsonl}:{lineno}: not a JSON line ({exc})") from exc
        if not isinstance(row, dict):
            raise ValueError(f"{metrics_jsonl}:{lineno}: not a JSON object")
        for key in LOSS_KEYS:
            if isinstance(row.get(key), (int, float)) and "step" in row:
                curves.setdefault(key, []).append((int(row["step"]), float(row[key])))
    return curves


def _plot_seeds(results: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(results["tasks"].items())
    fig, ax = plt.subplots(figsize=(max(4, 1.4 * len(tasks)), 3.5))
    for x, (task, r) in enumerate(tasks):
        values = [s["metrics"][r["primary"]] for s in r["seeds"]]
        ax.scatter([x] * len(values), values, s=18, alpha=0.7, color="tab:blue")
        ax.hlines(r["median"][r["primary"]], x - 0.3, x + 0.3, color="tab:red")
    ax.set_xticks(range(len(tasks)), [f"{t}\n{r['primary']}" for t, r in tasks], fontsize=8)
    ax.set_ylabel("score (%)")
    ax.set_title("fine-tuning seeds (red: median)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _plot_checkpoints(history: list[dict[str, Any]], curves: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.5))
    for key, points in curves.items():
        left.plot([p[0] for p in points], [p[1] for p in points], label=key)
    left.set_xlabel("step")
    left.set_title("pre-training loss (metrics.jsonl)")
    if curves:
        left.legend(fontsize=8)
    runs = sorted((h for h in history if h.get("step") is not None), key=lambda h: h["step"])
    tasks = sorted({t for h in runs for t in h["tasks"]})
    for task in tasks:
        pts = [(h["step"], h["tasks"][task]["median"][h["tasks"][task]["primary"]])
               for h in runs if task in h["tasks"]]
        right.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=task)
    avg = [(h["step"], h["glue_average"]) for h in runs if h.get("glue_average") is not None]
    if avg:
        right.plot([p[0] for p in avg], [p[1] for p in avg], "k--", marker="s", label="GLUE avg")
    right.set_xlabel("checkpoint step")
    right.set_title("downstream median score (%)")
    if tasks:
        right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def write_report(eval_dir: str | Path, results: dict[str, Any], *,
                 history: list[dict[str, Any]] = (),
                 metrics_jsonl: Path | None = None) -> Path:
    """``report.html`` + PNGs in ``eval_dir``; ``history``: results of the run's checkpoints."""
    eval_dir = Path(eval_dir)
    images = [_plot_seeds(results, eval_dir / "seeds.png")]
    curves = read_loss_curve(metrics_jsonl) if metrics_jsonl is not None else {}
    if history or curves:
        images.append(_plot_checkpoints(list(history), curves, eval_dir / "checkpoints.png"))
    body = [f"<h1>Evaluation of {html.escape(str(results['checkpoint']))}</h1>",
            f"<p>step {results.get('step')}, model {html.escape(str(results['model_dir']))}, "
            f"created {results['created']}</p>", _html_table(results), _html_seed_table(results)]
    body += [f'<p><img src="{p.name}" alt="{p.stem}"></p>' for p in images]
    page = ("<!doctype html><html><head><meta charset='utf-8'><title>ELECTRA evaluation</title>"
            "<style>td,th{padding:2px 8px;border:1px solid #ccc}table{border-collapse:collapse}"
            "</style></head><body>" + "\n".join(body) + "</body></html>\n")
    path = eval_dir / REPORT
    write_bytes(str(path), page.encode("utf-8"))
    return path


def _html_table(results: dict[str, Any]) -> str:
    rows = ["<table><tr><th>task</th><th>metric</th><th>median</th><th>seeds</th></tr>"]
    for task, r in results["tasks"].items():
        for m in r["metrics"]:
            rows.append(f"<tr><td>{html.escape(task)}</td><td>{m}</td>"
                        f"<td>{r['median'][m]:.2f}</td><td>{len(r['seeds'])}</td></tr>")
    if results.get("glue_average") is not None:
        rows.append(f"<tr><th colspan=2>{html.escape(_average_label(results))}</th>"
                    f"<th>{results['glue_average']:.2f}</th><td></td></tr>")
    return "\n".join(rows) + "</table>"


def _html_seed_table(results: dict[str, Any]) -> str:
    rows = ["<h2>Every run</h2><table><tr><th>task</th><th>seed</th><th>scores</th>"
            "<th>predictions</th><th>steps</th><th>seconds</th></tr>"]
    for task, r in results["tasks"].items():
        for s in r["seeds"]:
            scores = ", ".join(f"{k} {v:.2f}" for k, v in sorted(s["metrics"].items()))
            rows.append(f"<tr><td>{html.escape(task)}</td><td>{s['seed']}</td><td>{scores}</td>"
                        f"<td>{html.escape(s['predictions'])}</td><td>{s['steps']}</td>"
                        f"<td>{s['seconds']:.1f}</td></tr>")
    return "\n".join(rows) + "</table>"
