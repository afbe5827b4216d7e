"""Command-line flags generated from a job's dataclasses: the one flag helper of every CLI.

Every job (``CorpusJob``, ``PretrainJob``, ``EvaluationJob``) is a dataclass loaded by the strict
loader (``common.config``); its command line is generated from the same dataclasses, so a new
field is a new flag with the same type, choices and help, and no hand-written flag-to-key map
can drift from the config it sets.

* ``Flags(parser).fields(cls, section=...)``: one flag per field, ``--max-steps`` for
  ``max_steps``. The annotation decides the argparse shape: ``int``/``float``/``str`` take a
  value of that type; ``bool`` is ``--x/--no-x``; ``X | None`` is an ``X``; ``Literal[...]``
  gives ``choices``; ``list[X]`` is repeatable (``--source a --source b``). A field without a
  default is a required flag. Nested dataclasses and ``dict`` fields have no flag of their own
  (they are a config file's business, or a ``section`` of their own).
* ``Flags(parser).keys(root, [KeyFlag(...)])``: named flags that set config keys of a nested
  config (``--vocab-size`` sets ``tokenizer.vocab_size``); type and help come from the key's
  field, one flag may set several keys, extend a list or pick its key by value.
* Help text: a field's ``metadata["help"]`` (and ``metadata["metavar"]``), else the comment on or right above its line in the
  class's source (the project documents fields with comments), first sentence only.
* Defaults: shown as ``default 3``; a field whose default is decided at run time (``None``
  standing for "auto", "the corpus's", ...) says so in words, ``metadata["default"]``, and a
  ``None`` without them is not shown (its help says what it means), never as "default None".
* Every generated flag defaults to ``None`` (not given): ``given(args)`` returns only what the
  user typed, so a flag never overwrites a config file's value with a default.

Trade-off: flags follow field names, so renaming a field renames its flag; names kept for users'
scripts are listed where the flags are made (``names=`` / ``KeyFlag``).
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import io
import json
import textwrap
import tokenize
import types
import typing
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence, Union

from common.config import ConfigError, set_path

_FLAGS = "_generated_flags"  # the namespace attribute that carries the Flags (see Flags.__init__)


@dataclass(frozen=True)
class KeyFlag:
    """A named flag that sets one or more keys of a nested config."""

    name: str  # the flag without dashes, e.g. "vocab-size"; also its key in given(): vocab_size
    keys: tuple[str, ...]  # dotted config keys it sets (all of them, or the one ``route`` picks)
    help: str | None = None  # default: the help of the first key's field
    extend: bool = False  # a list key: the values are appended to the config's list
    route: Callable[[Any], str] | None = None  # picks the one key a value sets
    metavar: str | None = None

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")


@dataclass(frozen=True)
class _Flag:
    dest: str
    option: str  # the main option string, for messages


class Flags:
    """The flags a parser was given from dataclasses; ``given(args)`` reads them back."""

    def __init__(self, parser: argparse.ArgumentParser):
        self.parser = parser
        self.flags: list[_Flag] = []
        parser.set_defaults(**{_FLAGS: self})  # the parsed namespace then knows its flags

    def fields(self, cls: type, *, section: str | None = None, only: Iterable[str] | None = None,
               skip: Iterable[str] = (), names: Mapping[str, str | Sequence[str]] | None = None,
               title: str | None = None, required: bool | None = None, defaults: bool = True) -> None:
        """One flag per field of dataclass ``cls`` (module docstring). ``section``: the dotted
        prefix of the keys (``given`` then says ``section.field``); ``names``: the flag names
        (without dashes) of a field, replacing the generated one; ``required``: None = required
        when the field has no default; ``defaults``: show each field's default in its help
        (False where the real default is decided later, e.g. by the model's size)."""
        hints = typing.get_type_hints(cls)
        helps = field_help(cls)
        names, skip = dict(names or {}), set(skip)
        wanted = set(only) if only is not None else None
        target = self.parser.add_argument_group(title) if title else self.parser
        for f in dataclasses.fields(cls):
            if f.name in skip or (wanted is not None and f.name not in wanted) or not f.init:
                continue
            shape = _shape(hints[f.name])
            if shape is None:
                if wanted is not None:
                    raise TypeError(f"{cls.__name__}.{f.name}: {hints[f.name]!r} has no flag shape")
                continue
            flag_names = names.get(f.name, f.name.replace("_", "-"))
            options = [f"--{n}" for n in ([flag_names] if isinstance(flag_names, str) else flag_names)]
            has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            must = (not has_default) if required is None else required
            key = f"{section}.{f.name}" if section else f.name
            if f.metadata.get("metavar"):
                shape["metavar"] = f.metadata["metavar"]
            elif "type" in shape and "choices" not in shape:
                shape["metavar"] = f.name.upper()
            text = f.metadata.get("help") or helps.get(f.name, "")
            notes = [key] if section else []
            if has_default and not must and defaults:
                shown = f.default if f.default is not dataclasses.MISSING else f.default_factory()
                if f.metadata.get("default"):  # a default decided at run time, in words
                    notes.append(f"default: {f.metadata['default']}")
                elif shown is not None and (shown not in ([], {}) or section):
                    notes.append(f"default {shown!r}")
            if notes:
                text = f"{text} ({'; '.join(notes)})" if text else "; ".join(notes)
            target.add_argument(*options, dest=key, default=None, required=must, help=_escape(text), **shape)
            self.flags.append(_Flag(key, options[0]))

    def keys(self, root: type, specs: Iterable[KeyFlag], *, title: str | None = None) -> None:
        """A flag per ``KeyFlag``; type, choices and help from the field of its first key in
        the nested dataclass ``root``."""
        target = self.parser.add_argument_group(title) if title else self.parser
        for spec in specs:
            owner, leaf = resolve_key(root, spec.keys[0])
            f = next(x for x in dataclasses.fields(owner) if x.name == leaf)
            shape = _shape(typing.get_type_hints(owner)[leaf])
            if shape is None:
                raise TypeError(f"{spec.keys[0]}: {f.type!r} has no flag shape")
            if spec.route is not None:  # the value picks the key: choices would be the first key's only
                shape.pop("choices", None)
            if spec.metavar:
                shape["metavar"] = spec.metavar
            elif "type" in shape and "choices" not in shape:
                shape["metavar"] = spec.dest.upper()
            text = spec.help or f.metadata.get("help") or field_help(owner).get(leaf, "")
            text = f"{text} ({', '.join(spec.keys)})" if spec.help is None else text
            target.add_argument(f"--{spec.name}", dest=spec.dest, default=None, help=_escape(text), **shape)
            self.flags.append(_Flag(spec.dest, f"--{spec.name}"))

    def config(self, *, help: str, required: bool = False, set_help: str) -> None:
        """``--config LOCATION`` and the repeatable ``--set SECTION.KEY=VALUE`` (dest ``set``)."""
        self.parser.add_argument("--config", default=None, required=required, help=_escape(help))
        self.parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                                 dest="set", help=_escape(set_help))


