"""report.html and the loss curve of metrics.jsonl: cut and corrupt lines are skipped, counted
and shown under the plot, never fatal."""
from __future__ import annotations

import json

import pytest

from evaluation import report
from evaluation.results import SeedResult, TaskResult

ROWS = [{"step": s, "loss": 1.0 / s, "disc_loss": 0.5 / s} for s in range(1, 6)]
CUT_NOTE = "(a cut last line from a killed trainer)"


def _lines(rows) -> list[str]:
    return [json.dumps(r) + "\n" for r in rows]


def _results() -> dict:
    task = TaskResult(task="RTE", primary="accuracy", seeds=[SeedResult(
        seed=s, metrics={"accuracy": 50.0 + s}, predictions=f"p/seed{s}.jsonl", steps=3,
        seconds=1.0) for s in range(3)])
    return report.build_results(checkpoint="ckpt", model_dir="m", step=100, meta={}, recipe={},
                                tasks={"RTE": task})


def _expected(rows, key):
    return [(r["step"], r[key]) for r in rows if key in r]


def test_cut_last_line_is_counted_and_shown(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(_lines(ROWS)) + json.dumps({"step": 6, "loss": 0.1})[:11])
    curve = report.read_loss_curve(path)
    assert curve.curves["loss"] == _expected(ROWS, "loss")
    assert curve.curves["disc_loss"] == _expected(ROWS, "disc_loss")
    assert [(r["line"], r["reason"]) for r in curve.skipped] == [(6, "cut_last_line")]
    assert curve.summary() == {"path": str(path), "skipped": 1, "rows": curve.skipped}
    out = tmp_path / "eval"
    out.mkdir()
    report.write_report(out, _results(), metrics_jsonl=path)
    page = (out / "report.html").read_text()
    assert f"1 unreadable line skipped in metrics.jsonl: line 6 {CUT_NOTE}" in page
    assert '<img src="checkpoints.png"' in page  # the curve is still drawn
    assert (out / "checkpoints.png").stat().st_size > 1000
    assert page.index("checkpoints.png") < page.index("unreadable line")  # note under the plot


def test_corrupt_middle_lines_are_skipped_with_line_numbers(tmp_path):
    path = tmp_path / "metrics.jsonl"
    lines = _lines(ROWS)
    lines.insert(2, '{"step": 99, "lo\n')  # line 3: a complete but corrupt line
    lines.insert(4, "[1, 2]\n")  # line 5: JSON, not an object
    path.write_text("".join(lines) + '{"step": 7, "loss"')  # line 8: cut by a kill
    curve = report.read_loss_curve(path)
    assert curve.curves["loss"] == _expected(ROWS, "loss")  # every good line kept, in order
    assert [(r["line"], r["reason"]) for r in curve.skipped] == [
        (3, "corrupt_line"), (5, "corrupt_line"), (8, "cut_last_line")]
    assert "not an object" in curve.skipped[1]["detail"]
    out = tmp_path / "eval"
    out.mkdir()
    report.write_report(out, _results(), loss_curve=curve)
    page = (out / "report.html").read_text()
    # line 3's column 14: the opening quote of "lo
    assert ("3 unreadable lines skipped in metrics.jsonl: line 3 (corrupt: column 14: "
            "Unterminated string starting at)") in page
    assert "line 5 (corrupt: a JSON list, not an object)" in page
    assert f"line 8 {CUT_NOTE}" in page
    assert (out / "checkpoints.png").stat().st_size > 1000


def test_complete_bad_last_line_is_corrupt_not_cut(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(_lines(ROWS[:2])) + '{"step": 3,\n')  # has its newline: not a cut
    curve = report.read_loss_curve(path)
    assert [(r["line"], r["reason"]) for r in curve.skipped] == [(3, "corrupt_line")]
    assert curve.curves["loss"] == _expected(ROWS[:2], "loss")


@pytest.mark.parametrize("content", [None, "".join(_lines(ROWS)) + "\n\n"])
def test_clean_or_missing_file_has_no_note(tmp_path, content):
    path = tmp_path / "metrics.jsonl"
    if content is not None:
        path.write_text(content)  # trailing blank lines are not unreadable lines
    curve = report.read_loss_curve(path)
    assert curve.skipped == [] and curve.note() == ""
    assert curve.curves == ({} if content is None else {"loss": _expected(ROWS, "loss"),
                                                        "disc_loss": _expected(ROWS, "disc_loss")})
    out = tmp_path / "eval"
    out.mkdir()
    report.write_report(out, _results(), metrics_jsonl=path)
    assert "unreadable" not in (out / "report.html").read_text()
    assert (out / "checkpoints.png").is_file() == (content is not None)


# --- reference columns: baseline, other evaluations (random init), the paper ----------------

