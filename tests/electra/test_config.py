"""electra.config: presets, strict loading, overrides, derived sizes."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from electra.config import DEFAULT_DEEPSPEED, ConfigError, ElectraConfig, ModelConfig, ObjectiveConfig, load_config

PRESETS = Path(__file__).resolve().parents[2] / "electra" / "configs"


PRESET_NAMES = ("tiny", "mini", "small", "base", "large")


def _leaves(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out.update(_leaves(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_presets_state_only_what_differs_from_the_defaults(name):
    raw = json.loads((PRESETS / f"{name}.json").read_text())
    cfg = load_config(PRESETS / f"{name}.json")
    defaults = _leaves(ElectraConfig().to_dict())
    stated = _leaves(raw)
    # every value a preset states is one the defaults do not have, and everything else is a default
    assert {k: v for k, v in stated.items() if defaults.get(k, object()) == v} == {}
    assert {k: v for k, v in _leaves(cfg.to_dict()).items() if k not in stated} == \
        {k: v for k, v in defaults.items() if k not in stated}
    assert cfg.differences() == stated
    assert ElectraConfig.from_dict(cfg.to_dict()) == cfg
    assert set(cfg.deepspeed) == set(DEFAULT_DEEPSPEED)  # the section merged key by key, not replaced


def test_small_is_the_defaults_and_the_cpu_presets_turn_off_zero_and_bf16():
    assert json.loads((PRESETS / "small.json").read_text()) == {}
    assert load_config("small") == ElectraConfig()
    tiny = load_config("tiny")
    assert tiny.deepspeed == {**DEFAULT_DEEPSPEED, "zero_optimization": {"stage": 0}, "bf16": {"enabled": False}}
    assert load_config("base").deepspeed == DEFAULT_DEEPSPEED


def test_a_changed_default_reaches_every_preset_that_does_not_set_it(monkeypatch):
    """The trap the presets-as-differences layout removes: a default changed in the dataclass
    (here ObjectiveConfig.mask_prob, as an edit of its line would) must change every preset that
    does not set the field itself, and none that does."""
    before = {n: load_config(n) for n in PRESET_NAMES}
    names = [f.name for f in dataclasses.fields(ObjectiveConfig)]
    defaults = list(ObjectiveConfig.__init__.__defaults__)
    defaults[names.index("mask_prob")] = 0.2
    monkeypatch.setattr(ObjectiveConfig.__init__, "__defaults__", tuple(defaults))
    monkeypatch.setitem(DEFAULT_DEEPSPEED, "zero_optimization", {"stage": 2})  # and a DeepSpeed default
    after = {n: load_config(n) for n in PRESET_NAMES}
    assert {n: c.objective.mask_prob for n, c in after.items()} == \
        {"tiny": 0.2, "mini": 0.2, "small": 0.2, "base": 0.2, "large": 0.25}  # large sets 0.25
    assert {n: c.deepspeed["zero_optimization"]["stage"] for n, c in after.items()} == \
        {"tiny": 0, "mini": 0, "small": 2, "base": 2, "large": 2}  # tiny and mini set 0
    for n in PRESET_NAMES:  # nothing else moved
        assert dataclasses.replace(after[n], objective=before[n].objective, deepspeed=before[n].deepspeed) == before[n]


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
    with pytest.raises(ConfigError, match=r"model: unknown key\(s\) \['hiden_size'\].*; did you mean hidden_size\?$"):
        ElectraConfig.from_dict({"model": {"hiden_size": 3}})
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['trainer'\].*'train'.*did you mean train\?"):
        ElectraConfig.from_dict({"trainer": {}})
    path = tmp_path / "bad.json"  # a user's file: the error names the file, the key and the closest
    path.write_text('{"optimizer": {"lr": 1e-4, "warmup": 2}}')
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).startswith(f"{path}: config.optimizer: unknown key(s) ['warmup']; known keys: ")
    assert str(err.value).endswith("; did you mean warmup_steps?")


def test_an_unknown_set_key_names_the_item_not_the_preset():
    with pytest.raises(ConfigError) as err:
        load_config("tiny", ["train.seed=1", "train.max_step=3"])
    assert str(err.value) == "--set train.max_step=3: unknown key 'max_step' in train; did you mean train.max_steps?"
    with pytest.raises(ConfigError) as err:
        load_config("tiny", ["optimizer.warmup=3"])
    assert str(err.value) == ("--set optimizer.warmup=3: unknown key 'warmup' in optimizer; "
                              "did you mean optimizer.warmup_steps?")
    # DeepSpeed's section is DeepSpeed's: any key goes through (DeepSpeed checks it)
    assert load_config("tiny", ["deepspeed.zero_optimization.reduce_bucket_size=5"]).deepspeed[
        "zero_optimization"] == {"stage": 0, "reduce_bucket_size": 5}


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
    from electra.run.job import job_from_args
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
    ("optimizer.lr", r"^--set optimizer.lr: expected section.key=value"),
    ("optimiser.lr=1", r"^--set optimiser.lr=1: unknown key 'optimiser' at the top level; did you mean optimizer\?"),
    ("model.hidden.size=3", r"unknown key 'hidden' in model; did you mean model.hidden_size( or |\?)"),
    ("model.hidden_size.x=3", r"model.hidden_size is a value, not a section"),
    ("model.hidden_sizes=3", r"^--set model.hidden_sizes=3: unknown key 'hidden_sizes' in model; did you mean "
                             r"model.hidden_size or model.embedding_size\?$"),  # difflib's closest, best first
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


@pytest.mark.parametrize("preset,overrides,warmup,share", [
    ("tiny", ["optimizer.total_steps=20"], 2, (30, 300)),  # 10%
    ("base", ["optimizer.total_steps=20000"], 261, (10_000, 766_000)),  # the README's continue-pretraining run
    ("small", ["optimizer.total_steps=3"], 1, (10_000, 1_000_000)),  # a share that rounds to 0: one step
    ("tiny", ["optimizer.total_steps=3000"], 300, (30, 300)),  # a longer schedule too
    ("tiny", ["optimizer.total_steps=20", "optimizer.warmup_steps=7"], 7, None),  # set: kept as given
    ("tiny", ["optimizer.warmup_steps=7", "optimizer.total_steps=20"], 7, None),
    ("tiny", ["optimizer.total_steps=300", "train.max_steps=20"], 30, None),  # the schedule unchanged
    ("base", [], 10_000, None),  # a preset's own total_steps keeps the paper's warm-up
])
def test_a_changed_total_keeps_the_files_share_of_warm_up(preset, overrides, warmup, share):
    """Issue 48: `--set optimizer.total_steps=N` kept the preset's warm-up in steps (base: 10,000 of a
    20,000-step run; tiny: 30 of 20, never reaching the peak rate)."""
    from electra.config import load_run_config

    loaded = load_run_config(preset, overrides)
    assert loaded.config.optimizer.warmup_steps == warmup
    assert (tuple(loaded.warmup_from) if loaded.warmup_from else None) == share
    assert load_config(preset, overrides) == loaded.config


def test_a_users_file_is_the_reference_and_no_warm_up_stays_none(tmp_path):
    from electra.config import load_run_config

    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps({"optimizer": {"warmup_steps": 50, "total_steps": 1000}}))
    assert load_run_config(mine, ["optimizer.total_steps=100"]).config.optimizer.warmup_steps == 5
    mine.write_text(json.dumps({"optimizer": {"warmup_steps": 0, "total_steps": 1000}}))
    assert load_run_config(mine, ["optimizer.total_steps=100"]).config.optimizer.warmup_steps == 0
    mine.write_text(json.dumps({"optimizer": {"warmup_steps": -1}}))  # fixed by the override: no share
    assert load_run_config(mine, ["optimizer.warmup_steps=3", "optimizer.total_steps=9"]).warmup_from is None
