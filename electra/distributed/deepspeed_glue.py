"""DeepSpeed glue: process group, the DeepSpeed config derived from ours, the engine, collectives.

One code path for every machine: ``deepspeed.init_distributed`` picks NCCL on GPUs and the CPU
accelerator's backend (gloo/ccl) otherwise. Run as a plain ``python -m electra.train`` the
launcher's environment (RANK, WORLD_SIZE, MASTER_ADDR, ...) is absent, so a one-rank world on a
free local port is set up; the training code never branches on how it was started.

The ``deepspeed`` section of the config is DeepSpeed's own JSON; the trainer owns the fields
that must agree with the rest of the config and overwrites them: ``train_batch_size`` (the
preset's global batch), ``train_micro_batch_size_per_gpu``, ``gradient_accumulation_steps``
(derived: global / (micro x world), which must divide), ``gradient_clipping`` (optimizer
section) and the bf16/fp16 switches (``train.precision``). The optimiser and LR schedule are the
project's own (``electra.run.optim``), passed to DeepSpeed as client objects.

bf16 is mixed precision, not bf16 training: the module's parameters and activations are bf16,
the optimiser updates fp32 master weights, and gradients are accumulated over the micro batches
AND all-reduced in fp32 (``data_types.grad_accum_dtype`` and ``communication_data_type``, both
"fp32"). Without them DeepSpeed sums the micro-batch gradients into bf16 buffers (8 mantissa
bits; Large sums 64 micro batches per step) and reduces them in bf16. With ZeRO-1 DeepSpeed then
uses its ``BF16_Optimizer`` (fp32 gradient buffers, fp32 masters partitioned over ranks), with
ZeRO-2/3 its ZeRO optimiser with a separate fp32 accumulation buffer. ZeRO-0 has no fp32
accumulation path in DeepSpeed, so bf16 with stage 0 is refused at start.

Reading DeepSpeed's checkpoint files (weights-only loads, gathering the fp32 masters offline)
is ``electra.checkpoint.deepspeed_states``.

The GPU fast path (``configure_fast_path``, config ``train.tf32/compile/activation_checkpointing``)
touches numerics and speed only, never the parameter names: TF32 matmuls for fp32 runs,
``nn.Module.compile`` of the two encoders (in place, so state-dict keys and checkpoints do not
change), and activation checkpointing by wrapping each encoder layer's ``forward`` in
``torch.utils.checkpoint`` (non-reentrant, RNG preserved: the recomputation draws the same
dropout masks, and the RNG streams end where they would without it).
"""
from __future__ import annotations

import contextlib
import copy
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypeVar

import torch
import torch.distributed as dist

from common.config import ConfigError
from common.ports import free_port
from electra.distributed.batch_geometry import Resuming, batch_geometry
from electra.config import ElectraConfig
from electra.distributed.hardware import cpu_features, native_bf16

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int


# A one-rank group's store port is picked free and bound a moment later by torch; another process
# (parallel runs on one machine) can take it in between: try a new one that many times.
PORT_ATTEMPTS = 5


# DeepSpeed's lines that every run of ours printed and that ask nothing of the user (each filter
# matches one message exactly; DeepSpeed's other warnings pass):
# - "You are using ZeRO with an untested optimizer": ours (electra.run.optim.AdamWeightDecay, no bias
#   correction) is not on DeepSpeed's list; we allow it knowingly (``zero_allow_untested_optimizer``
#   in ``deepspeed_config``) and test it under ZeRO 1-3 (tests/electra/_zero_worker.py);
# - torch's FutureWarning on ``all_gather_into_tensor``, which DeepSpeed's ZeRO calls, not we.
# "Setting accelerator to CPU ... we were unable to detect it" is avoided at its source instead:
# without CUDA this project trains on the CPU, and says so (DS_ACCELERATOR) before DeepSpeed guesses.
DEEPSPEED_NOISE = ("You are using ZeRO with an untested optimizer",)
TORCH_NOISE = r"`torch\.distributed\.all_gather_into_tensor` is deprecated"


def _not_noise(record: logging.LogRecord) -> bool:
    return not any(text in record.getMessage() for text in DEEPSPEED_NOISE)


