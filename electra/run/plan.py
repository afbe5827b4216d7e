"""The resolve phase of pre-training: everything a run needs to know, checked before it starts.

``resolve(job, world_size=W)`` runs BEFORE any distributed start-up (no process group, no
DeepSpeed engine, no C++ op), so a user error surfaces in seconds as one line naming the key or
path, not minutes later as a traceback from every rank. It is two parts: ``settle_plan``, which
reads no corpus (steps 1, 2, 2b, 5, 6, in that order) and runs on every rank, and
``complete_plan`` (steps 3, 4), which with several ranks runs on rank 0 only, whose plan the
others take (``electra.run.shared_plan``). The steps:

1. the run directory: a local or shared-filesystem path that is, or can be, a folder;
2. the config: a preset by name or a file (``electra.config.load_run_config``), the overrides (a
   ``total_steps`` changed without a warm-up keeps the file's share of warm-up; a run that resumes
   keeps the warm-up it started with);
2b. ``--init-from``: the checkpoint's architecture replaces the preset's (a contradicting user
   setting is an error) and its vocabulary must be the corpus's (``electra.checkpoint.init_from``; checked
   with step 3);
3. the corpora: manifest, tokenizer (sha256 against the manifest and, when resuming, against the
   checkpoint; its data identity on the generations its epochs used, ``electra.data.corpus_growth``);
   several corpora must share the tokenizer and sequence length, and make up each
   epoch by ``data.weights`` (``electra.data.corpus_set``, ``electra.data.mixture``). The shard check, one
   listing per shard folder shared by the train and validation splits and compared with the
   manifest's names and sizes (``electra.data.corpus``), runs here on a single process; with several
   ranks it is deferred (``RunPlan.check_shards``) to rank 0, whose plan carries its answer to
   the others (``RunPlan.adopt`` takes an answer from elsewhere);
4. the run's config, resolved once (``resolve_run_config``): ``data.seq_len`` and the
   vocabulary size are the corpus's (a ``data.seq_len`` given by the user is a check), the
   precision is what this machine can train in;
5. the batch geometry for ``W`` ranks (``electra.distributed.batch_geometry``) and the DeepSpeed config
   (neither depends on the corpus: found before step 3);
6. the resume: the newest complete checkpoint, its global batch (the data position counts
   global steps, so it must be the same), and whether another world size needs DeepSpeed's
   universal checkpoint (``electra.checkpoint.universal.plan_resume``; refused in one line where it
   cannot work); with ``--resume-schedule`` and no checkpoint of its own, the same for the
   ``--init-from`` checkpoint.

Rank 0 (``electra.run.shared_plan.resolve_rank``) then checks that the run fits the machine
(``check_fits_machine``): a
GPU-sized run on a machine without a GPU would start a model of hundreds of millions of
parameters that takes hours per step and looks hung; it is refused in one line with the estimated
time per step and the presets that fit a CPU, unless ``train.allow_cpu``. The line is decided by
FLOPs per optimizer step, not by the preset's name or a measured time, so the same config gets
the same answer on every machine and under any load: ``CPU_STEP_FLOPS`` lets ``tiny``, ``mini``
and ``small`` on its 128-token corpus through and stops ``base`` and ``large`` at any corpus
length (tests/electra/run/test_summary.py pins where the line falls), i.e. anything past about a
minute per step at a CPU's tens of GFLOP/s. The estimate in the message uses the CPU's measured
matmul rate (``electra.distributed.hardware.matmul_flops_per_second``), a lower bound on the step's time.
Then that the corpus fills one global batch (``check_fills_batch``): fewer train examples than
that is no step at all, refused in one line naming the largest global batch they fill, counted
from the manifests (before start-up; the runner counts again, on every rank, what
``data.skip_corrupt`` left); a validation split too small for one is said once.

The result, a frozen ``RunPlan``, is what the other phases (``electra.run.runner``) use;
``electra.random_init`` resolves the same way, so its export is the run's step 0.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from common import storage
from common.config import ConfigError
from electra.checkpoint import run_layout as layout
from electra.distributed.batch_geometry import BatchGeometry, unfillable
from electra.config import ElectraConfig, WarmupShare, load_run_config
from electra.data.corpus import ShardRef
from electra.data.corpus_growth import GenerationRecord, recorded, start_view
from electra.data.corpus_set import CorpusSet, ShardCheck, open_corpora
from electra.checkpoint.init_from import InitSource, check_vocabulary, settle
from electra.data.mixture import Mixture
from electra.run.job import PretrainJob
from electra.checkpoint.universal import resume_split
from pipelines import schema

log = logging.getLogger("electra.train")
CPU_STEP_FLOPS = 3e12  # training FLOPs per optimizer step above which a CPU run is refused (docstring)
CPU_PRESETS = "tiny or mini"


@dataclass(frozen=True)
class RunPlan:
    job: PretrainJob
    run_dir: Path
    cfg: ElectraConfig  # resolved: seq_len, vocabulary and precision filled in
    corpus: CorpusSet  # one corpus, or several mixed
    geometry: BatchGeometry
    ds_config: dict
    resume_dir: Path | None
    resume: object | None  # electra.checkpoint.universal.ResumePlan when resuming (or resuming a schedule)
    init: InitSource | None = None  # --init-from, for a run that starts (not one resuming itself)
    resume_schedule: bool = False  # load init's optimiser and schedule too (resume is its plan)
    rank: int = 0  # the launcher's RANK: only rank 0 lists the store (module docstring, step 3)
    warmup_from: WarmupShare | None = None  # the config's schedule, when the warm-up was scaled to its share
    generations: GenerationRecord | None = None  # each epoch's corpus generations so far (electra.data.corpus_growth)
    # The shard check, once done (here or adopted from rank 0); a box, so the frozen plan can
    # defer it to the first ask.
    _checked: list = dataclasses.field(default_factory=list, repr=False, compare=False)

    @property
    def num_sources(self) -> int:
        return len(self.corpus.corpora)

    def check_shards(self) -> ShardCheck:
        """The shard check (one listing per shard folder), done on the first call; a one-line
        ``ConfigError`` when nothing is left to train on."""
        if not self._checked:
            check = self.corpus.check(skip_corrupt=self.cfg.data.skip_corrupt)
            if not check.train:
                raise ConfigError(no_train_shards(self.corpus))
            self._checked.append(check)
        return self._checked[0]

    def adopt(self, check: ShardCheck) -> None:
        """Take rank 0's shard check (broadcast by ``distributed.on_rank0``) as this rank's."""
        self._checked[:] = [check]

    @property
    def train_shards(self) -> tuple[ShardRef, ...]:  # every corpus's, corpus after corpus
        return self.check_shards().train

    @property
    def validation_shards(self) -> tuple[ShardRef, ...]:
        return self.check_shards().validation

    @property
    def train_mixture(self) -> Mixture | None:  # several corpora: what each gives an epoch
        return self.check_shards().mixture

    @property
    def skipped_shards(self) -> tuple[str, ...]:
        """Missing or truncated shards left out under data.skip_corrupt. Rank 0 reports them (the
        metrics are its own); another rank that has not adopted rank 0's check gets () rather
        than list the store for a report it does not write."""
        if self.rank != 0 and not self._checked:
            return ()
        return self.check_shards().skipped


def resolve_run_config(requested: ElectraConfig, *, corpus_seq_len: int | None = None,
                       corpus_vocab_size: int | None = None, precision: str) -> ElectraConfig:
    """The run's config: ``requested`` with the corpus's sequence length and vocabulary size (None:
    not known yet, left as they are) and the precision this machine trains in. Returns a new
    (frozen) config, validated again; every change is logged."""
    model, train, data = requested.model, requested.train, requested.data
    if corpus_seq_len is not None and data.seq_len != corpus_seq_len:
        data = dataclasses.replace(data, seq_len=corpus_seq_len)
    if corpus_vocab_size is not None and model.vocab_size != corpus_vocab_size:
        log.info("model.vocab_size %d -> %d (from the corpus tokenizer)", model.vocab_size, corpus_vocab_size)
        model = dataclasses.replace(model, vocab_size=corpus_vocab_size)
    if train.precision != precision:
        log.warning("train.precision %s -> %s: no native %s on this CPU (see distributed.effective_precision)",
                    train.precision, precision, train.precision)
        train = dataclasses.replace(train, precision=precision)
    if (model, train, data) == (requested.model, requested.train, requested.data):
        return requested
    # Through the strict loader, so the changed values pass the same checks as a config file.
    changed = dataclasses.replace(requested, model=model, train=train, data=data)
    return ElectraConfig.from_dict(dataclasses.asdict(changed), source="resolved run config")


def config_hash(cfg: ElectraConfig) -> str:
    """Hash of what decides the trajectory (not max_steps, save/log cadence)."""
    d = cfg.to_dict()
    keep = {k: d[k] for k in ("model", "objective", "optimizer", "data")}
    if keep["data"].get("weights") is None:  # one corpus: the hash runs of before mixtures saved
        del keep["data"]["weights"]
    if keep["data"].get("follow_appends", True):  # the default: the hash runs of before appends saved
        keep["data"].pop("follow_appends", None)
    for key in ("generator_num_heads", "generator_intermediate_size", "generator_num_layers"):
        if keep["model"].get(key) is None:  # derived generator sizes: the hash runs before these keys saved
            keep["model"].pop(key, None)
    keep["seed"] = d["train"]["seed"]
    return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:16]


def check_fits_machine(plan: RunPlan, *, cuda: bool) -> str | None:
    """Refuse (``ConfigError``) a run of more than ``CPU_STEP_FLOPS`` per optimizer step on a
    machine without a GPU unless ``train.allow_cpu``; with it, return the estimate to log. None
    on a GPU and for a run a CPU can train."""
    from electra.distributed.hardware import matmul_flops_per_second
    from electra.run.summary import human, step_flops

    cfg = plan.cfg
    flops = step_flops(cfg)
    if cuda or flops <= CPU_STEP_FLOPS:
        return None
    rate = matmul_flops_per_second(cfg.train.precision)
    estimate = (f"{human(flops, 'FLOP')} per optimizer step ({cfg.train.global_batch_size} x {cfg.seq_len} tokens), "
                f"at least {duration(flops / rate)} per step at this CPU's measured "
                f"{human(rate, 'FLOP/s')} ({cfg.train.precision} matmuls)")
    if cfg.train.allow_cpu:
        return estimate
    raise ConfigError(f"--config {plan.job.config} is sized for GPUs and this machine has none: {estimate}; "
                      f"on a CPU use --config {CPU_PRESETS}, or --allow-cpu (train.allow_cpu=true) to run it anyway")


def duration(seconds: float) -> str:
    """45 -> '45 s', 750 -> '12 min', 30000 -> '8.3 h', 400000 -> '4.6 days'."""
    for limit, scale, unit in ((90, 1, "s"), (5400, 60, "min"), (172800, 3600, "h")):
        if seconds < limit:
            return f"{seconds / scale:.2g} {unit}" if seconds / scale < 10 else f"{seconds / scale:.0f} {unit}"
    return f"{seconds / 86400:.2g} days" if seconds < 864000 else f"{seconds / 86400:.0f} days"


def world_size_from_env() -> int:
    """The launcher's world size (``WORLD_SIZE``), known before the process group exists."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def check_run_dir(out: str) -> Path:
    path = Path(storage.local_path(out))
    if path.exists() and not path.is_dir():
        raise ConfigError(f"--out {out}: exists and is not a folder; name a new or existing run directory")
    parent = next(p for p in (path, *path.parents) if p.exists())
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"--out {out}: {parent} is not writable; choose a run directory you can write")
    return path


