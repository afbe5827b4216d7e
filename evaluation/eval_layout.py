"""The evaluation folder, defined once: its names and where an evaluation of a checkpoint goes.

Every writer and reader of an evaluation folder (the runner, the report, the resume files, the
prediction files, the GLUE submission, the scan) takes its names from here::

    EVAL_DIR/                     RUN/eval/step_NNNNNNNN for a checkpoint RUN/checkpoints/step_N
        lease.json                held while an evaluation runs (common.lease)
        model/                    the discriminator exported from the checkpoint, when needed
        seeds/<task>/seed<N>.json every finished (task, seed), saved at once (resume)
        predictions/<task>/seed<N>.jsonl   dev predictions each score is computed from
        glue_submission/          one TSV per task when test files exist
        report.html, *.png        what a person reads
        results.json              written LAST: its presence marks a finished evaluation

A run's evaluations live beside its checkpoints (``RUN/eval/``, ``electra.checkpoint.run_layout.EVAL``),
with ``RUN/eval/skipped.jsonl`` listing the checkpoints that will never be evaluated and why
(``electra.checkpoint.eval_handoff``).

``default_out``: a step dir → ``RUN/eval/step_N``; a run dir → the eval folder of the checkpoint
it stands for (``resolve_target`` also turns the run dir into that step dir, so the
evaluation is keyed to one checkpoint, not to whatever is newest later); a run's final export
``RUN/hf`` → ``RUN/eval/hf``; any other Hugging Face folder → ``<folder>/eval``.
"""
from __future__ import annotations

from pathlib import Path

from electra.checkpoint import run_layout as layout

RESULTS = "results.json"
REPORT = "report.html"
LEASE = "lease.json"
MODEL = "model"
SEEDS = "seeds"
PREDICTIONS = "predictions"
SUBMISSION = "glue_submission"
OWN_FOLDER = "eval"  # beside a Hugging Face folder that is not part of a run


def resolve_target(checkpoint: str | Path) -> Path:
    """The checkpoint an evaluation is about: a run dir becomes the checkpoint it stands for
    (``run_layout.resolve_checkpoint``); a run with no complete checkpoint, a step dir that is
    gone (the runner records why) and a Hugging Face folder stay as given."""
    path = Path(checkpoint).resolve()
    try:
        return layout.resolve_checkpoint(path)
    except layout.NoCheckpoint:
        return path


def default_out(checkpoint: str | Path) -> Path:
    """Where the evaluation of ``checkpoint`` goes when no ``--out`` is given (module docstring)."""
    target = resolve_target(checkpoint)
    run = layout.run_dir_of(target)
    if run is not None and layout.step_of(target) is not None:
        return layout.eval_dir(run, target.name)
    if target.name == layout.HF and (target.parent / layout.CONFIG).is_file():
        return target.parent / layout.EVAL / layout.HF
    if (target / layout.HF).is_dir() and (target / layout.CONFIG).is_file():  # a run, no checkpoint
        return target / layout.EVAL / layout.HF
    return target / OWN_FOLDER


def results_path(eval_dir: str | Path) -> Path:
    return Path(eval_dir) / RESULTS


def is_finished(eval_dir: str | Path) -> bool:
    return results_path(eval_dir).is_file()
