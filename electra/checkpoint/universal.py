"""Resuming a checkpoint on a different number of ranks, through DeepSpeed's universal checkpoint.

Where the optimiser state lives decides what a world-size change needs:

* ZeRO-0 (fp32; bf16 needs ZeRO, see ``electra.distributed.deepspeed_glue``): every rank holds the whole model
  and optimiser state in ``mp_rank_00_model_states.pt``; a checkpoint loads as it is on any
  number of ranks.
* ZeRO-1/2 (fp32: DeepSpeed's ZeRO optimiser; bf16 + ZeRO-1: its ``BF16_Optimizer``; bf16 +
  ZeRO-2: the ZeRO optimiser with fp32 accumulation): the fp32 masters and Adam moments are
  flat partitions, one per rank (``[bf16_]zero_pp_rank_R_mp_rank_00_optim_states.pt``), and
  DeepSpeed refuses to load them on another world size ("Automatic adjustment of ZeRO's
  optimizer state partitioning ... is not currently supported"). The step dir is converted ONCE
  to DeepSpeed's universal layout (``deepspeed.checkpoint.ds_to_universal``: one folder per
  parameter with its full fp32 master and moments) and loaded with ``checkpoint.load_universal``,
  which every rank slices to its new partition. The same route also covers a change of stage
  (1 <-> 2) or precision (bf16 <-> fp32, e.g. a GPU run resumed on a CPU), whose partition
  layouts differ even on the same world size.
* ZeRO-3 is refused for any change (same world, stage and precision loads directly): DeepSpeed's
  ZeRO-3 universal load gives every parameter group the FIRST group's hyperparameters
  (``stage3.load_hp_checkpoint_state_from_checkpoint_dir_stage3``), so our no-decay group
  (biases, LayerNorm) would be decayed. A change between ZeRO-0 and ZeRO-1/2 is refused too:
  the universal converter reads only ZeRO partitions, and a universal load into a ZeRO-0 engine
  restores nothing.

The universal folder is a SIBLING of the step dir, so that no DeepSpeed reader walking the step
dir (``DeepSpeedCheckpoint`` lists it recursively) ever sees two copies of the state, and so that
the run layout never lists it as a checkpoint (``step_of`` parses only ``step_<digits>``)::

    RUN_DIR/checkpoints/
        step_00001000/                  the checkpoint as saved (electra.checkpoint.save_load)
        step_00001000.universal/        written once, to a temporary name, then renamed by rank 0
            mp_rank_00_model_states.pt  copied: module, LR scheduler, global step, ds_config
            zero/optimizer_state.pt     param groups (lr, betas, weight decay ...), loss scaler, clip
            zero/<param name>/fp32.pt   {"param": full fp32 master, "cat_dim": 0}
            zero/<param name>/exp_avg.pt, exp_avg_sq.pt   the full Adam moments, same form
            zero/<param name>/step.pt   the optimiser step count (an int)

A folder that exists under its final name is complete (the rename is the commit); leftovers of
an interrupted conversion (``*.universal.tmp-*``) are deleted before the next one, and universal
folders whose checkpoint has been pruned are deleted at the next checkpoint commit
(``prune_orphans``, called by ``electra.checkpoint.save_load.save_checkpoint``).

What DeepSpeed needs, and what our code adds:

* ``{"checkpoint": {"load_universal": true}}`` in the config BEFORE ``deepspeed.initialize``
  (DeepSpeed parses it into its config object at init; ``ds_config_for_resume``).
* The conversion is run with ``inject_missing_state``: our model carries no
  ``universal_checkpoint_info`` (it is only for tensor/pipeline-parallel models), and the
  converter refuses a checkpoint without it otherwise.
* A universal load restores only what the optimiser holds: parameters are copied from the fp32
  masters; frozen parameters (``objective.kind=mlm``) and buffers are NOT loaded by DeepSpeed,
  so ``electra.checkpoint.save_load.load_checkpoint`` copies them from the model-states file.
* Our client optimiser (``AdamWeightDecay``: state keys ``exp_avg``, ``exp_avg_sq``, ``step``)
  is what the converter expects; ``step`` is restored per group, the param groups' lr, betas,
  eps and weight decay from ``zero/optimizer_state.pt``, the LR scheduler (``last_epoch``) and
  ``global_steps`` from the model-states file, exactly as on a plain load.
* Every ``torch.load`` of the conversion and of the universal load runs weights-only
  (``electra.checkpoint.deepspeed_states``), like the plain load, and checks the file against the sum
  written at save (``electra.checkpoint.sums``). Before converting, each rank checks the saved
  partition files of its share and rank 0 the model states, and the ranks agree: a damaged
  file stops every rank in one line before the conversion reads it (``_check_saved_files``).

Trainer integration (every rank, after ``init_distributed``, BEFORE building the engine)::

    step_dir = layout.find_latest(run_dir)
    ds_config = D.deepspeed_config(cfg, world_size)
    plan = None
    if step_dir is not None:
        stage = ds_config.get("zero_optimization", {}).get("stage", 0)
        # one decision for all ranks; ResumeRefused (one line) on every rank: exit with its message
        plan = D.on_rank0(lambda: plan_resume(step_dir, world_size=world_size, zero_stage=stage,
                                              precision=cfg.train.precision))
        log.info(plan.message)
        agree = D.Agreement(conversion_timeout(step_dir))        # waits sized to the conversion
        try:
            prepare_universal(plan, rank=rank, world_size=world_size, agree=agree)  # each converts a share
        finally:
            agree.close()
    ds_config = ds_config_for_resume(ds_config, plan)           # checkpoint.load_universal
    engine = D.build_engine(module, optimizer, scheduler, ds_config)
    if plan is not None:
        meta = electra.checkpoint.save_load.load_checkpoint(engine, step_dir, rank=rank, universal=plan.universal)

``load_checkpoint`` without ``universal=True`` refuses, in one line, a checkpoint that needs it
(instead of DeepSpeed's refusal or a silent mis-load). Not this module's: where each rank's data
stream resumes on the new world size (``electra.data.stream``), and the batch geometry (the global batch
stays; gradient accumulation absorbs the change, ``electra.distributed.batch_geometry``; ``resume_split`` tells
it what a resume fixes, so that a batch the new world size cannot split is met with world sizes
``plan_resume`` accepts).

Conversion needs the checkpoint on a filesystem every rank sees (the run directory is local or
shared, ``electra.run.trainer.run_dir``). In a run it is split across the ranks
(``electra.checkpoint.universal_conversion``: each saved partition file extracted by one rank, the
parameters' merges dealt out, rank 0 finishing and committing), and the ranks meet between its
steps in an agreement whose timeout is sized to the conversion (``conversion_timeout``: the
optimiser-state bytes at a low rate plus a margin; ``electra.distributed.deepspeed_glue.Agreement``), not
DeepSpeed's fixed collective timeout (10 minutes). It reads the whole optimiser state and writes
it twice (fragments, then merged; about 4 GB each for Large's 335M parameters: fp32 masters and
two moments). To have it done before the run starts, convert offline with DeepSpeed's own
converter: ``python -m electra.checkpoint.universal STEP_DIR`` (the run then finds it complete
and reuses it).
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import io
import logging
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from electra.checkpoint import run_layout as layout
from electra.distributed.batch_geometry import Resuming
from electra.checkpoint.universal_conversion import Agree, commit, convert_across_ranks, remove_leftovers

log = logging.getLogger(__name__)

__all__ = ["ResumePlan", "ResumeRefused", "SavedLayout", "convert", "ds_config_for_resume", "plan_resume",
           "conversion_timeout", "prepare_universal", "prune_orphans", "resume_split", "saved_layout",
           "universal_dir"]

SUFFIX = ".universal"
CONVERT_COMMAND = "python -m electra.checkpoint.universal"


class ResumeRefused(ValueError):
    """A checkpoint that cannot be resumed with this world size / stage / precision (one line)."""


@dataclass(frozen=True)
class SavedLayout:
    """How a checkpoint was trained, read from its DeepSpeed model-states file."""
    world_size: int  # DeepSpeed's data-parallel world size at save time
    zero_stage: int
    precision: str  # "fp32", "bf16" or "fp16"


@dataclass(frozen=True)
class ResumePlan:
    """What resuming ``step_dir`` on this run's ranks takes (``plan_resume``)."""
    step_dir: Path
    saved_world_size: int
    world_size: int
    saved_zero_stage: int
    zero_stage: int
    saved_precision: str
    precision: str
    universal: bool  # convert to the universal layout and load with checkpoint.load_universal
    message: str  # why, in one line (for the log)

    @property
    def load_dir(self) -> Path:
        """The folder DeepSpeed loads: the step dir, or its universal sibling."""
        return universal_dir(self.step_dir) if self.universal else self.step_dir