def no_train_shards(corpus: CorpusSet) -> str:
    """The one line for a corpus set with nothing to train on, naming the likely cause: a train
    split left empty because documents are split whole (one long book drew validation)."""
    for c in corpus.corpora:
        train, validation = c.manifest.splits.get("train"), c.manifest.splits.get("validation")
        if (train is None or not train.num_documents) and validation is not None and validation.num_documents:
            fraction = (c.manifest.config.get("pack") or {}).get("validation_fraction")
            return (f"{c.root}: no train shards to read (the corpus's train split is empty: its "
                    f"{validation.num_documents} document(s) all went to validation; documents are split "
                    f"whole, pack.validation_fraction={fraction}); rebuild it with --validation-fraction 0 "
                    f"or more documents")
    listed = sum(len(c.manifest.shards_for("train")) for c in corpus.corpora)
    return f"{', '.join(corpus.locations)}: no train shards to read (manifest lists {listed}); rebuild the corpus"


@dataclass(frozen=True)
class Settled:
    """What resolve knows before reading a corpus (module docstring, steps 1, 2, 2b, 5 and 6): the
    same on every rank, so every rank can find these errors itself, before the process group."""
    job: PretrainJob
    world_size: int
    run_dir: Path
    requested: ElectraConfig  # the precision resolved; seq_len and vocabulary still the config's
    warmup_from: WarmupShare | None
    resume_dir: Path | None
    prior: layout.CheckpointMeta | None
    init: InitSource | None
    geometry: BatchGeometry
    ds_config: dict
    resume: object | None


