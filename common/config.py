"""One strict, typed config loader for the corpus, trainer and fine-tuning configs.

A config is a tree of dataclasses whose field annotations are the schema. ``from_dict`` builds
it from parsed JSON and rejects, at load time and with the key's full name:

* unknown keys (a typo never falls back to a default silently), listing the known ones and the
  closest of them (``difflib``: ``max_step`` -> ``max_steps``);
* wrong types: ``bool`` is not an ``int``, a string is not a number, ``1.5`` is not an ``int``
  (``1e6`` is: JSON writes big step counts that way);
* values outside a field's allowed set, written as ``typing.Literal["wordpiece", "unigram"]``;
* whatever a section's own ``validate()`` rejects (ranges, cross-field rules), called after the
  section is built.

Supported annotations: ``int``, ``float``, ``str``, ``bool``, ``dict`` (passed through, for
sections owned by another tool such as DeepSpeed), ``list[X]``, ``X | None``, ``Literal[...]``
and nested dataclasses. ``apply_override`` sets ``a.b.c=value`` in the raw mapping before
``from_dict`` checks it, so command-line overrides get exactly the same checks as the file; given
the schema, it first checks the key itself, so a mistyped ``--set`` key is blamed on the ``--set``
item (with the closest valid keys), not on the config file it is merged into.
"""
from __future__ import annotations

import dataclasses
import difflib
import json
import types
import typing
from typing import Any, Literal, TypeVar, Union

T = TypeVar("T")


class ConfigError(ValueError):
    """A config file, mapping or override that does not fit the schema; names the key."""


def check(ok: bool, message: str) -> None:
    """Raise ``ConfigError(message)`` unless ``ok`` (for ``validate()`` methods)."""
    if not ok:
        raise ConfigError(message)