PAPER8 = {"CoLA": "mcc", "SST-2": "accuracy", "MRPC": "accuracy", "STS-B": "spearman",
          "QQP": "accuracy", "MNLI": "accuracy_m", "QNLI": "accuracy", "RTE": "accuracy"}
# ELECTRA-1.75M, GLUE dev (Clark et al. 2020, Table 2), typed again from the paper
TABLE2_175M = {"CoLA": 69.1, "SST-2": 96.9, "MRPC": 90.8, "STS-B": 92.6, "QQP": 92.4,
               "MNLI": 90.9, "QNLI": 95.0, "RTE": 88.0}


def _task(name, primary, scores, baseline=None) -> TaskResult:
    """``scores``: {metric: [one value per seed]}."""
    n = len(next(iter(scores.values())))
    return TaskResult(task=name, primary=primary, baseline=baseline, seeds=[SeedResult(
        seed=i, metrics={m: v[i] for m, v in scores.items()}, predictions=f"p/{name}{i}",
        steps=1, seconds=1.0) for i in range(n)])


def _glue_results(size, tasks, *, shift=0.0, with_baseline=True):
    out = {}
    for i, t in enumerate(tasks):
        metric = PAPER8.get(t, "accuracy")
        base = {"name": f"majority class '{i}'", "prediction": str(i),
                "metrics": {metric: 10.0 + i}} if with_baseline else None
        out[t] = _task(t, metric, {metric: [50.0 + i + shift, 52.0 + i + shift,
                                            51.0 + i + shift]}, base)
    recipe = {"size": size, "lr": 5e-5, "layerwise_lr_decay": 0.9, "llrd_variant": "original",
              "optimizer": "original", "weight_decay": 0.0, "epochs": None,
              "batch_size": 32, "max_seq_len": 128, "num_seeds": 10, "first_seed": 0,
              "precision": "auto"} if size else {}
    return report.build_results(checkpoint="ckpt", model_dir="m", step=100, meta={},
                                recipe=recipe, tasks=out)


def _md_rows(table: str) -> tuple[list[str], dict[tuple[str, str], list[str]]]:
    lines = [ln for ln in table.splitlines() if ln.startswith("|")]
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]
    return cells[0], {(c[0], c[1]): c for c in cells[2:]}


def test_markdown_reference_columns_with_random_init_and_paper():
    tasks = list(PAPER8) + ["WNLI"]
    results = _glue_results("large", tasks)
    random_init = _glue_results("large", tasks, shift=-20.0)
    del random_init["tasks"]["RTE"]  # a task the reference evaluation did not run
    table = report.markdown_table(results, references={"random_init": random_init})
    head, rows = _md_rows(table)
    assert head == ["task", "metric", "median", "seeds", "min", "max", "baseline",
                    "random init", "paper (large)"]
    assert "| SST-2 | accuracy |" in table  # the prefix the evaluate flow's test looks for
    for i, t in enumerate(tasks):
        cells = rows[(t, PAPER8.get(t, "accuracy"))]
        assert cells[2:7] == [f"{51.0 + i:.2f}", "3", f"{50.0 + i:.2f}", f"{52.0 + i:.2f}",
                              f"{10.0 + i:.2f}"]
        assert cells[7] == ("—" if t == "RTE" else f"{31.0 + i:.2f}")  # random init median
        assert cells[8] == (f"{TABLE2_175M[t]:.1f}" if t in TABLE2_175M else "—")
    avg = rows[("**GLUE score (paper's 8-task average)**", "primary")]
    medians = [51.0 + i for i in range(8)]
    assert float(avg[2]) == pytest.approx(sum(medians) / 8, abs=0.005)
    assert float(avg[6]) == pytest.approx(sum(10.0 + i for i in range(8)) / 8, abs=0.005)
    assert avg[7] == "—"  # random init lacks RTE: no average over fewer tasks
    assert avg[8] == "89.5"
    assert "Table 2" in table and "WNLI: majority class '8'" in table


def test_subset_average_gets_no_paper_score_and_old_results_still_render():
    results = _glue_results("small", ["RTE", "CoLA"], with_baseline=False)
    for t in results["tasks"].values():  # a results.json from before baselines
        t.pop("baseline")
    results.pop("recipe")
    head, rows = _md_rows(report.markdown_table(results))
    assert head[-1] == "paper" and "random init" not in head
    assert rows[("RTE", "accuracy")][6:] == ["—", "—"]
    (avg,) = [c for k, c in rows.items() if k[0].startswith("**GLUE average over 2")]
    assert avg[6:] == ["—", "—"]


def test_small_falls_back_to_the_readme_row_marked():
    results = _glue_results("small", ["MRPC"])
    table = report.markdown_table(results)
    _, rows = _md_rows(table)
    assert rows[("MRPC", "accuracy")][-1] == "87.4†"  # ELECTRA-Small-OWT, README
    assert "† ELECTRA-Small-OWT" in table and "README" in table