def settle_plan(job: PretrainJob, *, world_size: int | None = None, precision: str | None = None) -> Settled:
    """The corpus-free part of ``resolve``: run directory, config, ``--init-from``, batch geometry,
    DeepSpeed config and resume plan. Reads the run directory and the checkpoints it resumes or
    starts from, never the corpus (``electra.run.shared_plan``: the ranks other than 0 run only this)."""
    from electra.distributed import deepspeed_glue as D  # torch, not DeepSpeed: imports in about a second

    world_size = world_size_from_env() if world_size is None else world_size
    run_dir = check_run_dir(job.out)
    requested, warmup_from = load_run_config(job.config, job.overrides)
    resume_dir = layout.find_latest(run_dir)
    prior = layout.CheckpointMeta.read(resume_dir) if resume_dir else None
    if prior is not None and warmup_from is not None:
        requested, warmup_from = keep_started_warmup(requested, warmup_from, run_dir)
    scaled = requested.optimizer
    requested, init = settle(requested, config=job.config, overrides=job.overrides, init_from=job.init_from,
                             resume_schedule=job.resume_schedule, run_dir=run_dir, resuming=prior is not None)
    if requested.optimizer != scaled:  # --resume-schedule: the checkpoint's schedule, as it was
        warmup_from = None
    requested = resolve_run_config(requested, precision=precision or D.effective_precision(requested.train.precision))
    # Resuming fixes parts of the batch split (the global batch, with ZeRO-3 the world size): an
    # unsplittable batch then suggests only world sizes the resume accepts.
    resuming = None if prior is None else resume_split(
        resume_dir, zero_stage=requested.deepspeed.get("zero_optimization", {}).get("stage", 0))
    ds_config = D.deepspeed_config(requested, world_size, resuming=resuming)  # the geometry, logged once, is its part
    geometry = BatchGeometry(ds_config["train_batch_size"], world_size, ds_config["train_micro_batch_size_per_gpu"],
                             ds_config["gradient_accumulation_steps"])
    resume = None
    if prior is not None:
        if prior.global_batch_size and prior.global_batch_size != geometry.global_batch:
            raise ConfigError(f"{resume_dir}: saved with train.global_batch_size {prior.global_batch_size}, "
                              f"now {geometry.global_batch}; the data position counts global batches: "
                              f"resume with train.global_batch_size={prior.global_batch_size} or start a new run")
        from electra.checkpoint.universal import ds_config_for_resume, plan_resume

        resume = plan_resume(resume_dir, world_size=world_size,
                             zero_stage=ds_config.get("zero_optimization", {}).get("stage", 0),
                             precision=requested.train.precision)
        ds_config = ds_config_for_resume(ds_config, resume)
    elif init is not None and job.resume_schedule:
        resume, ds_config = _schedule_resume(init, requested, ds_config, world_size)
    return Settled(job, world_size, run_dir, requested, warmup_from, resume_dir, prior, init, geometry, ds_config,
                   resume)


