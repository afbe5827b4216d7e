"""The paper's fine-tuning recipe and layer-wise learning-rate decay (LLRD).

``FinetuneRecipe`` holds every knob with the ELECTRA paper's value (reference §5); by model size:

| | Small | Base | Large |
|---|---|---|---|
| learning rate | 3e-4 | 1e-4 | 5e-5 |
| layer-wise decay | 0.8 | 0.8 | 0.9 |

Common: Adam (betas 0.9/0.999, eps 1e-6), weight decay 0, 10% linear warm-up multiplied into a
linear decay to 0, batch 32, 3 epochs (RTE, STS-B 10; SQuAD 2), max length 128 (SQuAD 512/128/64),
dropout 0.1, gradient clipping 1.0 as in the original's optimiser.

Optimiser (``optimizer``):

* ``"original"`` (default): the original's ``AdamWeightDecayOptimizer``
  (google-research/electra model/optimization.py), here ``electra.run.optim.AdamWeightDecay`` with
  ``bias_correction=False``: the moments are used without Adam's ``1 / (1 - beta^t)`` correction.
  For a steady gradient the uncorrected ``m / sqrt(v)`` is the corrected one times
  ``(1 - b1^t) / sqrt(1 - b2^t)``: about 3 at step 1, 6.5 at step 10, 3 at step 100, 1.3 at
  step 1000, so the early steps are several times LARGER than AdamW's at the same learning rate
  (the warm-up, which starts the lr at 0, tempers them). The published numbers were produced
  with it; a learning rate tuned under AdamW can be too large under it.
* ``"adamw"``: ``torch.optim.AdamW`` (bias-corrected, torch's fused kernel where the loop can
  use it), what this project used before, and what ``transformers`` ports use.

Weight decay: 0 by default, the value of the paper's fine-tuning hyper-parameters (Table 7);
the released code's ``configure_finetuning.py`` sets ``weight_decay_rate = 0.01``. The published
scores are what this project reproduces, so the paper's value is the default and 0.01 is one
knob away. Either way decay applies only to >= 2-D weights: biases and LayerNorm scales/shifts
(the 1-D tensors, ``electra.run.optim.uses_weight_decay``, the pre-training rule) are never decayed,
as the original's ``exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"]``; each LLRD
depth is therefore split into a decay group (``"layer_3"``) and a no-decay group
(``"layer_3.no_decay"``) with the same learning rate, for both optimisers.

``cap_lengths`` cuts the lengths to the model's ``max_position_embeddings`` (a small model with
128 positions cannot take SQuAD's 512) and records each cut in ``length_caps``.

Layer-wise decay gives parameter group at depth d the learning rate ``lr × decay^(top - d)``:
embeddings (and the embedding projection) are depth 0, encoder layer i (0-based) depth i + 1.

* ``"original"`` (default, as the published numbers were produced): the head is depth L + 2 and
  ``top = L + 2``, so the head gets ``lr`` but the top encoder layer already gets ``lr × decay²``
  — the off-by-one acknowledged in google-research/electra issues #51 and #64.
* ``"corrected"``: the head is depth L + 1 and ``top = L + 1``: head ``lr``, top layer
  ``lr × decay``, embeddings ``lr × decay^(L+1)``.

``FinetuneRecipe.from_dict`` loads a recipe dict through the project's one strict loader
(``common.config``): unknown keys, wrong types and values outside the ``Literal`` choices (size,
LLRD variant, optimiser, precision, device) are errors naming the key.

``precision`` "auto" (default) means bf16 where the hardware runs it natively, else fp32;
``length_buckets`` (default 50, 1 = off) sets the length-bucketed batching of ``loop.py``.
"""
from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from torch import nn

from common import config as strict
from common.config import check
from electra.run.optim import uses_weight_decay

from .squad_metrics import NA_THRESHOLD

Size = Literal["small", "base", "large"]
LlrdVariant = Literal["original", "corrected"]
OptimizerName = Literal["original", "adamw"]

SIZE_DEFAULTS = {
    "small": {"lr": 3e-4, "layerwise_lr_decay": 0.8},
    "base": {"lr": 1e-4, "layerwise_lr_decay": 0.8},
    "large": {"lr": 5e-5, "layerwise_lr_decay": 0.9},
}
LLRD_VARIANTS = typing.get_args(LlrdVariant)


