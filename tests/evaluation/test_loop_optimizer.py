"""The fine-tuning optimiser inside ``loop.train`` against the update rules written out in numpy.

``train`` runs a tiny ``FinetuneModel`` for a few steps on one fixed batch; a hook records each
parameter's raw gradient (before clipping), and an independent float64 reference replays the
run: global-norm clipping, the LLRD rate of each parameter from its name, the warm-up × linear
decay schedule, and the optimiser's update, either the original's ``AdamWeightDecayOptimizer``
(no bias correction) or AdamW's (bias-corrected). Weight decay is decided by NAME as the original
does (``exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"]``; our LayerNorms are
``LayerNorm``, ``attn_norm``, ``ffn_norm``), not by the tensor's rank as the code under test.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from electra.config import ModelConfig
from evaluation.heads import FinetuneModel, SequenceHead
from evaluation.loop import make_optimizer, seed_everything, train
from evaluation.recipe import FinetuneRecipe
from electra.model.networks import ElectraEmbeddings, build_encoder
from electra.run.optim import AdamWeightDecay

LAYERS, LR, DECAY, WD, EPS, B1, B2 = 2, 1e-2, 0.8, 0.1, 1e-6, 0.9, 0.999
STEPS, WARMUP = 6, 2  # 6 epochs of one batch; warm-up int(0.34 × 6) = 2 steps


def _model() -> FinetuneModel:
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=60, embedding_size=8, hidden_size=16, num_layers=LAYERS,
                      num_heads=2, intermediate_size=32, max_position_embeddings=64)
    return FinetuneModel(build_encoder(cfg, ElectraEmbeddings.from_config(cfg)),
                         SequenceHead(16, 2))


def _rows(n: int = 8):
    rng = np.random.default_rng(3)
    rows = [[2] + rng.integers(5, 60, size=int(k)).tolist() + [3] for k in rng.integers(3, 20, n)]
    segs = [[0] * (len(r) // 2) + [1] * (len(r) - len(r) // 2) for r in rows]
    return rows, segs, torch.tensor([i % 2 for i in range(n)])


def _rate(name: str) -> float:
    """LLRD, "original" variant: embeddings depth 0, layer i depth i + 1, head depth L + 2 = top."""
    top = LAYERS + 2
    if name.startswith(("encoder.embeddings.", "encoder.embeddings_project.")):
        depth = 0
    elif name.startswith("encoder.layers."):
        depth = int(name.split(".")[2]) + 1
    else:
        assert name.startswith("head."), name
        depth = top
    return LR * DECAY ** (top - depth)


def _decays(name: str) -> bool:
    return not (name.endswith(".bias") or "LayerNorm" in name or "_norm." in name)


def _schedule(k: int) -> float:
    return min(1.0, k / WARMUP) * max(0.0, 1.0 - k / STEPS)


def _reference(start: dict, grads: dict, *, bias_correction: bool, decays=_decays) -> dict:
    p = {n: v.astype(np.float64) for n, v in start.items()}
    m = {n: np.zeros_like(v) for n, v in p.items()}
    v = {n: np.zeros_like(x) for n, x in p.items()}
    for k in range(STEPS):
        g = {n: grads[n][k].astype(np.float64) for n in p}
        norm = np.sqrt(sum(float((x ** 2).sum()) for x in g.values()))
        g = {n: x * min(1.0, 1.0 / (norm + 1e-6)) for n, x in g.items()}  # clip at norm 1.0
        t = k + 1
        for n in p:
            m[n] = B1 * m[n] + (1 - B1) * g[n]
            v[n] = B2 * v[n] + (1 - B2) * g[n] ** 2
            mh, vh = m[n], v[n]
            if bias_correction:
                mh, vh = m[n] / (1 - B1 ** t), v[n] / (1 - B2 ** t)
            update = mh / (np.sqrt(vh) + EPS) + (WD * p[n] if decays(n) else 0.0)
            p[n] = p[n] - _rate(n) * _schedule(k) * update
    return p


def _run(optimizer: str):
    model = _model()
    rows, segs, targets = _rows()
    start = {n: p.detach().numpy().copy() for n, p in model.named_parameters()}
    grads: dict[str, list] = {n: [] for n in start}
    for n, p in model.named_parameters():  # fires after backward, before clipping
        p.register_post_accumulate_grad_hook(
            lambda t, n=n: grads[n].append(t.grad.detach().numpy().copy()))
    recipe = FinetuneRecipe(lr=LR, layerwise_lr_decay=DECAY, weight_decay=WD, adam_eps=EPS,
                            warmup_fraction=0.34, batch_size=len(rows), precision="fp32",
                            device="cpu", optimizer=optimizer)
    seed_everything(0)
    # the loss is scaled so that the gradient norm exceeds 1 and clipping takes part
    stats = train(model, rows=rows, segs=segs, recipe=recipe, epochs=STEPS, seed=0,
                  loss_fn=lambda out, idx, dev: 20 * torch.nn.functional.cross_entropy(
                      out.logits, targets[idx].to(dev)))
    assert stats.steps == STEPS and all(len(g) == STEPS for g in grads.values())
    norms = [np.sqrt(sum(float((g[k] ** 2).sum()) for g in grads.values())) for k in range(STEPS)]
    assert max(norms) > 1.0  # clipping is exercised
    return start, grads, {n: p.detach().numpy() for n, p in model.named_parameters()}


@pytest.mark.parametrize("optimizer,bias_correction", [("original", False), ("adamw", True)])
def test_train_steps_match_the_update_rule(optimizer, bias_correction):
    start, grads, end = _run(optimizer)
    expected = _reference(start, grads, bias_correction=bias_correction)
    other = _reference(start, grads, bias_correction=not bias_correction)
    for n in end:
        np.testing.assert_allclose(end[n], expected[n], rtol=1e-5, atol=1e-6, err_msg=n)
    # the check above tells the two rules apart, and would see decay on LayerNorm and biases
    assert max(np.abs(expected[n] - other[n]).max() for n in end) > 1e-3
    decayed_all = _reference(start, grads, bias_correction=bias_correction, decays=lambda n: True)
    assert min(np.abs(end[n] - decayed_all[n]).max() for n in end
               if n.lower().endswith("norm.weight")) > 1e-4


def test_make_optimizer_picks_the_class():
    model = _model()
    original = make_optimizer(model, FinetuneRecipe(), torch.device("cpu"))
    assert type(original) is AdamWeightDecay
    assert all(g["bias_correction"] is False for g in original.param_groups)
    adamw = make_optimizer(model, FinetuneRecipe(optimizer="adamw"), torch.device("cpu"))
    assert type(adamw) is torch.optim.AdamW and adamw.defaults["fused"]
    unfused = make_optimizer(model, FinetuneRecipe(optimizer="adamw", deepspeed=True),
                             torch.device("cpu"))
    assert not unfused.defaults["fused"]
