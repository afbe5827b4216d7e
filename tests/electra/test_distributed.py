"""electra.distributed: starting a process group survives what a killed start leaves behind."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the shared-memory op is DeepSpeed's CPU backend")
def test_a_killed_builds_lock_file_does_not_block_the_next_start(tmp_path):
    # A process killed while DeepSpeed JIT-builds its CPU shm op leaves torch's lock FILE; without
    # the guard every later start waits on it forever (here: until the timeout fails the test).
    from torch.utils.cpp_extension import _get_build_directory

    built = Path(_get_build_directory("deepspeed_shm_comm", verbose=False))
    root = tmp_path / "ext"
    target = root / built.name  # with TORCH_EXTENSIONS_DIR set, torch builds in $DIR/<name>
    if (built / "deepspeed_shm_comm.so").exists():  # reuse the build: ninja finds it up to date
        shutil.copytree(built, target, ignore=shutil.ignore_patterns("lock", "*.flock"))
    target.mkdir(parents=True, exist_ok=True)
    (target / "lock").touch()
    # The guarded build itself (a multi-rank CPU start calls it; one process skips the op).
    code = ("import logging\nlogging.basicConfig()\nfrom electra.distributed import build_shm_op_safely\n"
            "build_shm_op_safely()\nprint('built')\n")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=420,
                       env={**env, "TORCH_EXTENSIONS_DIR": str(root), "PYTHONPATH": str(REPO)})
    assert p.returncode == 0, p.stderr[-3000:]
    assert "built" in p.stdout
    assert "removing the lock file a killed build left" in p.stderr
    assert not (target / "lock").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the shared-memory op is DeepSpeed's CPU backend")
def test_one_cpu_process_neither_builds_nor_loads_the_shm_op(tmp_path):
    # An empty extensions folder: a build or a load would create the op's folder in it.
    code = ("from electra.distributed import init_distributed, shutdown\n"
            "info = init_distributed()\nprint('rank', info.rank, 'of', info.world_size)\nshutdown()\n")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                       env={**env, "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext"), "PYTHONPATH": str(REPO)})
    assert p.returncode == 0, p.stderr[-3000:]
    assert "rank 0 of 1" in p.stdout
    assert not (tmp_path / "ext").exists() or not any((tmp_path / "ext").iterdir())
    assert "built successfully" not in p.stdout + p.stderr