def quiet_deepspeed() -> None:
    """Silence DeepSpeed's noise (``DEEPSPEED_NOISE`` above) in this process, before DeepSpeed is
    imported (it picks its accelerator then); idempotent. A ``DS_ACCELERATOR`` already set wins."""
    import warnings

    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    ds_logger = logging.getLogger("DeepSpeed")  # the one DeepSpeed's LoggerFactory configures
    if _not_noise not in ds_logger.filters:
        ds_logger.addFilter(_not_noise)
    warnings.filterwarnings("ignore", message=TORCH_NOISE, category=FutureWarning)


def init_distributed() -> DistInfo:
    """Join the launcher's process group, or make a one-rank group when run without one."""
    quiet_deepspeed()
    import deepspeed

    own = "RANK" not in os.environ  # no launcher: this process makes its own one-rank group
    if own:
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(free_port()))
    if torch.cuda.is_available():
        pass
    elif int(os.environ["WORLD_SIZE"]) == 1:
        skip_shm_op()
    else:
        build_shm_op_safely()
    for attempt in range(PORT_ATTEMPTS if own else 1):
        try:
            deepspeed.init_distributed()
            break
        except Exception as exc:  # DistNetworkError: the port was free when picked, taken since
            if not own or "EADDRINUSE" not in str(exc) or attempt == PORT_ATTEMPTS - 1:
                raise
            os.environ["MASTER_PORT"] = str(free_port())
    info = DistInfo(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", 0)))
    if not torch.cuda.is_available() and info.world_size > 1:
        unlink_shm_segment(info.rank)
    return info


SHM_SEGMENT = "/dev/shm/deepspeed_allreduce_buffer_{uid}_{addr}_{port}_{rank}"


def unlink_shm_segment(rank: int) -> None:
    """Remove this rank's name of DeepSpeed's CPU all-reduce segment (the mapping stays).

    DeepSpeed's CPU backend gives every rank a 69 MB shared-memory segment, which every other rank
    of the machine maps during ``init_distributed``, and never unlinks it: each multi-process CPU
    run left 69 MB per rank in ``/dev/shm`` (RAM) until a reboot; a day of test runs had filled
    17 GB of a 24 GB machine. Once every rank has mapped every segment (the barrier: each rank
    leaves ``init_distributed`` only after mapping its peers'), the names are not needed: each
    rank unlinks its own, and the kernel frees the memory when the last process unmaps it, also
    when a rank is killed.
    """
    dist.barrier()
    name = SHM_SEGMENT.format(uid=os.getuid(), addr=os.environ.get("MASTER_ADDR", ""),
                              port=os.environ.get("MASTER_PORT", ""), rank=rank)
    try:
        os.unlink(name)
    except FileNotFoundError:
        pass  # ranks on several machines: DeepSpeed made no segment


def skip_shm_op() -> None:
    """One CPU process has no peer to share memory with: tell DeepSpeed its shm collective op is
    unavailable, so its backend neither builds nor loads it (a JIT build of 30-110 s on a new
    machine or venv path, for nothing). DeepSpeed consults ``deepspeed.ops.__compatible_ops__``
    before building (``deepspeed.comm.torch.build_shm_op``)."""
    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator

    builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
    if builder is not None:
        deepspeed.ops.__compatible_ops__[builder.NAME] = False


def build_shm_op_safely() -> None:
    """Build (or load) DeepSpeed's CPU shared-memory collective op under an ``flock``.

    DeepSpeed's CPU backend JIT-compiles that op at its first start on a machine, and torch guards
    the build with a lock FILE (``FileBaton``: created, waited on while it exists, removed when the
    build ends). A process killed mid-build (a timeout, Ctrl-C) leaves the file behind, and from
    then on every start waits on it forever. Here the build runs while holding an ``flock`` on a
    file beside it, which the kernel releases when its holder dies: whoever holds it knows no build
    of ours is running, so a lock file found then is a dead builder's and is removed (logged). The
    op is cached in-process, so DeepSpeed's own load that follows does not build again.
    """
    import fcntl

    from deepspeed.accelerator import get_accelerator
    from deepspeed.comm.torch import build_shm_op
    from torch.utils.cpp_extension import _get_build_directory

    builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
    if builder is None:
        return
    folder = Path(_get_build_directory(builder.name, verbose=False))
    with open(folder / ".electra-build.flock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)  # released on close, or by the kernel if we die
        stale = folder / "lock"
        if stale.exists():
            log.warning("%s: removing the lock file a killed build left (it would block every start)", stale)
            stale.unlink(missing_ok=True)
        build_shm_op()


FORCE_BF16_ENV = "ELECTRA_FORCE_BF16"  # tests: keep bf16 on a CPU without native bf16 (slow, tiny models)


def effective_precision(precision: str) -> str:
    """The precision to train in here: as configured on GPUs; on a CPU, bf16 only where the CPU
    has native bf16 matrix units (AMX or AVX512-BF16, see ``electra.distributed.hardware``), else fp32:
    without them bf16 matmuls run through slow fallbacks (README: Figures), and fp16 has no CPU
    path in DeepSpeed."""
    if precision == "fp32" or torch.cuda.is_available():
        return precision
    if precision == "bf16" and os.environ.get(FORCE_BF16_ENV) == "1":
        return precision
    return "bf16" if precision == "bf16" and native_bf16("cpu", features=cpu_features()) else "fp32"


def deepspeed_config(cfg: ElectraConfig, world_size: int, *, resuming: Resuming | None = None) -> dict:
    """Our config's deepspeed section with the fields the trainer owns filled in; ``resuming`` (what
    the checkpoint being resumed fixes) narrows an unsplittable batch's suggestions to those a
    resume accepts."""
    ds = copy.deepcopy(cfg.deepspeed)
    geometry = batch_geometry(cfg.train.global_batch_size, cfg.train.micro_batch_size, world_size,
                              resuming=resuming)
    ds.update(train_batch_size=geometry.global_batch, train_micro_batch_size_per_gpu=geometry.micro_batch,
              gradient_accumulation_steps=geometry.accum, gradient_clipping=cfg.optimizer.grad_clip)
    ds["bf16"] = {**ds.get("bf16", {}), "enabled": cfg.train.precision == "bf16"}
    ds["fp16"] = {**ds.get("fp16", {}), "enabled": cfg.train.precision == "fp16"}
    if cfg.train.precision == "bf16":  # fp32 accumulation and reduction (module docstring)
        stage = ds.get("zero_optimization", {}).get("stage", 0)
        if stage == 0:
            raise ConfigError("train.precision bf16 needs deepspeed.zero_optimization.stage >= 1: DeepSpeed "
                             "accumulates gradients in fp32 only with ZeRO (stage 1 on one rank costs nothing)")
        ds["data_types"] = {**ds.get("data_types", {}), "grad_accum_dtype": "fp32"}
        ds["communication_data_type"] = "fp32"
    ds.setdefault("steps_per_print", 10**9)
    # Our client optimiser (Adam without bias correction) is not on DeepSpeed's ZeRO list; ZeRO
    # only needs it to be a torch.optim.Optimizer over the flat partitions, which it is.
    ds.setdefault("zero_allow_untested_optimizer", True)
    return ds


def build_engine(module: torch.nn.Module, optimizer, scheduler, ds_config: dict):
    """``deepspeed.initialize`` with our client optimiser and scheduler; returns the engine."""
    import deepspeed

    engine, _, _, _ = deepspeed.initialize(model=module, optimizer=optimizer, lr_scheduler=scheduler,
                                           config=ds_config)
    return engine


def configure_fast_path(cfg: ElectraConfig, model: torch.nn.Module) -> list[str]:
    """TF32, compilation and activation checkpointing as configured (module docstring); returns
    what was switched on. TF32 and compilation only on CUDA; checkpointing everywhere."""
    on = []
    if torch.cuda.is_available() and cfg.train.tf32:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        on.append("tf32")
    encoders = [model.generator, model.discriminator]
    if cfg.train.activation_checkpointing:
        for layer in (layer for enc in encoders for layer in enc.layers):
            checkpoint_forward(layer)
        on.append("activation_checkpointing")
    if cfg.train.compile and torch.cuda.is_available():
        for enc in encoders:
            enc.compile()  # in place: parameter names stay as they are
        on.append("compile")
    return on


def checkpoint_forward(layer: torch.nn.Module) -> None:
    """Recompute ``layer`` in the backward instead of keeping its activations (training only)."""
    from torch.utils.checkpoint import checkpoint

    inner = layer.forward

    def forward(*args):
        if not (layer.training and torch.is_grad_enabled()):
            return inner(*args)
        return checkpoint(inner, *args, use_reentrant=False, preserve_rng_state=True)

    layer.forward = forward


def barrier() -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


class Agreement:
    """``agree(failed) -> bool``: every rank says whether it failed and learns whether any did (an
    all-reduce MAX on a gloo group of its own, on the CPU, so a long wait holds no GPU collective),
    waiting up to ``seconds`` (the default group's collectives give up after DeepSpeed's timeout,
    10 minutes unless ``DEEPSPEED_TIMEOUT`` says otherwise): for waits whose length is known from
    their work (ranks converting a checkpoint). Creating it is collective; call it any number of
    times, then ``close`` on every rank. One process: ``agree(failed)`` is ``failed``."""

    def __init__(self, seconds: float):
        import datetime

        self.group = None
        if dist.is_initialized() and dist.get_world_size() > 1:
            self.group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=max(1.0, seconds)))

    def __call__(self, failed: bool) -> bool:
        if self.group is None:
            return failed
        flag = torch.tensor([int(failed)])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.group)
        return bool(flag.item())

    def close(self) -> None:
        if self.group is not None:
            dist.destroy_process_group(self.group)
            self.group = None


