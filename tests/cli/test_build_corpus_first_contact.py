"""``electra-build-corpus`` at first contact: a user's mistake is one line, early, said once.

The checks before any server starts are proven by order, not by the clock: the runs below point
``PREFECT_API_URL`` at a port nothing listens on, so reaching the Prefect step would end in
"the Prefect server ... does not answer" instead of the line asserted; the in-process runs also
show that neither Prefect nor Ray was imported. The runs that do start a private server and a
local Ray check that each message appears once (the build's warnings, a stage's user error) and
that Ray's start-up notices and a failed Ray start are not a traceback.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ASSETS = ROOT / "tests/assets/languages"
RAY_NOTICES = ("Token authentication is enabled", "Started a local Ray instance")


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: nothing listens there


def _cli(args: list[str], *, env: dict[str, str] | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.build_corpus", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def _in_process(args: list[str]) -> tuple[int, list[str], bool]:
    """``main(args)`` in a fresh interpreter: (exit status, stderr lines, Prefect or Ray imported)."""
    code = ("import sys, cli.build_corpus as c; rc = c.main(sys.argv[1:]); "
            "print(rc, any(m in sys.modules for m in ('prefect', 'ray')))")
    p = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PREFECT_API_URL": f"http://127.0.0.1:{_dead_port()}/api"})
    rc, imported = p.stdout.split()[-2:]
    return int(rc), p.stderr.strip().splitlines(), imported == "True"


def _write_binary_and_empty(folder: Path) -> None:
    folder.mkdir()
    (folder / "empty.txt").write_bytes(b"")
    (folder / "blank.txt").write_bytes(b"\n\n  \n")
    (folder / "image.txt").write_bytes(bytes(range(256)) * 8)


@pytest.mark.parametrize("case", ["missing source", "empty folder", "empty and binary files", "unknown key",
                                  "dead ray address"])
def test_a_user_error_is_one_line_before_prefect_or_ray_is_even_imported(tmp_path, case):
    source, extra = tmp_path / "raw", []
    if case == "empty folder":
        source.mkdir()
    elif case == "empty and binary files":
        _write_binary_and_empty(source)
    elif case in ("unknown key", "dead ray address"):
        source.mkdir()
        (source / "a.txt").write_text((ASSETS / "es.txt").read_text(encoding="utf-8"), encoding="utf-8")
        extra = ["--set", "filter.no_such_key=1"] if case == "unknown key" else \
            ["--ray-address", f"127.0.0.1:{_dead_port()}"]
    rc, lines, imported = _in_process(["--source", str(source), "--out", str(tmp_path / "out"), *extra])
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("build-corpus: error: "), lines
    assert not imported and not (tmp_path / "out").exists()
    expected = {"missing source": [f"{source}: no such file or directory"],
                "empty folder": [f"{source}: matches no files"],
                "empty and binary files": ["no source file holds a document (3 files;", "binary: raw/image.txt",
                                           "empty_file: raw/blank.txt, raw/empty.txt", "fix: check that --source"],
                "unknown key": ["config.filter: unknown key(s) ['no_such_key']"],
                "dead ray address": ["--ray-address 127.0.0.1:", "nothing accepts a connection", "ray start --head"]}
    for part in expected[case]:
        assert part in lines[0], lines[0]


def test_ray_that_does_not_start_is_one_line_naming_the_cause_and_the_address_flag(tmp_path):
    """A local Ray whose start fails (its temporary folder is a file): one line with the cause and
    --ray-address, no traceback, exit 2 (a start-up timeout under load takes this path too)."""
    source = tmp_path / "raw"
    source.mkdir()
    (source / "a.txt").write_text((ASSETS / "de.txt").read_text(encoding="utf-8"), encoding="utf-8")
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    p = _cli(["--source", str(source), "--out", str(tmp_path / "out")],
             env={"RAY_TMPDIR": str(blocker), "TMPDIR": os.environ.get("TMPDIR", "/tmp")})
    errors = [ln for ln in p.stderr.splitlines() if "error" in ln.lower()]
    assert p.returncode == 2, p.stderr[-3000:]
    assert "Traceback" not in p.stdout + p.stderr, p.stderr[-3000:]
    assert len(errors) == 1 and errors[0].startswith("build-corpus: error: a local Ray did not start"), errors
    assert "NotADirectoryError" in errors[0] and "--ray-address" in errors[0]


def _documents(lang: str) -> list[str]:
    text = (ASSETS / f"{lang}.txt").read_text(encoding="utf-8")
    return [d.strip() for d in text.split("\n%%%\n") if d.strip()]


@pytest.mark.slow  # a whole build through the CLI (make test-all)
def test_a_build_says_each_warning_once_and_no_ray_notices(tmp_path):
    """Real German prose as JSON Lines: the build's warnings (here: no validation examples from
    30 documents) appear once each, in the closing lines, not also as log lines; Ray's token
    and start-up notices are gone."""
    source = tmp_path / "raw"
    source.mkdir()
    with open(source / "de.jsonl", "w", encoding="utf-8") as f:
        for doc in _documents("de"):
            f.write(json.dumps({"text": doc}, ensure_ascii=False) + "\n")
    p = _cli(["--source", str(source), "--out", str(tmp_path / "out"), "--language", "de", "--vocab-size", "300",
              "--seq-len", "64", "--validation-fraction", "0.001"])
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-3000:]
    manifest = json.loads((tmp_path / "out/manifest.json").read_text())
    assert manifest["warnings"], "the input was chosen to give the build warnings"
    for warning in manifest["warnings"]:
        assert out.count(warning) == 1, (warning, out[-4000:])
    for notice in RAY_NOTICES:
        assert notice not in out, out[-3000:]


def test_a_stage_that_keeps_nothing_says_so_once(tmp_path):
    """Documents ingest keeps and the filters drop, every one: the filter stage's line is the
    CLI's one error line; Prefect's task and flow logs do not repeat it."""
    source = tmp_path / "raw"
    source.mkdir()
    shorts = [" ".join(doc.split()[:4]) for doc in _documents("es")]  # four words: under every length rule
    (source / "a.jsonl").write_text("".join(json.dumps({"text": s}, ensure_ascii=False) + "\n" for s in shorts),
                                    encoding="utf-8")
    p = _cli(["--source", str(source), "--out", str(tmp_path / "out"), "--language", "es"])
    out = p.stdout + p.stderr
    assert p.returncode == 2, out[-3000:]
    errors = [ln for ln in out.splitlines() if "filter kept 0 of" in ln]
    assert len(errors) == 1 and errors[0].startswith("build-corpus: error: filter kept 0 of"), out[-4000:]
    assert "Traceback" not in out and " ERROR " not in out, out[-3000:]
