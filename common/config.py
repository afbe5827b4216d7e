"""One strict, typed config loader for the corpus, trainer and fine-tuning configs.

A config is a tree of dataclasses whose field annotations are the schema. ``from_dict`` builds
it from parsed JSON and rejects, at load time and with the key's full name:

* unknown keys (a typo never falls back to a default silently), listing the known ones;
* wrong types: ``bool`` is not an ``int``, a string is not a number, ``1.5`` is not an ``int``
  (``1e6`` is: JSON writes big step counts that way);
* values outside a field's allowed set, written as ``typing.Literal["wordpiece", "unigram"]``;
* whatever a section's own ``validate()`` rejects (ranges, cross-field rules), called after the
  section is built.

Supported annotations: ``int``, ``float``, ``str``, ``bool``, ``dict`` (passed through, for
sections owned by another tool such as DeepSpeed), ``list[X]``, ``X | None``, ``Literal[...]``
and nested dataclasses. ``apply_override`` sets ``a.b.c=value`` in the raw mapping before
``from_dict`` checks it, so command-line overrides get exactly the same checks as the file.
"""
from __future__ import annotations

import dataclasses
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
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known keys: {sorted(names)}")
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


def apply_override(raw: dict[str, Any], item: str) -> None:
    """Set ``a.b.c=value`` in the raw mapping (in place); ``from_dict`` type-checks it later."""
    key, sep, text = item.partition("=")
    path = key.strip().split(".")
    if not sep or len(path) < 2 or not all(path):
        raise ConfigError(f"override {item!r}: expected section.key=value")
    node = raw
    for part in path[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {item!r}: {part!r} is not a section")
    node[path[-1]] = parse_value(text)


def set_path(raw: dict[str, Any], dotted: str, value: Any) -> None:
    """``raw[a][b][c] = value`` for ``dotted = "a.b.c"`` (flags that map onto config keys)."""
    *parents, leaf = dotted.split(".")
    node = raw
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
