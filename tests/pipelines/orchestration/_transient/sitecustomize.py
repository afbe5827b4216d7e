"""Test-side fault injection for ``tests/pipelines/orchestration/test_runner_resume.py``.

A build runs in a subprocess with this folder on ``PYTHONPATH``, so the driver and every Ray
worker import this file at start-up. With ``TRANSIENT_LOG=<file>`` it wraps, as their module is
imported:

* ``pipelines.engine.parts.write_parquet``: each call writing into a stage's cache folder
  (``.work/<stage>-<key>/``) appends ``write <stage> <n>`` to the log (one ``O_APPEND`` write:
  lines of several processes never interleave); for stage ``TRANSIENT_STAGE`` ``n`` numbers the
  calls across processes (claim files, each created exclusively), else it is 0. Call
  ``TRANSIENT_NTH`` raises ``storage.StoreUnavailableError`` instead of writing: the transient
  failure of one writer block after the blocks before it finished.
* ``pipelines.engine.parts.read_task``: each read of a stage's parts appends ``read <stage>``.

``TRANSIENT_ROW_GROUP_ROWS`` sets ``parts.ROW_GROUP_ROWS`` (small row groups: a small corpus
then gives a stage several read blocks). The product has no fault-injection code.
"""
from __future__ import annotations

import os
import sys

_LOG = os.environ.get("TRANSIENT_LOG", "")
_STAGE = os.environ.get("TRANSIENT_STAGE", "")
_NTH = int(os.environ.get("TRANSIENT_NTH", "0"))
_ROWS = os.environ.get("TRANSIENT_ROW_GROUP_ROWS", "")


def _log(line: str) -> None:
    fd = os.open(_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def _call_number() -> int:
    n = 1
    while True:
        try:
            os.close(os.open(f"{_LOG}.claim{n}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return n
        except FileExistsError:
            n += 1


def _stage_of(folder) -> str:
    """The stage whose cache folder ``folder`` is in ("" for any other folder)."""
    import re

    m = re.search(r"/\.work/([a-z_]+)-[0-9a-f]+/", str(folder) + "/")
    return m.group(1) if m else ""


def _wrap(module) -> None:
    import functools

    write, read = module.write_parquet, module.read_task

    @functools.wraps(write)
    def write_parquet(folder, name, table):
        stage = _stage_of(folder)
        if stage == _STAGE:
            n = _call_number()
            _log(f"write {stage} {n}")
            if n == _NTH:
                from common import storage

                raise storage.StoreUnavailableError(f"{folder}/{name}: injected outage (call {n})")
        elif stage:
            _log(f"write {stage} 0")
        return write(folder, name, table)

    @functools.wraps(read)
    def read_task(folder, task):
        if _stage_of(folder):
            _log(f"read {_stage_of(folder)}")
        return read(folder, task)

    module.write_parquet, module.read_task = write_parquet, read_task
    if _ROWS:
        module.ROW_GROUP_ROWS = int(_ROWS)


if _LOG:
    # the node-loss hook's finder (REPO is on PYTHONPATH after this folder): loads the module, then wraps it
    from tests.flows._node_loss.sitecustomize import _WrapOnImport

    sys.meta_path.insert(0, _WrapOnImport({"pipelines.engine.parts": [_wrap]}))
