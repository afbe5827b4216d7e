"""report.html and the loss curve of metrics.jsonl: cut and corrupt lines are skipped, counted
and shown under the plot, never fatal."""
from __future__ import annotations

import json

import pytest

from electra.finetune import report
from electra.finetune.results import SeedResult, TaskResult

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
