"""The run directory, defined once: its names, the checkpoint listing, and ``meta.json``.

Every reader and writer of a run directory (the trainer, the checkpoint commit, the offline
export, checkpoint resolution for fine-tuning, the evaluation flows) takes the layout from here,
so a rename or a new completeness rule cannot leave one of them behind::

    RUN_DIR/
        config.json               the resolved run config, exactly as trained (ElectraConfig)
        deepspeed_config.json     the DeepSpeed config derived from it
        tokenizer/                the run's copy of the corpus tokenizer (exports read it)
        metrics.jsonl             train/eval/data records (electra.run.metrics_log)
        lineage.json              where a run started from with --init-from (electra.checkpoint.init_from), and
                                  the corpus generations it trained on (electra.data.corpus_growth)
        hf/                       the final Hugging Face export (discriminator/, generator/)
        eval/step_NNNNNNNN/       fine-tuning results of one checkpoint (cli.evaluate)
        eval/skipped.jsonl        checkpoints the evaluation hand-off gave up on (electra.checkpoint.eval_handoff)
        checkpoints/
            step_NNNNNNNN/        one checkpoint; complete iff meta.json is in it
                meta.json         written last (the commit marker, electra.checkpoint.save_load)
                eval_pending.json the pin: kept until evaluated (train.keep_until_evaluated)
                eval_claimed.json the pin once an evaluation has claimed it (electra.checkpoint.eval_handoff)
                hf/               its export when train.export_every_checkpoint is on
            latest                text file naming the newest complete step dir

Which checkpoint a path names is decided here once, ``resolve_checkpoint``: a complete step dir
is itself; a run folder stands for the checkpoint training would resume from (``find_latest``).
Resume, export (``electra-export``), ``--init-from`` and evaluation all resolve through it, so a
run folder never means one checkpoint to the trainer and another to the evaluation.

A step dir without ``meta.json`` is an interrupted write: it is never listed, resumed from or
evaluated, and ``clean_incomplete`` deletes it at the next start. ``latest`` is a hint, not the
truth: when it is missing or names an incomplete dir, the newest complete dir is used. Step dirs
sort by name because the step is zero-padded to eight digits (``step_name``); the listing
ignores anything that does not parse as ``step_<digits>``.

Pruning keeps the newest ``keep_last`` complete checkpoints and every PINNED one (a pin file,
``eval_pending.json`` or ``eval_claimed.json``, in the step dir: its evaluation has not finished;
``electra.checkpoint.eval_handoff`` writes and removes pins and explains why this is safe against an
evaluator pruning at the same time). A pinned checkpoint still counts among the newest
``keep_last``: pins add checkpoints on disk, they never push an unpinned new one out.

Nothing here imports torch or DeepSpeed: the fine-tuning side reads run directories without them.
"""
from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from common.sealed import seal, unseal

log = logging.getLogger(__name__)

CHECKPOINTS = "checkpoints"
LATEST = "latest"
META = "meta.json"
CONFIG = "config.json"
DEEPSPEED_CONFIG = "deepspeed_config.json"
TOKENIZER = "tokenizer"
METRICS = "metrics.jsonl"
TENSORBOARD = "tensorboard"
HF = "hf"
LINEAGE = "lineage.json"
EVAL = "eval"
PIN = "eval_pending.json"  # a pin waiting for its evaluation (electra.checkpoint.eval_handoff)
CLAIM = "eval_claimed.json"  # the same pin, renamed once an evaluation has claimed the checkpoint
SKIPPED = "skipped.jsonl"  # RUN/eval/skipped.jsonl: checkpoints whose evaluation was given up
STEP_PREFIX = "step_"


def step_name(step: int) -> str:
    return f"{STEP_PREFIX}{step:08d}"


def step_of(step_dir: str | Path) -> int | None:
    """The step a ``step_NNNNNNNN`` name stands for; None for any other name."""
    name = Path(step_dir).name
    digits = name[len(STEP_PREFIX):]
    return int(digits) if name.startswith(STEP_PREFIX) and digits.isdigit() else None


def checkpoints_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / CHECKPOINTS


def step_dir(run_dir: str | Path, step: int) -> Path:
    return checkpoints_dir(run_dir) / step_name(step)


