"""Typed configuration of ELECTRA pre-training: model, objective, optimiser, data, train, DeepSpeed.

Every field defaults to the paper's value (Clark et al. 2020, ELECTRA-Small unless noted; see
docs/electra-reference.md §2-3), and a preset (``electra/configs/NAME.json``) states only what
differs from those defaults: ``small`` is empty, ``base`` and ``large`` give their sizes and
schedules, ``tiny`` and ``mini`` scale the run down for a CPU. So a default changed here reaches
every preset that does not set the field (the resolved config is what a run prints at start and
writes to ``RUN/config.json``). The ``deepspeed`` section is DeepSpeed's own JSON config, passed
through untyped (DeepSpeed validates it); a file's ``deepspeed`` section is merged key by key
onto ``DEFAULT_DEEPSPEED``, so it too states only what differs.

Loading goes through the project's one strict loader (``common.config``): an unknown key anywhere
in the typed sections is an error that lists the known keys and the closest ones (a typo that
silently falls back to a default wastes a pre-training run), a wrong type or a value outside a
``Literal`` set fails naming the key, and each section's ``validate()`` checks ranges.

Overrides (``section.key=value``, e.g. ``optimizer.lr=1e-4`` or
``deepspeed.zero_optimization.stage=2``) are checked against the schema before they are merged (an
unknown key is blamed on the ``--set`` item, with the closest valid keys, not on the preset), then
parse the value as JSON when possible (numbers, booleans, ``null``, lists) and as a plain string
otherwise, then type-check it against the field, so ``train.max_steps=ten`` fails loudly instead
of becoming a string. An override of ``optimizer.total_steps`` that leaves the warm-up alone keeps
the file's share of warm-up (``load_run_config``). A config file may be any storage location
(``common.storage``).

The dataclasses are frozen: a loaded config is a value. What a run changes after loading (the
vocabulary size taken from the corpus, the precision this machine can train in) is applied once,
with ``dataclasses.replace``, in ``electra.run.plan.resolve_run_config``, and that object is what
the run writes to ``RUN/config.json`` and trains with. (The untyped ``deepspeed`` dict is not
frozen by this; ``electra.distributed.deepspeed_glue.deepspeed_config`` copies it before filling it in.)
"""
from __future__ import annotations

import copy
import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

from common import config as strict
from common.config import ConfigError, check

__all__ = ["DEFAULT_DEEPSPEED", "ConfigError", "DataConfig", "ElectraConfig", "ModelConfig", "ObjectiveConfig",
           "LoadedConfig", "OptimizerConfig", "TrainConfig", "WarmupShare", "apply_override", "load_config",
           "load_run_config"]


