"""``results.json`` and ``report.html`` (+ PNG plots) of an evaluation directory.

``results.json``: the checkpoint evaluated (path, step, its ``meta.json``), the model folder and
recipe used, per task the metric names, every seed's scores and prediction file, the medians, and
the GLUE average of the medians (``glue_average``) with the tasks it covers, and the
paper's 8-task GLUE score only when all eight are present. It is written LAST and atomically,
so its presence marks a finished evaluation (the new-checkpoint scanner relies on this).

References. A median means little alone (a collapsed MRPC run scores the majority class), so
results.json also holds each task's trivial ``baseline`` (``baselines``), their average over the
averaged tasks (``baseline_glue_average``) and the published numbers for the recipe's size
(``paper_reference``, from ``paper_scores``). The median table (``reference_table``, rendered
by ``markdown_table`` and in the report) puts beside each median the baseline, one column per
other evaluation passed as ``references`` (e.g. the same model at random initialisation) and the
paper's number (``reference_table`` says how averages are compared). The paper column is looked
up at render time, so reports of older results.json files get it too.

``report.html`` is a static page: a sentence stating the recipe (size, learning rate and
layer-wise decay, optimizer, epochs, batch, length, seeds, precision), the median table, the
per-seed table, ``seeds.png`` (every
seed's primary score with the median marked, per task) and, when other checkpoints of the same
run have been evaluated, ``checkpoints.png``: the pre-training loss curves from the run's
``metrics.jsonl`` beside each task's median score and the GLUE average across steps, so a
falling loss can be checked against rising downstream scores. Unreadable lines of
``metrics.jsonl`` (a cut last line from a killed trainer, or a corrupt line) never stop the
report: they are skipped, and a note under the plot gives their count and line numbers
(``LossCurve.note``; ``LossCurve.summary`` is the same for results.json). Plots use matplotlib's
Agg backend (no display needed).
"""
from __future__ import annotations

import html
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.storage import write_bytes

from . import baselines, paper_scores
from .glue_average import glue_average, glue_average_tasks, paper_glue_average
from .reference_table import num as _num, paper_cell as _paper_cell, reference_table
from .results import TaskResult
from .tasks import TASKS

from .eval_layout import REPORT, RESULTS  # noqa: E402,F401  (the folder's names, defined once)
FORMAT_VERSION = 1
LOSS_KEYS = ("loss", "gen_loss", "disc_loss")
# what the recipe's optimizer names mean (recipe.py); an unknown name is shown as it is
OPTIMIZERS = {"original": "AdamWeightDecay without bias correction, as the original code",
              "adamw": "torch AdamW, bias-corrected"}


