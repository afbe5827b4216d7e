"""The Prefect server a CLI run talks to: the user's, or a private one that lives for the run.

Every CLI enters ``prefect_runtime(prog)`` before it runs a flow:

* ``PREFECT_API_URL`` set (environment or active Prefect profile): that server is used. It is
  asked for ``/health`` first, so a server that is down costs one line naming the URL and the
  fix, not a flow-engine traceback minutes later.
* Otherwise a private server is started for this run and stopped at the end. It has a home of
  its own (a fresh temporary ``PREFECT_HOME`` holding its SQLite database, removed afterwards),
  so two runs, or a run and a long-lived server, never share ``~/.prefect/prefect.db``. Its
  telemetry is off (``PREFECT_SERVER_ANALYTICS_ENABLED=false``: the server's heartbeat to
  prefect.io logged ``ERROR ... Failed to send telemetry`` on every offline run), as are Ray's
  usage statistics (``RAY_USAGE_STATS_ENABLED=0``), unless the user set either. If it cannot
  start, ``RuntimeUnavailable``: one line with the cause and the fix; the server's home is then
  kept, and the line names the log in it.

Why our own subprocess rather than Prefect's ephemeral mode with a longer timeout: Prefect's
``SubprocessASGIServer`` (what a flow call starts when no API is set) shares the user's
``PREFECT_HOME`` database, counts its start-up timeout in sleep ticks rather than wall-clock
seconds, leaves the server process running when it gives up, and says nothing about why it
failed (the process's output is not captured). So this module starts the very same server
(the API app Prefect's ephemeral mode serves, with Prefect's ephemeral flags: no UI, only the
services an ephemeral server runs) in a subprocess it owns: a free port, its own home, its
output in ``server.log`` inside that home, a wall-clock deadline, a clean stop. Why not
``prefect server start``: it also loads Prefect's CLI and runs every background service
(schedules, late runs) that a one-run server never uses, and measured clearly slower to answer
on a loaded 2-core machine.

The start-up deadline is Prefect's own setting, ``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS``,
when the user set it (environment or profile); otherwise ``STARTUP_TIMEOUT_S``, far above
Prefect's default, which busy 2-core machines missed run after run: under load the server needs
several times its idle start-up time, and a run waits at most this long, once.

Settings reach Prefect in this process through its settings contexts, not the environment: the
flow modules import Prefect (which reads the environment once) before a CLI gets here. The
updated settings are entered both as the current context and as Prefect's global one: Prefect's
log and event workers run on their own threads, which see the global context, and would
otherwise start a second, unmanaged server to deliver logs. Subprocesses a flow starts through
a Prefect task runner get the settings from Prefect; plain subprocesses (a trainer a flow
launches) do not see the private server, as with Prefect's own ephemeral mode: a server that
stops with this run is no place for them to send events.

Console logs: the INFO lines Prefect itself writes for every flow and task run ("Beginning flow
run", "Finished in state Completed()") are kept off the console, so a run shows our progress
lines (which may go through Prefect's run logger) and every warning and error; the server still
receives them all. ``PREFECT_LOGGING_LEVEL`` set by the user (``INFO`` brings them back,
``DEBUG`` more) leaves the console as Prefect configures it. Install the CLI's own logging
(e.g. ``logging.basicConfig(force=True)``) before entering: the filter goes on the console
handlers present at entry.
"""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

# Wall-clock seconds the private server may take to answer: generous, because it is paid only
# when the machine is that slow, and a run that gives up has done nothing. The server answered
# in 11 s on an idle 2-core machine and in 33 s at a load of ~10.
STARTUP_TIMEOUT_S = 180.0
TIMEOUT_SETTING = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
# Loggers whose console handlers get ``PrefectChatterFilter`` (besides the root's, where Prefect's
# console handler sits).
CONSOLE_LOGGERS = ("prefect", "prefect.flow_runs", "prefect.task_runs")
# Environment defaults for the whole run: telemetry off (Ray's usage statistics; Prefect's is the
# private server's, below) and no uv runtime_env hook in Ray workers.
RUN_ENV_DEFAULTS = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
_SERVER_FIX = "set PREFECT_API_URL to a running Prefect server (`make serve`)"


class RuntimeUnavailable(Exception):
    """No Prefect server for this run; ``str()`` is one line naming the cause and the fix."""


