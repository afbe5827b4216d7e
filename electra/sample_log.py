"""The sample log (a contract): which examples each rank trained on, per optimizer step.

With ``data.log_samples=true`` every rank writes ``RUN/samples/rank{R}.jsonl``, one line per
optimizer step::

    {"step": S, "keys": [[document_uid, ordinal], ...]}

listing every example of that rank's micro batches of step ``S`` in the order trained. A run on
several corpora (``--data A --data B``) writes ``[corpus, document_uid, ordinal]``, ``corpus``
being the corpus's position in the ``--data`` list (uids are unique within a corpus only). The union
over ranks of step ``S``'s keys is the global batch of step ``S``, which the elastic sample order
(``electra.sample_order``) makes the same for any number of ranks: the log is how a resume on
another number of GPUs is checked, and how an audit finds what a model saw.

A resumed run truncates the file to the resumed step first (a killed run may have logged steps
after its last checkpoint, which the resumed run trains again), so each step appears once.
Lines are flushed per step: a kill loses at most the step being written, which resume redoes.
"""
from __future__ import annotations

import json
from pathlib import Path

SAMPLES = "samples"


def sample_log_path(run_dir: str | Path, rank: int) -> Path:
    return Path(run_dir) / SAMPLES / f"rank{rank}.jsonl"


def read_sample_log(run_dir: str | Path, rank: int) -> dict[int, list[tuple[int, ...]]]:
    """step -> keys of one rank's log."""
    out = {}
    for line in sample_log_path(run_dir, rank).read_text().splitlines():
        rec = json.loads(line)
        out[rec["step"]] = [tuple(k) for k in rec["keys"]]
    return out


class SampleLog:
    """Appends one line per step for one rank; a no-op when disabled."""

    def __init__(self, run_dir: str | Path, rank: int, *, enabled: bool, resume_step: int = 0):
        self.enabled = enabled
        self.pending: list[list[int]] = []
        self._file = None
        if not enabled:
            return
        path = sample_log_path(run_dir, rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():  # keep the steps up to the resumed one (module docstring)
            kept = [line for line in path.read_text().splitlines(keepends=True)
                    if line.strip() and json.loads(line)["step"] <= resume_step]
            path.write_text("".join(kept))
        self._file = open(path, "a")

    def add(self, keys: list[tuple[int, ...]]) -> None:
        if self.enabled:
            self.pending.extend([int(x) for x in key] for key in keys)

    def end_step(self, step: int) -> None:
        if self.enabled:
            self._file.write(json.dumps({"step": step, "keys": self.pending}) + "\n")
            self._file.flush()
            self.pending = []

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