@dataclass
class FinetuneRecipe:
    size: Size = "base"
    lr: float = 1e-4
    layerwise_lr_decay: float = 0.8  # 1.0 disables LLRD
    llrd_variant: LlrdVariant = "original"
    # original: AdamWeightDecay without bias correction; adamw: torch's AdamW (module docstring)
    optimizer: OptimizerName = "original"
    weight_decay: float = 0.0  # the paper's Table 7; the released code uses 0.01
    adam_eps: float = 1e-6
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    warmup_fraction: float = 0.1
    grad_clip: float = 1.0
    batch_size: int = 32
    epochs: float | None = None  # None: the task's paper default (3; RTE/STS-B 10; SQuAD 2)
    max_seq_len: int = 128
    dropout: float = 0.1
    num_seeds: int = 10  # reported scores are medians over seeds
    first_seed: int = 0
    squad_max_len: int = 512
    squad_doc_stride: int = 128
    squad_max_query: int = 64
    squad_max_answer: int = 30
    squad_n_best: int = 20
    squad_epochs: float = 2.0
    # no-answer score (ELECTRA: the answerability logit) above this answers "" (the best
    # threshold is reported too); the original's qa_na_threshold
    squad_na_threshold: float = NA_THRESHOLD
    squad_head: Literal["paper", "plain"] = "paper"  # paper: start-conditioned end + beam
    squad_beam: int = 20  # paper head: start_n_top = end_n_top
    squad_answerable_weight: float = 0.5  # weight of the SQuAD 2.0 answerability loss
    max_train_examples: int | None = None  # cap for smoke runs; None = the whole training set
    max_eval_examples: int | None = None
    eval_batch_size: int = 128
    # auto: bf16 autocast where the hardware has native bf16 (CUDA with bf16, AMX / AVX512-BF16
    # CPUs), else fp32 (loop.resolve_precision); fp32/bf16 force it
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    # training batches come from chunks of length_buckets x batch_size shuffled rows, each sorted
    # by length (little padding, random order; loop.epoch_batches); 1 = plain random batches
    length_buckets: int = 50
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # CPU threads for torch (None: torch's default). Tiny models on a shared machine run far
    # faster on 1 thread: OpenMP workers spin-wait for cores that other processes hold.
    num_threads: int | None = None
    deepspeed: bool = False  # wrap the model in a single-process DeepSpeed engine
    # lengths cut to the model's max_position_embeddings: {knob: {"recipe": asked, "used": cap}}
    length_caps: dict = dataclasses.field(default_factory=dict)

    def validate(self) -> None:
        """Ranges (``from_dict`` calls it; the ``Literal`` fields are checked while loading)."""
        check(self.lr > 0 and 0 < self.layerwise_lr_decay <= 1, "lr > 0, layerwise_lr_decay in (0, 1]")
        check(self.weight_decay >= 0, "weight_decay >= 0")
        check(0 <= self.warmup_fraction < 1, "warmup_fraction in [0, 1)")
        check(self.batch_size > 0 and self.num_seeds > 0, "batch_size and num_seeds > 0")
        check(self.epochs is None or self.epochs > 0, "epochs > 0")
        check(self.num_threads is None or self.num_threads > 0, "num_threads > 0 or None")
        check(self.length_buckets >= 1, "length_buckets >= 1 (1 = plain random batches)")
        check(self.squad_beam > 0 and self.squad_answerable_weight >= 0,
              "squad_beam > 0, squad_answerable_weight >= 0")

    @property
    def seeds(self) -> list[int]:
        return list(range(self.first_seed, self.first_seed + self.num_seeds))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FinetuneRecipe:
        return strict.from_dict(cls, d, where="finetune recipe")


def recipe_for_size(size: str, **overrides: Any) -> FinetuneRecipe:
    """The paper's recipe for ``small``/``base``/``large``, with explicit overrides on top."""
    if size not in SIZE_DEFAULTS:
        raise strict.ConfigError(f"unknown model size {size!r}; known: {list(SIZE_DEFAULTS)}")
    return FinetuneRecipe.from_dict({"size": size, **SIZE_DEFAULTS[size], **overrides})


def total_steps(rows: int, batch_size: int, epochs: float) -> int:
    """The optimizer steps a fine-tuning run takes (``loop.train``; the ETA's plan): ``epochs``
    (fractions allowed) of ``rows`` in batches, at least one."""
    return max(1, math.ceil(epochs * math.ceil(rows / batch_size)))


