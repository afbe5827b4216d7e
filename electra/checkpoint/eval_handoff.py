"""The checkpoint hand-off between the trainer and the evaluation: pins, releases, the skip policy.

The trainer keeps only the newest ``train.keep_last`` checkpoints, but an evaluation (fine-tuning
one checkpoint on GLUE, hours) starts per committed checkpoint and waits in a queue; a checkpoint
pruned before its turn would never be evaluated. With ``train.keep_until_evaluated`` the trainer
PINS every checkpoint it commits and the evaluation RELEASES it when done::

    RUN/checkpoints/step_N/eval_pending.json   the pin, {"step", "pinned_at"}: waiting
    RUN/checkpoints/step_N/eval_claimed.json   the same pin, renamed by ``claim``: in evaluation
    RUN/eval/skipped.jsonl                     one {"step", "reason", "at"} line per skipped one

Life of a checkpoint (the trainer's rank 0 in ``electra.checkpoint.save_load.save_checkpoint``):

1. ``pin(step_dir)`` BEFORE ``meta.json``: the pin is committed with the checkpoint (complete iff
   ``meta.json`` exists), so no complete checkpoint of a pinning run is ever unpinned by mistake,
   and a kill before the commit leaves an incomplete dir that nothing lists and the next start
   deletes, pin and all.
2. ``apply_policy``: when evaluation is slower than checkpointing, pins pile up and so does disk.
   While more than ``max_pending`` pins wait, the OLDEST waiting non-milestone is released with
   a reason in ``skipped.jsonl``. The evaluation takes the newest pending first, so the oldest is
   the one it would have reached last. Milestones (step a multiple of ``keep_every *
   save_every``) are never skipped; once only milestones (and claimed ones) are over the limit,
   nothing more is skipped, so milestones grow disk use by at most
   ``max_steps / (keep_every * save_every)`` checkpoints over a run.
3. ``layout.prune``: deletes complete checkpoints that are neither among the newest
   ``keep_last`` nor pinned.
4. The evaluation (``flows``) optionally ``claim``s the checkpoint it starts on (then the policy
   never skips it under its feet), and ``release``s it after writing ``results.json`` (or with
   ``skipped_reason`` when it gives up). ``release`` prunes the run to the ``keep_last`` of its
   ``RUN/config.json``: after training ends, that is what deletes the last pinned checkpoints
   once evaluated, so a run ends with ``keep_last`` checkpoints.

Concurrency. The trainer and an evaluator may prune, skip and release in the same run at once.
No lock is taken; each step is one atomic file operation and the states only move one way:

* A pin is written only into a dir that is not yet complete, and prune only looks at complete
  dirs. So "complete and unpinned" never becomes "pinned" again: a prune that decided to delete
  a dir cannot be wrong by the time it deletes it, and the dir being committed is never touched.
* Prune removes ``meta.json`` first, then the rest (``rmtree(ignore_errors=True)``): a reader
  sees a complete checkpoint or an ignored incomplete one. Two pruners delete the same set
  (both keep the newest ``keep_last`` of a listing that only grows at the new end).
* Skip (policy) and claim race on one file: the skip is ``unlink(eval_pending.json)``, the claim
  is ``rename(eval_pending.json -> eval_claimed.json)``. Exactly one of them succeeds; a skip
  that loses records nothing, a claim that loses returns False (the evaluator moves on). Between
  the two names there is no moment without a pin (rename is atomic), so prune cannot slip in.
* ``release`` of a dir that is already gone (pruned after a skip, deleted by hand) removes
  nothing, raises nothing, and still records the skip when asked.
* ``skipped.jsonl`` is appended with one ``write`` on an ``O_APPEND`` descriptor: lines from two
  processes do not interleave. A line cut by a crash is tolerated by ``skipped`` and the next
  writer starts on a new line.

Trade-offs: pins cost disk (bounded by ``keep_last + max_pending + claimed + milestones``
checkpoints) in exchange for every kept checkpoint being evaluated; a claim left by an evaluator
that died stays pinned (and listed by ``pending``) until an evaluation finishes it. Nothing here
imports torch or DeepSpeed: the evaluation side imports this module.
"""
from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from common import storage
from electra.checkpoint import run_layout as layout
from electra.checkpoint.run_layout import is_pinned

log = logging.getLogger(__name__)

__all__ = ["Policy", "apply_policy", "claim", "is_claimed", "is_pinned", "pending", "pin", "policy_for",
           "record_skip", "release", "skipped", "skipped_path"]


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass(frozen=True)
class Policy:
    """What the trainer applies after each commit (``train.eval_max_pending``, ``eval_keep_every``)."""
    max_pending: int = 3
    keep_every: int = 0
    save_every: int = 1

    def __post_init__(self) -> None:
        if self.max_pending < 1 or self.keep_every < 0 or self.save_every < 1:
            raise ValueError(f"{self}: need max_pending >= 1, keep_every >= 0, save_every >= 1")

    def is_milestone(self, step: int) -> bool:
        return self.keep_every > 0 and step % (self.keep_every * self.save_every) == 0


def policy_for(train) -> Policy | None:
    """The hand-off policy of a ``TrainConfig``; None when checkpoints are not pinned.

    ``keep_until_evaluated`` None ("auto") pins when a Prefect API is configured: the trainer
    then emits the event that starts an evaluation per checkpoint (``common.events``)."""
    keep = train.keep_until_evaluated
    if keep is None:
        from common.events import prefect_api_url

        keep = prefect_api_url() is not None
    if not keep:
        return None
    return Policy(max_pending=train.eval_max_pending, keep_every=train.eval_keep_every,
                  save_every=train.save_every)