def given(args: argparse.Namespace) -> dict[str, Any]:
    """``{dest: value}`` of the generated flags the command line gave (None = not given)."""
    flags: Flags | None = getattr(args, _FLAGS, None)
    if flags is None:
        raise ValueError("given(): these arguments were not parsed by a parser with generated flags")
    return {f.dest: getattr(args, f.dest) for f in flags.flags if getattr(args, f.dest, None) is not None}


def nested(values: Mapping[str, Any]) -> dict[str, Any]:
    """``{"recipe.lr": 1e-4, "out": "o"}`` -> ``{"recipe": {"lr": 1e-4}, "out": "o"}``."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        set_path(out, key, value)
    return out


def as_overrides(values: Mapping[str, Any]) -> list[str]:
    """``{"train.max_steps": 5}`` -> ``["train.max_steps=5"]`` (``common.config.apply_override``
    parses the value back: JSON for numbers and booleans, a string as it is)."""
    return [f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in values.items()]


def apply_keys(raw: dict[str, Any], specs: Iterable[KeyFlag], values: Mapping[str, Any]) -> dict[str, Any]:
    """Set the keys of each ``KeyFlag`` whose value was given (not None) in the raw config
    mapping ``raw`` (in place; returned). Unknown names are a ``ConfigError``."""
    by_dest = {s.dest: s for s in specs}
    unknown = sorted(set(values) - set(by_dest))
    if unknown:
        raise ConfigError(f"unknown flag(s) {unknown}; known: {sorted(by_dest)}")
    for name, value in values.items():
        if value is None:
            continue
        spec = by_dest[name]
        for key in (spec.route(value),) if spec.route else spec.keys:
            if spec.extend:
                current = _get_path(raw, key, [])
                if not isinstance(current, list):
                    raise ConfigError(f"{key}: expected a list of locations, got {current!r}")
                value_ = current + list(value)
            else:
                value_ = list(value) if isinstance(value, tuple) else value
            set_path(raw, key, value_)
    return raw


def resolve_key(root: type, dotted: str) -> tuple[type, str]:
    """The dataclass that owns the last part of ``dotted`` under ``root``, and that part."""
    *parents, leaf = dotted.split(".")
    owner = root
    for part in parents:
        owner = typing.get_type_hints(owner)[part]
        if not dataclasses.is_dataclass(owner):
            raise TypeError(f"{dotted}: {part} is not a section")
    if leaf not in {f.name for f in dataclasses.fields(owner)}:
        raise TypeError(f"{dotted}: no such key")
    return owner, leaf


@functools.lru_cache(maxsize=None)
def field_help(cls: type) -> dict[str, str]:
    """Each field's comment in the class's source: the one on its line, else the block of comment
    lines right above it; first sentence, without the ``#``. Empty when there is no source."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    comments: dict[int, tuple[str, bool]] = {}  # line -> (text, alone on its line)
    lines = source.splitlines()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            alone = not lines[tok.start[0] - 1][:tok.start[1]].strip()
            comments[tok.start[0]] = (tok.string.lstrip("#").strip(), alone)
    out = {}
    body = ast.parse(source).body[0]
    for node in getattr(body, "body", []):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        trailing = [comments[n][0] for n in range(node.lineno, node.end_lineno + 1)
                    if n in comments and not comments[n][1]]
        above, n = [], node.lineno - 1
        while n in comments and comments[n][1]:
            above.insert(0, comments[n][0])
            n -= 1
        text = " ".join(trailing or above)
        if text:
            out[node.target.id] = _first_sentence(text)
    return out


