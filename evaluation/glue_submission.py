"""GLUE-server submission TSVs from the test predictions of each task's median seed.

The server wants one file per task, ``index<TAB>prediction`` with that header; each task's spec
names its files (``TaskSpec.submission_files``: ``CoLA.tsv``, ..., ``MNLI-m.tsv``,
``MNLI-mm.tsv``, and the other folders' test sets its model predicts, MNLI's ``AX.tsv`` and
``WNLI.tsv``). Class names are written as the task's labels (``entailment``, ``0``/``1``);
regression scores are clipped to the task's range (STS-B [0, 5]). A file a task writes for its
own test set wins over the same file predicted by another task's model: ``WNLI.tsv`` comes from a
fine-tuned WNLI model when WNLI was run, otherwise from the MNLI model (entailment → 1).

The model chosen per task is the median seed (``TaskResult.median_seed``): a real run of the
fine-tuning, not an average of predictions, so the submission corresponds to one reported score.
Tasks without a spec (SQuAD) have no GLUE submission.
"""
from __future__ import annotations

from pathlib import Path

from common.storage import write_bytes

from .eval_layout import SUBMISSION as SUBMISSION_DIR  # (defined once)
from .predictions import read_predictions
from .results import TaskResult
from .tasks import TASKS


def write_submission(eval_dir: str | Path, results: dict[str, TaskResult]) -> dict[str, Path]:
    """Write the TSVs for every task that has test predictions; returns {file name: path}."""
    eval_dir = Path(eval_dir)
    files: dict[str, tuple[bool, list[str]]] = {}  # name -> (from another task's model, lines)
    for task, result in results.items():
        spec = TASKS.get(task)
        seed = result.median_seed() if result.seeds and spec is not None else None
        if seed is None or not seed.test_predictions:
            continue
        names = spec.submission_files
        borrowed = {e.split for e in spec.also_predicts}
        mine: dict[str, tuple[bool, list[str]]] = {}
        for row in read_predictions(eval_dir / seed.test_predictions):
            name = names.get(row["split"])
            if name is None:
                raise ValueError(f"{seed.test_predictions}: unexpected split {row['split']!r}")
            mine.setdefault(name, (row["split"] in borrowed, []))[1].append(
                f"{row['id']}\t{spec.format_prediction(row['prediction'])}")
        for name, (other, lines) in mine.items():
            if name not in files or (files[name][0] and not other):
                files[name] = (other, lines)
    out = {}
    for name, (_, lines) in sorted(files.items()):
        path = eval_dir / SUBMISSION_DIR / name
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(str(path), ("index\tprediction\n" + "\n".join(lines) + "\n").encode())
        out[name] = path
    return out
