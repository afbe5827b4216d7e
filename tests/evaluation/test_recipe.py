"""Recipe defaults and layer-wise LR decay: every parameter gets the formula's rate."""
from __future__ import annotations

import pytest

from electra.config import ModelConfig
from evaluation.heads import FinetuneModel, SequenceHead
from evaluation.recipe import (FinetuneRecipe, infer_size, layer_rates, param_groups,
                                     recipe_for_size)
from electra.model.networks import ElectraEmbeddings, build_encoder


def tiny_model(num_layers: int, *, embedding_size: int = 8) -> FinetuneModel:
    cfg = ModelConfig(vocab_size=50, embedding_size=embedding_size, hidden_size=16,
                      num_layers=num_layers, num_heads=2, intermediate_size=32)
    encoder = build_encoder(cfg, ElectraEmbeddings.from_config(cfg))
    return FinetuneModel(encoder, SequenceHead(16, 2))


def test_paper_defaults_by_size():
    assert (recipe_for_size("small").lr, recipe_for_size("small").layerwise_lr_decay) == (3e-4, 0.8)
    assert (recipe_for_size("base").lr, recipe_for_size("base").layerwise_lr_decay) == (1e-4, 0.8)
    assert (recipe_for_size("large").lr, recipe_for_size("large").layerwise_lr_decay) == (5e-5, 0.9)
    r = FinetuneRecipe()
    assert (r.weight_decay, r.warmup_fraction, r.batch_size, r.max_seq_len, r.llrd_variant) == (
        0.0, 0.1, 32, 128, "original")
    assert r.optimizer == "original"  # the original's Adam without bias correction
    assert (r.squad_max_len, r.squad_doc_stride, r.squad_max_query, r.squad_n_best,
            r.squad_max_answer, r.squad_epochs) == (512, 128, 64, 20, 30, 2.0)
    assert [infer_size(h) for h in (32, 256, 768, 1024)] == ["small", "small", "base", "large"]
    assert recipe_for_size("base", lr=2e-5).lr == 2e-5


def test_unknown_or_bad_recipe_keys_are_errors():
    with pytest.raises(ValueError, match=r"finetune recipe: unknown key\(s\) \['learning_rate'\]"):
        FinetuneRecipe.from_dict({"learning_rate": 1e-4})
    with pytest.raises(ValueError, match=r"recipe.llrd_variant: 'fixed' is not one of \['original', 'corrected'\]"):
        FinetuneRecipe.from_dict({"llrd_variant": "fixed"})
    with pytest.raises(ValueError,
                       match=r"recipe.optimizer: 'sgd' is not one of \['original', 'adamw'\]"):
        FinetuneRecipe.from_dict({"optimizer": "sgd"})
    with pytest.raises(ValueError, match=r"recipe.optimizer: 'AdamW' is not one of"):
        FinetuneRecipe.from_dict({"optimizer": "AdamW"})  # no case folding
    assert FinetuneRecipe.from_dict({"optimizer": "adamw"}).optimizer == "adamw"
    with pytest.raises(ValueError, match=r"finetune recipe: weight_decay >= 0"):
        FinetuneRecipe.from_dict({"weight_decay": -0.01})
    with pytest.raises(ValueError, match=r"recipe.device: 'tpu' is not one of"):
        FinetuneRecipe.from_dict({"device": "tpu"})
    with pytest.raises(ValueError, match=r"recipe.batch_size: expected int, got '32'"):
        FinetuneRecipe.from_dict({"batch_size": "32"})
    with pytest.raises(ValueError, match=r"finetune recipe: warmup_fraction in \[0, 1\)"):
        FinetuneRecipe.from_dict({"warmup_fraction": 1.5})
    assert FinetuneRecipe.from_dict(recipe_for_size("small").to_dict()) == recipe_for_size("small")
    with pytest.raises(ValueError, match="unknown model size 'xl'"):
        recipe_for_size("xl")