def universal_loads(engine) -> list[list[str]]:
    """Per rank of the world, the parameters whose universal-checkpoint files (``zero/<name>/``) it
    will load: DeepSpeed's ZeRO-1/2 and BF16 optimisers load a parameter's files only on the ranks
    whose partition holds a fragment of it (``lp._hp_mapping``). Collective (one all-gather of
    the names)."""
    opt = engine.optimizer
    groups = getattr(opt, "bit16_groups", None) or getattr(opt, "bf16_groups", None) or []
    names = sorted({opt.param_names[p] for group in groups for p in group
                    if getattr(p, "_hp_mapping", None) is not None})
    if not (dist.is_initialized() and dist.get_world_size() > 1):
        return [names]
    everyone: list = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, names)
    return everyone


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def on_rank0(compute: Callable[[], T]) -> T:
    """``compute()`` on rank 0 and its result (or its exception) on every rank.

    For decisions every rank must make alike from a store that each rank would otherwise query
    on its own, a moment apart (which shards exist): one answer, no divergence, no rank left
    waiting in a collective because it alone raised.
    """
    if not (dist.is_initialized() and dist.get_world_size() > 1):
        return compute()
    box: list = [None]
    if dist.get_rank() == 0:
        try:
            box = [(True, compute())]
        except Exception as exc:  # re-raised on every rank below
            box = [(False, portable(exc))]
    dist.broadcast_object_list(box, src=0)
    ok, value = box[0]
    if not ok:
        raise value
    return value


def portable(exc: Exception) -> Exception:
    """``exc`` if it survives pickling (what the broadcast does to it), else a ``RuntimeError``
    with its type and message: an exception that cannot be sent would fail on rank 0 alone and
    leave the other ranks waiting in the broadcast."""
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001  (any failure to round-trip)
        return RuntimeError(f"{type(exc).__name__}: {exc}")


@contextlib.contextmanager
def full_parameters(engine):
    """All parameters materialised on every rank (ZeRO-3 gathers its shards; else a no-op)."""
    if engine.zero_optimization_stage() == 3:
        import deepspeed

        with deepspeed.zero.GatheredParameters(list(engine.module.parameters()), modifier_rank=None):
            yield
    else:
        yield


def shutdown() -> None:
    """Leave the process group cleanly (an implicit teardown at exit can stall for seconds)."""
    if dist.is_initialized():
        barrier()
        dist.destroy_process_group()
