"""GLUE task registry and readers for the official GLUE download layout.

Each of the nine tasks (plus the AX diagnostic set) is a ``TaskSpec``: its folder name, its kind
(classification or regression), its label set, the splits it is evaluated on, and one ``Layout``
per file kind saying which tab-separated column holds what.

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


class GlueDataError(ValueError):
    """Bad GLUE input: the message names the file (and line) and what was expected."""


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


@dataclass(frozen=True)
class Layout:
    """Column positions in one kind of file; negative indices count from the end."""

    text_a: int
    text_b: int | None = None
    label: int | None = None
    guid: int | None = None
    header: bool = True
    num_fields: int | None = None  # fixed field count for header-less files


@dataclass(frozen=True)
class TaskSpec:
    name: str
    kind: str  # "classification" | "regression"
    labels: tuple[str, ...]  # empty for regression
    train: Layout
    dev: Layout
    test: Layout
    eval_splits: tuple[str, ...] = ("dev",)
    test_splits: tuple[str, ...] = ("test",)
    epochs: int = 3
    both_orders: bool = False  # MRPC and STS-B train on (a, b) and (b, a)
    score_range: tuple[float, float] = (0.0, 5.0)
    skip_malformed: bool = False  # QQP, MNLI: skip and count rows with a wrong field count

    @property
    def num_labels(self) -> int:
        return 1 if self.kind == "regression" else len(self.labels)

    def label_index(self, label: str) -> int:
        return self.labels.index(label)


_PAIR = Layout(guid=0, text_a=1, text_b=2, label=-1)
_PAIR_TEST = Layout(guid=0, text_a=1, text_b=2)
_BINARY = ("0", "1")
_NLI2 = ("entailment", "not_entailment")

TASKS: dict[str, TaskSpec] = {
    t.name: t
    for t in (
        TaskSpec("CoLA", "classification", _BINARY,
                 train=Layout(text_a=3, label=1, header=False, num_fields=4),
                 dev=Layout(text_a=3, label=1, header=False, num_fields=4),
                 test=Layout(guid=0, text_a=1)),
        TaskSpec("SST-2", "classification", _BINARY,
                 train=Layout(text_a=0, label=1), dev=Layout(text_a=0, label=1),
                 test=Layout(guid=0, text_a=1)),
        TaskSpec("MRPC", "classification", _BINARY,
                 train=Layout(text_a=3, text_b=4, label=0),
                 dev=Layout(text_a=3, text_b=4, label=0),
                 test=Layout(guid=0, text_a=3, text_b=4), both_orders=True),
        TaskSpec("STS-B", "regression", (),
                 train=Layout(guid=0, text_a=7, text_b=8, label=9),
                 dev=Layout(guid=0, text_a=7, text_b=8, label=9),
                 test=Layout(guid=0, text_a=7, text_b=8), epochs=10, both_orders=True),
        TaskSpec("QQP", "classification", _BINARY,
                 train=Layout(guid=0, text_a=3, text_b=4, label=5),
                 dev=Layout(guid=0, text_a=3, text_b=4, label=5),
                 test=Layout(guid=0, text_a=1, text_b=2), skip_malformed=True),
        TaskSpec("MNLI", "classification", ("contradiction", "entailment", "neutral"),
                 train=Layout(guid=0, text_a=8, text_b=9, label=-1),
                 dev=Layout(guid=0, text_a=8, text_b=9, label=-1),
                 test=Layout(guid=0, text_a=8, text_b=9),
                 eval_splits=("dev_matched", "dev_mismatched"),
                 test_splits=("test_matched", "test_mismatched"), skip_malformed=True),
        TaskSpec("QNLI", "classification", _NLI2, train=_PAIR, dev=_PAIR, test=_PAIR_TEST),
        TaskSpec("RTE", "classification", _NLI2, train=_PAIR, dev=_PAIR, test=_PAIR_TEST,
                 epochs=10),
        TaskSpec("WNLI", "classification", _BINARY, train=_PAIR, dev=_PAIR, test=_PAIR_TEST),
    )
}
# The diagnostic set: test-only, predicted with the MNLI model.
AX_LAYOUT = Layout(guid=0, text_a=1, text_b=2)
AX_CANDIDATES = ("diagnostic/diagnostic.tsv", "AX/test.tsv", "AX/AX.tsv")


def get_task(name: str) -> TaskSpec:
    """Look a task up by name, forgiving case and hyphens (``sst2`` → ``SST-2``)."""
    key = name.replace("-", "").lower()
    for task in TASKS.values():
        if task.name.replace("-", "").lower() == key:
            return task
    raise GlueDataError(f"unknown GLUE task {name!r}; known tasks: {', '.join(TASKS)}")


def parse_task_list(spec: str) -> list[TaskSpec]:
    """``"CoLA,SST-2"`` → specs, in the given order, without duplicates."""
    seen: dict[str, TaskSpec] = {}
    for part in spec.split(","):
        if part.strip():
            task = get_task(part.strip())
            seen.setdefault(task.name, task)
    return list(seen.values())


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


def read_ax(glue_dir: str | Path) -> tuple[Path, list[GlueExample]] | None:
    """The AX diagnostic test set, if the GLUE folder has it (None otherwise)."""
    for rel in AX_CANDIDATES:
        path = Path(glue_dir) / rel
        if path.is_file():
            return path, read_tsv(path, task=None, layout=AX_LAYOUT, split="ax")
    return None


def find_test_files(task: TaskSpec, glue_dir: str | Path) -> dict[str, Path]:
    """``{test split: path}`` for the task's test files that exist (may be empty)."""
    folder = Path(glue_dir) / task.name
    return {s: folder / f"{s}.tsv" for s in task.test_splits if (folder / f"{s}.tsv").is_file()}