def universal_dir(step_dir: str | Path) -> Path:
    step_dir = Path(step_dir)
    return step_dir.with_name(step_dir.name + SUFFIX)


def _precision(ds_config: dict) -> str:
    if (ds_config.get("bf16") or ds_config.get("bfloat16") or {}).get("enabled"):
        return "bf16"
    return "fp16" if (ds_config.get("fp16") or {}).get("enabled") else "fp32"


def _model_states_file(step_dir: Path) -> Path:
    for pattern in ("mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_model_states.pt"):
        if (step_dir / pattern).is_file():
            return step_dir / pattern
    raise FileNotFoundError(f"{step_dir}: no DeepSpeed model states (mp_rank_00_model_states.pt)")


def saved_layout(step_dir: str | Path) -> SavedLayout:
    """World size, ZeRO stage and precision a checkpoint was saved with. Reads the model-states
    file memory-mapped and weights-only (its tensors are not read)."""
    from electra.checkpoint import sums as sums_
    from electra.checkpoint.deepspeed_states import safe_load

    step_dir = Path(step_dir)
    path = _model_states_file(step_dir)
    sums_.check_size(path)  # a truncated file named in one line, before torch parses it
    try:
        states = safe_load(path, mmap=True)
    except Exception:
        sums_.verify(path)  # damaged after the save: say so in one line (else DeepSpeed's error)
        raise
    ds_config = states.get("ds_config") or {}
    stage = int((ds_config.get("zero_optimization") or {}).get("stage", 0))
    world = states.get("dp_world_size")
    if world is None:
        world = layout.CheckpointMeta.read(step_dir).world_size
    return SavedLayout(world_size=int(world), zero_stage=stage, precision=_precision(ds_config))