def from_dict(cls: type[T], data: Any, *, where: str = "config") -> T:
    """Build dataclass ``cls`` from ``data`` strictly (see the module docstring)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a JSON object, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known keys: {sorted(names)}"
                          + suggestion(unknown, names))
    kwargs = {k: coerce(v, hints[k], f"{where}.{k}") for k, v in data.items()}
    obj = cls(**kwargs)
    validate = getattr(obj, "validate", None)
    if callable(validate):
        try:
            validate()
        except ConfigError as exc:
            text = str(exc)
            raise ConfigError(text if text.startswith(where) else f"{where}: {text}") from None
    return obj


def coerce(value: Any, typ: Any, where: str) -> Any:
    """``value`` checked against annotation ``typ`` (and converted int -> float where allowed)."""
    origin = typing.get_origin(typ)
    if origin in (Union, types.UnionType):
        options = typing.get_args(typ)
        if value is None and type(None) in options:
            return None
        inner = [t for t in options if t is not type(None)]
        if len(inner) == 1:
            return coerce(value, inner[0], where)
        for option in inner:
            try:
                return coerce(value, option, where)
            except ConfigError:
                continue
        raise ConfigError(f"{where}: {value!r} fits none of {inner}")
    if origin is Literal:
        allowed = typing.get_args(typ)
        if isinstance(value, bool) or value not in allowed:
            raise ConfigError(f"{where}: {value!r} is not one of {list(allowed)}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        (item,) = typing.get_args(typ)[:1] or (Any,)
        out = [value_ if item is Any else coerce(value_, item, f"{where}[{i}]") for i, value_ in enumerate(value)]
        return out if origin is list else tuple(out)
    if dataclasses.is_dataclass(typ):
        return from_dict(typ, value, where=where)
    if typ is Any:
        return value
    if typ is bool:
        if isinstance(value, bool):
            return value
    elif typ is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer() and abs(value) < 2 ** 53:
            return int(value)
    elif typ is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif typ is str:
        if isinstance(value, str):
            return value
    elif typ is dict or origin is dict:
        if isinstance(value, dict):
            return json.loads(json.dumps(value))  # a private deep copy
    else:
        raise ConfigError(f"{where}: unsupported annotation {typ!r}")
    raise ConfigError(f"{where}: expected {getattr(typ, '__name__', typ)}, got {value!r}")


def closest(key: str, known: typing.Iterable[str]) -> list[str]:
    """Up to three of ``known`` that look like ``key`` (a typo's likely intent), best first."""
    return difflib.get_close_matches(key, list(known), n=3, cutoff=0.6)


def suggestion(unknown: typing.Sequence[str], known: typing.Iterable[str], prefix: str = "") -> str:
    """``"; did you mean max_steps?"`` for the unknown keys that have a close known one, else ``""``."""
    known = list(known)
    hints = [(key, closest(key, known)) for key in unknown]
    hints = [(key, [prefix + m for m in match]) for key, match in hints if match]
    if not hints:
        return ""
    if len(unknown) == 1:
        return f"; did you mean {' or '.join(hints[0][1])}?"
    return "; did you mean " + ", ".join(f"{' or '.join(m)} (for {k})" for k, m in hints) + "?"


def check_key(schema: type, path: typing.Sequence[str], where: str) -> None:
    """Raise a ``ConfigError`` naming ``where`` unless ``path`` (``["train", "max_steps"]``) is a key
    of dataclass ``schema``: each part a field, every part but the last a nested dataclass; below a
    ``dict`` field (a tool's own section, e.g. DeepSpeed's) anything goes."""
    node: Any = schema
    for depth, part in enumerate(path):
        if not dataclasses.is_dataclass(node):  # a pass-through dict: its owner checks it
            return
        names = [f.name for f in dataclasses.fields(node) if f.init]
        parent = ".".join(path[:depth])
        prefix = f"{parent}." if parent else ""
        if part not in names:
            place = f"in {parent}" if parent else "at the top level"
            hint = suggestion([part], names, prefix)
            raise ConfigError(f"{where}: unknown key {part!r} {place}"
                              + (hint or f"; known: {', '.join(prefix + n for n in sorted(names))}"))
        node = _dataclass_of(typing.get_type_hints(node)[part])
        if node is None and depth < len(path) - 1:
            raise ConfigError(f"{where}: {prefix}{part} is a value, not a section ({prefix}{part}=VALUE)")


def _dataclass_of(typ: Any) -> Any:
    """The nested dataclass (or ``dict``) an annotation holds, else None (a plain value)."""
    if typing.get_origin(typ) in (Union, types.UnionType):
        inner = [_dataclass_of(t) for t in typing.get_args(typ) if t is not type(None)]
        return next((t for t in inner if t is not None), None)
    if dataclasses.is_dataclass(typ) or typ is dict or typing.get_origin(typ) is dict:
        return typ
    return None


def to_dict(obj: Any) -> dict[str, Any]:
    return dataclasses.asdict(obj)


def load_json(uri: str) -> dict[str, Any]:
    """A JSON config file (any storage location) as a mapping; errors name the file and line."""
    from common import storage

    try:
        text = storage.read_text(uri)
    except OSError as exc:
        raise ConfigError(f"{uri}: cannot read config: {exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{uri}:{exc.lineno}: invalid JSON: {exc.msg}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{uri}: top level must be a JSON object")
    return data


def parse_value(text: str) -> Any:
    """A command-line value: JSON when it parses (numbers, true, null, lists), else a string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def apply_override(raw: dict[str, Any], item: str, schema: type | None = None, *, flag: str = "--set") -> None:
    """Set ``a.b.c=value`` in the raw mapping (in place); ``from_dict`` type-checks it later.
    With ``schema`` (the config's dataclass) the key is checked first, and an error names
    ``flag item`` (``--set train.max_step=3``) and the closest valid keys."""
    key, sep, text = item.partition("=")
    path = key.strip().split(".")
    if not sep or len(path) < 2 or not all(path):
        raise ConfigError(f"{flag} {item}: expected section.key=value")
    if schema is not None:
        check_key(schema, path, f"{flag} {item}")
    node = raw
    for part in path[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{flag} {item}: {part!r} is not a section")
    node[path[-1]] = parse_value(text)


def set_path(raw: dict[str, Any], dotted: str, value: Any) -> None:
    """``raw[a][b][c] = value`` for ``dotted = "a.b.c"`` (flags that map onto config keys)."""
    *parents, leaf = dotted.split(".")
    node = raw
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
