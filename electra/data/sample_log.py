"""The sample log (a contract): which examples each rank trained on, per optimizer step.

With ``data.log_samples=true`` every rank writes ``RUN/samples/rank{R}.jsonl``, one line per
optimizer step::

    {"step": S, "keys": [[document_uid, ordinal], ...], "generation": ["g0", ...]}

listing every example of that rank's micro batches of step ``S`` in the order trained, and for each
the corpus generation its shard belongs to (``electra.data.corpus_growth``: a corpus that grows joins
the run by generations; lines written before generations lack the field). A run on
several corpora (``--data A --data B``) writes ``[corpus, document_uid, ordinal]``, ``corpus``
being the corpus's position in the ``--data`` list (uids are unique within a corpus only). The union
over ranks of step ``S``'s keys is the global batch of step ``S``, which the elastic sample order
(``electra.data.sample_order``) makes the same for any number of ranks: the log is how a resume on
another number of GPUs is checked, and how an audit finds what a model saw.

A resumed run cuts the logs to the resumed step first (a killed run may have logged steps after
its last checkpoint, which the resumed run trains again), so each step appears once: every rank
its own file, and rank 0 the files of ranks at or beyond the new world size (a resume on fewer
ranks), whose later steps would otherwise join the union of a step they no longer train. The
cut happens whether or not the resumed run logs: a log then ends where logging stopped, never
with steps that were trained again unlogged. A cut file is replaced whole (written beside it,
then renamed), so a kill during the cut leaves the old file or the new one.
Lines are flushed per step: a kill loses at most the step being written, which resume redoes.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

SAMPLES = "samples"
_RANK_FILE = re.compile(r"rank(\d+)\.jsonl")


def sample_log_path(run_dir: str | Path, rank: int) -> Path:
    return Path(run_dir) / SAMPLES / f"rank{rank}.jsonl"


def read_sample_log(run_dir: str | Path, rank: int) -> dict[int, list[tuple[int, ...]]]:
    """step -> keys of one rank's log."""
    out = {}
    for line in sample_log_path(run_dir, rank).read_text().splitlines():
        rec = json.loads(line)
        out[rec["step"]] = [tuple(k) for k in rec["keys"]]
    return out


def read_sample_generations(run_dir: str | Path, rank: int) -> dict[int, list[str]]:
    """step -> the generation of each example of one rank's log (in the order of its keys)."""
    out = {}
    for line in sample_log_path(run_dir, rank).read_text().splitlines():
        rec = json.loads(line)
        out[rec["step"]] = list(rec.get("generation", []))
    return out


def cut_sample_log(path: Path, resume_step: int) -> None:
    """Keep the lines of steps up to ``resume_step`` (module docstring)."""
    lines = path.read_text().splitlines(keepends=True)
    kept = [line for line in lines if line.strip() and json.loads(line)["step"] <= resume_step]
    if kept == lines:
        return
    tmp = path.with_name(f".{path.name}.cut")
    tmp.write_text("".join(kept))
    os.replace(tmp, path)


def cut_departed_ranks(run_dir: str | Path, *, resume_step: int, world_size: int) -> list[int]:
    """Cut the logs of ranks ``>= world_size`` (left by a run on more ranks) to ``resume_step``;
    returns those ranks. Called by rank 0 alone: no rank of this run writes them."""
    folder = Path(run_dir) / SAMPLES
    ranks = sorted(int(m.group(1)) for f in (folder.iterdir() if folder.is_dir() else ())
                   if (m := _RANK_FILE.fullmatch(f.name)))
    departed = [r for r in ranks if r >= world_size]
    for r in departed:
        cut_sample_log(sample_log_path(run_dir, r), resume_step)
    return departed


class SampleLog:
    """Appends one line per step for one rank; a no-op when disabled (but a resumed run's old
    logs are cut to its step either way; rank 0 also cuts those of ranks beyond ``world_size``)."""

    def __init__(self, run_dir: str | Path, rank: int, *, enabled: bool, resume_step: int = 0,
                 world_size: int | None = None):
        self.enabled = enabled
        self.pending: list[list[int]] = []
        self.generations: list[str] = []
        self._file = None
        path = sample_log_path(run_dir, rank)
        if path.exists():  # keep the steps up to the resumed one (module docstring)
            cut_sample_log(path, resume_step)
        if rank == 0 and world_size is not None:
            cut_departed_ranks(run_dir, resume_step=resume_step, world_size=world_size)
        if not enabled:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "a")

    def add(self, keys: list[tuple[int, ...]], generations: list[str] | None = None) -> None:
        if self.enabled:
            self.pending.extend([int(x) for x in key] for key in keys)
            self.generations.extend(generations if generations is not None else [""] * len(keys))

    def end_step(self, step: int) -> None:
        if self.enabled:
            record = {"step": step, "keys": self.pending, "generation": self.generations}
            self._file.write(json.dumps(record) + "\n")
            self._file.flush()
            self.pending, self.generations = [], []

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
