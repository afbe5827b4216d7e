"""docs/interfaces.md names functions, classes and modules that callers rely on; this test keeps it
true by importing every one of them.

Which backticked spans are names (the rule is stated at the top of the page):
- a span that starts with one of the project's packages (``common.storage.write_bytes``) is an
  absolute name, checked wherever it appears (bullets, prose, tables);
- inside a bullet, a span that is a plain identifier or a dotted chain of them (``read_shard``,
  ``listed.ListedFile``, ``Lease.acquire``) is relative to the module of the bullet's last absolute
  span (the module itself, or the module a named class or function lives in), and is checked
  there (an attribute, or a submodule);
- a call's arguments and its return annotation are not names: ``f(x, *, y=1) -> T`` checks ``f``;
  ``a/b/c`` checks each of ``a``, ``b``, ``c``;
- file names and paths (``meta.json``, ``step_N/eval_pending.json``) are not names, nor is
  anything else (quoted literals like ``"electra.checkpoint.committed"``, paths with ``/`` and a
  dot, keys with ``=``, braces, spans that start with ``.``) is not a name.

A name resolves by importing the longest importable module prefix and ``getattr``-ing the rest; the
test fails listing every name that does not, with its line.
"""
from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "interfaces.md"
PACKAGES = ("common", "pipelines", "electra", "evaluation", "flows", "cli", "synthetic", "benchmarks")
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
CHAIN = re.compile(rf"^{IDENT}(?:\.{IDENT})*$")
SPAN = re.compile(r"`([^`]+)`")
# file names (`meta.json`, `electra/data/corpus.py`) look like dotted names but are not
FILE_SUFFIXES = ("json", "jsonl", "py", "md", "txt", "tar", "zst", "npy", "html", "png", "gz", "bz2",
                 "yaml", "toml", "tsv", "xml", "safetensors", "bin")


def candidate_names(span: str) -> list[str]:
    """The Python names a backticked span stands for ([] when it is not a name)."""
    span = span.strip()
    if not span or span[0] in "\"'{[.(<*-0123456789":
        return []
    head = span.split("->")[0].strip()
    if "(" in head:
        head = head[: head.index("(")].strip()
    if "/" in head and "." in head:
        return []  # a path
    parts = [p.strip() for p in head.split("/")]
    if any(p.rsplit(".", 1)[-1] in FILE_SUFFIXES and "." in p for p in parts):
        return []
    if all(CHAIN.match(p) for p in parts):
        return parts
    return []


def is_absolute(name: str) -> bool:
    return name.split(".")[0] in PACKAGES


def resolve(name: str, base: str | None = None):
    """The object `name` names (absolute, or relative to module `base`); raises LookupError."""
    parts = name.split(".")
    if base is None:
        obj = importlib.import_module(parts[0])
        parts = parts[1:]
    else:
        obj = importlib.import_module(base)
    for part in parts:
        if hasattr(obj, part):
            obj = getattr(obj, part)
            continue
        if isinstance(obj, type(importlib)):  # a module: maybe a submodule not imported yet
            try:
                obj = importlib.import_module(f"{obj.__name__}.{part}")
                continue
            except ModuleNotFoundError as exc:
                if exc.name != f"{obj.__name__}.{part}":
                    raise
        raise LookupError(f"{getattr(obj, '__name__', obj)!s} has no {part!r}")
    return obj


def module_of(name: str, obj) -> str:
    """The module a resolved absolute name lives in: itself for a module, else its longest prefix
    that is a module (``electra.run.runner.PretrainRunner`` -> ``electra.run.runner``)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if isinstance(sys.modules.get(candidate), type(importlib)):
            return candidate
    return parts[0]


def names_in(text: str) -> list[tuple[int, str, str | None]]:
    """(line number, name, base module or None) for every name the page mentions."""
    found = []
    for lineno, line in enumerate(text.splitlines(), 1):
        bullet = line.lstrip().startswith(("- ", "* "))
        base = None
        for span in SPAN.findall(line):
            for name in candidate_names(span):
                if is_absolute(name):
                    found.append((lineno, name, None))
                    try:
                        obj = resolve(name)
                    except ModuleNotFoundError:  # reported by the test; keep the old base
                        continue
                    except ImportError:  # a module that fails to import: its names fail with it
                        base = name
                        continue
                    except Exception:  # reported by the test; keep the old base
                        continue
                    base = module_of(name, obj)
                elif bullet:
                    found.append((lineno, name, base))
    return found


def test_parser_reads_the_forms_the_page_uses():
    assert candidate_names("common.storage.write_bytes") == ["common.storage.write_bytes"]
    assert candidate_names("Lease(path, *, ttl=) -> Lease") == ["Lease"]
    assert candidate_names("read_bytes/read_text/read_json") == ["read_bytes", "read_text", "read_json"]
    assert candidate_names('"electra.checkpoint.committed"') == []
    assert candidate_names("step_N/eval_pending.json") == []
    assert candidate_names('batch_format="numpy"') == []
    assert candidate_names(".size(path)") == []
    found = names_in("- `common.storage`: `join`, `listed.X`\nprose `join` and `common.hashing.digest`\n")
    assert found == [(1, "common.storage", None), (1, "join", "common.storage"),
                     (1, "listed.X", "common.storage"), (2, "common.hashing.digest", None)]
    # a name that is gone is caught, as an attribute and as a module
    with pytest.raises(LookupError):
        resolve("common.storage.put_file_that_never_was")
    with pytest.raises(Exception):
        resolve("common.no_such_module.f")
    assert resolve("read_range", "common.storage") is importlib.import_module("common.storage").read_range


def test_every_name_in_interfaces_md_exists():
    found = names_in(DOC.read_text(encoding="utf-8"))
    assert len(found) > 100, "the page should name the seams; did the parser stop matching?"
    missing = []
    for lineno, name, base in found:
        if base is None and not is_absolute(name):
            missing.append(f"line {lineno}: {name} (no module named before it in the bullet)")
            continue
        try:
            resolve(name, base)
        except Exception as exc:  # ImportError, LookupError, or an import-time failure
            where = f"{base}." if base else ""
            missing.append(f"line {lineno}: {where}{name} ({type(exc).__name__}: {exc})")
    assert not missing, "docs/interfaces.md names what the code does not have:\n" + "\n".join(missing)