@contextlib.contextmanager
def prefect_runtime(prog: str) -> Iterator[str]:
    """Run the body against the user's Prefect server (``PREFECT_API_URL``) or a private one
    started for it; yields the API URL. ``prog`` names the run in the private server's folder."""
    from prefect.settings import get_current_settings

    settings = get_current_settings()
    with _environment_defaults(RUN_ENV_DEFAULTS), _quiet_prefect_console():
        url = settings.api.url
        if url:
            _check_answers(str(url))
            try:
                yield str(url)
            finally:
                _drain_prefect_workers()
            return
        server = _PrivateServer(_new_home(prog), settings)
        try:
            server.start(_startup_timeout(settings))
        except BaseException:
            server.stop()  # its home stays: the message names the log in it
            raise
        log.info("%s: private Prefect server %s for this run (set PREFECT_API_URL to use your own)",
                 prog, server.api_url)
        try:
            with _settings(api_url=server.api_url, home=server.home):
                try:
                    yield server.api_url
                finally:
                    _drain_prefect_workers()
        finally:
            server.stop()
            shutil.rmtree(server.home, ignore_errors=True)


def _new_home(prog: str) -> Path:
    slug = "".join(c if c.isalnum() or c in "-_" else "-" for c in prog.split()[-1])[:40] or "run"
    try:
        return Path(tempfile.mkdtemp(prefix=f"prefect-{slug}-"))
    except OSError as exc:
        raise RuntimeUnavailable(
            f"cannot make a home for the private Prefect server in {tempfile.gettempdir()} ({exc.strerror or exc}); "
            f"set TMPDIR to a writable folder, or {_SERVER_FIX}") from exc


def _startup_timeout(settings) -> float:
    """The user's ``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS`` if set, else ours."""
    if TIMEOUT_SETTING in settings.to_environment_variables(exclude_unset=True):
        return float(settings.server.ephemeral.startup_timeout_seconds)
    return STARTUP_TIMEOUT_S


