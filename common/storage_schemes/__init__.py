"""Where the kinds of storage location are declared: one module per URI scheme, found by scanning.

``common.storage`` reads, writes and lists any location through fsspec; what differs between
kinds of store lives here, one module per scheme (walk-through: docs/add-a-storage-scheme.md),
each holding one module-level declaration ``SCHEME = Scheme(...)``:

* which URI schemes it serves (``s3``, ``s3a``) and how its fsspec filesystem is made: the
  options it is opened with (listing caches off) and, for a filesystem fsspec does not know by
  that name, the class to register for it;
* whether it is the local disk, and whether it can be written;
* the environment variables that locate the store and carry credentials: a Ray cluster's
  workers get the driver's values (``pipelines.engine.raydata.init_ray``), and an access-denied
  error names the credentials to check;
* which of its client library's errors can pass (retried within the budget of
  ``common.retry``) and which error codes mean access denied;
* whether a stream read to the end is probed one byte further, for a store whose HEAD can
  under-report an object's size.

``schemes()`` imports every module of this package once (``pkgutil.iter_modules``; names
starting with ``_`` are skipped) and collects the declarations; ``scheme(uri)`` answers for one
location. A scheme nobody declared (``memory://``, any other fsspec protocol) still works,
through fsspec's defaults: writable, not local, no variables, only the generic transient
errors of ``common.retry``. This package imports nothing of the project, so ``common.retry``
and ``common.storage`` can both use it.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Scheme:
    names: tuple[str, ...]  # URI schemes, lower case: ("s3", "s3a"); local paths are "file"
    open_options: dict[str, Any] = field(default_factory=dict)  # passed to fsspec's url_to_fs
    # An fsspec filesystem class registered under ``names`` (for a store fsspec does not know by
    # that name); None: fsspec's own implementation of the name.
    filesystem: type | None = None
    local: bool = False  # OS paths: written through a temporary file and os.replace
    writable: bool = True
    env: tuple[str, ...] = ()  # variables that locate the store or say who we are: Ray workers get them
    credentials: tuple[str, ...] = ()  # of those, the credentials an access-denied error says to check
    # Where the store is, first set wins; the last is the general one, named in a hint.
    endpoint_env: tuple[str, ...] = ()
    transient_codes: frozenset[str] = frozenset()  # error codes that can pass (throttling, 5xx by name)
    transient_types: tuple[type, ...] = ()  # the client library's errors that can pass (connections)
    denied_codes: frozenset[str] = frozenset()  # error codes that mean access denied
    probe_end: bool = False  # a stream read to its end asks for one byte more (HEAD may under-report)


_SCANNED: dict[str, Scheme] = {}


def schemes() -> tuple[Scheme, ...]:
    """Every declared scheme, by its first name (the package is scanned on first call)."""
    if not _SCANNED:
        found: dict[str, tuple[Scheme, str]] = {}
        for info in pkgutil.iter_modules(__path__):
            if info.name.startswith("_"):
                continue
            module = importlib.import_module(f"{__name__}.{info.name}")
            declared = getattr(module, "SCHEME", None)
            if not isinstance(declared, Scheme):
                raise TypeError(f"{module.__name__}: a storage scheme module declares SCHEME = Scheme(...)")
            for name in declared.names:
                if name in found:
                    raise ValueError(f"storage scheme {name!r} is declared twice: in {found[name][1]} and "
                                     f"{module.__name__}")
                found[name] = (declared, module.__name__)
            if declared.filesystem is not None:
                import fsspec

                for name in declared.names:
                    fsspec.register_implementation(name, declared.filesystem, clobber=True)
        _SCANNED.update({name: s for name, (s, _) in found.items()})
    return tuple(sorted({id(s): s for s in _SCANNED.values()}.values(), key=lambda s: s.names[0]))


def protocol(uri: str) -> str:
    """``file`` for local paths, else the URI scheme (``s3``, ``gs``, ``https``, ...)."""
    uri = str(uri)
    return uri.split("://", 1)[0].lower() if "://" in uri else "file"


def scheme(uri: str) -> Scheme:
    """The declaration serving ``uri`` (fsspec's defaults for an undeclared scheme)."""
    schemes()
    name = protocol(uri)
    return _SCANNED.get(name) or Scheme((name,))


def worker_env() -> tuple[str, ...]:
    """Every declared scheme's variables, in a stable order (what Ray workers get)."""
    return tuple(dict.fromkeys(v for s in schemes() for v in s.env))


def transient_codes() -> frozenset[str]:
    return frozenset().union(*(s.transient_codes for s in schemes()))


def transient_types() -> tuple[type, ...]:
    return tuple(dict.fromkeys(t for s in schemes() for t in s.transient_types))


def denied_codes() -> frozenset[str]:
    return frozenset().union(*(s.denied_codes for s in schemes()))