def run_dir_of(step_dir: str | Path) -> Path | None:
    """The run directory holding ``RUN/checkpoints/step_N``; None for a step dir elsewhere."""
    step_dir = Path(step_dir)
    return step_dir.parent.parent if step_dir.parent.name == CHECKPOINTS else None


def eval_dir(run_dir: str | Path, step_dir_name: str) -> Path:
    return Path(run_dir) / EVAL / step_dir_name


def is_complete(step_dir: str | Path) -> bool:
    return (Path(step_dir) / META).is_file()


def is_pinned(step_dir: str | Path) -> bool:
    """True while the checkpoint waits for (or is in) its evaluation: prune leaves it alone."""
    step_dir = Path(step_dir)
    return (step_dir / PIN).is_file() or (step_dir / CLAIM).is_file()


def _all_step_dirs(run_dir: str | Path) -> list[Path]:
    root = checkpoints_dir(run_dir)
    dirs = [d for d in root.glob(f"{STEP_PREFIX}*") if d.is_dir() and step_of(d) is not None]
    return sorted(dirs, key=lambda d: step_of(d))


def step_dirs(run_dir: str | Path) -> list[Path]:
    """Complete checkpoint step dirs of a run (``meta.json`` present), oldest first."""
    return [d for d in _all_step_dirs(run_dir) if is_complete(d)]


def read_meta(step_dir: str | Path) -> dict[str, Any]:
    """``meta.json`` as a mapping; ValueError naming the file when it cannot be read or parsed."""
    path = Path(step_dir) / META
    try:  # sealed (common.sealed): a digit changed in it is found, not read as another step
        data = unseal(path.read_bytes(), str(path), what="checkpoint meta",
                      fix=f"delete {Path(step_dir).name} to resume from the checkpoint before it")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: unreadable checkpoint meta ({exc})") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{path}: unreadable checkpoint meta (expected a JSON object)")
    return data


def read_lineage(run_dir: str | Path) -> dict[str, Any] | None:
    """A run's ``lineage.json``, or None when it has none: where an ``--init-from`` run started
    (``electra.checkpoint.init_from``, keys ``init_from``, ``kind``, ...) and the corpus generations trained
    on (``corpora``: location and generations of each, ``electra.data.corpus_growth``)."""
    path = Path(run_dir) / LINEAGE
    return json.loads(path.read_text()) if path.is_file() else None


def checkpoint_lineage(step_dir: str | Path) -> dict[str, Any] | None:
    """The lineage an export of ``step_dir`` carries: the run's, with the corpus generations that
    checkpoint had trained on (its ``meta.json``), which an earlier checkpoint may have fewer of."""
    run_dir = run_dir_of(step_dir)
    lineage = read_lineage(run_dir) if run_dir is not None else None
    record = read_meta(step_dir).get("generations") or {}
    if record.get("epochs"):
        newest = record["epochs"][-1]["generations"]
        lineage = {**(lineage or {}), "corpora": [{"location": loc, "generations": list(g)}
                                                  for loc, g in zip(record["locations"], newest)]}
    return lineage


def update_lineage(run_dir: str | Path, **entries: Any) -> None:
    """Set ``entries`` in ``lineage.json`` (rank 0), keeping what it holds; replaced whole."""
    path = Path(run_dir) / LINEAGE
    record = {**(read_lineage(run_dir) or {}), **entries}
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    tmp.replace(path)


@dataclass
class CheckpointMeta:
    step: int
    tokens_seen: int
    data_position: dict[str, int]
    manifest_sha256: str
    tokenizer_sha256: str
    config_hash: str
    wall_time: float  # seconds of training so far (summed over restarts)
    world_size: int = 1
    # The data position counts global steps: a resume needs the same global batch. 0: unknown.
    global_batch_size: int = 0
    # What the data stream is a function of (seq_len, tokenizer, shard list): resume refuses a
    # corpus that differs in it. "" in checkpoints written before it existed.
    data_sha256: str = ""
    # The corpus generations each epoch started used (electra.data.corpus_growth.GenerationRecord);
    # {} in checkpoints written before corpora grew.
    generations: dict[str, Any] = field(default_factory=dict)
    # Every rank wrote its sums_rank{R}.json before the commit (electra.checkpoint.sums); False in
    # checkpoints written before sums existed, which load unchecked.
    sums: bool = False
    saved_at: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))

    @classmethod
    def read(cls, step_dir: str | Path) -> CheckpointMeta:
        """The typed meta of a step dir; ValueError naming the file when unreadable or incomplete."""
        data = read_meta(step_dir)
        try:
            return cls(**data)
        except TypeError as exc:
            raise ValueError(f"{Path(step_dir) / META}: unreadable checkpoint meta ({exc})") from exc

    def to_json(self) -> bytes:
        return seal(asdict(self))


