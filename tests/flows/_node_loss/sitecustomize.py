"""Test-side fault injection for a two-node Ray cluster (``tests/flows/test_build_corpus_node_loss.py``).

Both nodes are started with this folder on ``PYTHONPATH``, so every Python process of a node
imports this file at start-up (Ray keeps a node's ``PYTHONPATH`` behind a job's ``py_modules``).
With ``NODE_LOSS_AT=module:qualname`` in a node's environment the function is wrapped as soon
as its module is imported; what the wrapper does depends on ``NODE_LOSS_ROLE``:

* ``kill`` (the worker node): call number ``NODE_LOSS_NTH`` (default 1) on the node (claim
  files, each created exclusively, number the calls) SIGKILLs the node's raylet (an ancestor of
  every Ray worker; the node's object store lives in it and its workers exit with it), records
  what it killed in ``NODE_LOSS_MARKER``, wakes the other node through the FIFO
  ``<marker>.fifo`` and SIGKILLs its own process. Earlier calls run normally, so with ``NTH=2``
  the node dies holding the finished output of its first task.
* ``wait`` (the head): a call made before the worker node died blocks until it has. Holding the
  head's one CPU sends the stage's next tasks to the worker node, so the worker is the one to
  reach the kill point whatever the scheduler would have chosen, provided the stage calls the
  function in at least ``NTH + 1`` tasks. ``NODE_LOSS_WAIT_S`` bounds the wait (a safety net for a
  stage with one such task: the build then goes on, no node dies, and the test says so).

Counting (``benchmarks/corpus/node_loss.py``): with ``NODE_LOSS_COUNT=<file>`` every call of each
function in ``NODE_LOSS_COUNT_AT`` (``module:qualname`` separated by commas; Ray Data's
``_map_task`` and our shuffle's map writers count the Ray tasks a build runs) appends one line
``<role> <module:qualname>`` to that file (one ``O_APPEND`` write: lines from several processes
never interleave), before the call runs: a task killed in flight is counted. Role ``count``
only counts (a build without a kill).

The product has no fault-injection code; a chosen call replaces racing a kill against a clock.
"""
from __future__ import annotations

import os
import sys

_AT = os.environ.get("NODE_LOSS_AT", "")
_ROLE = os.environ.get("NODE_LOSS_ROLE", "")
_MARKER = os.environ.get("NODE_LOSS_MARKER", "")
_NTH = int(os.environ.get("NODE_LOSS_NTH", "1"))
_COUNT = os.environ.get("NODE_LOSS_COUNT", "")
_COUNT_AT = [t for t in os.environ.get("NODE_LOSS_COUNT_AT", "").split(",") if t] if _COUNT else []


def _raylet_pid() -> int:
    pid = os.getppid()
    while pid > 1:
        with open(f"/proc/{pid}/comm") as f:
            if f.read().strip() == "raylet":
                return pid
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    raise RuntimeError(f"node loss: no raylet among the ancestors of pid {os.getpid()}")


def _call_number() -> int:
    """This call's number among the calls on this node (1, 2, ...; claim files never reused)."""
    n = 1
    while True:
        try:
            os.close(os.open(f"{_MARKER}.claim{n}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            n += 1
            continue
        return n


def _kill_node() -> None:
    import json
    import signal

    raylet = _raylet_pid()
    os.kill(raylet, signal.SIGKILL)
    with open(_MARKER + ".tmp", "w") as f:
        json.dump({"at": _AT, "call": _NTH, "worker": os.getpid(), "raylet": raylet}, f)
    os.replace(_MARKER + ".tmp", _MARKER)
    try:  # wake a waiting head; ENXIO: nobody waits (it will see the marker)
        fd = os.open(_MARKER + ".fifo", os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        pass
    else:
        os.write(fd, b"x")
        os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)


def _wait_for_kill() -> None:
    import select

    # O_RDWR: opening a FIFO never blocks that way. Opened before the marker is checked, so a
    # kill either wrote the marker before the check or finds this reader and writes a byte.
    fd = os.open(_MARKER + ".fifo", os.O_RDWR | os.O_NONBLOCK)
    try:
        if not os.path.exists(_MARKER):
            with open(_MARKER + ".waited", "a") as f:  # for whoever reads the logs: the head held back
                f.write(f"{os.getpid()}\n")
            select.select([fd], [], [], float(os.environ.get("NODE_LOSS_WAIT_S", "240")))
    finally:
        os.close(fd)


def _target(module, at: str):
    owner, *path, name = [module, *at.split(":", 1)[1].split(".")]
    for part in path:
        owner = getattr(owner, part)
    return owner, name


def _wrap_kill(module) -> None:
    import functools

    owner, name = _target(module, _AT)
    fn = getattr(owner, name)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if _ROLE == "kill" and not os.path.exists(_MARKER) and _call_number() == _NTH:
            _kill_node()
        elif _ROLE == "wait" and not os.path.exists(_MARKER):
            _wait_for_kill()
        return fn(*args, **kwargs)

    setattr(owner, name, wrapper)


def _wrap_count(module, at: str) -> None:
    import functools

    owner, name = _target(module, at)
    fn = getattr(owner, name, None)
    if fn is None:  # a name this version of the code does not have: nothing to count
        return
    line = f"{_ROLE} {at}\n".encode()

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        fd = os.open(_COUNT, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        return fn(*args, **kwargs)

    setattr(owner, name, wrapper)


class _WrapOnImport:
    """A meta-path finder that lets the other finders load the target modules, then wraps their
    functions (``wraps``: module name -> functions taking the module)."""

    def __init__(self, wraps: dict):
        self.wraps = wraps

    def find_spec(self, name, path=None, target=None):
        if name not in self.wraps:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        actions = self.wraps.pop(name)
        if not self.wraps:
            sys.meta_path.remove(self)
        exec_module = spec.loader.exec_module

        def exec_and_wrap(module):
            exec_module(module)
            for act in actions:
                act(module)

        spec.loader.exec_module = exec_and_wrap
        return spec


def _install() -> None:
    import functools

    wraps: dict = {}
    if _AT and _MARKER and _ROLE in ("kill", "wait"):
        wraps.setdefault(_AT.split(":", 1)[0], []).append(_wrap_kill)
    for at in _COUNT_AT:
        wraps.setdefault(at.split(":", 1)[0], []).append(functools.partial(_wrap_count, at=at))
    if wraps:
        sys.meta_path.insert(0, _WrapOnImport(wraps))


_install()
