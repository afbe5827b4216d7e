"""The trainer: ELECTRA pre-training on DeepSpeed, streaming the corpus shards; resumes exactly.

The command line is ``electra/train.py`` (a thin entry: arguments and ``main``); this module is
the run itself. The run directory's layout is ``electra.run_layout``'s, the checkpoint commit
``electra.checkpoint``'s, the DeepSpeed glue ``electra.distributed``'s.

``CORPUS`` is any corpus location (a path, ``s3://bucket/corpus``, ``gs://...``, ``https://...``):
the manifest, tokenizer and shards are read through ``common.storage`` on every rank. ``RUN_DIR``
must be a local or shared-filesystem path, because DeepSpeed writes checkpoints with
``torch.save`` to paths; a remote URI there fails at start, before any work.

Order of a run: join the process group; load the requested config (preset + flags + ``--set``);
find ``RUN_DIR/checkpoints/latest``; open the corpus and refuse one whose seq_len or tokenizer does
not match the config (or the checkpoint). The run's config is then resolved ONCE
(``resolve_run_config``: the vocabulary size from the corpus, the precision this machine can
train in), immutably (the config dataclasses are frozen), logged where it differs from the
request, and written as is to ``RUN_DIR/config.json``; nothing changes it afterwards. The
tokenizer files are copied into ``RUN_DIR/tokenizer`` (every export reads that copy). Seed, build
the model (identical on every rank), wrap ``ElectraObjective`` in a DeepSpeed engine with the
project's optimiser and LR schedule; load the checkpoint (model, optimiser, scheduler, RNG, data
position) if there is one. Then steps: ``accum`` micro batches (forward, backward, engine.step),
metrics every ``log_every`` steps, validation every ``eval_every``, checkpoints every
``save_every`` and at the end, and finally the Hugging Face export ``RUN_DIR/hf``. After each
checkpoint commit, rank 0 emits the Prefect event ``electra.checkpoint.committed`` when a Prefect
API is configured (``common.events``: on a background thread, never waited on) — the ``evaluate``
deployment's trigger in ``prefect.yaml`` starts the evaluation of that checkpoint.

Exact resume rests on three things: the data position (epoch, micro batch) in ``meta.json``;
every RNG the step draws from restored per rank (evaluation runs under ``fork_rng`` over the CPU
AND every CUDA generator, so its fixed seed never leaks into training: masks, Gumbel noise and
dropout would otherwise repeat after each evaluation); and the DataLoader seeded by its own
generator, not the global one.

Numerics: bf16 runs keep fp32 master weights and accumulate and all-reduce gradients in fp32
(electra/distributed.py); every Hugging Face export of a bf16/fp16 run is written from the fp32
master weights (``fp32_model``), the same values ``electra.hf_export.export_checkpoint`` reads
from the checkpoint files, not from the bf16-rounded module. The GPU fast path (TF32, ``torch.compile``, activation
checkpointing, DeepSpeed's FusedAdam) is set up in ``_build_engine`` from the config.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import logging
import os
import time
from pathlib import Path

import torch

from common import events, storage
from electra import checkpoint as ckpt
from electra import data as sdata
from electra import distributed as D
from electra import run_layout as layout
from electra.config import ElectraConfig, load_config
from electra.metrics_log import MetricsLog, MetricWindow, peak_flops, train_record
from pipelines.schema import TOKENIZER_FILES

log = logging.getLogger("electra.train")
DEBUG_KEYS_ENV = "ELECTRA_DEBUG_KEYS"  # a folder: each rank appends the sample keys it trained on
# Fault injection for the tests: SIGKILL inside the checkpoint commit of step N, or right after
# step N (logged, saved only if N is a save step): deterministic kills, no timing races.
KILL_IN_CHECKPOINT_ENV = "ELECTRA_TEST_KILL_IN_CHECKPOINT"
KILL_AFTER_STEP_ENV = "ELECTRA_TEST_KILL_AFTER_STEP"


def requested_config(args: argparse.Namespace) -> ElectraConfig:
    """The config as asked for: preset + command-line flags + ``--set``, strictly loaded."""
    flags = {"max_steps": args.max_steps, "save_every": args.save_every, "seed": args.seed,
             "micro_batch_size": args.micro_batch}
    overrides = [f"train.{k}={v}" for k, v in flags.items() if v is not None] + list(args.set)
    return load_config(args.config, overrides)


def resolve_run_config(requested: ElectraConfig, *, corpus_vocab_size: int, precision: str) -> ElectraConfig:
    """The run's config, built once: ``requested`` with the corpus's vocabulary size and the
    precision this machine trains in (``distributed.effective_precision``). Returns a new
    (frozen) config, validated again; every change is logged."""
    model, train = requested.model, requested.train
    if model.vocab_size != corpus_vocab_size:
        log.info("model.vocab_size %d -> %d (from the corpus tokenizer)", model.vocab_size, corpus_vocab_size)
        model = dataclasses.replace(model, vocab_size=corpus_vocab_size)
    if train.precision != precision:
        log.warning("train.precision %s -> %s: no native %s on this CPU (see distributed.effective_precision)",
                    train.precision, precision, train.precision)
        train = dataclasses.replace(train, precision=precision)
    if (model, train) == (requested.model, requested.train):
        return requested
    # Through the strict loader, so the changed values pass the same checks as a config file.
    return ElectraConfig.from_dict(dataclasses.asdict(dataclasses.replace(requested, model=model, train=train)),
                                   source="resolved run config")


def config_hash(cfg: ElectraConfig) -> str:
    """Hash of what decides the trajectory (not max_steps, save/log cadence)."""
    d = cfg.to_dict()
    keep = {k: d[k] for k in ("model", "objective", "optimizer", "data")}
    keep["seed"] = d["train"]["seed"]
    return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:16]


def seed_everything(seed: int) -> None:
    import random

    import numpy as np

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


class Trainer:
    """Holds the run's state; ``run()`` trains to ``max_steps``."""

    def __init__(self, args: argparse.Namespace):
        self.run_dir = run_dir(args.out)
        self.dist = D.init_distributed()
        self.rank0 = self.dist.rank == 0
        requested = requested_config(args)
        self.resume_dir = layout.find_latest(self.run_dir)
        prior = layout.CheckpointMeta.read(self.resume_dir) if self.resume_dir else None
        self.corpus = sdata.open_corpus(args.data, seq_len=requested.data.seq_len,
                                        tokenizer_sha256=prior.tokenizer_sha256 if prior else None,
                                        manifest_sha256=prior.manifest_sha256 if prior else None,
                                        data_sha256=prior.data_sha256 if prior and prior.data_sha256 else None,
                                        allow_change=requested.data.allow_corpus_change)
        self.cfg = resolve_run_config(requested, corpus_vocab_size=self.corpus.vocab_size,
                                      precision=D.effective_precision(requested.train.precision))
        if prior and prior.config_hash != config_hash(self.cfg):
            log.warning("config differs from the checkpoint's (hash %s -> %s)", prior.config_hash,
                        config_hash(self.cfg))
        self.ds_config = D.deepspeed_config(self.cfg, self.dist.world_size)
        self.accum = self.ds_config["gradient_accumulation_steps"]
        if self.rank0:
            layout.clean_incomplete(self.run_dir)
            for name, obj in ((layout.CONFIG, self.cfg.to_dict()), (layout.DEEPSPEED_CONFIG, self.ds_config)):
                storage.write_bytes(str(self.run_dir / name), (json.dumps(obj, indent=2) + "\n").encode())
            # The run keeps its own copy of the tokenizer so any checkpoint can be exported later
            # (electra.hf_export.export_checkpoint) without the corpus, which may be remote, at hand.
            # By name, not by listing: an https:// corpus cannot be listed.
            for name in TOKENIZER_FILES:
                try:
                    data = storage.read_bytes(storage.join(self.corpus.tokenizer_uri, name))
                except storage.StorageError:  # optional files; tokenizer.json open_corpus has read
                    continue
                storage.write_bytes(str(self.run_dir / layout.TOKENIZER / name), data)
        D.barrier()
        self.engine = self._build_engine()
        self._plans: dict[str, sdata.StreamPlan] = {}
        self.skipped_shards: list[str] = []
        # DeepSpeed records the global grad norm except for ZeRO-0 in fp32; measure it ourselves there.
        self.own_grad_norm = self.engine.zero_optimization_stage() == 0 and self.cfg.train.precision == "fp32"
        self.last_norm = None
        self.step, self.tokens_seen, self.wall_before = 0, 0, 0.0
        position = sdata.DataPosition()
        if self.resume_dir:
            meta = ckpt.load_checkpoint(self.engine, self.resume_dir, rank=self.dist.rank)
            self.step, self.tokens_seen, self.wall_before = meta.step, meta.tokens_seen, meta.wall_time
            position = sdata.DataPosition(**meta.data_position)
            log.info("resumed from %s (step %d, data %s)", self.resume_dir, self.step, position)
        self.train_stream = sdata.TrainStream(self._plan("train"), num_workers=self.cfg.data.num_workers,
                                              prefetch=self.cfg.data.prefetch_shards, start=position)
        self.metrics = MetricsLog(self.run_dir, enabled=self.rank0, resume_step=self.step)

    def _build_engine(self):
        from electra.model import ElectraForPretraining
        from electra.objective import ElectraObjective, SpecialTokens
        from electra.optim import build_optimizer, build_scheduler

        seed_everything(self.cfg.train.seed)  # same initial weights on every rank
        model = ElectraForPretraining(self.cfg.model)
        special = SpecialTokens.from_manifest(self.corpus.manifest.tokenizer.special_tokens)
        objective = ElectraObjective(model, self.cfg.objective, special, self.cfg.data.seq_len)
        fast = D.configure_fast_path(self.cfg, model)
        if fast and self.rank0:
            log.info("fast path: %s", ", ".join(fast))
        optimizer = build_optimizer(objective, self.cfg.optimizer,
                                    device="cuda" if torch.cuda.is_available() else "cpu")
        if self.rank0:
            log.info("optimizer: %s", type(optimizer).__name__)
        engine = D.build_engine(objective, optimizer, build_scheduler(optimizer, self.cfg.optimizer),
                                self.ds_config)
        seed_everything(self.cfg.train.seed + 1000 * (self.dist.rank + 1))  # distinct masks per rank
        return engine

    def _plan(self, split: str) -> sdata.StreamPlan:
        """This rank's plan for a split; shards are listed once per split and run."""
        if split in self._plans:
            return self._plans[split]
        shards, skipped = D.on_rank0(
            lambda: sdata.check_shards(self.corpus, split, skip_corrupt=self.cfg.data.skip_corrupt))
        self.skipped_shards += skipped
        self._plans[split] = sdata.StreamPlan(
            tuple(shards), self.cfg.data.seq_len, self.cfg.train.micro_batch_size, rank=self.dist.rank,
            world_size=self.dist.world_size, seed=self.cfg.train.seed, shuffle_block=self.cfg.data.shuffle_buffer,
            shuffle=split == "train")
        return self._plans[split]

    def run(self) -> None:
        cfg, max_steps = self.cfg, self.cfg.max_steps
        window = MetricWindow(self.engine.device)
        flops = _flops_per_token(cfg)
        peak = peak_flops(cfg.train.precision, cfg.train.peak_flops, tf32=cfg.train.tf32)
        batches = iter(self.train_stream)
        bar = _progress(self.rank0, total=max_steps, initial=self.step)
        started = time.perf_counter()
        kill_after = int(os.environ.get(KILL_AFTER_STEP_ENV, 0))
        if self.skipped_shards:
            self.metrics.write({"kind": "data", "step": self.step, "skipped_shards": self.skipped_shards,
                                "skipped_count": len(self.skipped_shards)})
        while self.step < max_steps:
            lr = self.engine.optimizer.param_groups[0]["lr"]
            logging_now = (self.step + 1) % cfg.train.log_every == 0 or self.step + 1 == max_steps
            for i in range(self.accum):
                self._micro_step(next(batches), window, want_norm=logging_now and i == self.accum - 1)
            self.step += 1
            bar.update(1)
            if self.step % cfg.train.log_every == 0 or self.step == max_steps:
                self._log(window, lr=lr, flops=flops, peak=peak, bar=bar)
            if cfg.train.eval_every and self.step % cfg.train.eval_every == 0:
                self.evaluate()
            if self.step % cfg.train.save_every == 0 or self.step == max_steps:
                if window.pending:  # tokens_seen in meta.json must include this window
                    self._log(window, lr=lr, flops=flops, peak=peak, bar=bar)
                self.save(self.wall_before + time.perf_counter() - started)
            if self.step == kill_after:
                os.kill(os.getpid(), 9)
        bar.close()
        self.export()  # also when resumed at max_steps: the export is a function of the checkpoint
        self.metrics.close()
        if self.rank0 and not events.flush(timeout=30.0):  # the last checkpoint's event
            log.warning("checkpoint event still being handed to Prefect at exit (may be lost; "
                        "the evaluate-new-checkpoints scan catches up)")

    def _micro_step(self, batch: sdata.Batch, window: MetricWindow, *, want_norm: bool = False) -> None:
        if os.environ.get(DEBUG_KEYS_ENV):
            with open(Path(os.environ[DEBUG_KEYS_ENV]) / f"keys_rank{self.dist.rank}.txt", "a") as f:
                f.write("".join(f"{self.step + 1}\t{k}\n" for k in batch.keys))
        dev = self.engine.device
        out = self.engine(batch.input_ids.to(dev, non_blocking=True), batch.segment_ids.to(dev, non_blocking=True))
        self.engine.backward(out.loss)
        if want_norm and self.own_grad_norm:  # gradients are all-reduced by now, not yet clipped
            grads = [p.grad.detach().float().norm() for p in self.engine.module.parameters() if p.grad is not None]
            self.last_norm = float(torch.stack(grads).norm()) if grads else None
        self.engine.step()
        window.add(out)

    def _log(self, window: MetricWindow, *, lr: float, flops, peak: float, bar) -> None:
        means, tokens, seconds = window.flush()
        self.tokens_seen += tokens
        norm = self.last_norm if self.own_grad_norm else self.engine.get_global_grad_norm()
        rec = train_record(self.step, means, tokens=tokens, seconds=seconds, lr=lr,
                           grad_norm=float(norm) if norm is not None else None, flops_per_token=flops,
                           peak=peak, world_size=self.dist.world_size)
        rec["tokens_seen"] = self.tokens_seen
        self.metrics.write(rec)
        bar.set_postfix(loss=f"{rec['loss']:.3f}", tok_s=f"{rec['tokens_per_sec']:.0f}", refresh=False)

    def evaluate(self) -> dict | None:
        """Validation losses and metrics on a fixed set of examples with fixed masks."""
        plan = self._plan("validation")
        if plan.batches_per_epoch < 1:
            log.warning("validation split too small for one micro batch per rank: no evaluation")
            return None
        window = MetricWindow(self.engine.device)
        self.engine.eval()
        cuda = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
        with torch.random.fork_rng(devices=cuda), torch.no_grad():  # all CUDA generators too
            torch.manual_seed(self.cfg.train.seed + self.dist.rank)
            n = min(self.cfg.data.eval_batches, plan.batches_per_epoch)
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
            manifest_sha256=self.corpus.manifest_sha256, tokenizer_sha256=self.corpus.tokenizer_sha256,
            data_sha256=self.corpus.data_sha256, config_hash=config_hash(self.cfg), wall_time=wall_time,
            world_size=self.dist.world_size)
        kill_at = os.environ.get(KILL_IN_CHECKPOINT_ENV)
        hook = None
        if kill_at and int(kill_at) == self.step:
            def hook():  # the DeepSpeed files are written, meta.json is not: a kill mid-commit
                os.kill(os.getpid(), 9)
        path = ckpt.save_checkpoint(self.engine, self.run_dir, meta, rank=self.dist.rank,
                                    keep_last=self.cfg.train.keep_last, barrier=D.barrier, before_commit=hook)
        if self.cfg.train.export_every_checkpoint:
            self.export(path / layout.HF)
        if self.rank0:  # committed (and exported): tell Prefect, without waiting (common.events)
            events.emit_checkpoint_committed(path, step=self.step)
        return path

    def export(self, out_dir: Path | None = None) -> None:
        """``hf/discriminator`` and ``hf/generator`` (ZeRO-3 shards gathered first)."""
        from electra.hf_export import export_hf

        with D.full_parameters(self.engine):
            model = self.fp32_model()  # every rank: gathering the masters is a collective
            if self.rank0:
                export_hf(model, self.cfg.model, out_dir or self.run_dir / layout.HF,
                          tokenizer_dir=self.run_dir / layout.TOKENIZER)
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

        from electra.model import ElectraForPretraining

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


def run_dir(out: str) -> Path:
    """``--out`` as a local path; a remote URI is refused before any work is done."""
    if not storage.is_local(out):
        raise ValueError(f"--out {out}: the run directory must be a local or shared-filesystem path "
                         "(DeepSpeed writes checkpoints with torch.save to paths); train into a local "
                         "folder and copy the run to the store afterwards")
    return Path(storage.local_path(out))


def _flops_per_token(cfg: ElectraConfig) -> float | None:
    try:
        from electra.flops import training_flops_per_token
    except ImportError:  # the FLOP model is optional for training itself
        log.warning("electra.flops unavailable: mfu not reported")
        return None
    return training_flops_per_token(cfg)


def _progress(enabled: bool, *, total: int, initial: int):
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, disable=not enabled, unit="step", dynamic_ncols=True,
                mininterval=2.0)