class GeneratorSizes(NamedTuple):
    hidden_size: int
    num_heads: int
    intermediate_size: int


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 30522
    embedding_size: int = 128
    hidden_size: int = 256
    num_layers: int = 12
    num_heads: int = 4
    intermediate_size: int = 1024
    # Generator width as a fraction of the discriminator's (paper: 1/4 to 1/2); its other sizes
    # derive from it (``generator_sizes``) unless given below.
    generator_fraction: float = 0.25
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    pad_token_id: int = 0
    # The generator's shape where it is not the derived one (null: derived, as in the paper): a
    # released pair's generator may have other ratios (--init-from takes them from its config.json).
    generator_num_heads: int | None = None  # derived: max(1, hidden // 64)
    generator_intermediate_size: int | None = None  # derived: 4 x its hidden size
    generator_num_layers: int | None = None  # derived: num_layers (the discriminator's depth)

    def generator_sizes(self) -> GeneratorSizes:
        """hidden = round(H x f), FFN = 4 x hidden, heads = max(1, hidden // 64) (reference §3),
        each unless ``generator_num_heads`` / ``generator_intermediate_size`` say otherwise."""
        hidden = max(1, round(self.hidden_size * self.generator_fraction))
        return GeneratorSizes(hidden, self.generator_num_heads or max(1, hidden // 64),
                              self.generator_intermediate_size or 4 * hidden)

    @property
    def generator_hidden_size(self) -> int:
        return self.generator_sizes().hidden_size

    @property
    def generator_depth(self) -> int:
        """The generator's layer count: ``generator_num_layers``, else the discriminator's."""
        return self.generator_num_layers or self.num_layers

    def validate(self) -> None:
        check(self.hidden_size % self.num_heads == 0,
              f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        for name in ("generator_num_heads", "generator_intermediate_size", "generator_num_layers"):
            check(getattr(self, name) is None or getattr(self, name) > 0, f"{name} must be positive (or null)")
        gen = self.generator_sizes()
        check(gen.hidden_size % gen.num_heads == 0,
              f"generator hidden size {gen.hidden_size} is not divisible by its {gen.num_heads} heads")
        check(0 < self.generator_fraction <= 1, "generator_fraction must be in (0, 1]")
        for name in ("vocab_size", "embedding_size", "num_layers", "max_position_embeddings",
                     "type_vocab_size", "intermediate_size"):
            check(getattr(self, name) > 0, f"{name} must be positive")
        for name in ("hidden_dropout", "attention_dropout"):
            check(0 <= getattr(self, name) < 1, f"{name} must be in [0, 1)")
        check(0 <= self.pad_token_id < self.vocab_size, "pad_token_id outside the vocabulary")


@dataclass(frozen=True)
class ObjectiveConfig:
    kind: Literal["electra", "mlm"] = "electra"  # replaced token detection | BERT's MLM baseline
    mask_prob: float = 0.15
    mask_token_prob: float = 0.85  # chosen positions that become [MASK]; the rest keep the token
    max_predictions: int | None = None  # None: int((mask_prob + 0.005) * seq_len)
    temperature: float = 1.0
    generator_weight: float = 1.0
    discriminator_weight: float = 50.0
    disallow_correct: bool = False
    # How the discriminator head's output bias starts: "zero" (the paper, with every other bias) or
    # "prior" (the log-odds of mask_prob, the share of tokens replaced at the start). With a short
    # warm-up a zero bias lets the discriminator collapse (electra/model/objective.py explains).
    discriminator_bias_init: Literal["zero", "prior"] = "zero"

    def max_predictions_for(self, seq_len: int) -> int:
        if self.max_predictions is not None:
            return self.max_predictions
        return int((self.mask_prob + 0.005) * seq_len)

    def validate(self) -> None:
        check(0 < self.mask_prob < 1, "mask_prob must be in (0, 1)")
        check(0 <= self.mask_token_prob <= 1, "mask_token_prob must be in [0, 1]")
        check(self.temperature > 0, "temperature must be positive")
        check(self.max_predictions is None or self.max_predictions >= 1, "max_predictions must be >= 1 or null")


@dataclass(frozen=True)
class OptimizerConfig:
    lr: float = 5e-4
    weight_decay: float = 0.01
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-6
    bias_correction: bool = False  # the original AdamWeightDecayOptimizer has none
    warmup_steps: int = 10000
    total_steps: int = 1000000  # horizon of the linear decay to 0
    grad_clip: float = 1.0
    # The update kernel: "auto" = DeepSpeed's FusedAdam (adam_w_mode, same bias_correction: the
    # same update as AdamWeightDecay, one multi-tensor CUDA kernel) on CUDA, electra.run.optim's
    # AdamWeightDecay elsewhere; "on" = FusedAdam or an error; "off" = always AdamWeightDecay.
    fused: Literal["auto", "on", "off"] = "auto"

    def validate(self) -> None:
        # 0 is allowed: the weights stay as loaded (a check that a continued run starts from them)
        check(self.lr >= 0, "lr must be >= 0")
        check(0 <= self.beta1 < 1 and 0 <= self.beta2 < 1, "beta1 and beta2 must be in [0, 1)")
        check(self.warmup_steps >= 0 and self.total_steps > 0,
              "warmup_steps must be >= 0 and total_steps positive")


@dataclass(frozen=True)
class DataConfig:
    # None: the corpus's (manifest.seq_len), which is what a run uses; a value is a check that
    # the corpus was packed at that length.
    seq_len: int | None = None
    # DataLoader worker processes per rank. "auto": 2 on CUDA, 0 on a CPU, where the step's threads
    # use every core and worker processes only take cycles from it (electra.data.stream.loader_workers).
    num_workers: int | Literal["auto"] = "auto"
    shuffle_buffer: int = 2000
    # Canonical streams of the elastic sample order (electra/data/sample_order.py): each global batch
    # draws from gcd(global_batch_size, streams) regions of the shuffled corpus, and a rank reads
    # about 1/ranks of the shards when its rank count divides that number. Part of the order.
    streams: int = 64
    skip_corrupt: bool = False
    # Validation global batches per evaluation: the same examples for any number of ranks.
    eval_batches: int = 20
    # Shards each loader worker reads ahead (in the epoch's order) while the current block is
    # consumed, hiding an object store's latency; each costs one decoded shard of memory. 0: off.
    prefetch_shards: int = 2
    # Node-local shard cache (electra/data/node_cache.py): the node's loader processes share one store
    # read of each shard through copies in a local folder. "auto": /dev/shm/electra-shards-<uid>
    # (else the temp folder), used where two of the node's loaders read the same shards (several
    # ranks on the node, or workers sharing a rank's piece of one stream); an absolute path (local
    # to the node): always; null: every worker reads the store itself.
    node_cache: str | None = "auto"
    # Resuming on a corpus whose shards differ from the checkpoint's (a republished corpus) is an
    # error: the saved data position would point into another stream. True: warn and go on.
    allow_corpus_change: bool = False
    # Write RUN/samples/rank{R}.jsonl: per optimizer step, the (document uid, ordinal) of every
    # example the rank trained on (a contract: tests and audits read it).
    log_samples: bool = False
    # With several --data corpora: one weight each, in the --data order; each corpus gives an epoch
    # its weight's share of all their examples (above its own size: repeated; below: a part, another
    # each epoch; electra/data/mixture.py). None: each corpus's own share (concatenation). Part of the order.
    weights: list[float] | None = None
    # A corpus that grows (build-corpus --append) joins the run at the next epoch start: each epoch
    # reads the manifest again and trains on every generation it lists (electra/data/corpus_growth.py;
    # checkpoints record each epoch's generations, so a resume replays them). False: the run keeps
    # the generations it started with.
    follow_appends: bool = True

    def validate(self) -> None:
        check(self.seq_len is None or self.seq_len >= 8, "seq_len must be >= 8 (or null: the corpus's)")
        check(self.weights is None or (bool(self.weights) and min(self.weights) >= 0 and sum(self.weights) > 0),
              f"weights {self.weights}: one number >= 0 per --data corpus, not all 0 (or null)")
        check(self.streams >= 1 and self.eval_batches >= 0, "streams must be >= 1 and eval_batches >= 0")
        check(self.num_workers == "auto" or self.num_workers >= 0, 'num_workers must be >= 0 or "auto"')
        check(self.prefetch_shards >= 0, "prefetch_shards must be >= 0")
        check(self.shuffle_buffer >= 1, "shuffle_buffer must be >= 1")
        check(self.node_cache is None or self.node_cache == "auto" or self.node_cache.startswith("/"),
              f'node_cache {self.node_cache!r}: "auto", an absolute path on the node, or null')


@dataclass(frozen=True)
class TrainConfig:
    global_batch_size: int = 128
    # Per rank; must divide global / ranks. The presets keep 32, which divides their global batch
    # on 1-8 ranks. Largest that fits one 80 GB GPU (bf16, ZeRO-1, flash attention), ESTIMATED from
    # the saved-for-backward bytes of one bf16 forward on CPU (attention matrices excluded, as the
    # fused kernels keep none) plus 20 bytes per parameter, within 90 % of the memory: Small the
    # whole 128 batch; Base 128 (~0.37 GB per sequence of 512); Large 32 (~1.3 GB per sequence,
    # 64 does not fit; activation checkpointing keeps only each layer's input and fits far more).
    micro_batch_size: int = 32
    max_steps: int | None = field(default=None, metadata={"default": "optimizer.total_steps"})  # steps to train
    save_every: int = 1000
    keep_last: int = 3  # newest checkpoints kept; pinned ones (below) are kept on top of these
    # The checkpoint hand-off to the evaluation (electra/checkpoint/eval_handoff.py). True: every committed
    # checkpoint is pinned (RUN/checkpoints/step_N/eval_pending.json) and survives pruning until
    # its evaluation releases it or the policy below skips it (RUN/eval/skipped.jsonl). None
    # ("auto"): True when a Prefect API is configured (common.events.prefect_api_url), i.e. when
    # the trainer's checkpoint event starts an evaluation per checkpoint; else False.
    keep_until_evaluated: bool | None = field(default=None, metadata={  # pin each checkpoint until evaluated
        "default": "on when a Prefect API is configured (each checkpoint then starts an evaluation), else off"})
    # The most pinned checkpoints still waiting for evaluation (>= 1); beyond it the oldest waiting
    # one is skipped (the evaluation takes the newest first), so disk stays bounded when
    # evaluating is slower than checkpointing.
    eval_max_pending: int = 3
    # Milestones the policy never skips: every k-th checkpoint (step a multiple of
    # k * save_every). 0: none. Each costs one checkpoint of disk until evaluated.
    eval_keep_every: int = 0
    log_every: int = 10
    eval_every: int = 1000
    seed: int = 42
    precision: Literal["fp32", "bf16", "fp16"] = "bf16"
    export_every_checkpoint: bool = False
    peak_flops: float | None = field(default=None, metadata={  # peak FLOP/s of one device, for MFU
        "default": "a table by device (electra/run/metrics_log.py)"})
    # GPU fast path (electra/distributed/deepspeed_glue.py ``configure_fast_path``), each flag's help its own line.
    # TF32: 10-bit mantissa products, fp32 accumulation; the MFU peak of fp32 runs is the TF32
    # figure. Compile: kernel fusion; costs compile time at start, pays on long runs. Activation
    # checkpointing: about a third more compute, frees the activations, for a larger micro batch on
    # Large.
    tf32: bool = True  # TF32 tensor-core matmuls for fp32 runs (CUDA only)
    compile: bool = False  # torch.compile of the two encoders (CUDA only)
    activation_checkpointing: bool = False  # recompute each encoder layer in the backward instead of keeping it
    # Run a GPU-sized config on a machine without a GPU anyway. Without it such a run (more than
    # electra.run.plan.CPU_STEP_FLOPS per optimizer step: base, large) is refused at start
    # with the estimated time per step and the presets that fit a CPU (tiny, mini).
    allow_cpu: bool = False

    def validate(self) -> None:
        check(self.micro_batch_size > 0 and self.global_batch_size > 0, "batch sizes must be positive")
        check(self.save_every >= 1, "save_every must be >= 1")
        # 0 would prune the checkpoint just committed, and with it the one `latest` names.
        check(self.keep_last >= 1, "keep_last must be >= 1")
        check(self.eval_max_pending >= 1, "eval_max_pending must be >= 1")
        check(self.eval_keep_every >= 0, "eval_keep_every must be >= 0 (0: no milestones)")


# DeepSpeed's section for the paper's presets: ZeRO stage 1 (on one rank it costs nothing, and bf16
# needs it for fp32 gradient accumulation: electra.distributed.deepspeed_glue.deepspeed_config, which also sets
# bf16/fp16 from train.precision and gradient_clipping from optimizer.grad_clip).
DEFAULT_DEEPSPEED: dict[str, Any] = {
    "zero_optimization": {"stage": 1},
    "bf16": {"enabled": True},
    "gradient_clipping": 1.0,
    "steps_per_print": 1000000000,
    "wall_clock_breakdown": False,
}


def merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``changes`` merged in key by key (nested dicts merged, other values replaced)."""
    out = copy.deepcopy(base)
    for key, value in changes.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


@dataclass(frozen=True)
class ElectraConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    deepspeed: dict = field(default_factory=lambda: copy.deepcopy(DEFAULT_DEEPSPEED))

    @property
    def max_steps(self) -> int:
        return self.train.max_steps if self.train.max_steps is not None else self.optimizer.total_steps

    @property
    def seq_len(self) -> int:
        """The run's sequence length; set once the corpus is known (``electra.run.plan``)."""
        if self.data.seq_len is None:
            raise ValueError("data.seq_len is not resolved yet (it is the corpus's manifest.seq_len)")
        return self.data.seq_len

    @property
    def max_predictions(self) -> int:
        return self.objective.max_predictions_for(self.seq_len)

    def validate(self) -> None:
        """Rules across sections (each section's own ``validate`` runs when it is built)."""
        check(self.data.seq_len is None or self.data.seq_len <= self.model.max_position_embeddings,
              f"data.seq_len {self.data.seq_len} exceeds model.max_position_embeddings "
              f"{self.model.max_position_embeddings}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, source: str = "config") -> ElectraConfig:
        """Build and validate strictly; errors name ``source`` and the key (``config.train.seed``).
        A ``deepspeed`` section is merged onto ``DEFAULT_DEEPSPEED`` (module docstring)."""
        if isinstance(d, dict) and isinstance(d.get("deepspeed"), dict):
            d = {**d, "deepspeed": merge(DEFAULT_DEEPSPEED, d["deepspeed"])}
        return strict.from_dict(cls, d, where=source)

    def differences(self, other: ElectraConfig | None = None) -> dict[str, Any]:
        """``{"train.max_steps": 10, "deepspeed.zero_optimization.stage": 0, ...}``: the values of
        this config that differ from ``other`` (the defaults), by dotted key, in field order."""
        return _flat_diff((other or ElectraConfig()).to_dict(), self.to_dict())


PRESETS_DIR = Path(__file__).resolve().parent / "configs"


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESETS_DIR.glob("*.json"))


def config_location(name: str | Path) -> str:
    """``--config`` as a location: an existing file or URI as given, else a preset by name
    (``large`` or ``large.json``, from ``electra/configs``). Anything else is a ``ConfigError``
    listing the presets."""
    from common import storage

    text = str(name)
    if not storage.is_local(text) or Path(storage.local_path(text)).is_file():
        return text
    stem = Path(text).name.removesuffix(".json")
    preset = PRESETS_DIR / f"{stem}.json"
    # A bare name, or the repository path of a preset run from another folder; never another
    # folder's file of the same name (a mistyped path must not silently become a preset).
    if preset.is_file() and (text in (stem, f"{stem}.json") or text.endswith(f"electra/configs/{stem}.json")):
        return str(preset)
    raise ConfigError(f"--config {text}: no such file and no such preset; presets: {', '.join(preset_names())} "
                      "(or give a path to a config JSON)")


class WarmupShare(NamedTuple):
    """The config file's schedule, whose share of warm-up a run with another ``total_steps`` keeps."""
    warmup_steps: int
    total_steps: int

    def steps_for(self, total_steps: int) -> int:
        """The same share of ``total_steps``, rounded half up; at least 1 if the file warms up."""
        if not self.warmup_steps:
            return 0
        return max(1, int(self.warmup_steps * total_steps / self.total_steps + 0.5))

    @property
    def percent(self) -> str:
        """``"1.3%"``: the share, to two significant digits."""
        return f"{100 * self.warmup_steps / self.total_steps:.2g}%"


class LoadedConfig(NamedTuple):
    config: ElectraConfig
    # The file's schedule when the warm-up was scaled to its share (below); None: as given.
    warmup_from: WarmupShare | None = None


def load_config(path: str | Path, overrides: typing.Sequence[str] = ()) -> ElectraConfig:
    """Read a preset (by name) or a run config JSON (a path or URI), apply ``section.key=value``
    overrides (each checked against the schema first: an unknown key names the ``--set`` item),
    merge onto the defaults, validate (an unknown key in the file names the file); the warm-up
    as ``load_run_config`` scales it."""
    return load_run_config(path, overrides).config


def load_run_config(path: str | Path, overrides: typing.Sequence[str] = ()) -> LoadedConfig:
    """``load_config``, saying whether the warm-up was scaled.

    The warm-up is a share of the schedule (the paper: 10,000 of Base's 766,000 steps; ``tiny``:
    30 of 300). An override that changes ``optimizer.total_steps`` and leaves
    ``optimizer.warmup_steps`` alone keeps the config file's share, rounded, at least one step:
    ``--set optimizer.total_steps=20000`` on ``base`` warms up for 261 steps, not 10,000 (half
    the run). A warm-up the overrides set is kept as given; the file (preset or the user's own) is
    the reference either way, so a file's own ``total_steps`` keeps its ``warmup_steps``."""
    path = config_location(path)
    raw = strict.load_json(str(path))
    reference = _file_schedule(raw)
    for item in overrides:
        apply_override(raw, item)
    cfg = ElectraConfig.from_dict(raw, source=f"{path}: config")
    opt = cfg.optimizer
    given = {item.partition("=")[0].strip() for item in overrides}
    if reference is None or "optimizer.warmup_steps" in given or opt.total_steps == reference.total_steps:
        return LoadedConfig(cfg)
    scaled = dataclasses.replace(opt, warmup_steps=reference.steps_for(opt.total_steps))
    return LoadedConfig(dataclasses.replace(cfg, optimizer=scaled), reference)


def _file_schedule(raw: Any) -> WarmupShare | None:
    """The (warm-up, total) of a config file's optimizer section (defaults where it is silent);
    None where the section is invalid (the full load reports it, unless an override fixes it)."""
    section = raw.get("optimizer", {}) if isinstance(raw, dict) else None
    try:
        opt = strict.from_dict(OptimizerConfig, section, where="optimizer")
    except ConfigError:
        return None
    return WarmupShare(opt.warmup_steps, opt.total_steps)


def apply_override(raw: dict[str, Any], item: str) -> None:
    """Set ``section.key=value`` in a raw config dict (in place); type checking happens in from_dict.

    The typed sections are flat; only ``deepspeed.*`` (DeepSpeed's own tree) nests. A key that is
    not in the schema is a ``ConfigError`` naming ``--set ITEM`` and the closest valid keys."""
    strict.apply_override(raw, item, ElectraConfig)


def _flat_diff(base: dict[str, Any], new: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            out.update(_flat_diff(base[key], value, f"{prefix}{key}."))
        elif key not in base or base[key] != value:
            out[f"{prefix}{key}"] = value
    return out