# ---------------------------------------------------------------------------------------------
def _shape(annotation: Any) -> dict[str, Any] | None:
    """argparse keywords for an annotation (the loader checks the value again), or None."""
    typ = annotation
    if typing.get_origin(typ) in (Union, types.UnionType):
        options = [t for t in typing.get_args(typ) if t is not type(None)]
        lists = [t for t in options if typing.get_origin(t) in (list, tuple)]
        typ = lists[0] if lists else options[0]  # list[str] | str: repeatable
    origin = typing.get_origin(typ)
    if origin in (list, tuple):
        (item,) = typing.get_args(typ)[:1] or (str,)
        inner = _shape(item)
        if inner is None or "action" in inner:
            return None
        return {"action": "append", **inner}
    if typ is bool:
        return {"action": argparse.BooleanOptionalAction}
    if origin is Literal:
        choices = list(typing.get_args(typ))
        return {"choices": choices, "type": type(choices[0])}
    if typ in (int, float, str):
        return {"type": typ}
    return None  # a nested dataclass, dict, Any: no flag of its own


def _get_path(raw: Mapping[str, Any], dotted: str, default: Any) -> Any:
    node: Any = raw
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def _first_sentence(text: str) -> str:
    end = text.find(". ")
    return text[:end + 1] if end >= 0 else text


def _escape(text: str) -> str:
    return text.replace("%", "%%")