def complete_plan(settled: Settled) -> RunPlan:
    """The rest of ``resolve``: the corpora (manifests, tokenizers), checked against the config,
    ``--init-from`` and the checkpoint; then the run's config with the corpus's sequence length and
    vocabulary. One process runs the shard check here too."""
    job, prior, init = settled.job, settled.prior, settled.init
    requested = settled.requested
    record = recorded(prior, job.corpora)  # the generations its epochs used (electra.data.corpus_growth)
    corpus = open_corpora(job.corpora, weights=requested.data.weights,
                          tokenizer_sha256=prior.tokenizer_sha256 if prior else None,
                          manifest_sha256=prior.manifest_sha256 if prior else None,
                          data_sha256=prior.data_sha256 if prior and prior.data_sha256 else None,
                          allow_change=requested.data.allow_corpus_change,
                          generations=record.last if record else None)
    corpus, record = start_view(corpus, record, epoch=prior.data_position.get("epoch", 0) if prior else 0,
                                follow=requested.data.follow_appends)
    if init is not None:  # before anything is built: seconds, not a model load
        check_vocabulary(init, corpus_vocabulary(corpus), corpus.primary.root)
    manifest_seq_len = corpus.manifest.seq_len
    if requested.data.seq_len is not None and requested.data.seq_len != manifest_seq_len:
        raise ConfigError(f"data.seq_len {requested.data.seq_len} but the corpus {corpus.primary.root} is packed "
                          f"at {manifest_seq_len}; drop data.seq_len (the corpus's is used) or rebuild the corpus")
    cfg = resolve_run_config(requested, corpus_seq_len=manifest_seq_len, corpus_vocab_size=corpus.vocab_size,
                             precision=requested.train.precision)
    if prior is not None and prior.config_hash != config_hash(cfg):
        log.warning("config differs from the checkpoint's (hash %s -> %s)", prior.config_hash, config_hash(cfg))
    plan = RunPlan(job, settled.run_dir, cfg, corpus, settled.geometry, settled.ds_config, settled.resume_dir,
                   settled.resume, init, init is not None and job.resume_schedule, rank=int(os.environ.get("RANK", "0")),
                   warmup_from=settled.warmup_from, generations=record)
    if settled.world_size == 1:  # one process: the check's errors surface here, in seconds
        plan.check_shards()
    return plan


