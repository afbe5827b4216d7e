"""Published files and folders are readable as the user's umask says (0644/0755 under 022, 0640/0750
under 027), although the atomic writer goes through ``tempfile.mkstemp``, which creates 0600."""
from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
import tempfile
from contextlib import contextmanager

import pytest

from common import filemode, storage

MODES = {0o022: (0o644, 0o755), 0o027: (0o640, 0o750)}  # umask -> (file, folder)


@contextmanager
def umask(mask: int):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("mask", sorted(MODES))
def test_storage_writes_follow_the_umask(tmp_path, mask):
    torch = pytest.importorskip("torch")
    file_mode, dir_mode = MODES[mask]
    old = tmp_path / "old.json"
    old.write_text("{}")
    old.chmod(0o600)  # what an older version published: the rename replaces it, mode included
    buf = io.BytesIO()
    torch.save({"module": {"w": torch.ones(3)}}, buf)  # a checkpoint-like file through storage
    with umask(mask):
        assert filemode.umask() == mask
        storage.write_bytes(str(tmp_path / "a.bin"), b"x")
        storage.write_json(str(old), {"a": 1})
        storage.write_bytes(str(tmp_path / "run" / "checkpoints" / "step_1" / "model_states.pt"), buf.getvalue())
        assert os.umask(mask) == mask  # nothing above changed the process's umask
    for path in (tmp_path / "a.bin", old, tmp_path / "run" / "checkpoints" / "step_1" / "model_states.pt"):
        assert mode(path) == file_mode, path
    for folder in (tmp_path / "run", tmp_path / "run" / "checkpoints", tmp_path / "run" / "checkpoints" / "step_1"):
        assert mode(folder) == dir_mode, folder
    assert json.loads(old.read_text()) == {"a": 1}
    got = torch.load(tmp_path / "run" / "checkpoints" / "step_1" / "model_states.pt", weights_only=True)
    assert torch.equal(got["module"]["w"], torch.ones(3))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin", "old.json", "run"]  # no temporary left


@pytest.mark.parametrize("mask", sorted(MODES))
def test_apply_umask_on_mkstemp_and_mkdtemp(tmp_path, mask):
    file_mode, dir_mode = MODES[mask]
    with umask(mask):
        fd, path = tempfile.mkstemp(dir=tmp_path)
        folder = tempfile.mkdtemp(dir=tmp_path)
        assert (mode(path), mode(folder)) == (0o600, 0o700)  # what tempfile makes whatever the umask
        try:
            assert filemode.apply_umask(fd) == file_mode
        finally:
            os.close(fd)
        assert filemode.apply_umask(folder, directory=True) == dir_mode
        other = tmp_path / "other"
        other.write_bytes(b"")
        other.chmod(0o600)
        assert filemode.apply_umask(other) == file_mode
    assert (mode(path), mode(folder), mode(other)) == (file_mode, dir_mode, file_mode)


def test_umask_without_proc_is_read_and_restored(monkeypatch):
    """Where /proc does not report it, the umask is set and restored (under a lock)."""
    monkeypatch.setattr(filemode, "_proc_umask", lambda: None)
    with umask(0o027):
        assert filemode.umask() == 0o027
        assert filemode.umask_mode() == 0o640 and filemode.umask_mode(directory=True) == 0o750
        assert os.umask(0o027) == 0o027  # left as it was


_CHILD = """
import io, json, os, stat, sys, torch
from common import storage
root = sys.argv[1]
buf = io.BytesIO()
torch.save({"w": torch.zeros(2)}, buf)
storage.write_bytes(os.path.join(root, "ckpt", "mp_rank_00_model_states.pt"), buf.getvalue())
storage.write_json(os.path.join(root, "meta.json"), {"step": 1})
print(json.dumps({p: stat.S_IMODE(os.stat(os.path.join(root, p)).st_mode)
                  for p in ("ckpt", "ckpt/mp_rank_00_model_states.pt", "meta.json")}))
"""


def test_a_process_started_under_umask_027_publishes_0640(tmp_path):
    """The real case: the umask comes from the shell that starts the program."""
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path)], capture_output=True, text=True,
                          umask=0o027, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == {"ckpt": 0o750, "ckpt/mp_rank_00_model_states.pt": 0o640, "meta.json": 0o640}
