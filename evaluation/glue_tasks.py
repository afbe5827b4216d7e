"""Readers for the official GLUE download layout: a task's files into examples.

What each task's files hold (columns, labels, splits) is its ``TaskSpec``
(``evaluation.task_spec``), declared in ``evaluation/tasks/<name>.py``; this module reads any
task by its spec. ``TASKS``, ``get_task`` and ``parse_task_list`` are the registry's
(``evaluation.tasks``), importable from here too.

Files are read as plain TSV, split on ``\\t`` with NO quote handling: the official files contain
unbalanced double quotes (MRPC, STS-B) that a CSV reader would glue across lines. Blank lines at
the end of a file are ignored. Every other row must have exactly as many fields as the header (or
the fixed count for the header-less CoLA files); anything else is a ``GlueDataError`` naming the
file and the line — except on QQP and MNLI (``TaskSpec.skip_malformed``), whose official
downloads contain rows broken by stray newlines inside a question. The original ELECTRA reader
(``classification_tasks._load_glue``) skips a row that cannot be turned into an example and logs
it; here such a row is skipped as a ``SkippedRow`` (file, line, reason, detail) that
``load_split`` returns, so results can record how many rows each file lost. A UTF-8 byte-order
mark (MRPC) is stripped. Labels are checked against the task's label set: a label outside it is
an error, never a new class (on QQP/MNLI too: only the field count is tolerated). Example ids
are the file's own id column where it has one, otherwise ``"{split}-{line number}"`` so a
prediction can always be traced back to a line.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .task_spec import ExtraTest, GlueDataError, Layout, TaskSpec
from .tasks import TASKS, get_task, parse_task_list

__all__ = ["TASKS", "ExtraTest", "GlueDataError", "GlueExample", "GlueSplit", "Layout", "SkippedRow",
           "TaskSpec", "check_files", "find_extra", "find_test_files", "get_task", "load_split",
           "load_tsv", "parse_task_list", "read_extra", "read_split", "read_tsv", "skipped_summary",
           "split_path", "training_examples"]


@dataclass(frozen=True)
class GlueExample:
    guid: str
    text_a: str
    text_b: str | None
    label: str | float | None  # class name (str) or score (float); None on test files


@dataclass(frozen=True)
class SkippedRow:
    """A malformed row left out of a task that tolerates them (QQP, MNLI): never silently."""

    path: str
    line: int
    reason: str  # "malformed-row"
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class GlueSplit:
    """One file read: its examples and the rows skipped on the way."""

    path: Path
    examples: list[GlueExample]
    skipped: list[SkippedRow] = field(default_factory=list)


def skipped_summary(splits: dict[str, GlueSplit]) -> dict[str, dict[str, Any]]:
    """``{split: {"path", "skipped", "rows"}}`` for results.json; splits without skips omitted."""
    return {name: {"path": str(s.path), "skipped": len(s.skipped),
                   "rows": [r.to_dict() for r in s.skipped[:20]]}
            for name, s in splits.items() if s.skipped}


def split_path(task: TaskSpec, glue_dir: str | Path, split: str) -> Path:
    folder = Path(glue_dir) / task.name
    if not folder.is_dir():
        raise GlueDataError(
            f"{folder}: task folder missing; expected {task.name}/ with "
            f"{', '.join(_expected_files(task))} (official GLUE layout)")
    path = folder / f"{split}.tsv"
    if not path.is_file():
        present = sorted(p.name for p in folder.iterdir())
        raise GlueDataError(f"{path}: file missing; expected {', '.join(_expected_files(task))}"
                            f" in {folder} (found: {', '.join(present) or 'nothing'})")
    return path


def check_files(task: TaskSpec, glue_dir: str | Path) -> list[Path]:
    """The train and dev files of a task; a ``GlueDataError`` listing what is expected if not.

    Cheap, so a flow can check every task before spending hours fine-tuning the first one.
    """
    return [split_path(task, glue_dir, s) for s in ("train", *task.eval_splits)]


def _expected_files(task: TaskSpec) -> list[str]:
    return [f"{s}.tsv" for s in ("train", *task.eval_splits)]


def _layout_for(task: TaskSpec, split: str) -> Layout:
    if split == "train":
        return task.train
    if split.startswith("test"):
        return task.test
    return task.dev


def read_split(task: TaskSpec | str, glue_dir: str | Path, split: str) -> list[GlueExample]:
    """Read ``glue_dir/<task>/<split>.tsv`` into examples (labels validated)."""
    return load_split(task, glue_dir, split).examples


def load_split(task: TaskSpec | str, glue_dir: str | Path, split: str) -> GlueSplit:
    """As ``read_split``, with the rows skipped (QQP/MNLI malformed rows) alongside."""
    task = get_task(task) if isinstance(task, str) else task
    path = split_path(task, glue_dir, split)
    skipped: list[SkippedRow] = []
    examples = read_tsv(path, task=task, layout=_layout_for(task, split), split=split,
                        skipped=skipped)
    return GlueSplit(path=path, examples=examples, skipped=skipped)


def load_tsv(path: Path, *, task: TaskSpec, layout: Layout, split: str) -> GlueSplit:
    """``read_tsv`` with the skipped rows kept (for test files, read by path)."""
    skipped: list[SkippedRow] = []
    examples = read_tsv(path, task=task, layout=layout, split=split, skipped=skipped)
    return GlueSplit(path=path, examples=examples, skipped=skipped)


def training_examples(task: TaskSpec, examples: list[GlueExample]) -> list[GlueExample]:
    """What a task trains on: MRPC and STS-B (``both_orders``) add every pair swapped.

    The paper trains these symmetric tasks on (a, b) and (b, a); the swapped copies follow the
    originals, with ids suffixed ``-swap`` so each can be traced back to its line.
    """
    if not task.both_orders:
        return list(examples)
    swapped = [GlueExample(guid=f"{e.guid}-swap", text_a=e.text_b, text_b=e.text_a,
                           label=e.label) for e in examples if e.text_b is not None]
    return list(examples) + swapped


def read_tsv(path: Path, *, task: TaskSpec | None, layout: Layout, split: str,
             skipped: list[SkippedRow] | None = None) -> list[GlueExample]:
    """Examples of one TSV file; ``skipped`` (if given) receives the rows left out.

    Rows with a wrong field count are skipped only for a task with ``skip_malformed`` AND when
    the caller passes ``skipped`` to receive them; otherwise they are a ``GlueDataError``.
    """
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise GlueDataError(f"{path}: not valid UTF-8 ({exc})") from exc
    lines = text.split("\n")
    while lines and not lines[-1].strip():  # trailing blank lines (an editor's extra newline)
        lines.pop()
    expected = layout.num_fields
    start = 0
    if layout.header:
        if not lines:
            raise GlueDataError(f"{path}: empty file; expected a header line")
        expected = len(lines[0].rstrip("\r").split("\t"))
        start = 1
    tolerate = task is not None and task.skip_malformed and skipped is not None
    examples = []
    for lineno in range(start + 1, len(lines) + 1):
        fields = lines[lineno - 1].rstrip("\r").split("\t")
        if expected is not None and len(fields) != expected:
            detail = f"{len(fields)} tab-separated fields, expected {expected}"
            if tolerate:
                skipped.append(SkippedRow(str(path), lineno, "malformed-row", detail))
                continue
            raise GlueDataError(f"{path}:{lineno}: malformed row: {detail}")
        examples.append(_make_example(fields, layout=layout, task=task,
                                      where=f"{path}:{lineno}", default_id=f"{split}-{lineno}"))
    return examples


def _make_example(fields: list[str], *, layout: Layout, task: TaskSpec | None, where: str,
                  default_id: str) -> GlueExample:
    guid = fields[layout.guid].strip() if layout.guid is not None else default_id
    text_b = fields[layout.text_b] if layout.text_b is not None else None
    label = None
    if layout.label is not None and task is not None:
        label = _check_label(fields[layout.label].strip(), task=task, where=where)
    return GlueExample(guid=guid or default_id, text_a=fields[layout.text_a], text_b=text_b,
                       label=label)


def _check_label(raw: str, *, task: TaskSpec, where: str) -> str | float:
    if task.kind == "regression":
        try:
            score = float(raw)
        except ValueError:
            raise GlueDataError(f"{where}: {task.name} score {raw!r} is not a number") from None
        lo, hi = task.score_range
        if not lo <= score <= hi:
            raise GlueDataError(f"{where}: {task.name} score {score} outside [{lo}, {hi}]")
        return score
    if raw not in task.labels:
        raise GlueDataError(f"{where}: {task.name} label {raw!r} not in the task's label set "
                            f"{list(task.labels)}")
    return raw


def find_extra(extra: ExtraTest, glue_dir: str | Path) -> Path | None:
    """The first of ``extra.paths`` present under the GLUE folder; None when none is."""
    return next((Path(glue_dir) / rel for rel in extra.paths if (Path(glue_dir) / rel).is_file()),
                None)


def read_extra(extra: ExtraTest, glue_dir: str | Path) -> tuple[Path, list[GlueExample]] | None:
    """Another folder's test set that a task's model predicts (MNLI: AX, WNLI), if present."""
    path = find_extra(extra, glue_dir)
    if path is None:
        return None
    return path, read_tsv(path, task=None, layout=extra.layout, split=extra.split)


def find_test_files(task: TaskSpec, glue_dir: str | Path) -> dict[str, Path]:
    """``{test split: path}`` for the task's test files that exist (may be empty)."""
    folder = Path(glue_dir) / task.name
    return {s: folder / f"{s}.tsv" for s in task.test_splits if (folder / f"{s}.tsv").is_file()}