def resolve(job: PretrainJob, *, world_size: int | None = None, precision: str | None = None) -> RunPlan:
    """The ``RunPlan`` of ``job`` on ``world_size`` ranks (module docstring); raises a one-line
    user error (``ConfigError``, ``FileNotFoundError``, ``CorpusMismatchError``, ...) otherwise."""
    return complete_plan(settle_plan(job, world_size=world_size, precision=precision))


def split_examples(corpus: CorpusSet, split: str) -> int:
    """The split's examples over every corpus, by their manifests (no listing: any rank, at once)."""
    return sum(s.num_examples for c in corpus.corpora for s in c.manifest.shards_for(split))


def check_fills_batch(plan: RunPlan, listed: tuple[int, int] | None = None) -> None:
    """A train split of fewer examples than one global batch has no step in an epoch
    (``electra.data.sample_order``: ``steps = N // G`` in effect): one line naming the largest global
    batch it fills (``batch_geometry.unfillable``). Counted from the manifests (any rank, before
    start-up; the runner asks after ``check_fits_machine``, whose answer for a GPU preset on a CPU
    comes first), or ``listed``: the (train, validation) examples the shard check left, which
    ``data.skip_corrupt`` may have cut. A validation split too small for one is no evaluation:
    said once, by rank 0. An empty train split is the shard check's to name (``no_train_shards``)."""
    corpus, G = plan.corpus, plan.geometry.global_batch
    train, validation = listed or (split_examples(corpus, "train"), split_examples(corpus, "validation"))
    where = ", ".join(corpus.locations)
    if 0 < train < G:
        raise ConfigError(unfillable(train, G, plan.geometry.world_size, f"--data {where}"))
    if listed or not (plan.cfg.train.eval_every and plan.cfg.data.eval_batches) or plan.rank != 0:
        return
    if 0 < validation < G:
        log.warning("--data %s: the validation split's %d example(s) cannot fill one global batch of %d: no "
                    "validation loss this run; rebuild the corpus with a larger --validation-fraction, or train "
                    "with a smaller --global-batch-size", where, validation, G)
    elif not validation:
        log.info("no validation split in --data %s: no evaluation", where)


