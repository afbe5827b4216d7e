"""Prefect events from code that must not depend on Prefect: "checkpoint committed".

The trainer calls ``emit_checkpoint_committed`` after a checkpoint's commit (``meta.json`` and
``latest`` written, the per-checkpoint export done). ``prefect.yaml`` gives the ``evaluate``
deployment a trigger on ``CHECKPOINT_COMMITTED``: the event's payload names the checkpoint and
the evaluation starts without anyone polling. The hourly scan stays as the safety net for events
that never arrived (no API configured at the time, server down).

Rules, because training must never wait on orchestration:
  * Nothing happens unless a Prefect API is configured: ``PREFECT_API_URL`` in the environment
    or in the active Prefect profile (``$PREFECT_HOME/profiles.toml``). Without one, Prefect
    would start a temporary local server just to drop the event; the check reads the
    environment and one TOML file, never imports Prefect.
  * The import of Prefect (about a second) and the hand-over to its events client happen on a
    daemon thread; ``emit_*`` returns at once. Prefect's client sends from its own thread and
    drains its queue at interpreter exit, bounded by its connection retries when the server is
    unreachable (then the event is lost, the error is logged, and the scan catches up).
  * ``flush(timeout)`` at the end of a run waits, bounded, for those threads, so the last
    checkpoint's event is not killed with the process.
  * Any failure is logged as a warning, never raised into the training loop.

Event contract (shared with ``prefect.yaml`` and the flows):
  event ``electra.checkpoint.committed``; resource id ``electra.checkpoint.<run>.<step dir>``
  with ``electra.run_dir``; payload ``{"checkpoint": step dir, "run_dir", "step"}`` (absolute
  paths, as the evaluation reads them).
"""
from __future__ import annotations

import logging
import os
import threading
import tomllib
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

CHECKPOINT_COMMITTED = "electra.checkpoint.committed"
RESOURCE_PREFIX = "electra.checkpoint."
_pending: list[threading.Thread] = []  # emitter threads not yet joined by ``flush``


def prefect_api_url() -> str | None:
    """The configured Prefect API URL (environment first, then the active profile), or None."""
    url = os.environ.get("PREFECT_API_URL", "").strip()
    if url:
        return url
    home = Path(os.environ.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser()
    try:
        profiles = tomllib.loads((home / "profiles.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return None
    active = os.environ.get("PREFECT_PROFILE") or profiles.get("active") or "ephemeral"
    value = str(profiles.get("profiles", {}).get(active, {}).get("PREFECT_API_URL") or "")
    return value.strip() or None


def checkpoint_event(step_dir: str | Path, *, step: int) -> dict[str, Any]:
    """The keyword arguments of ``prefect.events.emit_event`` for a committed checkpoint."""
    step_dir = Path(step_dir).resolve()
    run_dir = step_dir.parent.parent  # RUN/checkpoints/step_N
    return {"event": CHECKPOINT_COMMITTED,
            "resource": {"prefect.resource.id": f"{RESOURCE_PREFIX}{run_dir.name}.{step_dir.name}",
                         "prefect.resource.name": f"{run_dir.name}/{step_dir.name}",
                         "electra.run_dir": str(run_dir)},
            "payload": {"checkpoint": str(step_dir), "run_dir": str(run_dir), "step": int(step)}}


def emit_in_background(event: dict[str, Any]) -> threading.Thread | None:
    """Hand ``event`` to Prefect's events client on a daemon thread; None when no API is set."""
    url = prefect_api_url()
    if url is None:
        return None

    def send() -> None:
        try:
            from prefect.events import emit_event

            if emit_event(**event) is None:
                log.warning("prefect did not accept event %s (events disabled?)", event["event"])
        except Exception as exc:  # noqa: BLE001 - never let orchestration break training
            log.warning("could not emit %s to %s: %r", event["event"], url, exc)

    thread = threading.Thread(target=send, name="prefect-event", daemon=True)
    thread.start()
    _pending.append(thread)
    return thread


def flush(timeout: float = 30.0) -> bool:
    """Wait (at most ``timeout`` s in all) until every event was handed to Prefect's client,
    e.g. before a process exits: a daemon thread still importing Prefect would die with it.
    True when all were handed over."""
    import time

    deadline = time.monotonic() + timeout
    while _pending:
        _pending[0].join(max(0.0, deadline - time.monotonic()))
        if _pending[0].is_alive():
            return False
        _pending.pop(0)
    return True


def emit_checkpoint_committed(step_dir: str | Path, *, step: int) -> threading.Thread | None:
    """Announce a committed checkpoint (see the module docstring); returns at once."""
    return emit_in_background(checkpoint_event(step_dir, step=step))
