"""The one flag helper (``common.cli``): argparse flags generated from dataclasses.

Each test builds a small dataclass of its own and checks what a command line parses to against
values written out by hand (the argparse shapes: typed values, ``--x/--no-x``, choices,
repeatable lists, required fields, help from metadata and comments, named config flags).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Literal

import pytest

from common import cli
from common.config import ConfigError


@dataclass
class Inner:
    size: int = 8  # how many; a second sentence is left out of the help
    # the ratio kept
    ratio: float | None = 0.5
    kind: Literal["a", "b"] = "a"
    paths: list[str] = field(default_factory=list)
    flag: bool | None = None


@dataclass
class Root:
    inner: Inner = field(default_factory=Inner)
    name: str = "x"


@dataclass(frozen=True)
class Job:
    sources: list[str] = field(metadata={"help": "where from", "metavar": "SOURCE"})
    out: str = field(metadata={"help": "where to"})
    workers: int = 1
    keep: bool = False
    mode: Literal["fast", "slow"] = "fast"
    table: dict = field(default_factory=dict)  # no flag: a dict has no flag shape


def parser_with(*build) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="t", exit_on_error=False)
    flags = cli.Flags(p)
    for step in build:
        step(flags)
    return p


def test_fields_give_typed_flags_and_given_returns_only_what_was_typed():
    p = parser_with(lambda f: f.fields(Job, names={"sources": "source"}))
    args = p.parse_args(["--source", "a", "--source", "b", "--out", "o", "--workers", "3", "--keep",
                         "--mode", "slow"])
    assert cli.given(args) == {"sources": ["a", "b"], "out": "o", "workers": 3, "keep": True, "mode": "slow"}
    assert cli.given(p.parse_args(["--source", "a", "--out", "o", "--no-keep"])) == \
        {"sources": ["a"], "out": "o", "keep": False}
    options = {o for a in p._actions for o in a.option_strings}
    assert "--table" not in options and "--sources" not in options and "--no-keep" in options


def test_a_field_without_default_is_required_and_types_and_choices_are_checked(capsys):
    p = parser_with(lambda f: f.fields(Job))
    for argv in (["--out", "o"], ["--sources", "a", "--out", "o", "--workers", "two"],
                 ["--sources", "a", "--out", "o", "--mode", "medium"]):
        with pytest.raises((SystemExit, argparse.ArgumentError)):
            p.parse_args(argv)


def test_section_fields_are_keys_with_the_section_prefix_and_aliases():
    p = parser_with(lambda f: f.fields(Inner, section="inner", names={"size": ("size", "n")}))
    args = p.parse_args(["--n", "4", "--ratio", "0.25", "--paths", "p", "--paths", "q", "--no-flag"])
    given = cli.given(args)
    assert given == {"inner.size": 4, "inner.ratio": 0.25, "inner.paths": ["p", "q"], "inner.flag": False}
    assert cli.nested(given) == {"inner": {"size": 4, "ratio": 0.25, "paths": ["p", "q"], "flag": False}}
    assert cli.as_overrides({"inner.size": 4, "inner.flag": False, "inner.kind": "b"}) == \
        ["inner.size=4", "inner.flag=false", "inner.kind=b"]


def test_help_comes_from_metadata_or_the_fields_comment():
    assert cli.field_help(Inner) == {"size": "how many; a second sentence is left out of the help",
                                     "ratio": "the ratio kept"}
    text = parser_with(lambda f: f.fields(Inner, section="inner"), lambda f: f.fields(Job)).format_help()
    assert "where from" in text and "the ratio kept (inner.ratio; default 0.5)" in " ".join(text.split())
    assert "--sources SOURCE" in text


def test_key_flags_set_routed_extended_and_several_keys():
    specs = (cli.KeyFlag("size", ("inner.size",)),
             cli.KeyFlag("both", ("inner.size", "inner.ratio"), help="both"),
             cli.KeyFlag("path", ("inner.paths",), extend=True),
             cli.KeyFlag("what", ("name", "inner.kind"), route=lambda v: "inner.kind" if v in ("a", "b") else "name"))
    p = parser_with(lambda f: f.keys(Root, specs))
    args = p.parse_args(["--path", "p2", "--what", "b", "--size", "3"])
    assert cli.given(args) == {"path": ["p2"], "what": "b", "size": 3}
    raw = {"inner": {"paths": ["p1"]}}
    assert cli.apply_keys(raw, specs, cli.given(args)) == {"inner": {"paths": ["p1", "p2"], "kind": "b", "size": 3}}
    assert cli.apply_keys({}, specs, {"what": "zz", "both": 2}) == {"name": "zz", "inner": {"size": 2, "ratio": 2}}
    with pytest.raises(ConfigError, match="inner.paths: expected a list"):
        cli.apply_keys({"inner": {"paths": "p"}}, specs, {"path": ["x"]})
    with pytest.raises(ConfigError, match="unknown flag"):
        cli.apply_keys({}, specs, {"nope": 1})


def test_given_needs_a_parser_with_generated_flags():
    with pytest.raises(ValueError, match="generated flags"):
        cli.given(argparse.Namespace(x=1))


@dataclass
class Auto:
    steps: int | None = field(default=None, metadata={"default": "the schedule's"})  # steps to run
    peak: float | None = None  # None: a table by device
    size: int = 8


def test_a_default_decided_at_run_time_is_said_in_words_never_as_none():
    """``--keep-until-evaluated`` read "(... default None)" for an on/off/auto flag."""
    text = " ".join(parser_with(lambda f: f.fields(Auto, section="auto")).format_help().split())
    assert "steps to run (auto.steps; default: the schedule's)" in text
    assert "None: a table by device (auto.peak)" in text and "default None" not in text
    assert "--size SIZE auto.size; default 8" in text