def keep_started_warmup(requested: ElectraConfig, warmup_from: WarmupShare,
                        run_dir: Path) -> tuple[ElectraConfig, WarmupShare | None]:
    """A resumed run keeps the warm-up it started with where the scaled one differs, for the same
    ``total_steps`` (a run started before warm-ups were scaled: its schedule must not jump)."""
    try:
        own = json.loads((run_dir / layout.CONFIG).read_text())["optimizer"]
        started, total = int(own["warmup_steps"]), int(own["total_steps"])
    except (OSError, ValueError, KeyError, TypeError):
        return requested, warmup_from
    opt = requested.optimizer
    if total != opt.total_steps or started == opt.warmup_steps:
        return requested, warmup_from
    log.info("optimizer.warmup_steps %d: the one %s started with (not %d, the config's share of %d)",
             started, run_dir, opt.warmup_steps, total)
    return dataclasses.replace(requested, optimizer=dataclasses.replace(opt, warmup_steps=started)), None


def _schedule_resume(init: InitSource, cfg: ElectraConfig, ds_config: dict, world_size: int):
    """``--resume-schedule``: load the init checkpoint's optimiser state and schedule, as a resume
    of that checkpoint would (``plan_resume``), on the new data from its start."""
    from electra.checkpoint.universal import CONVERT_COMMAND, ds_config_for_resume, is_converted, plan_resume

    if init.objective_kind != cfg.objective.kind:
        raise ConfigError(f"--resume-schedule: {init.location} was trained with objective.kind "
                          f"{init.objective_kind}, this run has {cfg.objective.kind}; their optimiser states differ")
    step = layout.CheckpointMeta.read(init.step_dir).step
    if cfg.max_steps <= step:
        raise ConfigError(f"--resume-schedule continues {init.step_dir} at step {step}; train.max_steps "
                          f"{cfg.max_steps} is not past it: give --max-steps above {step}")
    resume = plan_resume(init.step_dir, world_size=world_size,
                         zero_stage=ds_config.get("zero_optimization", {}).get("stage", 0),
                         precision=cfg.train.precision)
    if resume.universal and not is_converted(init.step_dir):  # never written into another run's folder
        raise ConfigError(f"--resume-schedule: {resume.message}; convert it first ({CONVERT_COMMAND} "
                          f"{init.step_dir}, which writes beside it) or train on its {resume.saved_world_size} "
                          "rank(s) with its ZeRO stage and precision")
    return resume, ds_config_for_resume(ds_config, resume)


def corpus_vocabulary(corpus: CorpusSet):
    """The corpus tokenizer's vocabulary, with the lower-casing its manifest records."""
    from electra.checkpoint.vocabulary import from_tokenizer_json

    primary = corpus.primary
    uri = storage.join(primary.tokenizer_uri, schema.TOKENIZER_JSON)
    return from_tokenizer_json(storage.read_bytes(uri), uri, lowercase=primary.manifest.tokenizer.lowercase)