def same_world_only(saved_stage: int, zero_stage: int) -> bool:
    """ZeRO-3 on either side: the checkpoint resumes on its own world size (and stage, precision) only."""
    return saved_stage == 3 or zero_stage == 3


def resume_split(step_dir: str | Path, *, zero_stage: int) -> Resuming:
    """What resuming ``step_dir`` with ``zero_stage`` fixes for the batch split, so that an
    unsplittable batch is met with world sizes ``plan_resume`` accepts
    (``electra.distributed.batch_geometry.batch_geometry(..., resuming=...)``). Reads what ``plan_resume`` reads."""
    meta = layout.CheckpointMeta.read(step_dir)
    saved = saved_layout(step_dir)
    return Resuming(global_batch=meta.global_batch_size, saved_world_size=saved.world_size,
                    same_world_only=same_world_only(saved.zero_stage, int(zero_stage)))


def plan_resume(step_dir: str | Path, *, world_size: int, zero_stage: int, precision: str) -> ResumePlan:
    """Decide how to resume ``step_dir`` on ``world_size`` ranks with ``zero_stage`` and
    ``precision`` (this run's DeepSpeed config); call it BEFORE building the engine, on every
    rank (it only reads). Raises ``ResumeRefused`` (one line naming both world sizes and the way
    out) for a combination that cannot resume correctly (module docstring)."""
    step_dir, zero_stage = Path(step_dir), int(zero_stage)
    layout.CheckpointMeta.read(step_dir)  # a complete checkpoint, or a ValueError naming meta.json
    saved = saved_layout(step_dir)
    w0, s0, p0 = saved.world_size, saved.zero_stage, saved.precision

    def plan(universal: bool, message: str) -> ResumePlan:
        return ResumePlan(step_dir=step_dir, saved_world_size=w0, world_size=world_size, saved_zero_stage=s0,
                          zero_stage=zero_stage, saved_precision=p0, precision=precision, universal=universal,
                          message=message)

    here = f"{step_dir.name} was saved on {w0} rank(s) with ZeRO-{s0} {p0}; resuming on {world_size} rank(s) " \
           f"with ZeRO-{zero_stage} {precision}"
    if (w0, s0, p0) == (world_size, zero_stage, precision):
        return plan(False, f"{here}: same layout, loads directly")
    if s0 == 0 and zero_stage == 0:
        if p0 != precision:  # only fp16 can differ (bf16 needs ZeRO): FP16_Optimizer's state is another shape
            raise ResumeRefused(f"{here}: the saved optimiser state is {p0}'s; resume with train.precision={p0}")
        return plan(False, f"{here}: ZeRO-0 state is replicated, loads directly")
    if same_world_only(s0, zero_stage):
        raise ResumeRefused(
            f"{here}: ZeRO-3 resumes only on the same world size, stage and precision (DeepSpeed's ZeRO-3 "
            f"universal load gives every param group the first group's weight decay); resume on {w0} rank(s) "
            f"with ZeRO-{s0} {p0}")
    if s0 == 0 or zero_stage == 0:
        raise ResumeRefused(
            f"{here}: a change between ZeRO-0 and ZeRO-1/2 cannot carry the optimiser state (the universal "
            f"converter reads only ZeRO partitions); resume with deepspeed.zero_optimization.stage={s0} "
            + ("(on any number of ranks)" if s0 == 0 else "(or the other of 1/2, on any number of ranks)"))
    return plan(True, f"{here}: partitioned state, converting to {universal_dir(step_dir).name} "
                      f"(DeepSpeed universal checkpoint; offline: {CONVERT_COMMAND} {step_dir})")


