"""ELECTRA's optimiser and learning-rate schedule (google-research/electra model/optimization.py).

Optimiser (``AdamWeightDecay``): Adam moments, then a decoupled weight decay added to the update,
as the original ``AdamWeightDecayOptimizer``::

    m = b1 m + (1 - b1) g;   v = b2 v + (1 - b2) g^2
    update = m / (sqrt(v) + eps) + wd * param        (wd = 0 for LayerNorm weights and biases)
    param -= lr * update

With ``bias_correction=False`` (the paper's setting, the default) m and v are used as they are; with
True, ``m / (1 - b1^t)`` and ``v / (1 - b2^t)`` as in Adam/AdamW. Note the difference from
``torch.optim.AdamW``: besides the bias correction, eps is added to ``sqrt(v)`` in both, but
torch's AdamW has eps outside the corrected ``sqrt(v_hat)``; here the uncorrected form is exact.
The step is a handful of ``torch._foreach_*`` calls over all tensors of a group (no Python loop
per tensor). It is a plain ``torch.optim.Optimizer`` with ``param_groups`` and lazily created
state, so DeepSpeed can use it as a client optimizer (ZeRO swaps in its flat fp32 partitions).

Fused kernel (``optimizer.fused``, "auto" on CUDA): DeepSpeed's ``FusedAdam`` with
``adam_w_mode=True`` and the same ``bias_correction`` computes, per element,
``p -= lr * (m_hat / (sqrt(v_hat) + eps) + wd * p)`` with ``m_hat = m`` and ``v_hat = v`` when
uncorrected: the update above, in one multi-tensor CUDA launch per group. Its state uses the same
keys (``exp_avg``, ``exp_avg_sq``). It needs DeepSpeed's CUDA op (prebuilt or JIT-built); "auto"
falls back to ``AdamWeightDecay`` with a warning when the op cannot be loaded, "on" fails.

No decay: every parameter with fewer than 2 dimensions, i.e. biases and LayerNorm scales/shifts
(the original excludes names containing "LayerNorm", "layer_norm" and "bias"; in this model those
are exactly the 1-D tensors).

Schedule: ``lr(step) = peak * max(0, 1 - min(step, total)/total) * min(1, step/warmup)``: linear
decay to 0 over ``total_steps`` MULTIPLIED by the linear warm-up factor (ELECTRA multiplies; BERT
switched between the two). Like the original, the update at step 0 uses lr 0.

Gradient clipping (global norm 1.0) is DeepSpeed's ``gradient_clipping`` in the trainer; paths
without DeepSpeed call ``clip_grad_norm``.
"""
from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

from electra.config import OptimizerConfig

log = logging.getLogger(__name__)


class AdamWeightDecay(torch.optim.Optimizer):
    """Adam with decoupled weight decay and optional bias correction (see the module docstring)."""

    def __init__(self, params, *, lr: float = 5e-4, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.01, bias_correction: bool = False):
        if lr < 0 or eps < 0 or weight_decay < 0 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"invalid AdamWeightDecay settings lr={lr} betas={betas} eps={eps} wd={weight_decay}")
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                        bias_correction=bias_correction)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            self._step_group(group)
        return loss

    def _step_group(self, group: dict) -> None:
        params, grads, exp_avgs, exp_avg_sqs = [], [], [], []
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state[p]
            if not state:
                state["step"] = 0
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["step"] += 1
            params.append(p)
            grads.append(p.grad if p.grad.dtype == p.dtype else p.grad.to(p.dtype))
            exp_avgs.append(state["exp_avg"])
            exp_avg_sqs.append(state["exp_avg_sq"])
        if not params:
            return
        b1, b2 = group["betas"]
        lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
        torch._foreach_lerp_(exp_avgs, grads, 1 - b1)  # m += (1-b1)(g - m) == b1 m + (1-b1) g
        torch._foreach_mul_(exp_avg_sqs, b2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - b2)
        denom = torch._foreach_sqrt(exp_avg_sqs)
        step_size = lr
        if group["bias_correction"]:
            # All tensors of a group are created together, so they share one step count.
            t = self.state[params[0]]["step"]
            torch._foreach_div_(denom, (1 - b2 ** t) ** 0.5)
            step_size = lr / (1 - b1 ** t)
        torch._foreach_add_(denom, eps)
        if wd != 0:
            torch._foreach_mul_(params, 1 - lr * wd)
        torch._foreach_addcdiv_(params, exp_avgs, denom, value=-step_size)


