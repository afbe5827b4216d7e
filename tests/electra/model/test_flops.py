"""electra.model.flops: the formula against the model's own Linear layers, and known figures."""
from __future__ import annotations

from pathlib import Path

import pytest
from torch import nn

from electra.config import DataConfig, ElectraConfig, ModelConfig, ObjectiveConfig, load_config
from electra.model.flops import forward_flops_per_token, training_flops_per_token
from electra.model.networks import ElectraForPretraining

PRESETS = Path(__file__).resolve().parents[3] / "electra" / "configs"


def linear_weights(module: nn.Module) -> int:
    return sum(m.weight.numel() for m in module.modules() if isinstance(m, nn.Linear))


@pytest.mark.parametrize("model_kw", [
    dict(vocab_size=100, embedding_size=16, hidden_size=64, num_layers=3, num_heads=2, intermediate_size=128),
    dict(vocab_size=100, embedding_size=64, hidden_size=64, num_layers=2, num_heads=1, intermediate_size=256,
         generator_fraction=1.0),
])
def test_flops_match_a_count_of_the_models_matmuls(model_kw):
    """Every Linear weight is one multiply-add per token; attention adds 2*T*h per layer;
    the generator head (dense + tied output layer) runs on mask_prob of the tokens."""
    cfg = ElectraConfig(model=ModelConfig(**model_kw), objective=ObjectiveConfig(mask_prob=0.2),
                        data=DataConfig(seq_len=32))
    model = ElectraForPretraining(cfg.model)
    m, g = cfg.model, cfg.model.generator_sizes()
    encoders = linear_weights(model.generator) + linear_weights(model.discriminator)
    attention = 2 * 32 * (m.hidden_size + g.hidden_size) * m.num_layers
    gen_head = linear_weights(model.generator_head) + model.embeddings.word_embeddings.weight.numel()
    want = 2 * (encoders + attention + linear_weights(model.discriminator_head) + 0.2 * gen_head)
    assert forward_flops_per_token(cfg) == pytest.approx(want)
    assert training_flops_per_token(cfg) == pytest.approx(3 * want)


def test_mlm_objective_counts_only_the_discriminator_and_its_head():
    cfg = ElectraConfig(model=ModelConfig(vocab_size=100, embedding_size=16, hidden_size=64, num_layers=2,
                                          num_heads=2, intermediate_size=128),
                        objective=ObjectiveConfig(kind="mlm"), data=DataConfig(seq_len=128))
    model = ElectraForPretraining(cfg.model)
    t = cfg.data.seq_len
    want = 2 * (linear_weights(model.discriminator) + 2 * t * 64 * 2 + 0.15 * (64 * 16 + 16 * 100))
    assert forward_flops_per_token(cfg) == pytest.approx(want)


def test_electra_small_figure():
    cfg = load_config(PRESETS / "small.json", ["data.seq_len=128"])  # the paper's corpus lengths
    # Discriminator ~ 2 x 13.3M matmul weights + attention; generator ~ 1/16 of that; LM head at 15 %.
    assert 60e6 < training_flops_per_token(cfg) < 80e6
    # The whole Small run (1M steps x 128 x 128 tokens): paper table 1 quotes 1.4e18 FLOPs, counting
    # some non-matmul work too; the matmul-only figure is ~1.15e18.
    run = training_flops_per_token(cfg) * 1_000_000 * 128 * 128
    assert 1.0e18 < run < 1.4e18
    base = load_config(PRESETS / "base.json", ["data.seq_len=512"])  # ~8x the parameters, 4x the attention span
    assert 8 < training_flops_per_token(base) / training_flops_per_token(cfg) < 12
