"""User errors on the command line: one line, early, with exit status 2; tracebacks for the rest.

``user_error`` finds, anywhere in what an exception wraps (Ray wraps a task's error in its own,
Prefect re-raises the flow's), an error the user can act on: a location, a source, a config key,
the store, a Ray that did not start, a node's spill disk too small. ``quiet_user_errors`` keeps
such errors out of the console logs of Ray Data, Prefect and the root logger: each logs a
failing task's exception once, and Prefect's task and flow logs say it again in their final
state ("Finished in state Failed(...)"), so a run printed its message four times; now it ends in
the one line ``fail`` prints (the Prefect server still receives every record). Any other error
keeps its traceback: that is a bug to report. ``quiet_cli_lines`` does the same for the lines
the command line prints itself (records logged with ``extra={"cli_says": True}``: the build's
warnings, which the closing lines print, and the input-shape warning said before the build
started).
"""
from __future__ import annotations

import logging
import sys
from typing import Callable


def fail(prog: str, message: object, status: int = 2) -> int:
    """Print ``<prog>: error: <first line of message>`` on stderr; return ``status``."""
    text = str(message).strip()
    print(f"{prog}: error: {text.splitlines()[0] if text else type(message).__name__}", file=sys.stderr)
    return status


def user_error(exc: BaseException) -> str | None:
    """The one line to show for an error of a corpus build the user can act on (a location, a
    source, a config key, the store), found anywhere in what ``exc`` wraps; else None."""
    from common.config import ConfigError
    from common.retry import chain, ray_cause
    from common.storage import StorageError
    from pipelines.engine.node_space import SpillSpaceError
    from pipelines.engine.ray_start import RayUnavailable
    from pipelines.ingest import SourceError

    known: tuple[type[BaseException], ...] = (StorageError, SourceError, ConfigError, RayUnavailable, SpillSpaceError)
    # Near dedup's error, when its module ran at all: importing it here would import Ray, which
    # a mistake found before the build starts never needs.
    components = sys.modules.get("pipelines.dedup.components")
    if components is not None:
        known += (components.ComponentsNotConverged,)
    for e in chain(exc):
        if ray_cause(e) is None and isinstance(e, known):
            return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return None


class _UserErrorsOnce(logging.Filter):
    """Drops the log records of a user error: those carrying it (``exc_info``), and those that
    only repeat its line (Prefect's "Finished in state Failed('... <the line>')"), which come
    after. The CLI prints the line itself, once, at the end."""

    KEY_CHARS = 80  # what identifies a line inside another record's (quoted, escaped) message

    def __init__(self, describe: Callable[[BaseException], str | None] = user_error):
        super().__init__()
        self.describe = describe
        self.said: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            line = self.describe(record.exc_info[1])
            if line is not None:
                self.said.add(line[:self.KEY_CHARS])
                return False
        if self.said and record.levelno >= logging.ERROR:
            message = record.getMessage()
            return not any(key in message for key in self.said)
        return True


def quiet_user_errors(describe: Callable[[BaseException], str | None] = user_error, *, ray: bool = True) -> None:
    """Install ``_UserErrorsOnce`` on the console handlers of Prefect and the root logger (and of
    Ray Data with ``ray``). Prefect must be imported first: it installs its handlers then."""
    names = ["prefect", ""]
    if ray:
        import ray.data  # noqa: F401  (configures Ray Data's loggers and handlers)

        names += ["ray.data", "ray"]
    once = _UserErrorsOnce(describe)  # one filter: a line seen by one handler is known to all
    for name in names:
        for handler in logging.getLogger(name).handlers:
            handler.addFilter(once)


class _SaidByTheCommandLine(logging.Filter):
    """Drops the records marked ``cli_says`` (``extra={"cli_says": True}``): lines a deployment
    run needs in its log, and the command line prints itself (before the build, or last)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(record, "cli_says", False)


def quiet_cli_lines() -> None:
    """Install ``_SaidByTheCommandLine`` on the root logger's and Prefect's console handlers."""
    for name in ("", "prefect"):
        for handler in logging.getLogger(name).handlers:
            handler.addFilter(_SaidByTheCommandLine())
