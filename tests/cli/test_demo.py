"""The demo's recipe, its flags and its printed table (the whole demo is `make demo`, minutes long)."""
from __future__ import annotations

from cli import demo
from common import cli
from electra.config import load_config


def test_pretraining_recipe_is_a_valid_tiny_config_with_the_presets_tokens_per_step():
    # A typo in a key would only surface minutes into a user's `make demo`; the strict loader
    # rejects it here. The recipe shortens the examples without changing tokens per step.
    tiny = load_config(demo.REPO / demo.TINY)
    cfg = load_config(demo.REPO / demo.TINY, demo.PRETRAIN)
    # seq_len is the corpus's: the demo builds its corpus at SEQ_LEN; tiny's own length is its
    # 128 positions
    assert cfg.data.seq_len is None and demo.SEQ_LEN == 32
    assert cfg.train.global_batch_size * demo.SEQ_LEN == tiny.train.global_batch_size * tiny.model.max_position_embeddings
    assert cfg.model.hidden_dropout == cfg.model.attention_dropout == 0.0
    assert cfg.model.hidden_size == tiny.model.hidden_size and cfg.model.num_layers == tiny.model.num_layers
    assert cfg.optimizer.lr == 2e-3 and cfg.model.generator_fraction == 0.5


def test_table_prints_medians_ranges_and_their_difference():
    text = demo._table({"pre-trained": [70.0, 93.5, 93.0], "random init": [50.2, 53.0, 51.0]})
    lines = text.splitlines()
    pre = next(line for line in lines if line.startswith("pre-trained"))
    base = next(line for line in lines if line.startswith("random init"))
    assert pre.split()[1:3] == ["93.0", "70.0-93.5"]        # median of 70, 93, 93.5 is 93
    assert base.split()[2:4] == ["51.0", "50.2-53.0"]
    assert next(line for line in lines if line.startswith("difference")).split()[1] == "+42.0"


def test_flags_come_from_the_demo_job():
    args = demo.DemoJob(**cli.given(demo.build_parser().parse_args(["--steps", "10", "--class-fraction", "0.3"])))
    assert args == demo.DemoJob(steps=10, class_fraction=0.3)
    assert args.out == "demo_out" and args.seeds == 3
