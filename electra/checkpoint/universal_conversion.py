"""The universal-checkpoint conversion split across the ranks of the resuming run.

DeepSpeed's converter (``deepspeed.checkpoint.ds_to_universal.main``) runs in one process, and on
rank 0 the other ranks of a resume would wait for it: for Large it reads the ~4 GB of optimiser
state and writes it twice. Its work, for a ZeRO-1/2 checkpoint, is:

1. **extract**: each saved rank's partition file is cut into per-parameter fragments
   (``tmp/<param>/<tp>/<state>.<dp>``); one item per saved partition file;
2. **merge**: each parameter's fragments are concatenated into ``zero/<param>/<state>.pt``; one
   item per parameter;
3. **finish**: parameters no partition holds (frozen ones) take their fp32 value from the model
   states; the common optimiser state (param groups, loss scaler) goes to
   ``zero/optimizer_state.pt``; the fragments are deleted and the model-states files copied.

Items of steps 1 and 2 are independent, so here every rank takes a share: the saved partition
files ``d`` with ``d % W == r`` (each file read by one rank, not all by rank 0), and the
parameters dealt largest first, round-robin (so the shares' bytes differ by at most one
parameter; a merged parameter without fragments takes the model's value from its own rank);
rank 0 alone does the rest of step 3 and commits by renaming the temporary folder (as
``electra.checkpoint.universal.convert`` does). Between steps the ranks meet in an agreement
(``agree(failed) -> any rank failed``, a collective with a timeout sized to the conversion,
``electra.distributed.deepspeed_glue.Agreement``): a failure on any rank raises on every rank, after which
nothing waits, and rank 0 removes the temporary folder.

The pieces are DeepSpeed's own (``extract_zero_shards``, ``merge_tp_slices`` and the helpers its
``main`` uses for the parameter shapes and the optimiser state, some of them private), driven in
the order ``main`` drives them for a checkpoint without AutoEP experts (ours); pinned with
DeepSpeed, and checked by a test that compares the result with ``main``'s, file by file. Every
load runs weights-only and memory-mapped (``electra.checkpoint.deepspeed_states.weights_only_loads``): each
rank's ``DeepSpeedCheckpoint`` loads the whole model-states file for its parameter shapes, which
mapped reads its header and not its ~0.7 GB of tensors (rank 0 reads the frozen ones it copies).

Needs the run directory on a filesystem every rank sees (as the conversion on rank 0 did).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import logging
import math
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
Agree = Callable[[bool], bool]  # this rank failed? -> did any rank fail (a collective)


def dealt(items: Sequence[T], sizes: Sequence[int], rank: int, world_size: int) -> list[T]:
    """``rank``'s share of ``items``: dealt round-robin in decreasing ``sizes`` (ties by position),
    so no share exceeds another by more than one item's size."""
    order = sorted(range(len(items)), key=lambda i: (-sizes[i], i))
    return [items[i] for i in order[rank::world_size]]


def convert_across_ranks(step_dir: Path, out: Path, *, rank: int, world_size: int, agree: Agree,
                         tag: str) -> None:
    """Write the universal folder ``out`` of ``step_dir`` with this rank's share of the work
    (module docstring); every rank calls it, rank 0 commits. ``tag`` names the temporary folder
    alike on every rank. Raises on every rank when any rank failed."""
    from electra.checkpoint.deepspeed_states import weights_only_loads

    tmp = out.parent / f"{out.name}.tmp-{tag}"
    chatter = io.StringIO()  # DeepSpeed prints progress bars and notes
    try:
        with weights_only_loads(mmap=True), contextlib.redirect_stdout(chatter), contextlib.redirect_stderr(chatter):
            _step(agree, step_dir, "clean", lambda: _clean(out, tmp) if rank == 0 else None)
            ds, shapes = _step(agree, step_dir, "read", lambda: _checkpoint(step_dir))
            _step(agree, step_dir, "extract", lambda: _extract(ds, tmp, rank, world_size))
            _step(agree, step_dir, "merge", lambda: _merge(ds, shapes, tmp, rank, world_size))
            _step(agree, step_dir, "finish", lambda: _finish(ds, shapes, out, tmp) if rank == 0 else None)
    except BaseException:
        if chatter.getvalue():
            log.error("DeepSpeed said:\n%s", chatter.getvalue()[-4000:])
        if rank == 0:  # every rank is past the failed step (unless the agreement itself timed out:
            shutil.rmtree(tmp, ignore_errors=True)  # then the next conversion removes what a late rank wrote)
        raise


def _step(agree: Agree, step_dir: Path, name: str, work: Callable[[], T]) -> T:
    failure, value = None, None
    try:
        value = work()
    except Exception as exc:  # raised below, once every rank knows
        failure = exc
    if agree(failure is not None):
        if failure is not None:
            log.error("universal conversion of %s failed in its %s step on this rank", step_dir, name)
            raise failure
        raise RuntimeError(f"universal conversion of {step_dir} failed on another rank in its {name} step "
                           "(that rank's log says why)")
    return value


