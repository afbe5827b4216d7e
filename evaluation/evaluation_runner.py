"""The evaluation runner: one job, named phases that plain Python can drive, one folder it owns.

    runner = EvaluationRunner(job)        # evaluation.evaluation_job.EvaluationJob
    results = runner.run()                # = check, (lease), resolve, plan, run_unit..., publish

* **check**: is there anything to do? ``results.json`` already covering every asked task for
  this checkpoint, request and data (the files are hashed again) is returned as it is: one
  evaluation per (checkpoint, recipe, task set), however many triggers asked. Results of another
  request in the same folder raise ``EvaluationConflict`` (one line naming the folder and the
  difference) instead of being overwritten. A checkpoint step dir that is gone is not a crash:
  the skip the trainer's policy recorded is returned (``status: skipped``), or — pruned without
  a pin — a line ``{"step", "reason"}`` is added to ``RUN/eval/skipped.jsonl`` first
  (``electra.checkpoint.eval_handoff``).
* **lease** (``common.lease``): ``out/lease.json``, so the event-triggered run, the scan and a
  person at the CLI never evaluate one checkpoint twice at the same time; ``check`` is repeated
  under it.
* **claim** (``eval_handoff.claim``): a checkpoint the trainer pinned is marked as in
  evaluation, so the trainer's skip policy never takes it away mid-evaluation.
* **resolve**: the checkpoint's discriminator (exported into ``out/model`` when needed) and the
  paper recipe for its size with the job's overrides.
* **plan**: every task's files parsed before the first step. A missing or malformed file fails
  ITS task (recorded, named with file and line) and the others go on. Units: one per task
  in-process (its data tokenised once for all seeds), one per (task, seed) with ``workers`` > 1;
  SQuAD is one unit.
* **run_unit** (``evaluation.evaluation_unit``: a module function of a picklable
  ``UnitContext`` and ``Unit``, so worker processes can run it): fine-tune, score, save each seed
  at once (resume: a rerun redoes only what is missing).
* **publish**: the tasks merged into ``results.json`` (a run with more tasks adds them to the
  earlier ones of the same request), ``report.html`` with references, GLUE submission files,
  then ``results.json`` last, then the checkpoint's evaluation pin is released
  (``eval_handoff.release``: pruning of the run may resume).

``PHASES`` names them in order and ``drive`` runs a slice of them: ``run()`` drives them all in
this process; the Prefect flow (``flows/evaluate.py``) drives the same list, the units as Prefect
tasks.
"""
from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any, Callable

from common.lease import Lease, LeaseHeld, LeaseInfo
from electra.checkpoint import eval_handoff as handoff
from electra.checkpoint import run_layout as layout

from . import eta, eval_layout, glue_submission, report
from .evaluation_job import EvaluationJob
from .evaluation_unit import Unit, UnitContext, run_unit  # noqa: F401  (run_unit: re-exported for callers)
from .finetune import check_task_data, recipe_for_model, task_data_files
from .glue_tasks import GlueDataError
from .recipe import FinetuneRecipe
from .results import TaskResult, code_version, hash_files
from .sources import CheckpointError, ResolvedCheckpoint, resolve_checkpoint
from .squad_data import SquadDataError
from .squad_finetune import check_squad_data, squad_files, squad_task_name

log = logging.getLogger("evaluation.evaluate")
# The phases in order (``drive``): ``check`` is repeated under the folder's lease; the Prefect
# flow runs ``claim`` onwards inside an evaluation slot and ``run`` as Prefect tasks.
PHASES = ("check", "claim", "resolve", "plan", "run", "publish")
RANDOM_INIT = "random_init"  # RUN/eval/random_init: the run's model at random initialisation


class EvaluationFailed(RuntimeError):
    """Some tasks failed; ``results.json`` holds the others and the errors."""


class EvaluationConflict(ValueError):
    """The output folder holds the results of another request for the same checkpoint."""