def recipe_for_shape(hidden_size: int, max_positions: int, **overrides: Any) -> FinetuneRecipe:
    """The paper's recipe for a model this wide (an explicit ``size`` override wins), its lengths
    capped to the model's positions (``cap_lengths``); ``ConfigError`` for a bad override."""
    recipe = recipe_for_size(overrides.pop("size", None) or infer_size(hidden_size), **overrides)
    return cap_lengths(recipe, max_positions)


def cap_lengths(recipe: FinetuneRecipe, max_positions: int) -> FinetuneRecipe:
    """The recipe with ``max_seq_len`` and ``squad_max_len`` at most the model's positions.

    A longer input has no position embedding (the model would crash on it); each cut is
    recorded in ``length_caps`` so the results say which length was really used.
    """
    check(max_positions > 0, f"max_position_embeddings {max_positions} must be > 0")
    caps = dict(recipe.length_caps)
    values = {}
    for knob in ("max_seq_len", "squad_max_len"):
        asked = getattr(recipe, knob)
        if asked > max_positions:
            values[knob] = max_positions
            caps[knob] = {"recipe": asked, "used": max_positions}
    return dataclasses.replace(recipe, **values, length_caps=caps) if values else recipe


def infer_size(hidden_size: int) -> str:
    """Paper size closest to a model's width (Small 256, Base 768, Large 1024)."""
    if hidden_size <= 256:
        return "small"
    return "base" if hidden_size <= 768 else "large"


class LayerRates(NamedTuple):
    embeddings: float
    layers: list[float]  # index i = encoder layer i
    head: float


def layer_rates(lr: float, decay: float, num_layers: int, *,
                variant: str = "original") -> LayerRates:
    """Learning rate per depth (see the module docstring for both variants)."""
    if variant not in LLRD_VARIANTS:
        raise ValueError(f"llrd variant {variant!r} not in {LLRD_VARIANTS}")
    top = num_layers + 2 if variant == "original" else num_layers + 1
    rate = lambda depth: lr * decay ** (top - depth)  # noqa: E731
    return LayerRates(embeddings=rate(0), layers=[rate(i + 1) for i in range(num_layers)],
                      head=rate(top))


def param_groups(model: nn.Module, recipe: FinetuneRecipe) -> list[dict[str, Any]]:
    """Optimiser parameter groups of a ``FinetuneModel``: LLRD rates, no decay on 1-D tensors.

    Per depth a group named after it (``"embeddings"``, ``"layer_i"``, ``"head"``) holding the
    >= 2-D weights with ``recipe.weight_decay``, and ``"<name>.no_decay"`` holding the biases and
    LayerNorm tensors with weight decay 0; empty groups are left out. Every trainable parameter
    must belong to the embeddings, the embedding projection, an encoder layer or the head;
    anything else is an error rather than a silently wrong rate.
    """
    encoder, head = model.encoder, model.head
    rates = layer_rates(recipe.lr, recipe.layerwise_lr_decay, len(encoder.layers),
                        variant=recipe.llrd_variant)
    groups: list[tuple[str, float, list]] = [("embeddings", rates.embeddings, [])]
    seen: set[int] = set()

    def take(module: nn.Module | None) -> list:
        params = [p for p in module.parameters() if p.requires_grad] if module is not None else []
        seen.update(id(p) for p in params)
        return params

    groups[0][2].extend(take(encoder.embeddings) + take(getattr(encoder, "embeddings_project", None)))
    for i, layer in enumerate(encoder.layers):
        groups.append((f"layer_{i}", rates.layers[i], take(layer)))
    groups.append(("head", rates.head, take(head)))
    stray = [n for n, p in model.named_parameters() if p.requires_grad and id(p) not in seen]
    if stray:
        raise ValueError(f"parameters outside embeddings/layers/head, no LLRD depth: {stray}")
    out = []
    for name, lr, params in groups:
        decay = [p for p in params if uses_weight_decay(p)]
        no_decay = [p for p in params if not uses_weight_decay(p)]
        for suffix, wd, part in (("", recipe.weight_decay, decay), (".no_decay", 0.0, no_decay)):
            if part:
                out.append({"name": name + suffix, "params": part, "lr": lr, "initial_lr": lr,
                            "weight_decay": wd})
    return out
