"""The storage scheme declarations, and docs/add-a-storage-scheme.md done as it says.

The walk-through's module is not written into this checkout (other tests share it): the test
makes a copy of the ``common`` package whose files are links to this checkout's, adds the module
to the copy's ``common/storage_schemes/``, and drives ``common.storage`` in a subprocess that
imports the copy: the scheme is found by the same package scan as the shipped ones.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from common import retry, storage, storage_schemes
from common.retry import StorageError

REPO = Path(__file__).resolve().parents[2]

# The walk-through's module, as the doc shows it (the doc's text is checked against this below).
TOY = '''\
"""toy://: a store kept in this process's memory (docs/add-a-storage-scheme.md's example)."""
from fsspec.implementations.memory import MemoryFileSystem

from common.storage_schemes import Scheme


class ToyBusy(Exception):
    """What the toy store's client raises while it is busy: worth retrying."""


class ToyFileSystem(MemoryFileSystem):
    protocol = ("toy",)
    store: dict = {}  # its own objects, not memory://'s
    pseudo_dirs = [""]
    busy = 0  # the next `busy` reads fail with ToyBusy

    @classmethod
    def _strip_protocol(cls, path):
        path = str(path)
        return super()._strip_protocol("memory://" + path[len("toy://"):] if path.startswith("toy://") else path)

    def cat_file(self, path, start=None, end=None, **kwargs):
        if ToyFileSystem.busy:
            ToyFileSystem.busy -= 1
            raise ToyBusy("try again")
        return super().cat_file(path, start=start, end=end, **kwargs)


SCHEME = Scheme(
    names=("toy",),
    filesystem=ToyFileSystem,
    env=("TOY_TOKEN",),
    credentials=("TOY_TOKEN",),
    transient_types=(ToyBusy,),
)
'''

SCRIPT = """
import json, logging, os, sys
from common import retry, storage
import common.storage_schemes.toy as toy

assert toy.__file__.startswith(sys.argv[1]), toy.__file__  # the copy's module, found by the scan
warnings = []
logging.getLogger("common.storage").addHandler(type("H", (logging.Handler,), {"emit": lambda s, r: warnings.append(r.getMessage())})())
out = {}
storage.check_output("toy://bucket/corpus")
storage.write_bytes("toy://bucket/corpus/a/one.txt", b"one")
storage.write_json("toy://bucket/corpus/b.json", {"x": 1})
out["read"] = storage.read_text("toy://bucket/corpus/a/one.txt")
out["json"] = storage.read_json("toy://bucket/corpus/b.json")
out["listdir"] = storage.listdir("toy://bucket/corpus")
out["find"] = storage.find("toy://bucket/corpus")
out["sizes"] = storage.list_sizes("toy://bucket/corpus")
with storage.open_input("toy://bucket/corpus/a/one.txt") as f:
    out["stream"] = f.read().decode()
toy.ToyFileSystem.busy = 2  # the next two reads fail with ToyBusy: retried, then read
out["after_busy"] = storage.read_text("toy://bucket/corpus/a/one.txt")
out["retries"] = [w.split(": ", 1)[1].split(" (attempt")[0] for w in warnings]
out["memory_untouched"] = storage.listdir("memory://bucket")
os.environ["TOY_TOKEN"] = "secret"
out["worker_env"] = storage.worker_env().get("TOY_TOKEN")
out["read_only_hint"] = ""
try:
    storage.write_bytes("https://example.org/x", b"x")
except storage.StorageError as exc:
    out["read_only_hint"] = str(exc)
storage.remove("toy://bucket/corpus", recursive=True)
out["exists_after_remove"] = storage.exists("toy://bucket/corpus/a/one.txt")
print(json.dumps(out))
"""


def package_copy(root: Path) -> Path:
    """``root/common``: this checkout's package, every file a link to the real one."""
    shutil.copytree(REPO / "common", root / "common", symlinks=True, copy_function=os.symlink,
                    ignore=shutil.ignore_patterns("__pycache__"))
    return root / "common"


def test_the_walk_through_shows_this_module():
    assert TOY in (REPO / "docs" / "add-a-storage-scheme.md").read_text()


def test_a_new_scheme_module_serves_every_storage_call(tmp_path):
    (package_copy(tmp_path / "copy") / "storage_schemes" / "toy.py").write_text(TOY)
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "copy")}
    env.pop("TOY_TOKEN", None)
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "copy")], cwd=tmp_path / "copy", env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["read"] == "one" and out["json"] == {"x": 1} and out["stream"] == "one"
    assert out["listdir"] == ["a", "b.json"] and out["find"] == ["a/one.txt", "b.json"]
    assert out["sizes"] == {"a/one.txt": 3, "b.json": len(json.dumps({"x": 1}, indent=2) + "\n")}
    # ToyBusy is transient because the scheme says so: two retries, logged, then the bytes.
    assert out["after_busy"] == "one" and out["retries"] == ["ToyBusy: try again"] * 2
    assert out["memory_untouched"] == []  # toy:// keeps its own objects
    assert out["worker_env"] == "secret"  # a Ray cluster's workers would get it
    assert out["read_only_hint"].endswith("https:// is read-only here; write to a path, gs://, s3:// or toy://")
    assert out["exists_after_remove"] is False


def test_without_its_module_the_scheme_is_one_clear_error():
    with pytest.raises(StorageError, match=r"^toy://bucket/x: cannot open this kind of location \("):
        storage.read_bytes("toy://bucket/x")


def test_the_shipped_declarations(monkeypatch):
    names = {name: s for s in storage_schemes.schemes() for name in s.names}
    assert sorted(names) == ["file", "gcs", "gs", "http", "https", "local", "s3", "s3a"]
    assert storage.is_local("/a/b") and storage.is_local("file:///a") and not storage.is_local("s3://b/k")
    assert sorted(n for n, s in names.items() if not s.writable) == ["http", "https"]
    assert names["s3"].probe_end and not names["gs"].probe_end
    assert storage_schemes.scheme("memory://x") == storage_schemes.Scheme(("memory",))  # fsspec's defaults
    # What Ray workers get: each scheme's variables, as set (retry budget included), nothing unset.
    for k in (*storage_schemes.worker_env(), retry.ENV):
        monkeypatch.delenv(k, raising=False)
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "GOOGLE_APPLICATION_CREDENTIALS": "/k.json", retry.ENV: "5"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert storage.worker_env() == env


def test_a_scheme_name_is_declared_once(tmp_path, monkeypatch):
    copy = package_copy(tmp_path / "copy") / "storage_schemes"
    (copy / "s3_again.py").write_text('from common.storage_schemes import Scheme\n\nSCHEME = Scheme(names=("s3",))\n')
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "copy")}
    done = subprocess.run([sys.executable, "-c", "from common import storage; storage.exists('s3://b/k')"],
                          cwd=tmp_path / "copy", env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "ValueError: storage scheme 's3' is declared twice: in common.storage_schemes.s3 and " \
           "common.storage_schemes.s3_again" in done.stderr
