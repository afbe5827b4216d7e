"""electra.model.networks: sharing, sizes, init, masking invariance."""
from __future__ import annotations

import pytest
import torch

from electra.config import ModelConfig
from electra.model.networks import Dropout, ElectraForPretraining, sdpa_mask


def tiny(**kw) -> ModelConfig:
    base = dict(vocab_size=50, embedding_size=24, hidden_size=32, num_layers=2, num_heads=2,
                intermediate_size=64, max_position_embeddings=32, generator_fraction=0.5)
    return ModelConfig(**{**base, **kw})


def test_embedding_block_is_the_same_tensors_in_both_networks():
    m = ElectraForPretraining(tiny())
    assert m.generator.embeddings is m.embeddings and m.discriminator.embeddings is m.embeddings
    for name in ("word_embeddings", "position_embeddings", "token_type_embeddings", "LayerNorm"):
        ours = getattr(m.embeddings, name)
        assert getattr(m.generator.embeddings, name).weight is ours.weight
        assert getattr(m.discriminator.embeddings, name).weight is ours.weight
    assert m.generator.embeddings.LayerNorm.bias is m.discriminator.embeddings.LayerNorm.bias
    # An update through one network is seen by the other (one storage, not a copy).
    with torch.no_grad():
        m.generator.embeddings.LayerNorm.weight.add_(1.0)
    assert torch.equal(m.discriminator.embeddings.LayerNorm.weight, torch.full((24,), 2.0))
    # Parameters are counted once: the embedding block is not duplicated.
    n_emb = sum(p.numel() for p in m.embeddings.parameters())
    total = sum(p.numel() for p in m.parameters())
    parts = sum(p.numel() for mod in (m.generator.layers, m.discriminator.layers, m.generator_head,
                                      m.discriminator_head, m.generator.embeddings_project,
                                      m.discriminator.embeddings_project) for p in mod.parameters())
    assert total == n_emb + parts


def test_each_network_has_its_own_projection_only_when_sizes_differ():
    m = ElectraForPretraining(tiny())
    assert m.generator.embeddings_project.weight.shape == (16, 24)
    assert m.discriminator.embeddings_project.weight.shape == (32, 24)
    same = ElectraForPretraining(tiny(embedding_size=32))
    assert same.discriminator.embeddings_project is None
    assert same.generator.embeddings_project.weight.shape == (16, 32)


def test_generator_layers_have_the_derived_sizes():
    cfg = tiny(hidden_size=128, num_heads=2, embedding_size=64, generator_fraction=0.25)
    m = ElectraForPretraining(cfg)
    hidden, heads, ffn = cfg.generator_sizes()
    assert (hidden, heads, ffn) == (32, 1, 128)
    assert len(m.generator.layers) == len(m.discriminator.layers) == cfg.num_layers
    layer = m.generator.layers[0]
    assert layer.qkv.weight.shape == (3 * hidden, hidden) and layer.num_heads == heads
    assert layer.ffn_in.weight.shape == (ffn, hidden)
    assert m.generator_head.dense.weight.shape == (64, hidden)
    assert m.generator_head.bias.shape == (cfg.vocab_size,)


def test_small_discriminator_has_about_14m_parameters():
    m = ElectraForPretraining(ModelConfig())
    n = sum(p.numel() for p in [*m.discriminator.parameters(), *m.discriminator_head.parameters()])
    assert 13.3e6 < n < 14.2e6  # paper table: 14M


def test_init_is_normal_002_with_zero_biases_and_unit_layernorm():
    torch.manual_seed(0)
    m = ElectraForPretraining(ModelConfig(vocab_size=2000, num_layers=2))
    w = m.discriminator.layers[0].ffn_in.weight
    assert abs(w.std().item() - 0.02) < 0.001 and abs(w.mean().item()) < 0.001
    assert abs(m.embeddings.word_embeddings.weight.std().item() - 0.02) < 0.001
    assert torch.count_nonzero(m.discriminator.layers[1].qkv.bias) == 0
    assert torch.count_nonzero(m.generator_head.bias) == 0
    assert torch.equal(m.discriminator.layers[0].attn_norm.weight, torch.ones(256))


def test_padding_does_not_change_real_token_outputs():
    torch.manual_seed(1)
    m = ElectraForPretraining(tiny()).eval()
    ids = torch.randint(5, 50, (2, 10))
    seg = torch.zeros_like(ids)
    padded = torch.cat([ids, torch.zeros(2, 6, dtype=torch.long)], 1)
    mask = padded != 0
    with torch.no_grad():
        short = m.discriminator_logits(ids, seg, torch.ones_like(ids))
        long = m.discriminator_logits(padded, torch.zeros_like(padded), mask)
        gen_short = m.generator_logits(ids, seg, None)
        gen_long = m.generator_logits(padded, None, mask)
    assert torch.allclose(short, long[:, :10], atol=1e-5)
    assert torch.allclose(gen_short, gen_long[:, :10], atol=1e-5)


def test_generator_logits_at_positions_equal_the_full_logits_there():
    torch.manual_seed(2)
    m = ElectraForPretraining(tiny()).eval()
    ids = torch.randint(5, 50, (3, 12))
    positions = torch.tensor([0, 5, 13, 35])
    with torch.no_grad():
        full = m.generator_logits(ids)
        some = m.generator_logits(ids, positions=positions)
    assert some.shape == (4, 50)
    assert torch.allclose(some, full.reshape(-1, 50)[positions], atol=1e-6)


def test_sdpa_mask_is_none_without_padding():
    assert sdpa_mask(None) is None
    assert sdpa_mask(torch.ones(2, 5, dtype=torch.bool)) is None
    am = torch.tensor([[1, 1, 0], [1, 1, 1]])
    got = sdpa_mask(am)
    assert got.shape == (2, 1, 1, 3) and got.dtype == torch.bool
    assert got[0, 0, 0].tolist() == [True, True, False]


@pytest.mark.parametrize("training", [False, True])
def test_forward_is_finite_with_fully_padded_tail(training):
    m = ElectraForPretraining(tiny()).train(training)
    ids = torch.tensor([[2, 7, 8, 3, 0, 0], [2, 9, 3, 0, 0, 0]])
    out = m.discriminator_logits(ids, None, ids != 0)
    assert out.shape == (2, 6) and torch.isfinite(out).all()


def test_dropout_keeps_1_minus_p_scales_and_masks_the_gradient_alike():
    torch.manual_seed(0)
    drop = Dropout(0.1)
    x = torch.ones(200, 500, requires_grad=True)
    y = drop(x)
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.9) < 0.005  # 100k draws: std 0.001
    assert torch.allclose(y[kept], torch.full_like(y[kept], 1 / 0.9))
    y.sum().backward()
    assert torch.equal(x.grad != 0, kept) and torch.allclose(x.grad[kept], torch.full_like(y[kept], 1 / 0.9))
    assert drop.eval()(x) is x and Dropout(0.0)(x) is x
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        Dropout(1.0)
