"""electra.config: presets, strict loading, overrides, derived sizes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from electra.config import ConfigError, ElectraConfig, ModelConfig, ObjectiveConfig, load_config

PRESETS = Path(__file__).resolve().parents[2] / "electra" / "configs"


@pytest.mark.parametrize("name", ["tiny", "small", "base", "large"])
def test_presets_are_complete_and_round_trip(name):
    raw = json.loads((PRESETS / f"{name}.json").read_text())
    cfg = load_config(PRESETS / f"{name}.json")
    # Full files: every typed field is spelled out, so a reader sees the whole run.
    assert raw == {**cfg.to_dict(), "deepspeed": raw["deepspeed"]}
    assert ElectraConfig.from_dict(cfg.to_dict()) == cfg
    assert "zero_optimization" in cfg.deepspeed


def test_paper_values_in_presets():
    small, base, large = (load_config(PRESETS / f"{n}.json") for n in ("small", "base", "large"))
    assert (small.model.num_layers, small.model.hidden_size, small.model.num_heads,
            small.model.intermediate_size, small.model.embedding_size) == (12, 256, 4, 1024, 128)
    assert small.optimizer.lr == 5e-4 and small.optimizer.total_steps == 1_000_000
    assert small.train.global_batch_size == 128
    # seq_len is the corpus's (build-corpus --seq-len: 128 for Small, 512 for Base and Large)
    assert small.data.seq_len is base.data.seq_len is large.data.seq_len is None
    assert base.model.generator_sizes() == (256, 4, 1024) and base.optimizer.lr == 2e-4
    assert base.optimizer.total_steps == 766_000
    assert large.objective.mask_prob == 0.25 and large.model.num_layers == 24
    assert large.train.global_batch_size == 2048 and large.optimizer.total_steps == 400_000
    # max_predictions = int((mask_prob + 0.005) * seq_len): 19 / 79 / 130 (reference §2).
    assert (small.objective.max_predictions_for(128), base.objective.max_predictions_for(512),
            large.objective.max_predictions_for(512)) == (19, 79, 130)
    for c in (small, base, large):
        o = c.optimizer
        assert (o.beta1, o.beta2, o.eps, o.bias_correction, o.weight_decay, o.warmup_steps, o.grad_clip) == \
            (0.9, 0.999, 1e-6, False, 0.01, 10000, 1.0)
        m = c.model
        assert (m.hidden_dropout, m.attention_dropout, m.layer_norm_eps, m.initializer_range) == (0.1, 0.1, 1e-12, 0.02)
        assert c.objective.discriminator_weight == 50.0 and c.objective.mask_token_prob == 0.85


def test_defaults_are_the_paper_small_model():
    c = ElectraConfig()
    assert c.model == ModelConfig(vocab_size=30522, embedding_size=128, hidden_size=256, num_layers=12,
                                  num_heads=4, intermediate_size=1024, generator_fraction=0.25)
    assert c.objective == ObjectiveConfig("electra", 0.15, 0.85, None, 1.0, 1.0, 50.0, False)
    assert c.max_steps == 1_000_000


@pytest.mark.parametrize("hidden,fraction,expected", [
    (256, 0.25, (64, 1, 256)), (768, 1 / 3, (256, 4, 1024)), (1024, 0.25, (256, 4, 1024)),
    (1024, 0.5, (512, 8, 2048)), (64, 0.25, (16, 1, 64)),
])
def test_generator_sizes_from_fraction(hidden, fraction, expected):
    m = ModelConfig(hidden_size=hidden, num_heads=max(1, hidden // 64), generator_fraction=fraction)
    assert tuple(m.generator_sizes()) == expected
    assert m.generator_hidden_size == expected[0]


def test_unknown_keys_are_errors_listing_known_keys(tmp_path):
    with pytest.raises(ConfigError, match=r"model: unknown key\(s\) \['hiden_size'\].*hidden_size"):
        ElectraConfig.from_dict({"model": {"hiden_size": 3}})
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['trainer'\].*'train'"):
        ElectraConfig.from_dict({"trainer": {}})
    path = tmp_path / "bad.json"
    path.write_text('{"optimizer": {"lr": 1e-4, "lrr": 2}}')
    with pytest.raises(ConfigError, match=str(path)):
        load_config(path)


def test_invalid_json_names_file_and_line(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{\n  "model": {\n    "hidden_size": ,\n  }\n}\n')
    with pytest.raises(ConfigError, match=rf"{path}:3: invalid JSON"):
        load_config(path)


def test_overrides_are_parsed_and_type_checked():
    cfg = load_config(PRESETS / "tiny.json", ["optimizer.lr=1e-4", "train.max_steps=10",
                                              "deepspeed.zero_optimization.stage=2", "objective.kind=mlm",
                                              "train.precision=bf16", "model.generator_fraction=0.5",
                                              "deepspeed.bf16.enabled=true", "optimizer.total_steps=1e6"])
    assert cfg.optimizer.lr == 1e-4 and cfg.train.max_steps == 10 and cfg.max_steps == 10
    assert cfg.deepspeed["zero_optimization"]["stage"] == 2 and cfg.deepspeed["bf16"]["enabled"] is True
    assert cfg.objective.kind == "mlm" and cfg.train.precision == "bf16"
    assert cfg.model.generator_fraction == 0.5 and cfg.optimizer.total_steps == 1_000_000
    assert isinstance(cfg.optimizer.total_steps, int)
    assert load_config(PRESETS / "tiny.json", ["train.max_steps=null"]).train.max_steps is None


@pytest.mark.parametrize("argv, want", [
    ([], None),
    (["--set", "train.keep_until_evaluated=true"], True),
    (["--set", "train.keep_until_evaluated=false"], False),
    (["--keep-until-evaluated", "--set", "train.keep_until_evaluated=null"], None),  # --set wins
    (["--keep-until-evaluated"], True),
    (["--no-keep-until-evaluated"], False),
])
def test_keep_until_evaluated_from_the_command_line(argv, want):
    """bool | None: JSON true/false/null through --set, a --[no-]keep-until-evaluated flag."""
    from electra.pretrain_job import job_from_args
    from electra.train import parse_args

    job = job_from_args(parse_args(["--config", "tiny", "--data", "d", "--out", "o", "--eval-max-pending", "2",
                                    *argv]))
    train = load_config(job.config, job.overrides).train
    assert (train.keep_until_evaluated, train.eval_max_pending, train.eval_keep_every) == (want, 2, 0)


@pytest.mark.parametrize("override,message", [
    ("train.eval_max_pending=0", r"config.train: eval_max_pending must be >= 1"),
    ("train.eval_keep_every=-1", r"config.train: eval_keep_every must be >= 0"),
    ("train.keep_until_evaluated=1", r"train.keep_until_evaluated: expected bool"),
    ("train.max_steps=ten", r"train.max_steps: expected int, got 'ten'"),
    ("train.seed=true", r"train.seed: expected int"),
    ("optimizer.bias_correction=1", r"bias_correction: expected bool"),
    ("optimizer.lr", r"expected section.key=value"),
    ("optimiser.lr=1", r"unknown section 'optimiser'"),
    ("model.hidden.size=3", r"section 'model' is flat"),
    ("model.hidden_sizes=3", r"unknown key\(s\) \['hidden_sizes'\]"),
    ("objective.kind=bert", r"tiny.json: config.objective.kind: 'bert' is not one of \['electra', 'mlm'\]"),
    ("train.precision=fp8", r"config.train.precision: 'fp8' is not one of \['fp32', 'bf16', 'fp16'\]"),
    ("data.prefetch_shards=-1", r"config.data: prefetch_shards must be >= 0"),
    ("data.num_workers=-1", r'config.data: num_workers must be >= 0 or "auto"'),
    ("data.num_workers=some", r"config.data.num_workers: 'some' fits none of"),
    ("model.num_heads=3", r"not divisible by num_heads"),
    ("data.seq_len=1024", r"exceeds model.max_position_embeddings"),
])
def test_bad_overrides_fail_clearly(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(PRESETS / "tiny.json", [override])


def test_load_config_from_a_uri_names_the_file(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"train": {"seed": 5}}))
    assert load_config(f"file://{path}").train.seed == 5
    with pytest.raises(ConfigError, match=rf"{tmp_path}/missing.json: no such file and no such preset"):
        load_config(f"file://{tmp_path}/missing.json")


@pytest.mark.parametrize("given", ["large", "large.json", "electra/configs/large.json"])
def test_presets_by_name(given, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not the repository: the relative path does not exist here
    assert load_config(given) == load_config(PRESETS / "large.json")


def test_a_file_wins_over_a_preset_and_a_bad_name_lists_the_presets(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "large.json").write_text(json.dumps({"train": {"seed": 7}}))
    assert load_config("large.json").train.seed == 7  # the user's file in the current folder
    with pytest.raises(ConfigError) as err:
        load_config("huge")
    assert str(err.value) == ("--config huge: no such file and no such preset; presets: base, large, mini, small, "
                              "tiny (or give a path to a config JSON)")
    with pytest.raises(ConfigError, match="no such file and no such preset"):
        load_config(tmp_path / "elsewhere" / "small.json")  # a mistyped path never becomes a preset