def pin(step_dir: str | Path) -> Path:
    """Pin a checkpoint being written (before its ``meta.json``); atomic. Returns the pin file."""
    path = Path(step_dir) / layout.PIN
    step = layout.step_of(step_dir)
    storage.write_bytes(str(path), (json.dumps({"step": step, "pinned_at": _now()}) + "\n").encode())
    return path


def is_claimed(step_dir: str | Path) -> bool:
    return (Path(step_dir) / layout.CLAIM).is_file()


def claim(step_dir: str | Path) -> bool:
    """Mark a pinned checkpoint as in evaluation, so the policy never skips it; True when the
    caller may evaluate it (also when it was claimed before, e.g. by an evaluation that died),
    False when it is no longer pinned (skipped, released or gone)."""
    step_dir = Path(step_dir)
    try:
        os.rename(step_dir / layout.PIN, step_dir / layout.CLAIM)
        return True
    except FileNotFoundError:
        return is_claimed(step_dir)


def pending(run_dir: str | Path) -> list[Path]:
    """Pinned (waiting or claimed) complete checkpoints, oldest first."""
    return [d for d in layout.step_dirs(run_dir) if is_pinned(d)]


def skipped_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / layout.EVAL / layout.SKIPPED


def record_skip(run_dir: str | Path, step: int, reason: str) -> None:
    """Append ``{"step", "reason", "at"}`` to ``RUN/eval/skipped.jsonl`` with a single write."""
    path = skipped_path(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"step": int(step), "reason": str(reason), "at": _now()}) + "\n"
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":  # a line cut by a crash: do not extend it
            line = "\n" + line
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def skipped(run_dir: str | Path) -> dict[int, str]:
    """Step -> reason from ``skipped.jsonl`` (a later line wins); unparseable lines (a cut last
    line) are left out."""
    try:
        lines = skipped_path(run_dir).read_text().splitlines()
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:  # a scan must go on with the other runs
        log.warning("%s unreadable (%r); no skips read", skipped_path(run_dir), exc)
        return {}
    out: dict[int, str] = {}
    for i, text in enumerate(lines):
        if not text.strip():
            continue
        try:
            rec = json.loads(text)
            step, reason = rec["step"], rec["reason"]
            if not isinstance(step, int) or isinstance(step, bool) or not isinstance(reason, str):
                raise TypeError("step must be an int and reason a string")
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            (log.debug if i == len(lines) - 1 else log.warning)(
                "%s line %d unreadable (%s); left out", skipped_path(run_dir), i + 1, exc)
            continue
        out[step] = reason
    return out


def _keep_last(run_dir: Path) -> int | None:
    """``train.keep_last`` of the run's resolved ``config.json``; None (and a warning) if unreadable."""
    path = run_dir / layout.CONFIG
    try:
        value = json.loads(path.read_text())["train"]["keep_last"]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
        log.warning("%s: no readable train.keep_last (%r); not pruning", path, exc)
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        log.warning("%s: train.keep_last %r is not an int >= 1; not pruning", path, value)
        return None
    return value


def release(step_dir: str | Path, *, skipped_reason: str | None = None) -> list[Path]:
    """Unpin a checkpoint (its evaluation finished, or ``skipped_reason`` says why not: then one
    line goes to ``skipped.jsonl``), then prune its run to the ``train.keep_last`` of
    ``RUN/config.json``. Returns the pruned step dirs. A step dir already gone is not an error."""
    step_dir = Path(step_dir)
    for name in (layout.PIN, layout.CLAIM):
        try:
            (step_dir / name).unlink(missing_ok=True)
        except NotADirectoryError:
            pass
    run_dir = layout.run_dir_of(step_dir)
    step = layout.step_of(step_dir)
    if run_dir is None or step is None:
        log.warning("%s is not RUN/checkpoints/step_N: unpinned, nothing recorded or pruned", step_dir)
        return []
    if skipped_reason is not None:
        record_skip(run_dir, step, skipped_reason)
    keep_last = _keep_last(run_dir)
    if keep_last is None:
        return []
    pruned = layout.prune(run_dir, keep_last)
    from electra.checkpoint.universal import prune_orphans  # torch-free; its conversions of pruned ones

    prune_orphans(run_dir)
    return pruned


def apply_policy(run_dir: str | Path, *, max_pending: int, keep_every: int, save_every: int) -> list[int]:
    """Skip the oldest waiting non-milestone checkpoints while more than ``max_pending`` wait
    (claimed ones are in evaluation, not waiting, and are never skipped); returns the skipped
    steps, each with a line in ``skipped.jsonl``. When only milestones are left over the limit
    nothing more is skipped: milestones then grow disk use, bounded by the run's length /
    (``keep_every`` * ``save_every``). Does not prune: the caller does (``layout.prune``)."""
    policy = Policy(max_pending=max_pending, keep_every=keep_every, save_every=save_every)
    waiting = [d for d in pending(run_dir) if not is_claimed(d)]
    candidates = [d for d in waiting if not policy.is_milestone(layout.step_of(d))]
    out = []
    while len(waiting) > max_pending and candidates:
        d = candidates.pop(0)
        reason = (f"evaluation slower than checkpointing: {len(waiting)} checkpoints pending > "
                  f"eval_max_pending={max_pending}; the newest pending are evaluated first")
        waiting.remove(d)
        try:
            os.unlink(d / layout.PIN)  # loses to a claim (rename) or a release: then not ours to skip
        except FileNotFoundError:
            continue
        step = layout.step_of(d)
        record_skip(run_dir, step, reason)
        log.warning("checkpoint %s will not be evaluated: %s", d.name, reason)
        out.append(step)
    return out
