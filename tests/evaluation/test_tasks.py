"""The task registry: the nine GLUE tasks found as files, the errors of a bad task file, and a task
added as docs/add-a-task.md says — one new file in evaluation/tasks/ — planned, fine-tuned, scored
with its primary metric and reported, in a fresh process that finds it the way it finds the others."""
from __future__ import annotations

import json
import os
import random
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

import evaluation.tasks
from evaluation import report
from evaluation.predictions import read_predictions
from evaluation.tasks import TASKS, TaskFileError, discover, get_task

from .glue_files import WORDS, write
from .tiny_model import tiny_export, train_tokenizer

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "add-a-task.md"
GLUE = ("CoLA", "SST-2", "MRPC", "STS-B", "QQP", "MNLI", "QNLI", "RTE", "WNLI")


def test_the_glue_tasks_are_one_file_each():
    folder = Path(evaluation.tasks.__file__).parent
    files = {p.stem for p in folder.glob("*.py") if not p.stem.startswith("_")}
    assert {"cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli"} <= files
    assert set(GLUE) <= set(TASKS) and all(TASKS[t].name == t for t in TASKS)
    assert get_task("sts-b") is TASKS["STS-B"] and get_task("mnli") is TASKS["MNLI"]


def _package(root: Path, name: str, files: dict[str, str]) -> tuple[str, list[str]]:
    pkg = root / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for stem, text in files.items():
        (pkg / f"{stem}.py").write_text(text)
    return name, [str(pkg)]


GOOD = ('from evaluation.task_spec import ACCURACY, Layout, TaskSpec\n'
        'TASK = TaskSpec(name={name!r}, kind="classification", labels=("0", "1"), '
        'train=Layout(text_a=0, label=1), dev=Layout(text_a=0, label=1), test=Layout(text_a=0), '
        'metrics=(ACCURACY,), primary={primary!r})\n')


def test_a_bad_task_file_is_one_line_naming_it(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    name, folders = _package(tmp_path, "tasks_ok", {"b": GOOD.format(name="Beta", primary="accuracy"),
                                                    "a": GOOD.format(name="alpha", primary="accuracy"),
                                                    "_helper": "X = 1\n"})
    assert list(discover(name, folders)) == ["alpha", "Beta"]  # by name; _helper is no task
    cases = {
        "tasks_none": ({"t": "X = 1\n"}, r"tasks_none/t\.py: declares no TASK = TaskSpec\(\.\.\.\)"),
        "tasks_primary": ({"t": GOOD.format(name="T", primary="f1")},
                          r"tasks_primary/t\.py: task 'T': primary 'f1' is not one of its metrics"),
        "tasks_twice": ({"a": GOOD.format(name="SST-2", primary="accuracy"),
                         "b": GOOD.format(name="sst2", primary="accuracy")},
                        r"tasks_twice/b\.py: task 'sst2' is already declared in .*tasks_twice/a\.py"),
    }
    for package, (files, message) in cases.items():
        name, folders = _package(tmp_path, package, files)
        with pytest.raises(TaskFileError, match=message) as err:
            discover(name, folders)
        assert "\n" not in str(err.value)


def _doc_task_file(name: str) -> str:
    """The task file of docs/add-a-task.md (its first Python block), named ``name``."""
    block = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S).group(1)
    assert 'name="Toy"' in block
    return block.replace('name="Toy"', f'name="{name}"')


def _toy_glue(glue: Path, name: str) -> None:
    """Train, dev and test files of the doc's task: label "yes" iff the sentence has the word."""
    rng = random.Random(7)

    def rows(n: int, *, labelled: bool) -> list[str]:
        out = ["index\tsentence" + ("\tlabel" if labelled else "")]
        for i in range(n):
            yes = i % 2 == 1
            words = [rng.choice(WORDS) for _ in range(rng.randint(4, 8))]
            words.insert(rng.randrange(len(words) + 1), "excellent" if yes else "ordinary")
            out.append(f"{i}\t{' '.join(words)}" + (f"\t{'yes' if yes else 'no'}" if labelled else ""))
        return out

    write(glue / name / "train.tsv", rows(24, labelled=True))
    write(glue / name / "dev.tsv", rows(10, labelled=True))
    write(glue / name / "test.tsv", rows(6, labelled=False))