def uses_weight_decay(param: torch.Tensor) -> bool:
    """The original's exclusion rule: only >= 2-D tensors decay (biases and LayerNorm are 1-D).

    The one copy of the rule, shared by pre-training (``parameter_groups``) and fine-tuning
    (``evaluation.recipe.param_groups``)."""
    return param.ndim >= 2


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two groups: >= 2-D weights decay, 1-D tensors (biases, LayerNorm) do not. Frozen params are left out."""
    decay, no_decay = [], []
    for _, p in model.named_parameters():  # shared tensors (the embedding block) appear once
        if p.requires_grad:
            (decay if uses_weight_decay(p) else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def build_optimizer(model: nn.Module, cfg: OptimizerConfig, *, device: str = "cpu") -> torch.optim.Optimizer:
    """``AdamWeightDecay``, or DeepSpeed's ``FusedAdam`` with the same update (``cfg.fused``).

    ``device``: the device type the parameters will live on when the optimiser steps (the trainer
    builds it before DeepSpeed moves the model); "auto" fuses only for "cuda"."""
    groups = parameter_groups(model, cfg.weight_decay)
    if cfg.fused == "on" or (cfg.fused == "auto" and device == "cuda"):
        try:
            return fused_adam(groups, cfg)
        except Exception as exc:  # the CUDA op missing or failing to build
            if cfg.fused == "on":
                raise RuntimeError(f"optimizer.fused=on: DeepSpeed FusedAdam unavailable ({exc})") from exc
            log.warning("DeepSpeed FusedAdam unavailable (%s): using AdamWeightDecay", exc)
    return AdamWeightDecay(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps,
                           weight_decay=cfg.weight_decay, bias_correction=cfg.bias_correction)


def fused_adam(groups: list[dict], cfg: OptimizerConfig) -> torch.optim.Optimizer:
    """DeepSpeed ``FusedAdam`` configured as ``AdamWeightDecay`` (decoupled decay, our bias setting)."""
    if not torch.cuda.is_available():
        raise RuntimeError("FusedAdam is a CUDA kernel and no CUDA device is available")
    from deepspeed.ops.adam import FusedAdam

    with _arch_list_deepspeed_parses():  # the op is built (JIT, once per machine) on construction
        return FusedAdam(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps,
                         weight_decay=cfg.weight_decay, adam_w_mode=True, bias_correction=cfg.bias_correction)


def deepspeed_arch_list(value: str) -> str:
    """``TORCH_CUDA_ARCH_LIST`` without architecture-specific suffixes: ``"8.0 9.0a+PTX"`` ->
    ``"8.0;9.0+PTX"``. DeepSpeed's JIT builder sorts the entries as integers and fails on ``9.0a``
    (the Hopper-specific target that CUDA images set); Adam needs no sm_90a instruction."""
    out: list[str] = []
    for entry in value.replace(";", " ").split():
        entry = re.sub(r"^(\d+\.\d+)[a-z]+", r"\1", entry)
        if entry not in out:
            out.append(entry)
    return ";".join(out)


@contextmanager
def _arch_list_deepspeed_parses() -> Iterator[None]:
    old = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if old is None:
        yield
        return
    os.environ["TORCH_CUDA_ARCH_LIST"] = deepspeed_arch_list(old)
    try:
        yield
    finally:
        os.environ["TORCH_CUDA_ARCH_LIST"] = old


def lr_multiplier(step: int, cfg: OptimizerConfig) -> float:
    """Factor on the peak lr at ``step``: linear decay to 0 times linear warm-up."""
    decay = max(0.0, 1.0 - min(step, cfg.total_steps) / cfg.total_steps)
    warmup = min(1.0, step / cfg.warmup_steps) if cfg.warmup_steps > 0 else 1.0
    return decay * warmup


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: OptimizerConfig) -> torch.optim.lr_scheduler.LambdaLR:
    """LambdaLR over ``lr_multiplier``; call ``scheduler.step()`` after each ``optimizer.step()``."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_multiplier(step, cfg))


def clip_grad_norm(parameters: Iterable[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Global-norm clipping for paths without DeepSpeed; returns the norm before clipping."""
    return torch.nn.utils.clip_grad_norm_(list(parameters), max_norm, foreach=True)