def _check_answers(url: str) -> None:
    """Raise ``RuntimeUnavailable`` unless the server at ``url`` answers ``/health``."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        error = client.api_healthcheck()
    if error is not None:
        cause = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise RuntimeUnavailable(
            f"the Prefect server at PREFECT_API_URL={url} does not answer ({cause}); start it "
            f"(`make serve` or `prefect server start`), or unset PREFECT_API_URL to run with a private server")


class _PrivateServer:
    """Prefect's API server (the app its ephemeral mode serves) in a subprocess we own.

    The listening socket is bound here (port 0: the OS picks a free one) and handed to uvicorn
    as a file descriptor, so no other process can take the port while the server starts (it
    binds only after its start-up, tens of seconds on a loaded machine)."""

    def __init__(self, home: Path, settings):
        self.home = home
        self.log_path = home / "server.log"
        self.port: int | None = None
        self.process: subprocess.Popen | None = None
        # The user's settings (environment and profile) travel, as Prefect's own ephemeral server
        # passes them; the home, its database and the telemetry switch are the run's own.
        env = {**os.environ, **settings.to_environment_variables(exclude_unset=True)}
        env.pop("PREFECT_API_DATABASE_CONNECTION_URL", None)  # the deprecated alias must not win
        env.update(PREFECT_HOME=str(home),
                   PREFECT_SERVER_DATABASE_CONNECTION_URL=f"sqlite+aiosqlite:///{home / 'prefect.db'}",
                   PREFECT_UI_ENABLED="0", PREFECT__SERVER_EPHEMERAL="1", PREFECT__SERVER_FINAL="1")
        for name in ("PREFECT_API_URL", "PREFECT_PROFILE"):
            env.pop(name, None)
        env.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
        self.env = env

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def start(self, timeout: float) -> None:
        """Launch, then wait at most ``timeout`` wall-clock seconds for ``/health`` to answer."""
        import httpx
        import prefect

        deadline = time.monotonic() + timeout
        with socket.socket() as sock, open(self.log_path, "ab") as out:
            sock.bind(("127.0.0.1", 0))
            sock.listen(128)
            self.port = sock.getsockname()[1]
            self.process = subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "--app-dir", str(prefect.__module_path__.parent),
                 "--factory", "prefect.server.api.server:create_app", "--fd", str(sock.fileno()),
                 "--log-level", "error", "--lifespan", "on"],
                env=self.env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=self.home, pass_fds=(sock.fileno(),))
        with httpx.Client(timeout=5) as client:
            while True:
                code = self.process.poll()
                if code is not None:
                    raise RuntimeUnavailable(
                        f"the private Prefect server exited with status {code} ({self._cause()}; log: "
                        f"{self.log_path}); {_SERVER_FIX}")
                if time.monotonic() >= deadline:
                    raise RuntimeUnavailable(
                        f"the private Prefect server did not answer within {timeout:g} s (log: {self.log_path}); "
                        f"allow a slower start with {TIMEOUT_SETTING}=<seconds> (default here "
                        f"{STARTUP_TIMEOUT_S:g}), or {_SERVER_FIX}")
                try:
                    if client.get(f"{self.api_url}/health").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)

    def _cause(self) -> str:
        """The server log's last error line (else its last line), shortened."""
        try:
            lines = [ln.strip() for ln in self.log_path.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            lines = []
        errors = [ln for ln in lines if "rror" in ln and "shutdown failed" not in ln.lower()]
        return (errors or lines or ["no output"])[-1][:300]

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@contextlib.contextmanager
def _settings(*, api_url: str, home: Path) -> Iterator[None]:
    """Prefect settings with this run's API and home, as the current and the global context."""
    import prefect.context
    from prefect.settings import PREFECT_API_URL, PREFECT_HOME, PREFECT_PROFILES_PATH

    current = prefect.context.get_settings_context()
    # The user's profiles file stays the one read: only the server's data moves to the new home.
    updated = current.settings.copy_with_update(updates={
        PREFECT_API_URL: api_url, PREFECT_HOME: str(home),
        PREFECT_PROFILES_PATH: str(current.settings.profiles_path)})
    ctx = prefect.context.SettingsContext(profile=current.profile, settings=updated)
    # Prefect's own test harness does the same for the same reason (its issues 15818 and 21544).
    with ctx, prefect.context._temporary_global_settings_context(ctx):
        yield


def _drain_prefect_workers() -> None:
    """Deliver queued logs and events before the server stops (else they fail, noisily, at exit)."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for worker in (APILogWorker, EventsWorker):
        try:
            worker.drain_all(timeout=30, at_exit=False)
        except Exception as exc:  # delivery is best effort; the run's own result is what matters
            log.debug("draining %s: %s", worker.__name__, exc)


@contextlib.contextmanager
def _environment_defaults(defaults: dict[str, str]) -> Iterator[None]:
    """Set each variable the user did not set, for the run; restore afterwards."""
    added = [k for k in defaults if k not in os.environ]
    os.environ.update({k: defaults[k] for k in added})
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


class PrefectChatterFilter(logging.Filter):
    """Drops the INFO lines Prefect itself writes ("Beginning flow run", "Created task run",
    "Finished in state Completed()"), keeps every line our code logs through Prefect's run
    logger or prints in a flow (``log_prints``), and every warning and error. Told apart by
    where the record was made: inside the prefect package, or not. Also drops httpx's INFO line
    per request (Prefect's client makes dozens per run; visible when a CLI logs at INFO)."""

    def __init__(self) -> None:
        super().__init__()
        import prefect

        self.prefect_dir = str(Path(prefect.__file__).parent) + os.sep

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        if record.name.startswith(("httpx", "httpcore")):  # a line per request of Prefect's client
            return False
        return not (record.name.startswith("prefect") and record.pathname.startswith(self.prefect_dir)
                    and record.funcName != "print_as_log")


@contextlib.contextmanager
def _quiet_prefect_console() -> Iterator[None]:
    """``PrefectChatterFilter`` on the console handlers (not on Prefect's API handler: the
    server keeps every line), unless the user set ``PREFECT_LOGGING_LEVEL``."""
    from prefect.logging.handlers import APILogHandler
    from prefect.settings import get_current_settings

    if "PREFECT_LOGGING_LEVEL" in get_current_settings().to_environment_variables(exclude_unset=True):
        yield
        return
    handlers = {h for name in ("", *CONSOLE_LOGGERS) for h in logging.getLogger(name).handlers
                if not isinstance(h, APILogHandler)}
    chatter = PrefectChatterFilter()
    for handler in handlers:
        handler.addFilter(chatter)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(chatter)