def _remove_stale_toys(folder: Path) -> None:
    # a killed test run leaves its file behind; a live run's (another process) is left alone
    for path in folder.glob("toy_*.py"):
        pid = path.stem.split("_")[-1]
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            path.unlink(missing_ok=True)
        except (ValueError, PermissionError):
            pass


DRIVE = """
import json, sys
from evaluation.evaluation_job import EvaluationJob
from evaluation.evaluation_runner import EvaluationRunner, run_unit
job = EvaluationJob.load(env={}, **json.loads(sys.argv[1]))
runner = EvaluationRunner(job)
assert runner.check() is None and runner.claim() is None and runner.resolve() is None
units = runner.plan()
runner.publish({unit: run_unit(runner.context, unit) for unit in units})
print(json.dumps({"planned": [u.describe() for u in units], "failed": runner.failed}))
"""


def test_a_task_added_as_one_file_is_planned_finetuned_scored_and_reported(tmp_path):
    from sklearn.metrics import accuracy_score, f1_score

    folder = Path(evaluation.tasks.__file__).parent  # where the registry looks, installed or not
    _remove_stale_toys(folder)
    name = f"Toy{os.getpid()}"  # its own name: a concurrent run of this test adds another task
    task_file = folder / f"toy_{os.getpid()}.py"
    glue, out = tmp_path / "glue", tmp_path / "out"
    _toy_glue(glue, name)
    export = tiny_export(tmp_path / "hf", tokenizer_dir=train_tokenizer(tmp_path / "tok"))
    job = {"checkpoint": str(export), "glue_dir": str(glue), "tasks": name.lower(), "out": str(out),
           "seeds": 2, "recipe": {"max_seq_len": 32, "batch_size": 8, "num_threads": 1}}
    tmp = task_file.with_suffix(".tmp")  # not a module until complete: another process never
    tmp.write_text(_doc_task_file(name))  # imports half a file
    os.replace(tmp, task_file)
    try:
        proc = subprocess.run([sys.executable, "-c", DRIVE, json.dumps(job)], cwd=REPO, capture_output=True,
                              text=True, timeout=600, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    finally:
        task_file.unlink(missing_ok=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert name not in TASKS  # this process listed the folder before the file existed
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"planned": [name], "failed": {}}

    results = report.read_results(out)
    toy = results["tasks"][name]
    assert (toy["primary"], toy["metrics"], toy["num_train"], toy["num_eval"]) == ("f1", ["accuracy", "f1"],
                                                                                 24, {"dev": 10})
    assert toy["baseline"]["name"] == "majority class 'no'"  # a tie goes to the first label
    assert [s["train_loss"] for s in toy["seeds"]] and all(len(s["train_loss"]) == 2 for s in toy["seeds"])
    for seed in toy["seeds"]:  # each score, recomputed from its prediction file by scikit-learn
        rows = read_predictions(out / seed["predictions"])
        y, p = [r["label"] for r in rows], [r["prediction"] for r in rows]
        assert len(rows) == 10 and set(p) <= {"no", "yes"}
        assert seed["metrics"] == pytest.approx({"accuracy": 100 * accuracy_score(y, p),
                                                 "f1": 100 * f1_score(y, p, pos_label="yes", zero_division=0)})
    median = statistics.median(s["metrics"]["f1"] for s in toy["seeds"])
    assert toy["median"]["f1"] == pytest.approx(median)
    assert (results["glue_average"], results["glue_average_tasks"]) == (None, [])  # in_glue_average=False

    assert f"| {name} | f1 | {median:.2f} | 2 |" in report.markdown_table(results)
    html = (out / "report.html").read_text()
    assert f"<td>{name}</td>" in html and f"{name} 2" in html  # a table row; its epochs in the recipe line
    assert results["submission"] == [f"{name}.tsv"]
    lines = (out / "glue_submission" / f"{name}.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and [line.split("\t")[0] for line in lines[1:]] == [str(i) for i in range(6)]
    assert {line.split("\t")[1] for line in lines[1:]} <= {"no", "yes"}
    assert not task_file.exists() and name not in TASKS