def remove_leftovers(out: Path) -> None:
    """Leftovers of an interrupted conversion to ``out`` (and an incomplete ``out``) go before the next."""
    for stale in [*out.parent.glob(f"{out.name}.tmp-*"), out]:
        if stale.exists():
            log.warning("removing %s (left by an interrupted conversion)", stale)
            shutil.rmtree(stale)


def _clean(out: Path, tmp: Path) -> None:
    remove_leftovers(out)
    tmp.mkdir()


def _checkpoint(step_dir: Path):
    """DeepSpeed's reader of ``step_dir``, and each parameter's shapes (one per tensor-parallel rank)."""
    from deepspeed.checkpoint import UNIVERSAL_CHECKPOINT_INFO, UNIVERSAL_CHECKPOINT_VERSION_KEY, DeepSpeedCheckpoint
    from deepspeed.checkpoint import ds_to_universal as dtu

    ds = DeepSpeedCheckpoint(str(step_dir))
    dtu._inject_missing_state(ds)  # our model carries no universal_checkpoint_info (tensor/pipeline only)
    dtu._check_for_required_state(ds)
    info = ds.get_checkpoint_info(UNIVERSAL_CHECKPOINT_INFO)
    if set(info) - {UNIVERSAL_CHECKPOINT_VERSION_KEY}:  # tensor/pipeline-parallel patterns: not ours
        raise NotImplementedError(f"{step_dir}: universal_checkpoint_info {sorted(info)}; convert it offline "
                                  "(python -m electra.checkpoint.universal)")
    return ds, _shapes(ds)


def _shapes(ds) -> dict[str, list]:
    from deepspeed.checkpoint import ds_to_universal as dtu

    by_tp, autoep, _ = dtu._aggregate_autoep_zero12_metadata(ds.model_state_metadata)
    if autoep is not None:
        raise NotImplementedError("AutoEP expert checkpoints: convert offline (python -m electra.checkpoint.universal)")
    return dtu._group_per_tp_shapes(by_tp, ds.pp_degree, ds.tp_degree)


def _extract(ds, tmp: Path, rank: int, world_size: int) -> None:
    from deepspeed.checkpoint import ds_to_universal as dtu

    grid = list(itertools.product(range(ds.pp_degree), range(ds.tp_degree), range(ds.dp_degree)))
    for item in grid[rank::world_size]:  # saved partition files have the same size: a plain deal
        dtu.extract_zero_shards(str(tmp / "tmp"), ds, item)


def _merge(ds, shapes: dict[str, list], tmp: Path, rank: int, world_size: int) -> None:
    from deepspeed.checkpoint import UNIVERSAL_CHECKPOINT_INFO
    from deepspeed.checkpoint import ds_to_universal as dtu

    names = sorted(shapes)
    sizes = [sum(math.prod(s) for s in shapes[n] if s is not None) for n in names]
    info = ds.get_checkpoint_info(UNIVERSAL_CHECKPOINT_INFO)
    module = None
    for name in dealt(names, sizes, rank, world_size):  # no patterns declared (_checkpoint): none unused
        dtu.merge_tp_slices(info, str(tmp / "zero"), str(tmp / "tmp"), ds.tp_degree, (name, shapes[name]))
        if not (tmp / "zero" / name / "fp32.pt").is_file():  # no fragment anywhere: the model's value
            module = _modules(ds) if module is None else module
            _save_fp32(tmp / "zero" / name, module[name])


def _finish(ds, shapes: dict[str, list], out: Path, tmp: Path) -> None:
    from deepspeed.checkpoint import ds_to_universal as dtu

    # what no rank merged (frozen parameters, buffers): fp32 from the model states. Decided by the
    # names, not by looking for the merged files, which another node may have written moments ago
    for name, tensor in _modules(ds).items():
        if name not in shapes:
            _save_fp32(tmp / "zero" / name, tensor)
    dtu._save_optimizer_state(argparse.Namespace(output_folder=str(tmp)), ds)
    shutil.rmtree(tmp / "tmp", ignore_errors=True)
    for model_file in ds.mp_rank_files:
        shutil.copy2(model_file, tmp)
    commit(tmp, out)


def _modules(ds) -> dict:
    """The model-states files' modules, merged (one file without tensor/pipeline parallelism)."""
    import torch

    module: dict = {}
    for model_file in ds.mp_rank_files:
        module.update(torch.load(model_file, map_location="cpu").get("module") or {})
    return module


def _save_fp32(folder: Path, tensor) -> None:
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    torch.save({"param": tensor.float()}, folder / "fp32.pt")


def commit(tmp: Path, out: Path) -> None:
    """Make the complete folder ``tmp`` durable and give it its final name ``out`` (the commit)."""
    _fsync_tree(tmp)
    os.replace(tmp, out)
    _fsync_dir(out.parent)


def _fsync_tree(root: Path) -> None:
    for folder, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(folder, name), "rb") as f:
                os.fsync(f.fileno())
        _fsync_dir(Path(folder))


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
