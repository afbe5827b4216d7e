"""User errors on the command line: one line, early, with exit status 2; tracebacks for the rest.

``user_error`` finds, anywhere in what an exception wraps (Ray wraps a task's error in its own,
Prefect re-raises the flow's), an error the user can act on: a location, a source, a config key,
the store. ``quiet_user_errors`` keeps the tracebacks of such errors out of the logs of Ray
Data, Prefect and the root logger (each logs a failing task's traceback once), so the run ends
in the one line ``fail`` prints. Any other error keeps its traceback: that is a bug to report.
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
    from pipelines.dedup.components import ComponentsNotConverged
    from pipelines.ingest import SourceError

    for e in chain(exc):
        if ray_cause(e) is None and isinstance(e, (StorageError, SourceError, ConfigError, ComponentsNotConverged)):
            return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return None


class _OneLineUserErrors(logging.Filter):
    """Log records of a user error keep their first line and lose their traceback (Ray Data and
    Prefect each log a failing task's traceback; the CLI then prints the one line that matters)."""

    def __init__(self, describe: Callable[[BaseException], str | None] = user_error):
        super().__init__()
        self.describe = describe

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None and self.describe(record.exc_info[1]) is not None:
            record.msg, record.args = record.getMessage().splitlines()[0], ()
            record.exc_info, record.exc_text = None, None
        return True


def quiet_user_errors(describe: Callable[[BaseException], str | None] = user_error, *, ray: bool = True) -> None:
    """Install ``_OneLineUserErrors`` on the console handlers of Prefect and the root logger (and
    of Ray Data with ``ray``). Prefect must be imported first: it installs its handlers then."""
    names = ["prefect", ""]
    if ray:
        import ray.data  # noqa: F401  (configures Ray Data's loggers and handlers)

        names += ["ray.data", "ray"]
    for name in names:
        for handler in logging.getLogger(name).handlers:
            handler.addFilter(_OneLineUserErrors(describe))