def find_latest(run_dir: str | Path) -> Path | None:
    """The checkpoint to resume from: ``latest`` if it names a complete dir, else the newest one."""
    pointer = checkpoints_dir(run_dir) / LATEST
    if pointer.is_file():
        target = checkpoints_dir(run_dir) / pointer.read_text().strip()
        if is_complete(target):
            return target
        log.warning("%s names %s, which is incomplete; falling back to the newest complete one", pointer, target)
    complete = step_dirs(run_dir)
    return complete[-1] if complete else None


class NoCheckpoint(FileNotFoundError):
    """A path that names no complete checkpoint; the message is one line naming it and the fix."""


CHECKPOINT_FORMS = "a checkpoint folder RUN/checkpoints/step_N or a run folder RUN written by electra.train"


def is_run_dir(path: str | Path) -> bool:
    """A run folder: it has ``checkpoints/`` or the trainer's ``config.json``."""
    return checkpoints_dir(path).is_dir() or (Path(path) / CONFIG).is_file()


def resolve_checkpoint(path: str | Path, *, forms: str = CHECKPOINT_FORMS) -> Path:
    """The complete checkpoint ``path`` names: a complete step dir is itself, a run folder its
    ``find_latest``. Anything else is ``NoCheckpoint``, one line naming the path and what to give
    instead (``forms``: the caller's own list of what it accepts)."""
    path = Path(path)
    if not path.exists():
        raise NoCheckpoint(f"{path}: no such folder; give {forms}")
    if not path.is_dir():
        raise NoCheckpoint(f"{path}: not a folder; give {forms}")
    run = run_dir_of(path)
    if run is not None and step_of(path) is not None:
        if is_complete(path):
            return path
        raise NoCheckpoint(f"{path}: not a complete checkpoint (no {META}: an interrupted write); "
                           f"pass another step folder or the run folder {run}")
    if is_run_dir(path):
        latest = find_latest(path)
        if latest is None:
            raise NoCheckpoint(f"{path}: no complete checkpoint in {checkpoints_dir(path)} (a step_N "
                               f"folder with {META}); train until one is saved")
        return latest
    raise NoCheckpoint(f"{path}: neither a checkpoint folder nor a run folder; give {forms}")


def clean_incomplete(run_dir: str | Path) -> list[Path]:
    """Delete step dirs a kill left without ``meta.json`` (rank 0, before training starts)."""
    removed = []
    for d in _all_step_dirs(run_dir):
        if not is_complete(d):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
            log.warning("removed incomplete checkpoint %s (interrupted write)", d)
    return removed


def prune(run_dir: str | Path, keep_last: int) -> list[Path]:
    """Delete the complete checkpoints that are neither among the newest ``keep_last`` nor pinned;
    returns what was deleted.

    Only complete dirs are considered: a dir being written (no ``meta.json`` yet) is never
    touched, which is what makes a pin written before ``meta.json`` safe. A complete dir never
    gains a pin (pins are written before the commit only), so "complete and unpinned" cannot
    change between the check and the delete. Each deletion removes ``meta.json`` first: a reader
    listing the run meanwhile sees an incomplete dir (ignored), never half a checkpoint. Two
    processes pruning the same run at once delete the same dirs; ``ignore_errors`` absorbs the
    files the other one removed first."""
    complete = step_dirs(run_dir)
    older = complete[: max(0, len(complete) - keep_last)]
    doomed = [d for d in older if not is_pinned(d)]
    for d in doomed:
        try:
            (d / META).unlink(missing_ok=True)
        except OSError:  # e.g. the dir went away with the other pruner's rmtree
            pass
        shutil.rmtree(d, ignore_errors=True)
    return doomed