@pytest.mark.parametrize("variant,top", [("original", 3 + 2), ("corrected", 3 + 1)])
def test_llrd_matches_formula_for_every_parameter(variant, top):
    lr, decay, L = 1e-3, 0.8, 3
    model = tiny_model(L)  # embedding 8 != hidden 16: the projection exists and is depth 0
    recipe = FinetuneRecipe(lr=lr, layerwise_lr_decay=decay, llrd_variant=variant)
    groups = param_groups(model, recipe)
    rate_of = {id(p): g["lr"] for g in groups for p in g["params"]}
    assert len(rate_of) == sum(1 for _ in model.parameters())  # every parameter exactly once
    enc = model.encoder
    for p in list(enc.embeddings.parameters()) + list(enc.embeddings_project.parameters()):
        assert rate_of[id(p)] == pytest.approx(lr * decay ** top)  # depth 0
    for i, layer in enumerate(enc.layers):
        for p in layer.parameters():
            assert rate_of[id(p)] == pytest.approx(lr * decay ** (top - (i + 1)))
    for p in model.head.parameters():
        assert rate_of[id(p)] == pytest.approx(lr)
    assert all(g["weight_decay"] == 0.0 for g in groups)


def test_llrd_original_off_by_one_vs_corrected():
    orig = layer_rates(1.0, 0.5, 12)
    fixed = layer_rates(1.0, 0.5, 12, variant="corrected")
    assert orig.head == fixed.head == 1.0
    assert orig.layers[-1] == 0.25 and fixed.layers[-1] == 0.5  # top layer decay² vs decay
    assert orig.embeddings == 0.5 ** 14 and fixed.embeddings == 0.5 ** 13
    assert layer_rates(1.0, 1.0, 4).layers == [1.0] * 4  # decay 1 disables LLRD


def test_llrd_rates_reach_the_optimizer():
    import torch

    model = tiny_model(2)
    recipe = FinetuneRecipe(lr=2e-4, layerwise_lr_decay=0.5)
    opt = torch.optim.AdamW(param_groups(model, recipe))
    rates = [2e-4 * 0.5 ** 4, 2e-4 * 0.5 ** 3, 2e-4 * 0.5 ** 2, 2e-4]
    assert [g["name"] for g in opt.param_groups] == [
        n + s for n in ("embeddings", "layer_0", "layer_1", "head") for s in ("", ".no_decay")]
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([r for r in rates for _ in "ab"])


@pytest.mark.parametrize("wd", [0.0, 0.01])
def test_no_decay_groups_hold_exactly_biases_and_layernorm(wd):
    """The original's rule by NAME (exclude "LayerNorm", "layer_norm", "bias"), checked here
    through the modules: LayerNorm parameters and biases, and nothing else, are not decayed."""
    from torch import nn

    model = tiny_model(3)
    norms = {id(p) for m in model.modules() if isinstance(m, nn.LayerNorm)
             for p in m.parameters()}
    biases = {id(p) for n, p in model.named_parameters() if n.endswith(".bias")}
    groups = param_groups(model, FinetuneRecipe(weight_decay=wd))
    kept = {id(p) for g in groups if g["name"].endswith(".no_decay") for p in g["params"]}
    decayed = {id(p) for g in groups if not g["name"].endswith(".no_decay") for p in g["params"]}
    assert kept == norms | biases and norms and biases
    # the rest, the matrices and embedding tables, is decayed
    assert decayed == {id(p) for p in model.parameters()} - kept
    assert all(p.ndim == 2 for g in groups for p in g["params"] if id(p) in decayed)
    for g in groups:
        assert g["weight_decay"] == (0.0 if g["name"].endswith(".no_decay") else wd)
    by_name = {g["name"]: g for g in groups}
    for name, g in by_name.items():  # a depth's two groups share its learning rate
        assert g["lr"] == by_name[name.removesuffix(".no_decay")]["lr"]


def test_stray_parameters_are_still_an_error():
    import torch
    from torch import nn

    model = tiny_model(1)
    model.extra = nn.Parameter(torch.zeros(3))  # 1-D: it would land in a no-decay group
    with pytest.raises(ValueError, match=r"no LLRD depth: \['extra'\]"):
        param_groups(model, FinetuneRecipe())


def test_cap_lengths_records_each_cut():
    from evaluation.recipe import cap_lengths

    rec = recipe_for_size("base", max_seq_len=256)
    capped = cap_lengths(rec, 200)
    assert (capped.max_seq_len, capped.squad_max_len) == (200, 200)
    assert capped.length_caps == {"max_seq_len": {"recipe": 256, "used": 200},
                                  "squad_max_len": {"recipe": 512, "used": 200}}
    assert cap_lengths(rec, 512) == rec and rec.length_caps == {}
    assert FinetuneRecipe.from_dict(capped.to_dict()) == capped  # the cut survives the loader