def test_report_html_states_the_recipe_and_shows_references(tmp_path):
    results = _glue_results("large", ["RTE", "SST-2"])
    results["precision"] = "bf16"
    random_init = _glue_results("large", ["RTE", "SST-2"], shift=-20.0)
    report.write_report(tmp_path, results, references={"random_init": random_init})
    page = (tmp_path / "report.html").read_text()
    recipe = page[page.index("Recipe:"):page.index("</p>", page.index("Recipe:"))]
    for part in ("ELECTRA-Large", "learning rate 5e-05", "layer-wise decay 0.9 (original variant)",
                 "optimizer original (AdamWeightDecay without bias correction",
                 "epochs RTE 10, SST-2 3", "batch 32", "max length 128", "10 seeds (0–9)",
                 "precision auto (ran bf16)"):
        assert part in recipe, part
    assert page.index("Recipe:") < page.index("<table>")  # at the top
    for th in ("median (min–max, n seeds)", "baseline", "random init", "paper (large)"):
        assert f"<th>{th}</th>" in page
    assert ("<tr><td>RTE</td><td>accuracy</td><td>51.00 (50.00–52.00, 3 seeds)</td>"
            "<td>10.00</td><td>31.00</td><td>88.0</td></tr>") in page
    report.write_report(tmp_path, results)  # no references: no such column
    assert "random init" not in (tmp_path / "report.html").read_text()


def test_recipe_sentence_shows_whatever_optimizer_is_recorded():
    results = _glue_results("base", ["RTE"])
    results["recipe"].update(optimizer="adamw", epochs=2.0, layerwise_lr_decay=1.0)
    text = report.recipe_summary(results)
    assert "optimizer adamw (torch AdamW" in text and "2 epochs" in text
    assert "no layer-wise decay" in text
    results["recipe"]["optimizer"] = "lamb"
    assert "optimizer lamb," in report.recipe_summary(results)
    del results["recipe"]["optimizer"]
    assert "optimizer" not in report.recipe_summary(results)
    assert report.recipe_summary({"tasks": {}}) == "Recipe: not recorded."


def test_summary_text_is_the_table_and_the_report_path(tmp_path):
    results = _glue_results("base", ["RTE"])
    text = report.summary_text(results, tmp_path / "report.html")
    assert text.startswith("Recipe: ELECTRA-Base recipe")
    assert report.markdown_table(results) in text
    assert text.rstrip().splitlines()[-1] == f"report: {tmp_path / 'report.html'}"


def test_results_json_carries_the_references():
    results = _glue_results("large", list(PAPER8))
    assert results["baseline_glue_average"] == pytest.approx(sum(10.0 + i for i in range(8)) / 8)
    ref = results["paper_reference"]
    assert ref["size"] == "large" and ref["glue_average"]["value"] == 89.5
    assert {t: m["value"] for t, d in ref["tasks"].items() for m in d.values()} == TABLE2_175M
    assert all("Table 2" in m["source"] for d in ref["tasks"].values() for m in d.values())


# --- the published numbers themselves ---------------------------------------------------------

def test_paper_glue_rows_average_to_the_printed_average():
    from evaluation import paper_scores

    for size in ("large", "large-400k"):  # the per-task rows of Table 2 against its Avg. column
        pub = paper_scores.PAPER[size]
        assert set(pub.glue) == set(PAPER8)
        assert sum(pub.glue.values()) / 8 == pytest.approx(pub.glue_average, abs=0.05)
    assert paper_scores.PAPER["large"].glue == TABLE2_175M
    # the README's released Large is the paper's ELECTRA-1.75M: the same GLUE numbers
    assert paper_scores.RELEASED["ELECTRA-Large"].glue == TABLE2_175M


def test_paper_lookup_only_where_a_source_has_the_number():
    from evaluation.paper_scores import glue_average, reference

    assert reference("base", "SQuAD1.1", "exact").value == 84.5
    assert reference("base", "SQuAD2.0", "f1").value == 83.3
    assert reference("large", "SQuAD1.1", "f1").value == 94.9
    assert reference("large", "SQuAD2.0", "exact").value == 88.0
    assert reference("small", "SQuAD1.1", "f1") is None  # not in the paper
    assert reference("large", "SQuAD2.0", "best_f1") is None
    assert reference("large", "MRPC", "f1") is None  # the paper reports MRPC accuracy
    assert reference("large", "MNLI", "accuracy_mm") is None  # and MNLI matched
    assert reference("large", "WNLI", "accuracy") is None
    assert reference(None, "RTE", "accuracy") is None and reference("xl", "RTE", "accuracy") is None
    assert reference("base", "RTE", "accuracy").from_paper is False  # README Base++
    assert [glue_average(s).value for s in ("small", "base", "large")] == [79.9, 85.1, 89.5]
