"""GLUE-server submission TSVs from the test predictions of each task's median seed.

The server wants one file per task, ``index<TAB>prediction`` with that header, named
``CoLA.tsv SST-2.tsv MRPC.tsv STS-B.tsv QQP.tsv MNLI-m.tsv MNLI-mm.tsv QNLI.tsv RTE.tsv WNLI.tsv
AX.tsv``. Class names are written as the task's labels (``entailment``, ``0``/``1``); STS-B scores
are clipped to [0, 5]. AX (the diagnostic set) always comes from the MNLI model; WNLI comes from a
fine-tuned WNLI model when WNLI was run, otherwise from the MNLI model (entailment → 1).

The model chosen per task is the median seed (``TaskResult.median_seed``): a real run of the
fine-tuning, not an average of predictions, so the submission corresponds to one reported score.
"""
from __future__ import annotations

from pathlib import Path

from common.storage import write_bytes

from .predictions import read_predictions
from .results import TaskResult

from .eval_layout import SUBMISSION as SUBMISSION_DIR  # noqa: E402  (defined once)
# split name in the test prediction file -> submission file name, per task
_FILES = {
    "MNLI": {"test_matched": "MNLI-m.tsv", "test_mismatched": "MNLI-mm.tsv", "ax": "AX.tsv",
             "wnli_test": "WNLI.tsv"},
}


def _format(task: str, prediction) -> str:
    if task == "STS-B":
        return f"{min(5.0, max(0.0, float(prediction))):.3f}"
    return str(prediction)


def write_submission(eval_dir: str | Path, results: dict[str, TaskResult]) -> dict[str, Path]:
    """Write the TSVs for every task that has test predictions; returns {file name: path}."""
    eval_dir = Path(eval_dir)
    files: dict[str, list[str]] = {}
    for task, result in results.items():
        seed = result.median_seed() if result.seeds else None
        if seed is None or not seed.test_predictions:
            continue
        names = _FILES.get(task, {"test": f"{task}.tsv"})
        for row in read_predictions(eval_dir / seed.test_predictions):
            name = names.get(row["split"])
            if name is None:
                raise ValueError(f"{seed.test_predictions}: unexpected split {row['split']!r}")
            files.setdefault(name, []).append(f"{row['id']}\t{_format(task, row['prediction'])}")
    if "WNLI" in results and results["WNLI"].seeds and results["WNLI"].median_seed().test_predictions:
        wnli = results["WNLI"].median_seed()
        files["WNLI.tsv"] = [f"{r['id']}\t{r['prediction']}"
                             for r in read_predictions(eval_dir / wnli.test_predictions)]
    out = {}
    for name, lines in sorted(files.items()):
        path = eval_dir / SUBMISSION_DIR / name
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes(str(path), ("index\tprediction\n" + "\n".join(lines) + "\n").encode())
        out[name] = path
    return out
