"""Where the filter blocks are declared: each block module registers itself; nothing else lists them.

A block is one module of this package (``pipelines/filters/<name>.py``, walk-through in
docs/add-a-filter.md) holding its config section, a dataclass, and a factory that builds the
block from that section, decorated with ``@register``::

    @dataclass
    class ShoutingConfig:
        max_upper_frac: float | None = 0.5

    @register("shouting", config=ShoutingConfig, position=45, default=False)
    def build(cfg: ShoutingConfig) -> Shouting: ...

``blocks()`` imports every module of the package once (``pkgutil.iter_modules`` over the
package's ``__path__``; modules whose name starts with ``_`` are skipped) and returns what they
declared, ordered by ``position``, then name. Everything else is derived from that list:
``pipelines.config`` makes ``FilterConfig`` from it (a section ``filter.<name>`` per block, the
names ``filter.blocks`` accepts, and the default ``filter.blocks``: the blocks declared
``default=True``, by position), and ``pipelines.filters.base`` builds the blocks from it.

Trade-offs. Discovery by import means importing the corpus config imports every block module
(the language and language-model blocks bring numba, about a second on a busy machine); a
static type checker cannot see ``FilterConfig``'s sections, which are made at import time (the
strict loader, the CLI generator and pickling to Ray workers see an ordinary dataclass). In
exchange a block is one file: nothing to keep in step in the config, the base module or a list
of imports. ``position`` is an explicit number, not the file name, so renaming a file never
reorders the filters (the order decides which block names a document's drop reason).

This module imports nothing of the pipeline, so that ``pipelines.config`` can use it while
the block modules, which import ``pipelines.filters.base``, are being imported.
"""
from __future__ import annotations

import importlib
import pkgutil
import sys
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class BlockSpec:
    name: str  # the block's name: its section filter.<name>, its entry in filter.blocks, its reasons
    config: type  # the section's dataclass (defaults and validate())
    build: Callable[..., Any]  # section (and the language's splitter, if `splitter`) -> the block
    position: int  # where the block runs among the others (default order of filter.blocks)
    default: bool  # in the default filter.blocks (else the user lists it to turn it on)
    splitter: bool  # build takes the name of the language's word splitter as a second argument
    # The block measures words or sentences with numbers calibrated per language: a language
    # without calibrated thresholds skips it (pipelines.language.profiles).
    counts_words: bool
    module: str


_DECLARED: dict[str, BlockSpec] = {}
_SCANNED: list[BlockSpec] = []


def register(name: str, *, config: type, position: int, default: bool = True, splitter: bool = False,
             counts_words: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare the decorated factory as block ``name`` configured by dataclass ``config`` (see the
    module docstring and ``BlockSpec`` for the other arguments)."""
    def wrap(factory: Callable[..., Any]) -> Callable[..., Any]:
        module = getattr(factory, "__module__", "")
        earlier = _DECLARED.get(name)
        if earlier is not None and earlier.module != module:
            raise ValueError(f"filter block {name!r} is declared twice: in {earlier.module} and {module}")
        if not name.isidentifier():
            raise ValueError(f"filter block {name!r} ({module}): a name must be a Python identifier "
                             "(it is a config section)")
        _DECLARED[name] = BlockSpec(name, config, factory, int(position), bool(default), bool(splitter),
                                    bool(counts_words), module)
        return factory
    return wrap


def blocks() -> tuple[BlockSpec, ...]:
    """Every declared block, by position then name (the package is scanned on first call)."""
    if not _SCANNED:
        # By name, not ``import pipelines.filters``: the block modules import this one.
        package = __name__.rpartition(".")[0]
        for found in pkgutil.iter_modules(sys.modules[package].__path__):
            if not found.name.startswith("_"):
                importlib.import_module(f"{package}.{found.name}")
        _SCANNED.extend(sorted(_DECLARED.values(), key=lambda s: (s.position, s.name)))
    return tuple(_SCANNED)


def spec(name: str) -> BlockSpec:
    """The declared block ``name`` (a KeyError naming the known ones otherwise)."""
    for s in blocks():
        if s.name == name:
            return s
    raise KeyError(f"no filter block {name!r}; known: {[s.name for s in blocks()]}")