class EvaluationRunner:
    def __init__(self, job: EvaluationJob, *, flow_run_id: str | None = None,
                 is_dead: Callable[[LeaseInfo], bool] | None = None):
        self.job, self.out = job, job.out_dir
        self.flow_run_id, self.is_dead = flow_run_id, is_dead
        self.run_id = uuid.uuid4().hex[:12]
        self.resolved: ResolvedCheckpoint | None = None
        self.recipe: FinetuneRecipe | None = None
        self.context: UnitContext | None = None
        self.failed: dict[str, str] = {}  # this run's failed tasks: task -> error
        self.per_seed = job.workers > 1
        self.claimed = False  # this run claimed the checkpoint's pin (and releases it)
        self.units: list[Unit] = []  # plan's units; run's outcomes (a unit -> its result or error)
        self.outcomes: dict[Unit, Any] = {}
        self.published = False  # publish ran: results.json and report.html are written
        self.finished: list[str] = []  # the tasks results.json holds after publish

    # -- names ---------------------------------------------------------------------------------
    @property
    def task_names(self) -> list[str]:
        names = [s.name for s in self.job.task_specs]
        return names + ([squad_task_name(self.job.squad_version)] if self.job.squad_dir else [])

    def lease(self) -> Lease:
        """The lease on the output folder (a context manager; ``LeaseHeld`` when taken)."""
        return Lease(self.out / eval_layout.LEASE, flow_run_id=self.flow_run_id,
                     is_dead=self.is_dead, note="evaluate")

    # -- phases --------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        """All phases in this process, units one after another (no Prefect)."""
        early = self.check()
        if early is not None:
            return early
        try:
            with self.lease():
                outcome = self.drive(PHASES)
        except LeaseHeld as held:
            return self.in_progress(held)
        if self.published:
            self.raise_failures()
        return outcome

    def drive(self, phases: tuple[str, ...], run_units: Callable[[list[Unit]], dict[Unit, Any]] | None = None
              ) -> dict[str, Any] | None:
        """Run ``phases`` (a slice of ``PHASES``) in order until one ends the run: an early
        outcome (already evaluated, skipped) or, at ``publish``, the results. ``run_units`` runs
        the planned units (default: in this process, one after another; the Prefect flow passes
        its tasks); a unit's exception is its outcome, so the other units go on."""
        for phase in phases:
            if phase == "plan":
                self.units = self.plan()
            elif phase == "run":
                self.outcomes = (run_units or self._run_here)(self.units)
            elif phase == "publish":
                return self.publish(self.outcomes)
            else:
                early = getattr(self, phase)()
                if early is not None:
                    return early
        return None

    def _run_here(self, units: list[Unit]) -> dict[Unit, Any]:
        outcomes: dict[Unit, Any] = {}
        for unit in units:
            try:
                outcomes[unit] = run_unit(self.context, unit)
            except Exception as exc:  # noqa: BLE001 - recorded, the other units go on
                outcomes[unit] = exc
        return outcomes

    def in_progress(self, held: LeaseHeld) -> dict[str, Any]:
        """What a run returns when another live run holds the folder (nothing was done)."""
        log.warning("not evaluating %s: %s", self.job.target, held)
        return {"status": "in_progress", "checkpoint": str(self.job.target), "out": str(self.out),
                "holder": held.info.describe()}

    def check(self) -> dict[str, Any] | None:
        """Existing results covering the job, a gone checkpoint's skip, or None: work to do."""
        existing = self._existing()
        if existing is not None and self._covers(existing):
            log.info("%s: already evaluated (%s) — returning %s", self.job.target,
                     ", ".join(self.task_names), eval_layout.results_path(self.out))
            step = self._own_step()
            if step is not None and layout.is_pinned(step):  # a run died between results and release
                handoff.release(step)
            return existing
        return self._gone()

    def _own_step(self) -> Path | None:
        """The checkpoint when this run writes its run's own evaluation folder (RUN/eval/step_N):
        only such a run claims and releases the trainer's pin; an evaluation elsewhere (another
        --out) leaves the hand-off alone."""
        step = self.job.step_dir
        if step is None or self.out.resolve() != eval_layout.default_out(step).resolve():
            return None
        return step

    def claim(self) -> dict[str, Any] | None:
        """Claim a pinned checkpoint (the trainer's skip policy then leaves it alone); the skip
        when the policy skipped it first. A checkpoint of a run without pins needs no claim."""
        step = self._own_step()
        if step is None:
            return None
        if layout.is_pinned(step) and handoff.claim(step):
            self.claimed = True
            return None
        reason = handoff.skipped(self._run()).get(layout.step_of(step))
        if reason is None:  # never pinned, never skipped: evaluate it
            return None
        log.warning("%s: not evaluated: %s", step, reason)
        return {"status": "skipped", "checkpoint": str(step), "out": str(self.out), "reason": reason}

    def resolve(self) -> dict[str, Any] | None:
        """The model and recipe (``self.resolved``, ``self.context``); the skip, recorded, when
        the checkpoint was deleted while being exported (a run without pins)."""
        self.out.mkdir(parents=True, exist_ok=True)
        try:
            self.resolved = resolve_checkpoint(self.job.target, export_dir=self.out / eval_layout.MODEL)
        except (CheckpointError, OSError):
            gone = self._gone()
            if gone is not None:
                return gone
            raise
        overrides = {**self.job.recipe, **({"num_seeds": self.job.seeds} if self.job.seeds else {})}
        self.recipe = recipe_for_model(self.resolved.model_dir, **overrides)
        self.context = UnitContext(model_dir=str(self.resolved.model_dir), recipe=self.recipe.to_dict(),
                                   out=str(self.out), checkpoint=self.resolved.checkpoint,
                                   run_id=self.run_id, glue_dir=self.job.glue_dir,
                                   squad_dir=self.job.squad_dir, squad_version=self.job.squad_version)
        return None

    def plan(self) -> list[Unit]:
        """Every file parsed first; a bad or missing one fails its task only."""
        units, steps = [], {}
        for spec in self.job.task_specs:
            try:
                rows = check_task_data(spec, self.job.glue_dir)
            except (GlueDataError, OSError) as exc:
                self._fail(spec.name, exc)
                continue
            steps[spec.name] = eta.planned_steps(spec, rows["train"], self.recipe)
            if self.per_seed:
                units += [Unit(spec.name, seed) for seed in self.recipe.seeds]
            else:
                units.append(Unit(spec.name))
        if self.job.squad_dir:
            name = squad_task_name(self.job.squad_version)
            try:
                check_squad_data(self.job.squad_dir, self.job.squad_version)
                units.append(Unit(name))
            except (SquadDataError, OSError) as exc:
                self._fail(name, exc)
        squad = squad_task_name(self.job.squad_version) if any(u.is_squad for u in units) else None
        # the progress lines' whole-evaluation ETA (evaluation.eta): this process's units only
        eta.activate(eta.clock_for(steps, self.recipe.seeds, squad))
        log.info("evaluating %s -> %s: %d unit(s) (%s)%s", self.job.target, self.out, len(units),
                 ", ".join(u.describe() for u in units),
                 f"; failed before fine-tuning: {', '.join(self.failed)}" if self.failed else "")
        return units

    def publish(self, outcomes: dict[Unit, dict | BaseException]) -> dict[str, Any]:
        """Merge, write the report and ``results.json`` (last), release the checkpoint's pin."""
        eta.activate(None)  # fine-tuning is over
        finished: dict[str, TaskResult] = {}
        for unit, outcome in outcomes.items():
            if isinstance(outcome, BaseException):
                self._fail(unit.task, outcome, seed=unit.seed)
            elif unit.seed is None:
                finished[unit.task] = TaskResult.from_dict(outcome)
        for name in {u.task for u in outcomes if u.seed is not None} - set(self.failed):
            # every seed saved: assembling the task reads them, nothing is fine-tuned again
            finished[name] = TaskResult.from_dict(run_unit(self.context, Unit(name)))
        results = self._results(finished)
        references = self._references()
        results["reference_dirs"] = {name: str(folder) for name, folder in references.items()}
        report.write_report(self.out, results, history=self._history(results),
                            loss_curve=self._loss_curve(results),
                            references={n: report.read_results(f) for n, f in references.items()} or None)
        report.write_results(self.out, results)  # last: its presence marks a finished evaluation
        self.published, self.finished = True, list(results["tasks"])
        step = self.job.step_dir
        if self.claimed:
            self.claimed = False
            pruned = handoff.release(step)  # pruning of the run resumes
            if pruned:
                log.info("released %s; pruned %s", step.name, ", ".join(p.name for p in pruned))
        return results

    def raise_failures(self) -> None:
        """``EvaluationFailed`` naming the failed tasks, where the others' results are, and the
        two ways on: fix the data and rerun (only the failed tasks are redone), or leave them
        out with ``--tasks`` (the finished ones)."""
        if self.failed:
            detail = "; ".join(f"{task}: {error}" for task, error in self.failed.items())
            keep = [t for t in self.finished if not t.startswith("SQuAD")]
            way = (f", or leave them out: --tasks {','.join(keep)}" if keep else "")
            raise EvaluationFailed(
                f"{len(self.failed)} task(s) failed ({detail}); {eval_layout.RESULTS} and {eval_layout.REPORT} in "
                f"{self.out} hold the others; fix the data and rerun to redo only these{way}")

    # -- helpers -------------------------------------------------------------------------------
    def _fail(self, task: str, exc: BaseException, *, seed: int | None = None) -> None:
        message = f"{type(exc).__name__}: {exc}" + (f" (seed {seed})" if seed is not None else "")
        self.failed.setdefault(task, message)
        log.error("task %s failed: %s", task, message)

    def _run(self) -> Path | None:
        step = self.job.step_dir
        return layout.run_dir_of(step) if step is not None else None

    def _existing(self) -> dict[str, Any] | None:
        """This folder's results for this checkpoint and request; None when there are none (or
        they are of another checkpoint, or from before requests were recorded: replaced)."""
        if not eval_layout.is_finished(self.out):
            return None
        existing = report.read_results(self.out)
        if existing.get("checkpoint") != str(self.job.target) or "request" not in existing:
            return None
        asked = self.job.request
        if existing["request"] != asked:
            raise EvaluationConflict(
                f"{self.out} holds results of another request for this checkpoint "
                f"({existing['request']}; this run asks {asked}): evaluate into another --out")
        return existing

    def _covers(self, existing: dict[str, Any]) -> bool:
        tasks, failed = existing.get("tasks", {}), existing.get("failed", {})
        for name in self.task_names:
            if name not in tasks or name in failed:
                return False
            if tasks[name].get("data_files") != self._data_hashes(name):
                return False  # the data changed: this task is evaluated again
        return True

    def _data_hashes(self, name: str) -> dict[str, str] | None:
        try:
            if name.startswith("SQuAD"):
                return hash_files(list(squad_files(self.job.squad_dir, self.job.squad_version)))
            spec = next(s for s in self.job.task_specs if s.name == name)
            return hash_files(task_data_files(spec, self.job.glue_dir))
        except (GlueDataError, OSError):
            return None

    def _gone(self) -> dict[str, Any] | None:
        step = self.job.step_dir
        if step is None or layout.is_complete(step):
            return None
        run, number = layout.run_dir_of(step), layout.step_of(step)
        reason = handoff.skipped(run).get(number)
        if reason is None:
            reason = ("checkpoint deleted before its evaluation (not pinned: run the trainer with "
                      "train.keep_until_evaluated=true to keep it until evaluated)")
            handoff.record_skip(run, number, reason)
        log.warning("%s: not evaluated: %s", step, reason)
        return {"status": "skipped", "checkpoint": str(step), "out": str(self.out), "reason": reason}

    def _results(self, finished: dict[str, TaskResult]) -> dict[str, Any]:
        from .loop import resolve_device, resolve_precision

        existing = self._existing()
        names = set(self.task_names)
        tasks = {n: TaskResult.from_dict(t) for n, t in (existing or {}).get("tasks", {}).items()
                 if n not in names}  # earlier tasks of the same request, kept
        tasks.update(finished)
        failed = {n: e for n, e in (existing or {}).get("failed", {}).items() if n not in names}
        failed.update(self.failed)
        r = self.resolved
        results = report.build_results(checkpoint=r.checkpoint, model_dir=str(r.model_dir),
                                       step=r.step, meta={**r.meta, "source": r.source},
                                       recipe=self.context.recipe, tasks=tasks)
        submission = glue_submission.write_submission(self.out, tasks) if self.job.glue_dir else {}
        results.update(failed=failed, run_id=self.run_id, eval_dir=str(self.out), code_version=code_version(),
                       request=self.job.request, submission=sorted(submission),
                       precision=resolve_precision(self.recipe, resolve_device(self.recipe)),
                       data_files={p: h for t in tasks.values() for p, h in t.data_files.items()},
                       length_caps=self.context.recipe.get("length_caps", {}))
        return results

    def _history(self, results: dict[str, Any]) -> list[dict[str, Any]]:
        """This run's other evaluated checkpoints, for the scores-across-checkpoints plot."""
        if self.resolved.run_dir is None:
            return []
        root = Path(self.resolved.run_dir) / layout.EVAL
        others = [p.parent for p in sorted(root.glob(f"{layout.STEP_PREFIX}*/{eval_layout.RESULTS}"))
                  if p.parent.resolve() != self.out.resolve()]
        return [report.read_results(p) for p in others] + [results]

    def _loss_curve(self, results: dict[str, Any]):
        if self.resolved.run_dir is None:
            return None
        curve = report.read_loss_curve(Path(self.resolved.run_dir) / layout.METRICS)
        if curve is not None and curve.skipped:  # cut/corrupt lines: counted, shown in the report
            results["metrics_jsonl_skipped"] = curve.summary()
        return curve

    def _references(self) -> dict[str, Path]:
        """Evaluation folders shown beside every score: the model at random initialisation
        (``--reference``, else the run's ``RUN/eval/random_init`` when it was evaluated)."""
        run = self.resolved.run_dir
        folder = Path(self.job.reference) if self.job.reference else (
            Path(run) / layout.EVAL / RANDOM_INIT if run is not None else None)
        if folder is None or not eval_layout.is_finished(folder) or folder.resolve() == self.out.resolve():
            return {}
        return {"random_init": folder.resolve()}
