"""The pre-training runner: one job, five named phases that plain Python can drive.

    runner = PretrainRunner(job)          # electra.run.job.PretrainJob
    runner.run()                          # = resolve, prepare, build, train, export

* **resolve** (``electra.run.shared_plan.resolve_rank``): run directory, config, batch geometry,
  DeepSpeed config and resume plan, checked on every rank before any distributed start-up: a
  user error is one line within seconds. The corpus (manifest, tokenizer, shard listing) is read
  by rank 0 alone, which also checks whether the run fits the machine (``check_fits_machine``: a
  GPU-sized run on a CPU is refused unless ``train.allow_cpu``) and whether the corpus fills one
  global batch (``check_fills_batch``); one process raises what it finds at once, rank 0 of
  several holds it for the others.
* **prepare**: join the process group (DeepSpeed's CPU shm op is skipped for one process), take
  rank 0's plan, shard check included, or its error (``electra.run.shared_plan.share``: one
  broadcast; no other rank reads the corpus's manifest), and rank 0 prints the config once
  (``electra.run.summary``: what differs from the defaults, and the derived values) and readies
  the run directory: deletes checkpoints a kill left incomplete, writes ``config.json`` (the full
  resolved config) and ``deepspeed_config.json``, and copies the corpus tokenizer into ``RUN/tokenizer`` (every export reads that copy, so any checkpoint can be
  exported without the corpus, which may be remote). Every rank plans from rank 0's shard
  listing, the same answer even if the store changed since.
* **build** (``build_objective`` + DeepSpeed): seed, model (identical on every rank; the
  ``--init-from`` weights when the run starts from a checkpoint), objective, engine with the
  project's optimiser and LR schedule; then the checkpoint, if any: directly, or through
  DeepSpeed's universal checkpoint when the world size changed under ZeRO (``electra.checkpoint.save_load``);
  with ``--resume-schedule``, the init checkpoint's optimiser state and schedule the same way.
* **train**: ``electra.run.trainer.Trainer.run``.
* **export**: the Hugging Face export ``RUN/hf`` (also when resumed at ``max_steps``: the export
  is a function of the checkpoint), metrics closed, the last event handed to Prefect.

``electra.random_init`` uses ``resolve`` and ``build_objective`` for its step-0 export.
"""
from __future__ import annotations

import json
import logging
import os

from common import storage
from electra.distributed import deepspeed_glue as D
from electra.checkpoint import run_layout as layout
from electra.run.job import PretrainJob
from electra.run.plan import RunPlan, check_fills_batch
from electra.run.seeding import seed_everything
from electra.run.shared_plan import Resolved, resolve_rank, share
from electra.run.trainer import StartState, Trainer, TrainHooks

log = logging.getLogger("electra.train")
PHASES = ("resolve", "prepare", "build", "train", "export")


def build_objective(plan: RunPlan):
    """The model and its objective from the run's seed: the same weights on every rank, and the
    step-0 weights ``electra.random_init`` exports; with ``--init-from``, the checkpoint's weights
    (loaded after the objective, which may set the discriminator bias of a random init)."""
    from electra.model.networks import ElectraForPretraining
    from electra.model.objective import ElectraObjective, SpecialTokens

    cfg = plan.cfg
    seed_everything(cfg.train.seed)
    model = ElectraForPretraining(cfg.model)
    special = SpecialTokens.from_manifest(plan.corpus.manifest.tokenizer.special_tokens)
    objective = ElectraObjective(model, cfg.objective, special, cfg.seq_len)
    if plan.init is not None and not plan.resume_schedule:  # (a resumed schedule loads them with it)
        from electra.checkpoint.init_from import load_weights

        model.load_state_dict(load_weights(plan.init, cfg.model), strict=True)
    return objective


