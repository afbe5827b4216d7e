"""Rows, table and plot of the ELECTRA-vs-MLM comparison (``benchmarks/evaluate/electra_vs_mlm.py``).

A row is one fine-tuned model: a checkpoint of either pre-training run, or the random
initialisation. Per task it keeps the primary metric that ``cli.evaluate`` reports for the task
(``results.json``: ``tasks[T].primary``, e.g. CoLA MCC, STS-B Spearman, accuracy for SST-2 and MRPC), the
per-seed scores, and their median (``statistics.median``: the mean of the two middle seeds for an
even count), min and max. The row's average is one statistic with its own spread: for each seed
i, the mean over tasks of seed i's scores; then the median, min and max of those per-seed means
(a centre taken from another statistic, e.g. the mean of the task medians, can fall outside such a
band).

``write_report`` writes ``results.json`` (rows + setup), ``table.md`` (returned, and printed by the
caller) and ``score_vs_flops.png``: one panel per task plus the average, score against
pre-training FLOPs, ELECTRA and MLM lines with min-max bars, the random initialisation as a
horizontal line with its band. Matplotlib runs on the Agg backend (no display).
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path


def task_scores(results: dict) -> dict[str, dict]:
    """Per task: primary metric, per-seed scores (seed order), median, min, max."""
    out = {}
    for task, t in sorted(results.get("tasks", {}).items()):
        primary = t["primary"]
        seeds = sorted(t["seeds"], key=lambda s: s["seed"])
        scores = [float(s["metrics"][primary]) for s in seeds]
        out[task] = {"metric": primary, "seeds": [s["seed"] for s in seeds], "scores": scores,
                     "median": statistics.median(scores), "min": min(scores), "max": max(scores)}
    return out


def average(tasks: dict[str, dict]) -> dict:
    """Median, min and max over seeds of the per-seed mean over tasks."""
    if not tasks:
        return {"median": float("nan"), "min": float("nan"), "max": float("nan")}
    n = min(len(t["scores"]) for t in tasks.values())
    per_seed = [statistics.fmean(t["scores"][i] for t in tasks.values()) for i in range(n)]
    return {"median": statistics.median(per_seed), "min": min(per_seed), "max": max(per_seed)}


def collect_row(objective: str, step: int, meta: dict | None, flops_per_token: float,
                results_path: Path) -> dict:
    tokens = meta["tokens_seen"] if meta else 0
    tasks = task_scores(json.loads(Path(results_path).read_text()))
    return {"objective": objective, "step": step, "tokens": tokens, "flops": tokens * flops_per_token,
            "pretrain_wall_s": meta["wall_time"] if meta else 0.0, "tasks": tasks, "average": average(tasks)}


def table(rows: list[dict]) -> str:
    tasks = sorted({t for r in rows for t in r["tasks"]})
    metrics = {t: next(r["tasks"][t]["metric"] for r in rows if t in r["tasks"]) for t in tasks}
    head = (["objective", "step", "tokens", "FLOPs", "pre-train wall"] + [f"{t} {metrics[t]}" for t in tasks]
            + ["average"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def cell(s: dict | None) -> str:
        return "-" if s is None else f"{s['median']:.1f} [{s['min']:.1f}, {s['max']:.1f}]"

    for r in rows:
        wall = f"{r['pretrain_wall_s'] / 60:.1f} min" if r["objective"] != "random" else "-"
        lines.append("| " + " | ".join([r["objective"], str(r["step"]), f"{r['tokens']:,}", f"{r['flops']:.3g}", wall]
                                       + [cell(r["tasks"].get(t)) for t in tasks] + [cell(r["average"])]) + " |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    panels = sorted({t for r in rows for t in r["tasks"]}) + ["average"]
    cols = min(3, len(panels))
    nrows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(5 * cols, 3.6 * nrows), squeeze=False)
    budgets = sorted({r["flops"] for r in rows if r["flops"]})
    for ax, panel in zip(axes.flat, panels):
        def stat(r):
            return r["average"] if panel == "average" else r["tasks"].get(panel)
        for objective, colour in (("electra", "tab:blue"), ("mlm", "tab:orange")):
            pts = sorted((r["flops"], stat(r)) for r in rows if r["objective"] == objective and stat(r))
            if pts:
                x = [p[0] for p in pts]
                y = [p[1]["median"] for p in pts]
                err = [[p[1]["median"] - p[1]["min"] for p in pts], [p[1]["max"] - p[1]["median"] for p in pts]]
                ax.errorbar(x, y, yerr=err, marker="o", capsize=3, color=colour, label=objective.upper())
        for r in rows:
            if r["objective"] == "random" and stat(r):
                s = stat(r)
                ax.axhline(s["median"], color="grey", linestyle="--", label="no pre-training")
                ax.axhspan(s["min"], s["max"], color="grey", alpha=0.15)
        metric = "task mean, median over seeds" if panel == "average" else next(
            r["tasks"][panel]["metric"] for r in rows if panel in r["tasks"])
        ax.set_title(f"{panel} ({metric})")
        ax.set_xlabel("pre-training FLOPs")
        ax.set_xscale("log")
        # ticks at the checkpoints' budgets only: log-axis labels at every 1e13 overlap
        ax.xaxis.set_major_locator(FixedLocator(budgets))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.2g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(out: Path, rows: list[dict], setup: dict) -> str:
    out = Path(out)
    (out / "results.json").write_text(json.dumps({"setup": setup, "rows": rows}, indent=1) + "\n")
    text = table(rows)
    caps = setup.get("max_train_examples")
    note = (f"Median [min, max] over {setup.get('seeds')} fine-tuning seeds; training examples per task capped at "
            f"{caps or 'none'}; fine-tuning flags: `{' '.join(setup.get('finetune_flags', []))}`")
    if setup.get("pending"):
        note += ("\n\nNot fine-tuned yet (rerun the same command to finish them): "
                 + ", ".join(setup["pending"]) + ".")
    (out / "table.md").write_text(text + "\n\n" + note + "\n")
    plot(rows, out / "score_vs_flops.png")
    return text + "\n\n" + note