def ds_config_for_resume(ds_config: dict, plan: ResumePlan | None) -> dict:
    """A copy of ``ds_config`` with ``checkpoint.load_universal`` set as ``plan`` needs (False
    without a plan: a fresh start). DeepSpeed reads it in ``deepspeed.initialize``."""
    ds = copy.deepcopy(ds_config)
    ds["checkpoint"] = {**(ds.get("checkpoint") or {}), "load_universal": bool(plan and plan.universal)}
    return ds


def is_converted(step_dir: str | Path) -> bool:
    """A universal folder under its final name is complete (the rename is its commit)."""
    return (universal_dir(step_dir) / "zero" / "optimizer_state.pt").is_file()


def convert(step_dir: str | Path, *, workers: int = 1) -> Path:
    """Convert a complete ZeRO-1/2 step dir to its universal sibling (module docstring), once:
    an existing complete one is returned as is. Written to ``<name>.universal.tmp-<pid>`` and
    renamed; leftovers of an interrupted conversion are deleted first. ``workers`` > 1 runs
    DeepSpeed's extraction in that many processes (offline use; in a training process keep 1)."""
    from deepspeed.checkpoint import ds_to_universal

    from electra.checkpoint.deepspeed_states import weights_only_loads

    step_dir = Path(step_dir)
    out = universal_dir(step_dir)
    if is_converted(step_dir):
        return out
    layout.CheckpointMeta.read(step_dir)  # never convert an incomplete checkpoint
    remove_leftovers(out)
    tmp = step_dir.parent / f"{out.name}.tmp-{os.getpid()}"
    args = argparse.Namespace(input_folder=str(step_dir), output_folder=str(tmp), num_extract_workers=workers,
                              num_merge_workers=workers, keep_temp_folder=False, strict=True,
                              inject_missing_state=True)
    log.info("converting %s to a universal checkpoint %s", step_dir, out)
    chatter = io.StringIO()
    try:
        with weights_only_loads(), contextlib.redirect_stdout(chatter), contextlib.redirect_stderr(chatter):
            ds_to_universal.main(args)
    except BaseException:
        log.error("universal conversion of %s failed; DeepSpeed said:\n%s", step_dir, chatter.getvalue()[-4000:])
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        # ds_to_universal points a "latest_universal" file beside its output at the temporary name
        (step_dir.parent / "latest_universal").unlink(missing_ok=True)
    commit(tmp, out)
    return out


# The conversion's rate, taken low: it reads the optimiser state once and writes it twice
# (fragments, then merged files), on whatever filesystem holds the run; plus a fixed margin.
CONVERSION_BYTES_PER_SECOND = 20 << 20
CONVERSION_MARGIN_SECONDS = 600.0


