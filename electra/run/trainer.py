"""The training loop of ELECTRA pre-training: steps, metrics, validation, checkpoints, export.

The phases around it (resolve, prepare, build) are ``electra.run.runner``'s; the command
line is ``electra/train.py``. A ``Trainer`` is handed a resolved ``RunPlan``, the process group,
a built DeepSpeed engine and the data position to start from, and runs steps to ``max_steps``:
``accum`` micro batches (forward, backward, engine.step), metrics every ``log_every`` steps,
validation every ``eval_every``, checkpoints every ``save_every`` and at the end, and the Hugging
Face export ``RUN_DIR/hf``. After each checkpoint commit, rank 0 emits the Prefect event
``electra.checkpoint.committed`` when a Prefect API is configured (``common.events``: on a
background thread, never waited on); the ``evaluate`` deployment's trigger starts from it.
With ``train.keep_until_evaluated`` (auto: on when that API is configured) each checkpoint is
pinned until its evaluation releases it, so pruning cannot delete it before its turn
(``electra.checkpoint.eval_handoff``: the pin, the skip policy, and why it is safe with an evaluator pruning
at the same time).

Exact resume rests on three things: the data position (epoch, global step) in ``meta.json``,
which names the same examples for any number of ranks (``electra.data.sample_order``); every RNG the
step draws from restored per rank (evaluation runs under ``fork_rng`` over the CPU AND every CUDA
generator, so its fixed seed never leaks into training: masks, Gumbel noise and dropout would
otherwise repeat after each evaluation); and the DataLoader seeded by its own generator. A resume
on another number of ranks sees the same global batches; its masks and dropout differ (the RNG
streams are per rank), so the losses are those of an equivalent run, not bitwise the same.

Numerics: bf16 runs keep fp32 master weights and accumulate and all-reduce gradients in fp32
(electra/distributed/deepspeed_glue.py); every Hugging Face export of a bf16/fp16 run is written from the fp32
master weights (``fp32_model``), the same values ``electra.checkpoint.hf_export.export_checkpoint`` reads
from the checkpoint files, not from the bf16-rounded module.

A corpus that grows joins by generations at epoch starts (``electra.data.corpus_growth``): the
stream asks ``_epoch_plan`` for each epoch's plan, and each checkpoint records the generations
every epoch started used, so a resume replays them.

Test hooks are parameters (``TrainHooks``): a callable after each step, one inside the save
(DeepSpeed's files written, the sums not), one inside the checkpoint commit (sums written,
``meta.json`` not) and one inside the resume (DeepSpeed's load done, no step run), so a test
kills a run at a chosen point without timing races. All are None by default: nothing runs.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from common import events
from electra.checkpoint import save_load as ckpt
from electra.data import stream as sdata
from electra.distributed import deepspeed_glue as D
from electra.checkpoint import eval_handoff
from electra.checkpoint import run_layout as layout
from electra.data.corpus_growth import CorpusFollower, GenerationRecord, names_of
from electra.run.metrics_log import MetricsLog, MetricWindow, peak_flops, train_record
from electra.run.plan import RunPlan, config_hash
from electra.data.sample_log import SampleLog

log = logging.getLogger("electra.train")


@dataclass(frozen=True)
class TrainHooks:
    after_step: Callable[[int], None] | None = None  # called with the step just finished (and saved)
    before_commit: Callable[[int], None] | None = None  # inside the commit: files written, meta not
    in_save: Callable[[int], None] | None = None  # inside the save: DeepSpeed's files written, sums not
    # in the resume (electra.run.runner), with the step loaded: DeepSpeed's load done, no step run
    in_resume: Callable[[int], None] | None = None


@dataclass(frozen=True)
class StartState:
    step: int = 0
    tokens_seen: int = 0
    wall_time: float = 0.0
    position: sdata.DataPosition = sdata.DataPosition()


class Trainer:
    """Holds the run's state; ``run()`` trains to ``max_steps``."""

    def __init__(self, plan: RunPlan, dist: D.DistInfo, engine, start: StartState, *,
                 train_shards: tuple, validation_shards: tuple, hooks: TrainHooks = TrainHooks(),
                 train_mixture=None):
        self.plan, self.cfg, self.dist, self.engine, self.hooks = plan, plan.cfg, dist, engine, hooks
        self.run_dir, self.corpus = plan.run_dir, plan.corpus
        self.rank0 = dist.rank == 0
        self.handoff = eval_handoff.policy_for(self.cfg.train)  # None: checkpoints are not pinned
        if self.rank0:
            log.info("checkpoint hand-off: %s", "off (pruned to train.keep_last)" if self.handoff is None else
                     f"pinned until evaluated (at most {self.handoff.max_pending} waiting; milestones every "
                     f"{self.handoff.keep_every} checkpoint(s), 0 = none)")
        self.accum = plan.geometry.accum
        self.step, self.tokens_seen, self.wall_before = start.step, start.tokens_seen, start.wall_time
        # DeepSpeed records the global grad norm except for ZeRO-0 in fp32; measure it ourselves there.
        self.own_grad_norm = engine.zero_optimization_stage() == 0 and self.cfg.train.precision == "fp32"
        self.last_norm = None
        self.train_plan = self._stream_plan(train_shards, shuffle=True, mixture=train_mixture)
        self.validation_plan = self._stream_plan(validation_shards, shuffle=False)
        data = self.cfg.data
        # Each epoch's generations of a corpus that grows (electra.data.corpus_growth), decided as it starts
        record = plan.generations or GenerationRecord.begin(
            plan.corpus.locations, start.position.epoch, tuple(names_of(c) for c in plan.corpus.corpora),
            follow=data.follow_appends, identity=plan.corpus.data_sha256)
        self.follower = CorpusFollower(plan.corpus, train_shards, train_mixture, record,
                                       skip_corrupt=data.skip_corrupt)
        self.train_stream = sdata.TrainStream(self.train_plan, num_workers=sdata.loader_workers(data.num_workers),
                                              prefetch=data.prefetch_shards, start=start.position,
                                              node_cache=data.node_cache, plan_for=self._epoch_plan)
        if self.rank0:
            layout.update_lineage(self.run_dir, corpora=record.lineage())
        self.metrics = MetricsLog(self.run_dir, enabled=self.rank0, resume_step=self.step)
        self.samples = SampleLog(self.run_dir, dist.rank, enabled=self.cfg.data.log_samples,
                                 resume_step=self.step, world_size=dist.world_size)

    def _stream_plan(self, shards: tuple, *, shuffle: bool, mixture=None) -> sdata.StreamPlan:
        cfg, g = self.cfg, self.plan.geometry
        return sdata.StreamPlan(tuple(shards), cfg.seq_len, g.global_batch, g.micro_batch, rank=self.dist.rank,
                                world_size=self.dist.world_size, seed=cfg.train.seed,
                                shuffle_block=cfg.data.shuffle_buffer, streams=cfg.data.streams, shuffle=shuffle,
                                mixture=mixture)

    def _epoch_plan(self, epoch: int) -> sdata.StreamPlan:
        """The train plan of ``epoch``, at its start: another one when generations joined."""
        if self.follower.advance(epoch):
            f = self.follower
            self.train_plan = self._stream_plan(f.train, shuffle=True, mixture=f.mixture)
            if self.rank0:
                layout.update_lineage(self.run_dir, corpora=f.record.lineage())
        return self.train_plan

    def run(self) -> None:
        cfg, max_steps = self.cfg, self.cfg.max_steps
        window = MetricWindow(self.engine.device, sources=self.plan.num_sources)
        flops = _flops_per_token(cfg)
        peak = peak_flops(cfg.train.precision, cfg.train.peak_flops, tf32=cfg.train.tf32)
        batches = iter(self.train_stream)
        bar = _progress(self.rank0, total=max_steps, initial=self.step)
        started = time.perf_counter()
        skipped = list(self.plan.skipped_shards)
        if skipped:
            self.metrics.write({"kind": "data", "step": self.step, "skipped_shards": skipped,
                                "skipped_count": len(skipped)})
        try:  # closed on an error too: the error's one line then starts a line of its own
            while self.step < max_steps:
                lr = self.engine.optimizer.param_groups[0]["lr"]
                logging_now = (self.step + 1) % cfg.train.log_every == 0 or self.step + 1 == max_steps
                for i in range(self.accum):
                    self._micro_step(next(batches), window, want_norm=logging_now and i == self.accum - 1)
                self.step += 1
                self.samples.end_step(self.step)
                bar.update(1)
                if self.step % cfg.train.log_every == 0 or self.step == max_steps:
                    self._log(window, lr=lr, flops=flops, peak=peak, bar=bar)
                if cfg.train.eval_every and self.step % cfg.train.eval_every == 0:
                    _outside(window, self.evaluate)
                if self.step % cfg.train.save_every == 0 or self.step == max_steps:
                    if window.pending:  # tokens_seen in meta.json must include this window
                        self._log(window, lr=lr, flops=flops, peak=peak, bar=bar)
                    _outside(window, lambda: self.save(self.wall_before + time.perf_counter() - started))
                if self.hooks.after_step is not None:
                    self.hooks.after_step(self.step)
        finally:
            bar.close()
        self.samples.close()

    def finish(self) -> None:
        """Close the metrics and hand the last checkpoint's event to Prefect."""
        self.metrics.close()
        if self.rank0 and not events.flush(timeout=30.0):  # the last checkpoint's event
            log.warning("checkpoint event still being handed to Prefect at exit (may be lost; "
                        "the evaluate-new-checkpoints scan catches up)")

    def _micro_step(self, batch: sdata.Batch, window: MetricWindow, *, want_norm: bool = False) -> None:
        self.samples.add(batch.keys, batch.generations)
        dev = self.engine.device
        out = self.engine(batch.input_ids.to(dev, non_blocking=True), batch.segment_ids.to(dev, non_blocking=True))
        self.engine.backward(out.loss)
        if want_norm and self.own_grad_norm:  # gradients are all-reduced by now, not yet clipped
            grads = [p.grad.detach().float().norm() for p in self.engine.module.parameters() if p.grad is not None]
            self.last_norm = float(torch.stack(grads).norm()) if grads else None
        self.engine.step()
        window.add(out, batch.sources)

    def _log(self, window: MetricWindow, *, lr: float, flops, peak: float, bar) -> None:
        means, tokens, seconds = window.flush()
        self.tokens_seen += tokens
        norm = self.last_norm if self.own_grad_norm else self.engine.get_global_grad_norm()
        rec = train_record(self.step, means, tokens=tokens, seconds=seconds, lr=lr,
                           grad_norm=float(norm) if norm is not None else None, flops_per_token=flops,
                           peak=peak, world_size=self.dist.world_size)
        rec["tokens_seen"] = self.tokens_seen
        dev = self.engine.device
        if isinstance(dev, torch.device) and dev.type == "cuda":  # the most this rank has held since start
            rec["max_memory_gib"] = torch.cuda.max_memory_allocated(dev) / 2**30
        self.metrics.write(rec)
        bar.set_postfix(loss=f"{rec['loss']:.3f}", tok_s=f"{rec['tokens_per_sec']:.0f}", refresh=False)

    def evaluate(self) -> dict | None:
        """Validation losses and metrics on a fixed set of examples with fixed masks."""
        plan = self.validation_plan
        if plan.steps_per_epoch < 1 or self.cfg.data.eval_batches < 1:  # said once at start (electra.run.plan)
            return None
        window = MetricWindow(self.engine.device)
        self.engine.eval()
        cuda = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
        with torch.random.fork_rng(devices=cuda), torch.no_grad():  # all CUDA generators too
            torch.manual_seed(self.cfg.train.seed + self.dist.rank)
            n = min(self.cfg.data.eval_batches, plan.steps_per_epoch)
            for batch in sdata.eval_batches(plan, n, prefetch=self.cfg.data.prefetch_shards):
                dev = self.engine.device
                window.add(self.engine(batch.input_ids.to(dev), batch.segment_ids.to(dev)))
        self.engine.train()
        means, tokens, _ = window.flush()
        rec = {"kind": "eval", "step": self.step, "tokens": tokens, **{f"eval_{k}": v for k, v in means.items()}}
        self.metrics.write(rec)
        return rec

    def save(self, wall_time: float) -> Path:
        meta = layout.CheckpointMeta(
            step=self.step, tokens_seen=self.tokens_seen, data_position=self.train_stream.position.to_dict(),
            manifest_sha256=self.follower.corpus.manifest_sha256, tokenizer_sha256=self.corpus.tokenizer_sha256,
            # the identity of the newest generations its epochs used (electra.data.corpus_growth)
            data_sha256=self.follower.record.identity, config_hash=config_hash(self.cfg), wall_time=wall_time,
            world_size=self.dist.world_size, global_batch_size=self.plan.geometry.global_batch,
            generations=self.follower.record.to_dict())
        before, inside = self.hooks.before_commit, self.hooks.in_save
        hook = (lambda step=self.step: before(step)) if before is not None else None
        in_save = (lambda step=self.step: inside(step)) if inside is not None else None
        path = ckpt.save_checkpoint(self.engine, self.run_dir, meta, rank=self.dist.rank,
                                    keep_last=self.cfg.train.keep_last, barrier=D.barrier, before_commit=hook,
                                    handoff=self.handoff, in_save=in_save)
        if self.cfg.train.export_every_checkpoint:
            self.export(path / layout.HF)
        if self.rank0:  # committed (and exported): tell Prefect, without waiting (common.events)
            events.emit_checkpoint_committed(path, step=self.step)
        return path

    def export(self, out_dir: Path | None = None) -> None:
        """``hf/discriminator`` and ``hf/generator`` (ZeRO-3 shards gathered first)."""
        from electra.checkpoint.hf_export import export_hf
        from electra.checkpoint.init_from import read_lineage

        with D.full_parameters(self.engine):
            model = self.fp32_model()  # every rank: gathering the masters is a collective
            if self.rank0:
                export_hf(model, self.cfg.model, out_dir or self.run_dir / layout.HF,
                          tokenizer_dir=self.run_dir / layout.TOKENIZER, lineage=read_lineage(self.run_dir))
        D.barrier()

    def fp32_model(self):
        """The model with the optimiser's fp32 master weights (bf16/fp16 runs: a CPU copy on rank 0,
        None on the other ranks, which only take part in the gathering; fp32 runs: the module
        itself). Parameters the optimiser does not hold (frozen by ``kind=mlm``) keep the module's
        values."""
        module = self.engine.module.model
        if self.cfg.train.precision == "fp32":
            return module
        from deepspeed.utils import safe_get_full_fp32_param

        from electra.model.networks import ElectraForPretraining

        masters = {}
        for name, p in module.named_parameters(remove_duplicate=False):  # shared embeddings: each name
            master = safe_get_full_fp32_param(p)  # a collective with ZeRO: every rank, same order
            if master is not None and self.rank0:
                masters[name] = master.detach().float().cpu()
        if not self.rank0:
            return None
        state = {k: v.detach().float().cpu() for k, v in module.state_dict().items()}
        state.update({k: v.view(state[k].shape) for k, v in masters.items()})
        with torch.random.fork_rng(devices=[]):  # the throw-away init must not move the training RNG
            model = ElectraForPretraining(self.cfg.model)
        model.load_state_dict(state, strict=True)
        return model


def _outside(window: MetricWindow, work) -> None:
    """Run ``work`` (an evaluation, a checkpoint) without counting its time in the window's
    tokens/s and MFU. The device finishes the queued training steps first, so their time stays in."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    work()
    window.exclude(time.perf_counter() - t0)


def _flops_per_token(cfg) -> float | None:
    try:
        from electra.model.flops import training_flops_per_token
    except ImportError:  # the FLOP model is optional for training itself
        log.warning("electra.model.flops unavailable: mfu not reported")
        return None
    return training_flops_per_token(cfg)


def _progress(enabled: bool, *, total: int, initial: int):
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, disable=not enabled, unit="step", dynamic_ncols=True,
                mininterval=2.0)
