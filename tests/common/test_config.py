"""The strict config loader: every kind of mistake is an error at load time naming the key."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pytest

from common.config import (ConfigError, apply_override, check, check_key, closest, coerce, from_dict, load_json,
                           parse_value, set_path, to_dict)


@dataclass
class Tok:
    kind: Literal["wordpiece", "unigram"] = "wordpiece"
    vocab_size: int = 100
    lowercase: bool = True
    pretrained: str | None = None

    def validate(self) -> None:
        check(self.vocab_size > 5, "vocab_size must exceed 5")


@dataclass
class Opt:
    lr: float = 1e-3
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    deepspeed: dict = field(default_factory=dict)


@dataclass
class Top:
    steps: int = 10
    tokenizer: Tok = field(default_factory=Tok)
    optim: Opt = field(default_factory=Opt)
    label: int | str = 0


W = "corpus config"


def test_defaults_and_a_full_round_trip():
    assert from_dict(Top, {}) == Top()
    cfg = from_dict(Top, {"steps": 5, "tokenizer": {"kind": "unigram", "pretrained": "s3://b/v.txt"},
                          "optim": {"lr": 1, "betas": [0.8, 1], "deepspeed": {"zero": {"stage": 2}}}})
    assert cfg.optim.lr == 1.0 and isinstance(cfg.optim.lr, float) and cfg.optim.betas == [0.8, 1.0]
    assert from_dict(Top, to_dict(cfg)) == cfg


def test_unknown_keys_are_named_with_the_known_ones():
    with pytest.raises(ConfigError) as info:
        from_dict(Top, {"tokenizer": {"vocab": 5}}, where=W)
    assert str(info.value) == (f"{W}.tokenizer: unknown key(s) ['vocab']; known keys: "
                               "['kind', 'lowercase', 'pretrained', 'vocab_size']; did you mean vocab_size?")
    with pytest.raises(ConfigError) as info:  # nothing close: the known keys only
        from_dict(Top, {"b": 1, "a": 2}, where=W)
    assert str(info.value) == f"{W}: unknown key(s) ['a', 'b']; known keys: ['label', 'optim', 'steps', 'tokenizer']"
    with pytest.raises(ConfigError) as info:  # several: each with its closest
        from_dict(Top, {"step": 1, "tokeniser": {}, "zzz": 0}, where=W)
    assert str(info.value).endswith("; did you mean steps (for step), tokenizer (for tokeniser)?")


def test_closest_keys_are_difflib_s():
    assert closest("max_step", ["max_steps", "save_every", "seed"]) == ["max_steps"]
    assert closest("lr", ["lr", "beta1"]) == ["lr"] and closest("qqq", ["lr", "beta1"]) == []


def test_an_override_is_checked_against_the_schema_and_names_the_item():
    """With the schema, a mistyped --set key is blamed on the --set item, with the closest keys,
    before anything is merged (without it, from_dict would blame the file it was merged into)."""
    raw = {"steps": 3}
    with pytest.raises(ConfigError) as info:
        apply_override(raw, "tokenizer.vocab=5", Top)
    assert str(info.value) == ("--set tokenizer.vocab=5: unknown key 'vocab' in tokenizer; "
                               "did you mean tokenizer.vocab_size?")
    assert raw == {"steps": 3}  # nothing merged
    with pytest.raises(ConfigError) as info:
        apply_override(raw, "tokeniser.kind=unigram", Top, flag="--override")
    assert str(info.value) == "--override tokeniser.kind=unigram: unknown key 'tokeniser' at the top level; " \
                              "did you mean tokenizer?"
    with pytest.raises(ConfigError) as info:  # nothing close: the section's keys
        apply_override(raw, "optim.zzz=1", Top)
    assert str(info.value) == ("--set optim.zzz=1: unknown key 'zzz' in optim; "
                               "known: optim.betas, optim.deepspeed, optim.lr")
    with pytest.raises(ConfigError, match=r"^--set optim\.lr\.x=1: optim\.lr is a value, not a section"):
        apply_override(raw, "optim.lr.x=1", Top)
    with pytest.raises(ConfigError, match=r"^--set steps\.x=1: steps is a value, not a section"):
        apply_override(raw, "steps.x=1", Top)
    # a dict field is a tool's own tree: any key below it; a valid key goes in as before
    apply_override(raw, "optim.deepspeed.anything.at.all=2", Top)
    apply_override(raw, "tokenizer.vocab_size=7", Top)
    assert raw == {"steps": 3, "optim": {"deepspeed": {"anything": {"at": {"all": 2}}}}, "tokenizer": {"vocab_size": 7}}
    check_key(Top, ["label"], "x")  # a top-level value is a key too (the loader decides what may be set)


def test_literal_violations_name_the_key_and_the_allowed_values():
    with pytest.raises(ConfigError) as info:
        from_dict(Top, {"tokenizer": {"kind": "bpe"}}, where=W)
    assert str(info.value) == f"{W}.tokenizer.kind: 'bpe' is not one of ['wordpiece', 'unigram']"
    with pytest.raises(ConfigError, match="is not one of"):
        coerce(True, Literal[1, 2], "x")  # True == 1, but a bool is not the literal 1


@pytest.mark.parametrize("value,ok", [(True, False), (1e6, True), (1.5, False), ("3", False), (3, True),
                                      (2.0 ** 53, False), (-4.0, True), (None, False)])
def test_int_fields(value, ok):
    if ok:
        got = from_dict(Top, {"steps": value}).steps
        assert got == int(value) and type(got) is int
    else:
        with pytest.raises(ConfigError, match=r"^config\.steps: expected int, got "):
            from_dict(Top, {"steps": value})


def test_bool_float_str_list_and_optional_fields():
    with pytest.raises(ConfigError, match=r"config\.tokenizer\.lowercase: expected bool, got 1$"):
        from_dict(Top, {"tokenizer": {"lowercase": 1}})
    with pytest.raises(ConfigError, match=r"config\.optim\.lr: expected float, got True"):
        from_dict(Top, {"optim": {"lr": True}})
    with pytest.raises(ConfigError, match=r"config\.optim\.lr: expected float, got '0\.1'"):
        from_dict(Top, {"optim": {"lr": "0.1"}})
    with pytest.raises(ConfigError, match=r"config\.optim\.betas\[1\]: expected float, got 'x'"):
        from_dict(Top, {"optim": {"betas": [0.9, "x"]}})
    with pytest.raises(ConfigError, match=r"config\.optim\.betas: expected a list, got 0\.9"):
        from_dict(Top, {"optim": {"betas": 0.9}})
    with pytest.raises(ConfigError, match=r"config\.tokenizer\.pretrained: expected str, got 5"):
        from_dict(Top, {"tokenizer": {"pretrained": 5}})
    with pytest.raises(ConfigError, match=r"config\.optim\.deepspeed: expected dict"):
        from_dict(Top, {"optim": {"deepspeed": [1]}})
    with pytest.raises(ConfigError, match=r"config\.tokenizer: expected a JSON object, got str"):
        from_dict(Top, {"tokenizer": "wordpiece"})
    assert from_dict(Top, {"tokenizer": {"pretrained": None}}).tokenizer.pretrained is None
    assert from_dict(Top, {"label": "x"}).label == "x" and from_dict(Top, {"label": 3}).label == 3
    with pytest.raises(ConfigError, match=r"config\.label: 1\.5 fits none of"):
        from_dict(Top, {"label": 1.5})
    # dict sections are passed through, as a private copy
    raw = {"optim": {"deepspeed": {"zero": {"stage": 2}}}}
    cfg = from_dict(Top, raw)
    raw["optim"]["deepspeed"]["zero"]["stage"] = 3
    assert cfg.optim.deepspeed == {"zero": {"stage": 2}}


def test_validate_runs_after_building_and_is_prefixed_with_the_path():
    with pytest.raises(ConfigError) as info:
        from_dict(Top, {"tokenizer": {"vocab_size": 3}}, where=W)
    assert str(info.value) == f"{W}.tokenizer: vocab_size must exceed 5"
    with pytest.raises(ConfigError, match="unsupported annotation"):
        coerce(1, set[int], "x")


def test_overrides_then_from_dict():
    raw = {"steps": 1e6, "tokenizer": {"kind": "unigram"}}
    apply_override(raw, "tokenizer.vocab_size=3e4")
    apply_override(raw, "tokenizer.lowercase=false")
    apply_override(raw, "optim.betas=[0.5, 0.6]")
    apply_override(raw, "tokenizer.pretrained=s3://bucket/vocab.txt")
    apply_override(raw, "optim.deepspeed.zero.stage=3")
    cfg = from_dict(Top, raw)
    assert (cfg.steps, cfg.tokenizer.kind, cfg.tokenizer.lowercase) == (1_000_000, "unigram", False)
    assert cfg.tokenizer.vocab_size == 30_000 and type(cfg.tokenizer.vocab_size) is int
    assert cfg.optim.betas == [0.5, 0.6] and cfg.tokenizer.pretrained == "s3://bucket/vocab.txt"
    assert cfg.optim.deepspeed == {"zero": {"stage": 3}}
    apply_override(raw, "tokenizer.kind=bpe")  # checked by from_dict, exactly like the file
    with pytest.raises(ConfigError, match=r"tokenizer\.kind: 'bpe' is not one of"):
        from_dict(Top, raw)
    apply_override(raw, "tokenizer.typo=1")
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['typo'\]"):
        from_dict(Top, raw)
    for bad in ("steps", "steps=3", ".x=1", "a..b=1"):  # top-level scalars are not overridable
        with pytest.raises(ConfigError, match="expected section.key=value"):
            apply_override({}, bad)
    with pytest.raises(ConfigError, match="'steps' is not a section"):
        apply_override({"steps": 3}, "steps.x=1")
    assert [parse_value(t) for t in ("3", "1.5", "true", "null", "[1]", "wordpiece", "s3://b")] == \
        [3, 1.5, True, None, [1], "wordpiece", "s3://b"]
    raw = {}
    set_path(raw, "a.b.c", 1)
    set_path(raw, "a.d", 2)
    assert raw == {"a": {"b": {"c": 1}, "d": 2}}


def test_load_json_errors_name_the_file_and_line(tmp_path):
    path = tmp_path / "cfg.json"
    path.write_text('{\n  "steps": 3,\n  "tokenizer": {"kind": "wordpiece",}\n}\n')
    with pytest.raises(ConfigError, match=rf"^{path}:3: invalid JSON"):
        load_json(str(path))
    path.write_text("[1, 2]")
    with pytest.raises(ConfigError, match=rf"^{path}: top level must be a JSON object"):
        load_json(str(path))
    with pytest.raises(ConfigError, match=rf"^{tmp_path}/none.json: cannot read config"):
        load_json(str(tmp_path / "none.json"))
    path.write_text('{"steps": 7}')
    assert from_dict(Top, load_json(str(path))).steps == 7
