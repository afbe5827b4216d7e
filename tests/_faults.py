"""Kill a build at a chosen point, from the test side: ``python -m tests._faults POINT MODULE ARGS...``.

Patches the runner so that this process SIGKILLs itself right after a stage wrote its outputs
and before its completion marker (``POINT`` = the stage's name), or right before the manifest
is written (``POINT`` = ``publish``), then runs ``MODULE`` as ``__main__`` with ``ARGS``. The
product has no fault-injection code; a deterministic point replaces racing a kill against a
clock.
"""
from __future__ import annotations

import os
import runpy
import signal
import sys


def install(point: str) -> None:
    from pipelines import schema
    from pipelines.orchestration.runner import CorpusBuild

    def die(*_args, **_kwargs):
        os.kill(os.getpid(), signal.SIGKILL)

    if point == "publish":
        schema.Manifest.save = die
        return
    save = CorpusBuild._save

    def _save(self, result):
        if result.name == point and not result.pruned:
            die()
        return save(self, result)

    CorpusBuild._save = _save


if __name__ == "__main__":
    point, module, *args = sys.argv[1:]
    install(point)
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