def conversion_timeout(step_dir: str | Path) -> float:
    """Seconds a rank waits for the others at each step of the conversion of ``step_dir``, sized as
    if one rank did all of it (a share takes less): its optimiser-state bytes at
    ``CONVERSION_BYTES_PER_SECOND``, plus ``CONVERSION_MARGIN_SECONDS`` (so a Large checkpoint's
    ~4 GB gets ~13 minutes, where DeepSpeed's collective timeout gives any size 10)."""
    states = sum(f.stat().st_size for f in Path(step_dir).glob("*optim_states.pt"))
    return CONVERSION_MARGIN_SECONDS + states / CONVERSION_BYTES_PER_SECOND


def prepare_universal(plan: ResumePlan, *, rank: int, world_size: int, agree: Agree) -> Path:
    """The folder to load for ``plan``: the step dir, or its universal sibling, converted once
    (reused when complete) by all ranks together (``electra.checkpoint.universal_conversion``; ``agree``:
    the ranks' agreement, sized by ``conversion_timeout``). Every rank calls it, after
    ``init_distributed`` and before building the engine. A failure on any rank raises on every
    rank."""
    if not plan.universal:
        return plan.step_dir
    out = universal_dir(plan.step_dir)
    if agree(not is_converted(plan.step_dir)):  # some rank does not see it complete: convert
        _check_saved_files(plan.step_dir, rank=rank, world_size=world_size)
        if rank == 0:
            log.info("converting %s to a universal checkpoint %s on %d rank(s)", plan.step_dir, out, world_size)
        tag = os.environ.get("MASTER_PORT", "run") if world_size > 1 else str(os.getpid())
        convert_across_ranks(plan.step_dir, out, rank=rank, world_size=world_size, agree=agree, tag=tag)
    if agree(not is_converted(plan.step_dir)):  # on every rank: none goes on to a collective alone
        raise RuntimeError(f"{out}: missing after the conversion (the run directory is not on a filesystem "
                           "every rank sees)")
    return out


def _check_saved_files(step_dir: Path, *, rank: int, world_size: int) -> None:
    """Before the conversion reads the saved files: each rank checks the partition files of its
    share (``electra.checkpoint.universal_conversion``: saved partition ``d`` by rank ``d % world_size``),
    rank 0 the model states; the ranks agree, then every rank counts them checked
    (``electra.checkpoint.sums``: ``check``, ``agree``, ``trust``)."""
    from electra.checkpoint import sums as sums_

    if not sums_.has_sums(step_dir):
        return
    saved = int(layout.read_meta(step_dir).get("world_size") or 1)
    mine = [f for d in range(rank, saved, world_size)
            for f in step_dir.glob(f"*zero_pp_rank_{d}_mp_rank_*optim_states.pt")]
    if rank == 0:
        mine = [*step_dir.glob("mp_rank_*_model_states.pt"), *mine]
    sums_.agree(sums_.check(sorted(mine)))
    sums_.trust(step_dir.glob("mp_rank_*_model_states.pt"))  # checked by rank 0; the others map its header


def prune_orphans(run_dir: str | Path) -> list[Path]:
    """Delete universal folders (and conversion leftovers) whose checkpoint is gone or incomplete."""
    removed = []
    for d in layout.checkpoints_dir(run_dir).glob(f"{layout.STEP_PREFIX}*{SUFFIX}*"):
        source = d.with_name(d.name.split(SUFFIX)[0])
        if d.is_dir() and not layout.is_complete(source):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=CONVERT_COMMAND, description="Convert a ZeRO-1/2 checkpoint step dir to DeepSpeed's universal "
        "layout (its sibling STEP_DIR.universal), so it resumes on any number of ranks.")
    parser.add_argument("step_dir", type=Path)
    parser.add_argument("--workers", type=int, default=1, help="extraction processes (default 1)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    saved = saved_layout(args.step_dir)
    if saved.zero_stage not in (1, 2):
        print(f"{args.step_dir}: ZeRO-{saved.zero_stage} checkpoint; only ZeRO-1/2 checkpoints need (and support) "
              "conversion", file=sys.stderr)
        return 2
    print(convert(args.step_dir, workers=args.workers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
