"""electra.run.optim: schedule values, the no-bias-correction update, parameter groups, clipping."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from electra.config import ModelConfig, ObjectiveConfig, OptimizerConfig
from electra.model.networks import ElectraForPretraining
from electra.model.objective import ElectraObjective, SpecialTokens
from electra.run.optim import (AdamWeightDecay, build_optimizer, build_scheduler, clip_grad_norm, lr_multiplier,
                           parameter_groups)


@pytest.mark.parametrize("step,want", [
    (0, 0.0), (1, 0.01 * 0.999), (50, 0.5 * 0.95), (100, 0.9), (500, 0.5), (999, 0.001), (1000, 0.0), (5000, 0.0),
])
def test_schedule_is_linear_decay_times_warmup(step, want):
    cfg = OptimizerConfig(warmup_steps=100, total_steps=1000)
    assert lr_multiplier(step, cfg) == pytest.approx(want, abs=1e-12)


def test_schedule_paper_values_and_no_warmup():
    paper = OptimizerConfig()  # warm-up 10k, 1M steps
    assert lr_multiplier(5_000, paper) == pytest.approx(0.5 * (1 - 5_000 / 1e6))
    assert lr_multiplier(10_000, paper) == pytest.approx(0.99)
    assert lr_multiplier(250_000, paper) == pytest.approx(0.75)
    assert lr_multiplier(0, OptimizerConfig(warmup_steps=0, total_steps=10)) == 1.0


def test_scheduler_sets_the_group_lr_per_step():
    cfg = OptimizerConfig(lr=1e-3, warmup_steps=4, total_steps=8)
    p = nn.Parameter(torch.ones(2, 2))
    opt = build_optimizer(nn.ParameterList([p]), cfg)
    sched = build_scheduler(opt, cfg)
    seen = []
    for _ in range(9):
        seen.append(opt.param_groups[0]["lr"])
        p.grad = torch.ones_like(p)
        opt.step()
        sched.step()
    assert seen == pytest.approx([1e-3 * lr_multiplier(s, cfg) for s in range(9)])
    assert seen[0] == 0.0 and seen[4] == pytest.approx(0.5e-3)


def test_update_without_bias_correction_matches_hand_computation():
    lr, b1, b2, eps, wd = 0.1, 0.9, 0.999, 1e-6, 0.01
    w = nn.Parameter(torch.tensor([[1.0, -2.0], [0.5, 3.0]]))
    b = nn.Parameter(torch.tensor([0.25, -0.75]))
    opt = AdamWeightDecay([{"params": [w], "weight_decay": wd}, {"params": [b], "weight_decay": 0.0}],
                          lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    grads = [(torch.tensor([[0.1, -0.2], [0.3, 0.0]]), torch.tensor([1.0, -1.0])),
             (torch.tensor([[-0.5, 0.4], [0.1, 2.0]]), torch.tensor([0.5, 0.25]))]
    w_ref, b_ref = w.detach().clone().double(), b.detach().clone().double()
    mw = vw = torch.zeros_like(w_ref)
    mb = vb = torch.zeros_like(b_ref)
    for gw, gb in grads:
        w.grad, b.grad = gw.clone(), gb.clone()
        opt.step()
        gw, gb = gw.double(), gb.double()
        mw, vw = b1 * mw + (1 - b1) * gw, b2 * vw + (1 - b2) * gw * gw
        mb, vb = b1 * mb + (1 - b1) * gb, b2 * vb + (1 - b2) * gb * gb
        w_ref = w_ref - lr * (mw / (vw.sqrt() + eps) + wd * w_ref)  # AdamWeightDecayOptimizer
        b_ref = b_ref - lr * (mb / (vb.sqrt() + eps))
    assert torch.allclose(w.detach().double(), w_ref, atol=1e-6)
    assert torch.allclose(b.detach().double(), b_ref, atol=1e-6)
    # First step, no bias correction: |update| = (1-b1)|g| / (sqrt(1-b2)|g| + eps) ~ 3.16, not Adam's ~1.
    p = nn.Parameter(torch.zeros(1))
    one = AdamWeightDecay([p], lr=1.0, weight_decay=0.0)
    p.grad = torch.ones(1)
    one.step()
    assert p.item() == pytest.approx(-0.1 / (0.001 ** 0.5 + 1e-6), rel=1e-6)


def test_bias_corrected_update_equals_torch_adamw():
    torch.manual_seed(0)
    a = nn.Parameter(torch.randn(5, 3))
    b = nn.Parameter(a.detach().clone())
    ours = AdamWeightDecay([a], lr=0.01, eps=1e-6, weight_decay=0.1, bias_correction=True)
    ref = torch.optim.AdamW([b], lr=0.01, eps=1e-6, weight_decay=0.1)
    for _ in range(5):
        g = torch.randn(5, 3)
        a.grad, b.grad = g.clone(), g.clone()
        ours.step()
        ref.step()
    assert torch.allclose(a, b, atol=1e-6)


def test_no_decay_on_layernorm_and_biases_and_shared_embeddings_once():
    model = ElectraForPretraining(ModelConfig(vocab_size=30, embedding_size=16, hidden_size=32, num_layers=1,
                                              num_heads=2, intermediate_size=64, max_position_embeddings=16))
    decay, no_decay = parameter_groups(model, 0.01)
    ids = lambda ps: {id(p) for p in ps["params"]}  # noqa: E731
    assert no_decay["weight_decay"] == 0.0 and decay["weight_decay"] == 0.01
    for name, p in model.named_parameters():
        is_norm_or_bias = "LayerNorm" in name or "norm" in name or name.endswith("bias")
        assert (id(p) in ids(no_decay)) == is_norm_or_bias, name
        assert (id(p) in ids(decay)) != is_norm_or_bias, name
    assert id(model.embeddings.LayerNorm.weight) in ids(no_decay)
    assert id(model.generator_head.bias) in ids(no_decay)
    n_params = len(list(model.parameters()))
    assert len(decay["params"]) + len(no_decay["params"]) == n_params  # shared block counted once
    opt = build_optimizer(model, OptimizerConfig())
    assert [g["weight_decay"] for g in opt.param_groups] == [0.01, 0.0]
    assert opt.defaults["bias_correction"] is False and opt.defaults["eps"] == 1e-6


def test_frozen_parameters_are_left_out():
    model = ElectraForPretraining(ModelConfig(vocab_size=30, embedding_size=16, hidden_size=32, num_layers=1,
                                              num_heads=2, intermediate_size=64, max_position_embeddings=16))
    obj = ElectraObjective(model, ObjectiveConfig(kind="mlm"), SpecialTokens(), seq_len=16)
    opt = build_optimizer(obj, OptimizerConfig())
    in_opt = {id(p) for g in opt.param_groups for p in g["params"]}
    assert not any(id(p) in in_opt for p in model.generator.layers.parameters())
    assert all(id(p) in in_opt for p in obj.mlm_head.parameters())


def test_parameters_without_grad_are_untouched_and_state_is_saved():
    p, q = nn.Parameter(torch.ones(3)), nn.Parameter(torch.ones(3))
    opt = AdamWeightDecay([p, q], lr=0.1)
    p.grad = torch.full((3,), 0.5)
    opt.step()
    assert torch.equal(q, torch.ones(3)) and p[0] < 1
    state = opt.state_dict()
    again = AdamWeightDecay([nn.Parameter(p.detach().clone()), nn.Parameter(torch.ones(3))], lr=0.1)
    again.load_state_dict(state)
    assert again.state_dict()["state"][0]["step"] == 1
    assert torch.equal(again.state_dict()["state"][0]["exp_avg"], state["state"][0]["exp_avg"])


def test_clip_grad_norm_scales_to_global_norm():
    p, q = nn.Parameter(torch.zeros(2)), nn.Parameter(torch.zeros(1))
    p.grad, q.grad = torch.tensor([3.0, 0.0]), torch.tensor([4.0])
    norm = clip_grad_norm([p, q], 1.0)
    assert norm.item() == pytest.approx(5.0)
    assert torch.allclose(p.grad, torch.tensor([0.6, 0.0])) and torch.allclose(q.grad, torch.tensor([0.8]))


@pytest.mark.parametrize("value, want", [
    ("9.0a", "9.0"),                                  # what CUDA images set for Hopper
    ("8.0 9.0a+PTX", "8.0;9.0+PTX"),                  # spaces, a suffix before +PTX
    ("7.5;8.0;9.0;9.0a;10.0f", "7.5;8.0;9.0;10.0"),   # duplicates once the suffix is gone
    ("12.0", "12.0"),
])
def test_deepspeed_arch_list_drops_architecture_suffixes(value, want):
    from electra.run.optim import deepspeed_arch_list

    got = deepspeed_arch_list(value)
    assert got == want
    # what DeepSpeed's JIT builder does with the list (op_builder.builder.compute_capability_args)
    sorted(got.split(";"), key=lambda cc: tuple(int(part.split("+")[0]) for part in cc.split(".")))
