"""electra.distributed.deepspeed_glue: starting a process group survives what a killed start leaves behind."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[3]


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
    code = ("import logging\nlogging.basicConfig()\nfrom electra.distributed.deepspeed_glue import build_shm_op_safely\n"
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
    code = ("from electra.distributed.deepspeed_glue import init_distributed, shutdown\n"
            "info = init_distributed()\nprint('rank', info.rank, 'of', info.world_size)\nshutdown()\n")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                       env={**env, "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext"), "PYTHONPATH": str(REPO)})
    assert p.returncode == 0, p.stderr[-3000:]
    assert "rank 0 of 1" in p.stdout
    assert not (tmp_path / "ext").exists() or not any((tmp_path / "ext").iterdir())
    assert "built successfully" not in p.stdout + p.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="the shared-memory op is DeepSpeed's CPU backend")
def test_two_cpu_ranks_leave_no_shared_memory_segment_behind(tmp_path):
    # DeepSpeed never unlinks its CPU all-reduce segments (69 MB per rank in /dev/shm); each rank
    # unlinks its own once all are mapped, and the shared-memory all-reduce still works after.
    from common.ports import free_port
    from electra.distributed.deepspeed_glue import SHM_SEGMENT

    port = str(free_port())
    code = ("import torch, torch.distributed as dist\nfrom electra.distributed.deepspeed_glue import init_distributed, shutdown\n"
            "info = init_distributed()\nt = torch.full((4,), float(info.rank + 1))\n"
            "import deepspeed.comm as ds\nds.inference_all_reduce(t)\nprint('sum', t.tolist())\nshutdown()\n")
    base = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    procs = [subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env={**base, "PYTHONPATH": str(REPO), "RANK": str(r), "LOCAL_RANK": str(r),
                                              "WORLD_SIZE": "2", "LOCAL_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                                              "MASTER_PORT": port})
             for r in range(2)]
    outs = [p.communicate(timeout=420) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
        assert "sum [3.0, 3.0, 3.0, 3.0]" in out
    left = [SHM_SEGMENT.format(uid=os.getuid(), addr="127.0.0.1", port=port, rank=r) for r in range(2)]
    assert not [name for name in left if os.path.exists(name)]


def test_a_one_rank_group_takes_another_port_when_its_own_was_taken(monkeypatch):
    """The port a one-process run picks is free when picked; another process can bind it before
    torch's store does (parallel runs, seen in CI): the start tries a new one instead of failing."""
    import socket

    from electra.distributed import deepspeed_glue as D

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    busy = taken.getsockname()[1]
    ports = iter([busy])
    real = D.free_port
    monkeypatch.setattr(D, "free_port", lambda: next(ports, None) or real())
    saved = dict(os.environ)
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        os.environ.pop(key, None)
    try:
        info = D.init_distributed()
        assert (info.rank, info.world_size) == (0, 1)
        assert int(os.environ["MASTER_PORT"]) != busy  # the second pick
    finally:
        D.shutdown()
        taken.close()
        os.environ.clear()
        os.environ.update(saved)


class _Unsendable(Exception):
    """An exception whose constructor takes two arguments: pickling keeps one (its message)."""

    def __init__(self, where: str, why: str):
        super().__init__(f"{where}: {why}")


def test_an_error_rank0_broadcasts_survives_the_pickle_or_becomes_one_that_does():
    """``on_rank0`` sends rank 0's error to every rank (``electra.run.shared_plan``: rank 0's failed
    resolve): one that cannot be unpickled would fail there, on a rank waiting for the answer;
    it is sent as a ``RuntimeError`` naming its type and message instead. Others go as they are."""
    import pickle

    from electra.distributed import deepspeed_glue as D
    from electra.data.corpus import CorruptShardError

    with pytest.raises(TypeError):  # the premise: this one does not survive the round trip
        pickle.loads(pickle.dumps(_Unsendable("s3://b/c", "gone")))
    sent = D.portable(_Unsendable("s3://b/c", "gone"))
    assert type(sent) is RuntimeError and str(sent) == "_Unsendable: s3://b/c: gone"
    assert pickle.loads(pickle.dumps(sent)).args == sent.args
    kept = CorruptShardError("s3://b/c/shards/train-000001.tar: missing")
    assert D.portable(kept) is kept