class PretrainRunner:
    def __init__(self, job: PretrainJob, *, hooks: TrainHooks = TrainHooks()):
        self.job, self.hooks = job, hooks
        self.resolved: Resolved | None = None
        self.plan: RunPlan | None = None  # after resolve on rank 0 (or one process), after prepare on every rank
        self.dist: D.DistInfo | None = None
        self.shards: tuple[tuple, tuple] | None = None
        self.trainer: Trainer | None = None

    def run(self) -> Trainer:
        for phase in PHASES:
            getattr(self, phase)()
        return self.trainer

    def resolve(self) -> RunPlan | None:
        import torch

        # before the process group: the launcher's RANK (absent: one process, rank 0)
        self.resolved = resolve_rank(self.job, rank=int(os.environ.get("RANK", "0")), cuda=torch.cuda.is_available())
        self.plan = self.resolved.plan
        return self.plan

    def prepare(self) -> None:
        self.dist = D.init_distributed()
        plan = self.plan = share(self.resolved)  # rank 0's plan, or its error, on every rank
        if self.dist.rank == 0:
            from electra.run.summary import summary_lines

            for line in summary_lines(plan.cfg, plan.geometry, config=self.job.config,
                                      written_to=str(plan.run_dir / layout.CONFIG), warmup_from=plan.warmup_from):
                log.info("%s", line)
            layout.clean_incomplete(plan.run_dir)
            for name, obj in ((layout.CONFIG, plan.cfg.to_dict()), (layout.DEEPSPEED_CONFIG, plan.ds_config)):
                storage.write_bytes(str(plan.run_dir / name), (json.dumps(obj, indent=2) + "\n").encode())
            plan.corpus.copy_tokenizer(str(plan.run_dir / layout.TOKENIZER))
            if plan.init is not None:  # the source, with the sha256 of its weight files
                from electra.checkpoint.init_from import LINEAGE, lineage

                record = lineage(plan.init, resume_schedule=plan.resume_schedule)
                storage.write_bytes(str(plan.run_dir / LINEAGE), (json.dumps(record, indent=2) + "\n").encode())
                log.info("starting from %s (%s)", plan.init.location, plan.init.kind)
        # rank 0's listing, and the mixture made from it (in its plan): every rank plans the same order
        self.shards = (plan.train_shards, plan.validation_shards, plan.train_mixture)
        train, validation, mixture = self.shards  # again, on what data.skip_corrupt left
        check_fills_batch(plan, (sum(mixture.takes) if mixture else sum(s.num_examples for s in train),
                                 sum(s.num_examples for s in validation)))
        D.barrier()

    def build(self) -> Trainer:
        import torch

        from electra.checkpoint import save_load as ckpt
        from electra.checkpoint.mirror import CheckpointMirror
        from electra.data.stream import DataPosition
        from electra.run.optim import build_optimizer, build_scheduler

        plan, rank0 = self.plan, self.dist.rank == 0
        objective = build_objective(plan)
        fast = D.configure_fast_path(plan.cfg, objective.model)
        if fast and rank0:
            log.info("fast path: %s", ", ".join(fast))
        optimizer = build_optimizer(objective, plan.cfg.optimizer, device="cuda" if torch.cuda.is_available() else "cpu")
        if rank0:
            log.info("optimizer: %s", type(optimizer).__name__)
        if plan.resume is not None:  # the ranks convert to the universal layout when the world size changed
            if rank0:
                log.info("resume: %s", plan.resume.message)
            self._prepare_universal(plan.resume)
        engine = D.build_engine(objective, optimizer, build_scheduler(optimizer, plan.cfg.optimizer), plan.ds_config)
        mirror = None
        if plan.resume is not None:  # the node's ranks share one read of the files all of them load
            loads = D.universal_loads(engine) if plan.resume.universal else None  # collective
            mirror = CheckpointMirror.open(plan.cfg.data.node_cache, plan.resume.load_dir, rank=self.dist.rank,
                                           world_size=self.dist.world_size, param_loads=loads)
            D.barrier()  # every rank has joined before any loads
        seed_everything(plan.cfg.train.seed + 1000 * (self.dist.rank + 1))  # distinct masks per rank
        start = StartState()
        resumed = self.hooks.in_resume
        if plan.resume_dir is not None:
            after = None if resumed is None else (lambda: resumed(layout.step_of(plan.resume_dir)))
            meta = ckpt.load_checkpoint(engine, plan.resume_dir, rank=self.dist.rank, universal=plan.resume.universal,
                                        mirror=mirror, after_load=after)
            start = StartState(meta.step, meta.tokens_seen, meta.wall_time, DataPosition.from_dict(meta.data_position))
            log.info("resumed from %s (step %d, data %s, saved on %d ranks, now %d)", plan.resume_dir, meta.step,
                     start.position, meta.world_size, self.dist.world_size)
        elif plan.resume_schedule:  # the init checkpoint's optimiser and schedule; the new data from its start
            meta = ckpt.load_checkpoint(engine, plan.init.step_dir, rank=self.dist.rank,
                                        universal=plan.resume.universal, mirror=mirror)
            start = StartState(meta.step, meta.tokens_seen)
            log.info("optimiser state and schedule of %s: continuing at step %d on the new data",
                     plan.init.step_dir, meta.step)
        train_shards, validation_shards, mixture = self.shards
        self.trainer = Trainer(plan, self.dist, engine, start, train_shards=train_shards,
                               validation_shards=validation_shards, train_mixture=mixture, hooks=self.hooks)
        return self.trainer

    def _prepare_universal(self, resume) -> None:
        """Every rank converts a share (``electra.checkpoint.universal_conversion``), its waits sized to the
        conversion (longer than a collective's timeout may be needed)."""
        from electra.checkpoint.universal import conversion_timeout, prepare_universal

        if not resume.universal:
            return
        agree = D.Agreement(conversion_timeout(resume.step_dir))
        try:
            prepare_universal(resume, rank=self.dist.rank, world_size=self.dist.world_size, agree=agree)
        finally:
            agree.close()

    def train(self) -> None:
        self.trainer.run()

    def export(self) -> None:
        self.trainer.export()
        self.trainer.finish()
        if self.dist.rank == 0:
            log.info("done: step %d, %d tokens, run dir %s", self.trainer.step, self.trainer.tokens_seen,
                     self.plan.run_dir)