def build_results(*, checkpoint: str, model_dir: str, step: int | None, meta: dict,
                  recipe: dict, tasks: dict[str, TaskResult]) -> dict[str, Any]:
    medians = {t: r.median.get(r.primary) for t, r in tasks.items()}
    scored = {t: v for t, v in medians.items() if v is not None}
    task_dicts = {t: r.to_dict() for t, r in tasks.items()}
    return {"format_version": FORMAT_VERSION, "checkpoint": checkpoint, "model_dir": model_dir,
            "step": step, "checkpoint_meta": meta, "recipe": recipe, "tasks": task_dicts,
            "glue_average": glue_average(scored),
            "glue_average_tasks": glue_average_tasks(scored),
            "paper_glue_average": paper_glue_average(scored),
            "baseline_glue_average": baselines.average_primary(task_dicts,
                                                               glue_average_tasks(scored)),
            "paper_reference": paper_scores.references_for(
                recipe.get("size"), {t: d["metrics"] for t, d in task_dicts.items()}),
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


def markdown_table(results: dict[str, Any], references: dict[str, dict] | None = None) -> str:
    """Median per task and metric (percent) with its seeds, min and max, then the references:
    the task's trivial baseline, each of ``references`` (e.g. ``{"random_init": results}``) and
    the paper's number for the recipe's size; the GLUE average last. Notes under the table name
    each baseline and the paper's sources."""
    table = reference_table(results, references)
    head = ["task", "metric", "median", "seeds", "min", "max", "baseline",
            *table.reference_labels, table.paper_label]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in table.rows:
        cells = [r.task, r.metric, _num(r.median), str(r.n), _num(r.low), _num(r.high),
                 _num(r.baseline), *(_num(v) for v in r.references), _paper_cell(r.paper)]
        lines.append("| " + " | ".join(cells) + " |")
    if table.average is not None:
        a = table.average
        lines.append("| " + " | ".join([f"**{a.task}**", "primary", _num(a.median), "", "", "",
                                        _num(a.baseline), *(_num(v) for v in a.references),
                                        _paper_cell(a.paper)]) + " |")
    notes = table.notes()
    return "\n".join(lines) + "\n" + ("\n" + "\n".join(f"- {n}" for n in notes) + "\n"
                                       if notes else "")


def summary_text(results: dict[str, Any], report_path: str | Path,
                 references: dict[str, dict] | None = None) -> str:
    """What a command line prints once at the end: the recipe, the table, where the report is."""
    return (f"{recipe_summary(results)}\n\n{markdown_table(results, references)}\n"
            f"report: {report_path}\n")


def recipe_summary(results: dict[str, Any]) -> str:
    """The fine-tuning recipe in one readable sentence (only what results.json recorded)."""
    rec = results.get("recipe") or {}
    if not rec:
        return "Recipe: not recorded."
    get, ran, decay = rec.get, results.get("precision"), rec.get("layerwise_lr_decay")
    squad = any(t.startswith("SQuAD") for t in results["tasks"])
    caps = {k: v for k, v in (results.get("length_caps") or get("length_caps") or {}).items()
            if squad or not k.startswith("squad")}  # a SQuAD length matters only with SQuAD
    first, seeds = get("first_seed", 0), get("num_seeds")
    parts = [
        "size" in rec and f"ELECTRA-{str(rec['size']).capitalize()} recipe",
        "lr" in rec and f"learning rate {rec['lr']:g}",
        decay is not None and ("no layer-wise decay" if decay == 1 else f"layer-wise decay "
                               f"{decay:g}" + (f" ({get('llrd_variant')} variant)"
                                               if get("llrd_variant") else "")),
        get("optimizer") and f"optimizer {rec['optimizer']}" + (
            f" ({OPTIMIZERS[rec['optimizer']]})" if rec["optimizer"] in OPTIMIZERS else ""),
        "weight_decay" in rec and f"weight decay {rec['weight_decay']:g}",
        "epochs" in rec and (f"{rec['epochs']:g} epochs" if rec["epochs"] is not None
                             else "epochs " + _default_epochs(results, rec)),
        "batch_size" in rec and f"batch {rec['batch_size']}",
        "max_seq_len" in rec and f"max length {rec['max_seq_len']}" + (
            f" (SQuAD {rec['squad_max_len']})" if squad and "squad_max_len" in rec else ""),
        caps and "cut to the model's positions: " + ", ".join(
            f"{k} {v['recipe']}→{v['used']}" for k, v in caps.items()),
        seeds and f"{seeds} seeds ({first}–{first + seeds - 1})",
        "precision" in rec and f"precision {rec['precision']}" + (
            f" (ran {ran})" if ran and ran != rec["precision"] else ""),
    ]
    return "Recipe: " + ", ".join(p for p in parts if p) + "."


def _default_epochs(results: dict[str, Any], rec: dict[str, Any]) -> str:
    out = []
    for task in results["tasks"]:
        if task.startswith("SQuAD"):
            if "squad_epochs" in rec:
                out.append(f"{task} {rec['squad_epochs']:g}")
        elif task in TASKS:
            out.append(f"{task} {TASKS[task].epochs:g}")
    return ", ".join(out) or "the task defaults"


@dataclass
class LossCurve:
    """A run's pre-training loss curves and the ``metrics.jsonl`` lines that could not be read.

    ``skipped``: one row per unreadable line, ``{line, reason, detail}``; ``reason`` is
    ``cut_last_line`` (no newline: the trainer was killed mid-write) or ``corrupt_line``.
    """

    path: str
    curves: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    skipped: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """For results.json: the file, how many lines were skipped, and the first rows."""
        return {"path": self.path, "skipped": len(self.skipped), "rows": self.skipped[:20]}

    def note(self) -> str:
        """One sentence for the report ("" when every line was read)."""
        if not self.skipped:
            return ""
        n = len(self.skipped)
        why = [f"line {r['line']} (a cut last line from a killed trainer)"
               if r["reason"] == "cut_last_line" else f"line {r['line']} (corrupt: {r['detail']})"
               for r in self.skipped[:10]]
        more = f"; {n - 10} more" if n > 10 else ""
        return (f"{n} unreadable line{'s' if n > 1 else ''} skipped in {Path(self.path).name}: "
                + "; ".join(why) + more)


def read_loss_curve(metrics_jsonl: Path) -> LossCurve:
    """The loss curves of a run's metrics.jsonl (``{key: [(step, value)]}``) and its bad lines.

    No line is fatal: the curve is only drawn. A last line without its newline that does not
    parse was cut by a killed trainer (``cut_last_line``). Any other unreadable line (not JSON,
    not an object) is corruption the trainer never writes (each record is one flushed line and a
    resume drops cut lines), so it is logged as a warning with its line number and counted as
    ``corrupt_line``; both show in the report and in results.json, nothing is lost silently.
    """
    metrics_jsonl = Path(metrics_jsonl)
    out = LossCurve(path=str(metrics_jsonl))
    if not metrics_jsonl.is_file():
        return out
    text = metrics_jsonl.read_text(errors="replace")
    lines = text.splitlines()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict):
                raise ValueError(f"a JSON {type(row).__name__}, not an object")
        except ValueError as exc:  # json.JSONDecodeError is a ValueError
            cut = lineno == len(lines) and not text.endswith("\n")
            detail = (f"column {exc.colno}: {exc.msg}" if isinstance(exc, json.JSONDecodeError)
                      else str(exc))
            out.skipped.append({"line": lineno, "reason": "cut_last_line" if cut
                                else "corrupt_line", "detail": detail})
            logging.getLogger(__name__).warning("%s:%d: unreadable line skipped (%s)",
                                                metrics_jsonl, lineno, detail)
            continue
        for key in LOSS_KEYS:
            if isinstance(row.get(key), (int, float)) and "step" in row:
                out.curves.setdefault(key, []).append((int(row["step"]), float(row[key])))
    return out


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
                 history: list[dict[str, Any]] = (), metrics_jsonl: Path | None = None,
                 loss_curve: LossCurve | None = None,
                 references: dict[str, dict] | None = None) -> Path:
    """``report.html`` + PNGs in ``eval_dir``; ``history``: results of the run's checkpoints.

    ``loss_curve``: an already read ``metrics_jsonl`` (the flow reads it once to put its skipped
    lines in results.json too); otherwise ``metrics_jsonl`` is read here. ``references``: other
    evaluations to show beside each median, ``{name: results.json dict}`` (e.g. the same model at
    random initialisation as ``"random_init"``), one column each.
    """
    eval_dir = Path(eval_dir)
    images = [_plot_seeds(results, eval_dir / "seeds.png")]
    if loss_curve is None and metrics_jsonl is not None:
        loss_curve = read_loss_curve(metrics_jsonl)
    curves = loss_curve.curves if loss_curve is not None else {}
    if history or curves:
        images.append(_plot_checkpoints(list(history), curves, eval_dir / "checkpoints.png"))
    body = [f"<h1>Evaluation of {html.escape(str(results['checkpoint']))}</h1>",
            f"<p>step {results.get('step')}, model {html.escape(str(results['model_dir']))}, "
            f"created {results['created']}</p>",
            f"<p>{html.escape(recipe_summary(results))}</p>",
            _html_table(results, references), _html_seed_table(results)]
    body += [f'<p><img src="{p.name}" alt="{p.stem}"></p>' for p in images]
    if loss_curve is not None and loss_curve.skipped:  # under the loss curve
        body.append(f'<p class="note">{html.escape(loss_curve.note())}</p>')
    page = ("<!doctype html><html><head><meta charset='utf-8'><title>ELECTRA evaluation</title>"
            "<style>td,th{padding:2px 8px;border:1px solid #ccc}table{border-collapse:collapse}"
            "</style></head><body>" + "\n".join(body) + "</body></html>\n")
    path = eval_dir / REPORT
    write_bytes(str(path), page.encode("utf-8"))
    return path


def _html_table(results: dict[str, Any], references: dict[str, dict] | None) -> str:
    table = reference_table(results, references)
    head = ["task", "metric", "median (min–max, n seeds)", "baseline",
            *table.reference_labels, table.paper_label]
    rows = ["<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
    for r in table.rows:
        spread = f"{_num(r.median)} ({_num(r.low)}–{_num(r.high)}, {r.n} seed{'s' * (r.n != 1)})"
        cells = [r.task, r.metric, spread, _num(r.baseline), *(_num(v) for v in r.references),
                 _paper_cell(r.paper)]
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    if table.average is not None:
        a = table.average
        cells = [_num(a.median), _num(a.baseline), *(_num(v) for v in a.references),
                 _paper_cell(a.paper)]
        rows.append(f"<tr><th colspan=2>{html.escape(a.task)}</th>"
                    + "".join(f"<th>{html.escape(c)}</th>" for c in cells) + "</tr>")
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in table.notes())
    return "\n".join(rows) + "</table>" + (f'<ul class="note">{notes}</ul>' if notes else "")


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
