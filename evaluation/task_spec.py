"""What a GLUE-like task is, declared once: ``TaskSpec``, read by every part of the evaluation.

A task is a sentence (or sentence-pair) classification or regression problem in the GLUE
download layout: a folder ``<name>/`` with ``train.tsv``, one or more dev files and optional test
files. Each task lives in its own file, ``evaluation/tasks/<name>.py``, as ``TASK = TaskSpec(...)``
(``evaluation.tasks`` finds them); everything downstream takes its facts from the spec and has no
list of task names of its own:

* the files: ``Layout`` per file kind (which tab-separated column holds what), the dev splits
  scored (``eval_splits``) and the test splits predicted (``test_splits``);
* the labels: a label set (classification) or a score range (regression);
* the scores: ``metrics`` (each a name and a function of predictions and labels, computed on
  every dev split), the ``primary`` metric (the key the median seed, the GLUE average and the
  paper's published number use) and, for a task with several dev splits, ``metric_suffix``: how
  the headline score splits into one key per dev split (MNLI: ``accuracy_m``, ``accuracy_mm``);
* the GLUE server's file names: ``submission`` (test split → file), and ``also_predicts``: test
  sets of other folders that this task's model predicts (MNLI predicts AX and WNLI's test set);
* training: ``epochs`` (the paper's per-task default), ``both_orders`` (train on (a, b) and
  (b, a)), ``skip_malformed`` (skip and count rows with a wrong field count, as the original
  reader does on QQP and MNLI); and whether the task counts in the GLUE average.

A spec checks itself when it is made (a primary that is not one of its metrics, a dev split
without a suffix, ...), so a mistake in a task file is one line naming it at import, not a
``KeyError`` hours into an evaluation.

Classification values are compared as the label strings of the files (``"0"``/``"1"``, class
names), regression values as floats: ``metric_values`` converts both predictions and labels, so
a prediction file read back scores exactly as the predictions in memory did.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from . import metrics as m


class GlueDataError(ValueError):
    """Bad GLUE input: an unknown task, or a file (and line) that is not what the task expects."""


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
class Metric:
    """One score of a dev split: its key in the metric dict and ``fn(predictions, labels)``."""

    name: str
    fn: Callable[[Sequence, Sequence], float]


ACCURACY = Metric("accuracy", m.accuracy)
MCC = Metric("mcc", m.matthews_corrcoef)  # Matthews correlation
PEARSON = Metric("pearson", m.pearson)
SPEARMAN = Metric("spearman", m.spearman)


def f1(positive: str) -> Metric:
    """F1 of the class ``positive`` (a label string of the task, e.g. ``"1"``)."""
    return Metric("f1", functools.partial(m.f1_binary, positive=positive))


@dataclass(frozen=True)
class ExtraTest:
    """A test set in another folder that this task's model predicts (MNLI: AX and WNLI).

    ``paths``: candidates under the GLUE folder, the first that exists is read (none: skipped).
    ``relabel``: this task's label → the label the other set's submission wants (None: as is).
    """

    split: str  # its name in the test prediction file
    paths: tuple[str, ...]
    layout: Layout
    submission: str  # the GLUE server's file name
    relabel: Mapping[str, str] | None = None


@dataclass(frozen=True)
class TaskSpec:
    name: str  # the folder name in the GLUE download, and the task's name everywhere
    kind: str  # "classification" | "regression"
    labels: tuple[str, ...]  # empty for regression
    train: Layout
    dev: Layout
    test: Layout
    metrics: tuple[Metric, ...]  # computed on every dev split
    primary: str  # a key of the task's metric dict (after ``metric_suffix``)
    eval_splits: tuple[str, ...] = ("dev",)
    test_splits: tuple[str, ...] = ("test",)
    # several dev splits: dev split -> suffix of its metric keys (MNLI "dev_matched" -> "_m")
    metric_suffix: Mapping[str, str] = field(default_factory=dict)
    # test split -> the GLUE server's file name; empty: {"test": "<name>.tsv"}
    submission: Mapping[str, str] = field(default_factory=dict)
    also_predicts: tuple[ExtraTest, ...] = ()
    in_glue_average: bool = True  # WNLI: no (the paper leaves it out), nor a task outside GLUE
    epochs: int = 3
    both_orders: bool = False  # MRPC and STS-B train on (a, b) and (b, a)
    score_range: tuple[float, float] = (0.0, 5.0)  # regression: labels outside are an error
    skip_malformed: bool = False  # QQP, MNLI: skip and count rows with a wrong field count

    def __post_init__(self) -> None:
        where = f"task {self.name!r}"
        if self.kind not in ("classification", "regression"):
            raise ValueError(f"{where}: kind {self.kind!r} must be 'classification' or 'regression'")
        if (self.kind == "classification") != bool(self.labels):
            raise ValueError(f"{where}: a classification task needs labels, a regression task none")
        if not self.metrics:
            raise ValueError(f"{where}: no metrics")
        if len(self.eval_splits) > 1 and set(self.metric_suffix) != set(self.eval_splits):
            raise ValueError(f"{where}: dev splits {list(self.eval_splits)} need a metric_suffix each "
                             f"(got {dict(self.metric_suffix)})")
        if self.primary not in self.metric_names:
            raise ValueError(f"{where}: primary {self.primary!r} is not one of its metrics "
                             f"{list(self.metric_names)}")
        for extra in self.also_predicts:
            if extra.relabel is not None and set(extra.relabel) != set(self.labels):
                raise ValueError(f"{where}: also_predicts {extra.split!r} relabels {sorted(extra.relabel)}, "
                                 f"not the task's labels {sorted(self.labels)}")

    def __hash__(self) -> int:  # mapping fields are not hashable; the name identifies a task
        return hash(self.name)

    @property
    def num_labels(self) -> int:
        return 1 if self.kind == "regression" else len(self.labels)

    def label_index(self, label: str) -> int:
        return self.labels.index(label)

    @property
    def metric_names(self) -> tuple[str, ...]:
        """Every key of the task's metric dict, in the order computed."""
        suffixes = [self.metric_suffix[s] for s in self.eval_splits] if self.metric_suffix else [""]
        return tuple(metric.name + suffix for suffix in suffixes for metric in self.metrics)

    def metric_values(self, values: Sequence) -> list:
        """Predictions or labels as scored: floats (regression) or label strings. Every value of
        a column gets one type: numpy compares an int array with a str array as all-False."""
        if self.kind == "regression":
            return [float(v) for v in values]
        return [str(v) for v in values]

    def split_metrics(self, preds: Sequence, labels: Sequence) -> dict[str, float]:
        """The metric dict (fractions) of one dev split."""
        preds, labels = self.metric_values(preds), self.metric_values(labels)
        return {metric.name: metric.fn(preds, labels) for metric in self.metrics}

    def score(self, per_split: Mapping[str, tuple[Sequence, Sequence]]) -> dict[str, float]:
        """The task's metric dict (fractions) from ``{dev split: (predictions, labels)}``: one
        split's metrics as they are, several splits' with each split's ``metric_suffix``."""
        if not self.metric_suffix:
            if len(per_split) != 1:
                raise ValueError(f"{self.name}: expected one evaluation split, got {sorted(per_split)}")
            (preds, labels), = per_split.values()
            return self.split_metrics(preds, labels)
        out = {}
        for split, (preds, labels) in per_split.items():
            suffix = self.metric_suffix.get(split, "_" + split)
            out.update({k + suffix: v for k, v in self.split_metrics(preds, labels).items()})
        return out

    @property
    def submission_files(self) -> dict[str, str]:
        """Split name in the test prediction file → the GLUE server's file name."""
        own = dict(self.submission) or {"test": f"{self.name}.tsv"}
        return {**own, **{e.split: e.submission for e in self.also_predicts}}

    def format_prediction(self, value) -> str:
        """A prediction as the server wants it: a label, or a score clipped to the range."""
        if self.kind == "regression":
            lo, hi = self.score_range
            return f"{min(hi, max(lo, float(value))):.3f}"
        return str(value)
