"""Typed configuration of ELECTRA pre-training: model, objective, optimiser, data, train, DeepSpeed.

Every field defaults to the paper's value (Clark et al. 2020, ELECTRA-Small unless noted; see
docs/electra-reference.md §2-3), so a preset file only has to say what differs. Loading is strict:
an unknown key anywhere in the typed sections is an error that lists the known keys, because a typo
that silently falls back to a default wastes a pre-training run. The ``deepspeed`` section is
DeepSpeed's own JSON config and is passed through untyped (DeepSpeed validates it).

Overrides (``section.key=value``, e.g. ``optimizer.lr=1e-4`` or
``deepspeed.zero_optimization.stage=2``) parse the value as JSON when possible (numbers, booleans,
``null``, lists) and as a plain string otherwise, then type-check it against the field, so
``train.max_steps=ten`` fails loudly instead of becoming a string.
"""
from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Union


class ConfigError(ValueError):
    """A config file or override that does not fit the schema."""


class GeneratorSizes(NamedTuple):
    hidden_size: int
    num_heads: int
    intermediate_size: int


@dataclass
class ModelConfig:
    vocab_size: int = 30522
    embedding_size: int = 128
    hidden_size: int = 256
    num_layers: int = 12
    num_heads: int = 4
    intermediate_size: int = 1024
    # Generator width as a fraction of the discriminator's; depth is the same (paper: 1/4 to 1/2).
    generator_fraction: float = 0.25
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    hidden_dropout: float = 0.1
    attention_dropout: float = 0.1
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    pad_token_id: int = 0

    def generator_sizes(self) -> GeneratorSizes:
        """hidden = round(H x f), FFN = 4 x hidden, heads = max(1, hidden // 64) (reference §3)."""
        hidden = max(1, round(self.hidden_size * self.generator_fraction))
        return GeneratorSizes(hidden, max(1, hidden // 64), 4 * hidden)

    @property
    def generator_hidden_size(self) -> int:
        return self.generator_sizes().hidden_size

    def validate(self) -> None:
        _check(self.hidden_size % self.num_heads == 0,
               f"model.hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        gen = self.generator_sizes()
        _check(gen.hidden_size % gen.num_heads == 0,
               f"generator hidden size {gen.hidden_size} is not divisible by its {gen.num_heads} heads")
        _check(0 < self.generator_fraction <= 1, "model.generator_fraction must be in (0, 1]")
        for name in ("vocab_size", "embedding_size", "num_layers", "max_position_embeddings",
                     "type_vocab_size", "intermediate_size"):
            _check(getattr(self, name) > 0, f"model.{name} must be positive")
        for name in ("hidden_dropout", "attention_dropout"):
            _check(0 <= getattr(self, name) < 1, f"model.{name} must be in [0, 1)")
        _check(0 <= self.pad_token_id < self.vocab_size, "model.pad_token_id outside the vocabulary")


@dataclass
class ObjectiveConfig:
    kind: str = "electra"  # "electra" (replaced token detection) | "mlm" (BERT baseline)
    mask_prob: float = 0.15
    mask_token_prob: float = 0.85  # chosen positions that become [MASK]; the rest keep the token
    max_predictions: int | None = None  # None: int((mask_prob + 0.005) * seq_len)
    temperature: float = 1.0
    generator_weight: float = 1.0
    discriminator_weight: float = 50.0
    disallow_correct: bool = False

    def max_predictions_for(self, seq_len: int) -> int:
        if self.max_predictions is not None:
            return self.max_predictions
        return int((self.mask_prob + 0.005) * seq_len)

    def validate(self) -> None:
        _check(self.kind in ("electra", "mlm"), f"objective.kind must be 'electra' or 'mlm', got {self.kind!r}")
        _check(0 < self.mask_prob < 1, "objective.mask_prob must be in (0, 1)")
        _check(0 <= self.mask_token_prob <= 1, "objective.mask_token_prob must be in [0, 1]")
        _check(self.temperature > 0, "objective.temperature must be positive")
        _check(self.max_predictions is None or self.max_predictions >= 1,
               "objective.max_predictions must be >= 1 or null")


@dataclass
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

    def validate(self) -> None:
        _check(self.lr > 0, "optimizer.lr must be positive")
        _check(0 <= self.beta1 < 1 and 0 <= self.beta2 < 1, "optimizer betas must be in [0, 1)")
        _check(self.warmup_steps >= 0 and self.total_steps > 0, "optimizer steps must be positive")


@dataclass
class DataConfig:
    seq_len: int = 128
    num_workers: int = 2
    shuffle_buffer: int = 2000
    skip_corrupt: bool = False
    eval_batches: int = 20
    # Hash every shard against the manifest before training (one read of the split per rank).
    verify_shards: bool = True

    def validate(self) -> None:
        _check(self.seq_len >= 8, "data.seq_len must be >= 8")


@dataclass
class TrainConfig:
    global_batch_size: int = 128
    micro_batch_size: int = 32
    max_steps: int | None = None  # None: optimizer.total_steps
    save_every: int = 1000
    keep_last: int = 3
    log_every: int = 10
    eval_every: int = 1000
    seed: int = 42
    precision: str = "bf16"  # "fp32" | "bf16" | "fp16"
    export_every_checkpoint: bool = False
    # Peak FLOP/s of one device for MFU; None: a table by device (electra/metrics_log.py).
    peak_flops: float | None = None

    def validate(self) -> None:
        _check(self.precision in ("fp32", "bf16", "fp16"),
               f"train.precision must be fp32, bf16 or fp16, got {self.precision!r}")
        _check(self.micro_batch_size > 0 and self.global_batch_size > 0, "train batch sizes must be positive")


@dataclass
class ElectraConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    deepspeed: dict = field(default_factory=dict)

    @property
    def max_steps(self) -> int:
        return self.train.max_steps if self.train.max_steps is not None else self.optimizer.total_steps

    @property
    def max_predictions(self) -> int:
        return self.objective.max_predictions_for(self.data.seq_len)

    def validate(self) -> ElectraConfig:
        for f in _SECTIONS:
            getattr(self, f).validate()
        _check(self.data.seq_len <= self.model.max_position_embeddings,
               f"data.seq_len {self.data.seq_len} exceeds model.max_position_embeddings "
               f"{self.model.max_position_embeddings}")
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, source: str = "config") -> ElectraConfig:
        if not isinstance(d, dict):
            raise ConfigError(f"{source}: top level must be a JSON object")
        _reject_unknown(d, [f.name for f in dataclasses.fields(cls)], f"{source}")
        sections = {name: _build(typ, d.get(name, {}), f"{source}: {name}") for name, typ in _SECTIONS.items()}
        ds = d.get("deepspeed", {})
        if not isinstance(ds, dict):
            raise ConfigError(f"{source}: deepspeed must be a JSON object")
        return cls(**sections, deepspeed=json.loads(json.dumps(ds))).validate()


_SECTIONS = {"model": ModelConfig, "objective": ObjectiveConfig, "optimizer": OptimizerConfig,
             "data": DataConfig, "train": TrainConfig}


def load_config(path: str | Path, overrides: typing.Sequence[str] = ()) -> ElectraConfig:
    """Read a preset/run config JSON, apply ``section.key=value`` overrides, validate."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}:{e.lineno}: invalid JSON: {e.msg}") from e
    except OSError as e:
        raise ConfigError(f"{path}: cannot read config: {e}") from e
    for item in overrides:
        apply_override(raw, item)
    return ElectraConfig.from_dict(raw, source=str(path))


def apply_override(raw: dict[str, Any], item: str) -> None:
    """Set ``a.b.c=value`` in a raw config dict (in place); type checking happens in from_dict."""
    key, sep, text = item.partition("=")
    parts = key.strip().split(".")
    if not sep or len(parts) < 2 or not all(parts):
        raise ConfigError(f"override {item!r}: expected section.key=value")
    if parts[0] not in _SECTIONS and parts[0] != "deepspeed":
        raise ConfigError(f"override {item!r}: unknown section {parts[0]!r}; "
                          f"known: {sorted([*_SECTIONS, 'deepspeed'])}")
    if parts[0] in _SECTIONS and len(parts) != 2:
        raise ConfigError(f"override {item!r}: section {parts[0]!r} is flat (section.key=value)")
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = text
    node = raw
    for p in parts[:-1]:
        node = node.setdefault(p, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {item!r}: {p!r} is not a section")
    node[parts[-1]] = value


def _build(cls: type, d: Any, where: str) -> Any:
    if not isinstance(d, dict):
        raise ConfigError(f"{where}: must be a JSON object")
    hints = typing.get_type_hints(cls)
    _reject_unknown(d, list(hints), where)
    return cls(**{k: _coerce(v, hints[k], f"{where}.{k}") for k, v in d.items()})


def _reject_unknown(d: dict[str, Any], known: list[str], where: str) -> None:
    unknown = sorted(set(d) - set(known))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known keys: {sorted(known)}")


def _coerce(value: Any, typ: Any, where: str) -> Any:
    """Check ``value`` against a field type (int, float, str, bool, dict, or X | None)."""
    origin = typing.get_origin(typ)
    if origin in (Union, types.UnionType):
        options = typing.get_args(typ)
        if value is None and type(None) in options:
            return None
        inner = [t for t in options if t is not type(None)]
        return _coerce(value, inner[0], where)
    if typ is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if typ is int and isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)  # 1e6 in JSON is a float; accept it for a step count
    if typ in (int, str, bool, dict) and isinstance(value, typ) and not (typ is int and isinstance(value, bool)):
        return value
    raise ConfigError(f"{where}: expected {getattr(typ, '__name__', typ)}, got {value!r}")


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)
