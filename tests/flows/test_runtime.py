"""``flows.runtime.prefect_runtime``: the user's server when PREFECT_API_URL is set, else a private
server with a home of its own per run; one line when no server can be had.

The runs go through ``_runtime_probe.py`` in subprocesses with a controlled environment (a fake
HOME, no PREFECT_* or analytics settings from the test session): Prefect reads its settings once
per process, and the private-server case must not see the session's test server.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROBE = str(Path(__file__).with_name("_runtime_probe.py"))


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(HOME=str(home), PYTHONPATH=str(REPO), TMPDIR=str(home / "tmp"), **extra)
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    return env


def _probe(env: dict[str, str]):
    from tests._procs import run_in_group

    done = run_in_group([sys.executable, PROBE], cwd=str(REPO), env=env, timeout=600)
    lines = [ln for ln in done.output.splitlines() if ln.startswith("{")]
    seen = json.loads(lines[-1]) if done.returncode == 0 and lines else None
    return done, seen


def test_private_server_per_run_with_its_own_home_and_quiet_logs(tmp_path):
    user_home = tmp_path / "user"
    first, a = _probe(_env(user_home))
    assert first.returncode == 0, first.output[-3000:]
    # The second run also shows that PREFECT_LOGGING_LEVEL brings Prefect's own lines back.
    second, b = _probe(_env(user_home, PREFECT_LOGGING_LEVEL="INFO"))
    assert second.returncode == 0, second.output[-3000:]

    assert a["value"] == 42 and b["value"] == 42
    # A home per run, inside the temporary folder, gone afterwards; never ~/.prefect's database.
    assert a["home"] != b["home"] and a["url"] != b["url"]
    for seen in (a, b):
        assert Path(seen["home"]).parent == user_home / "tmp" and seen["home_existed"]
        assert not Path(seen["home"]).exists()
    assert not list(user_home.rglob("prefect.db*"))
    # Two runs share no database: each server holds exactly its own flow run.
    assert a["flow_runs"] == [a["flow_run"]] and b["flow_runs"] == [b["flow_run"]]
    # Telemetry off, and nothing logged about it (the server's heartbeat to prefect.io fails offline).
    assert a["analytics"] is False
    assert "telemetry" not in first.output.lower()
    # Our lines on the console; Prefect's own per-run INFO lines and httpx's per-request lines not.
    for output in (first.output, second.output):
        assert "probe: our progress line" in output and "probe: a printed line" in output
    for chatter in ("Finished in state", "Beginning flow run", "HTTP Request"):
        assert chatter not in first.output, chatter
    assert "Finished in state Completed" in second.output


def test_uses_the_server_at_prefect_api_url(tmp_path, prefect_harness):
    import httpx
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    done, seen = _probe(_env(tmp_path, PREFECT_API_URL=url))
    assert done.returncode == 0, done.output[-3000:]
    assert seen["url"] == url
    assert "private Prefect server" not in done.output
    # The run is recorded on that server (which also holds other tests' runs).
    assert httpx.get(f"{url}/flow_runs/{seen['flow_run']}").json()["state_type"] == "COMPLETED"
    assert seen["flow_run"] in seen["flow_runs"]
    assert not (tmp_path / "tmp").exists() or not list((tmp_path / "tmp").iterdir())


def test_a_server_that_does_not_answer_is_one_line(tmp_path):
    from common.ports import free_port

    url = f"http://127.0.0.1:{free_port()}/api"  # nothing listens there
    done, _ = _probe(_env(tmp_path, PREFECT_API_URL=url))
    assert done.returncode == 2, done.output[-3000:]
    (line,) = [ln for ln in done.output.splitlines() if "error:" in ln]
    assert line.startswith("runtime-probe: error: the Prefect server at PREFECT_API_URL=" + url)
    assert "unset PREFECT_API_URL" in line and "Traceback" not in done.output


def _own_processes_in(folder: Path) -> list[str]:
    """Processes whose working directory is under ``folder`` (the private server runs in its home)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if cwd.startswith(str(folder)):
            found.append(pid)
    return found


def test_a_server_that_cannot_start_in_time_is_one_line_and_stopped(tmp_path, monkeypatch):
    """A start-up timeout of 0 s (the user's setting wins over ours): the server is given up at
    once, deterministically, whatever the machine's speed."""
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS, temporary_settings

    from flows.runtime import RuntimeUnavailable, prefect_runtime

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    updates = {PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS: 0}
    with temporary_settings(updates=updates, restore_defaults={PREFECT_API_URL}):
        with pytest.raises(RuntimeUnavailable) as info:
            with prefect_runtime("build-corpus"):
                pytest.fail("the body must not run without a server")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("the private Prefect server did not answer within 0 s")
    assert "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=" in message and "PREFECT_API_URL" in message
    (home,) = tmp_path.glob("prefect-build-corpus-*")  # kept: it holds the log the message names
    assert str(home / "server.log") in message
    assert _own_processes_in(home) == []  # the server was stopped, not left behind


def test_no_usable_temporary_folder_is_one_line(tmp_path):
    """The folder for the private server's home cannot be made: one line naming it, exit 2."""
    from tests._procs import run_in_group

    missing = tmp_path / "missing"
    # tempfile would skip an unusable TMPDIR for /tmp; the probe runs with tempfile's folder pinned.
    code = ("import runpy, sys, tempfile; tempfile.tempdir = sys.argv.pop(1); "
            f"runpy.run_path({PROBE!r}, run_name='__main__')")
    done = run_in_group([sys.executable, "-c", code, str(missing)], cwd=str(REPO), env=_env(tmp_path), timeout=300)
    assert done.returncode == 2, done.output[-3000:]
    (line,) = [ln for ln in done.output.splitlines() if "error:" in ln]
    assert f"cannot make a home for the private Prefect server in {missing}" in line
    assert "TMPDIR" in line and "Traceback" not in done.output
