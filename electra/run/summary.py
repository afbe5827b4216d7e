"""What a pre-training run says about itself once, at start: its config as differences, and the
values derived from it.

The full resolved config (every field, the corpus's sequence length and vocabulary filled in) is
written to ``RUN/config.json``; printing it would be a hundred lines nobody reads. Rank 0 prints
instead, as nanochat prints its derived values, a few lines:

* where the config came from and where the full resolved one is;
* what differs from the defaults (the paper's ELECTRA-Small, ``electra.config``), one line per
  section: the preset's own values, the ``--set`` overrides and what the corpus decided;
* derived values: parameters, the batch split (micro x ranks x accumulation steps), tokens and
  training FLOPs per optimizer step, masked positions per sequence, the schedule (a warm-up
  scaled to a shortened schedule says so, with the config's share).

Parameters are counted on a model built on PyTorch's ``meta`` device (shapes, no memory, no
initialisation cost), so the count is the model's own, not a formula that could drift from it.
"""
from __future__ import annotations

from electra.distributed.batch_geometry import BatchGeometry
from electra.config import ElectraConfig, ModelConfig, WarmupShare
from electra.model.flops import training_flops_per_token


def parameter_counts(model: ModelConfig) -> tuple[int, int]:
    """(all parameters of the generator-discriminator pair, the discriminator's with the shared
    embeddings and its head: the model fine-tuning keeps; the paper's 14 M / 110 M / 335 M at
    its 30,522-token vocabulary)."""
    import torch

    from electra.model.networks import ElectraForPretraining

    with torch.device("meta"):
        m = ElectraForPretraining(model)
    def count(*modules) -> int:  # each shared tensor once (the encoders hold the one embedding module)
        return sum(p.numel() for p in {id(p): p for mod in modules for p in mod.parameters()}.values())

    return count(m), count(m.discriminator, m.discriminator_head)


def step_tokens(cfg: ElectraConfig) -> int:
    """Token positions per optimizer step (global batch x sequence length; padding included)."""
    return cfg.train.global_batch_size * cfg.seq_len


def step_flops(cfg: ElectraConfig) -> float:
    """Training matmul FLOPs of one optimizer step of full rows (``electra.model.flops``)."""
    return training_flops_per_token(cfg) * step_tokens(cfg)


def human(n: float, unit: str = "") -> str:
    """12_300_000 -> '12.3 M' (k, M, G, T, P)."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {prefix}{unit}"
    return f"{n:.3g} {unit}".rstrip()


def summary_lines(cfg: ElectraConfig, geometry: BatchGeometry, *, config: str, written_to: str,
                  warmup_from: WarmupShare | None = None) -> list[str]:
    """The lines rank 0 logs at start (module docstring). ``warmup_from``: the config file's
    schedule, when the warm-up was scaled to its share (``electra.config.load_run_config``)."""
    lines = [f"config {config}; the full resolved config: {written_to}; differs from the defaults "
             "(ELECTRA-Small, electra/config.py) in:"]
    by_section: dict[str, list[str]] = {}
    for key, value in cfg.differences().items():
        section, _, name = key.partition(".")
        by_section.setdefault(section, []).append(f"{name}={_value(value)}")
    lines += [f"  {section}: {' '.join(items)}" for section, items in by_section.items()]
    total, disc = parameter_counts(cfg.model)
    g = geometry
    ranks = f"{g.world_size} rank{'s' if g.world_size != 1 else ''}"
    lines.append(f"derived: {human(total)} parameters (discriminator {human(disc)}); batch {g.global_batch} = "
                 f"micro {g.micro_batch} x {ranks} x {g.accum} accumulation step{'s' if g.accum != 1 else ''}; "
                 f"{step_tokens(cfg):,} tokens and {human(step_flops(cfg), 'FLOP')} per step; "
                 f"{cfg.max_predictions} masked positions per sequence of {cfg.seq_len}; "
                 f"{cfg.max_steps:,} steps ({_warmup(cfg, warmup_from, config)}, LR {cfg.optimizer.lr:g} "
                 f"decaying to 0 at {cfg.optimizer.total_steps:,}); {cfg.train.precision}")
    return lines


def _warmup(cfg: ElectraConfig, warmup_from: WarmupShare | None, config: str) -> str:
    """``10,000 warm-up``; scaled: ``261 warm-up: 1.3% of 20,000, base's share (10,000 of 766,000)``."""
    opt = cfg.optimizer
    if warmup_from is None:
        return f"{opt.warmup_steps:,} warm-up"
    return (f"{opt.warmup_steps:,} warm-up: {warmup_from.percent} of {opt.total_steps:,}, {config}'s share "
            f"({warmup_from.warmup_steps:,} of {warmup_from.total_steps:,})")


def _value(value) -> str:
    import json

    return json.dumps(value) if isinstance(value, (bool, list, dict)) or value is None else str(value)
