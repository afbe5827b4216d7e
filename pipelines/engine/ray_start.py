"""Starting Ray for a build, quietly, and saying in one line why it did not start.

Two ways in (``raydata.init_ray`` picks): a private local instance (``address=None``), or a
cluster's address (``--ray-address``: ``auto``, ``host:port`` or ``ray://host:port``).

* **Before any server starts**, ``check_address`` asks a ``host:port`` address for a TCP
  connection (``PROBE_TIMEOUT_S``). Ray's own connect retries a silent GCS for minutes, printing
  a C++ warning line every few seconds; a refused or unanswered port is a typo or a cluster not
  started, and costs the user one line now. ``auto`` is left to Ray, which answers at once when
  no cluster runs on the machine.
* **A failed start** (a local instance that does not come up, a cluster that refuses the
  connection, a start-up timeout on a loaded machine) is ``RayUnavailable``: one line with the
  cause (the exception's type and first line) and the fix naming ``--ray-address``, instead of
  Ray's traceback repeated by Prefect's task and flow logs.
* **Quiet by default**: the ``ray`` logger of the driver at WARNING (its INFO line "Started a
  local Ray instance." said nothing a build's own lines do not), and Ray 2.60's notice that it
  turned token authentication on for a new local instance ("Token authentication is enabled for
  this Ray cluster ...", a WARNING on every build) dropped: it announces a safe default, not a
  problem. Its other warnings (authentication *disabled*, among them) still show. Asking for
  the mode explicitly (``RAY_AUTH_MODE=token``) would silence it too, but only when set before
  Ray reads its config at import, which a library cannot promise: set after, the driver and the
  new instance disagreed on the token and the GCS refused the driver.
"""
from __future__ import annotations

import contextlib
import logging
import socket
from typing import Any

PROBE_TIMEOUT_S = 3.0
# Where Ray 2.60 logs its token-authentication notices, and the start of the one dropped.
AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"
AUTH_NOTICE = "Token authentication is enabled for this Ray cluster"
_FIX_LOCAL = ("free memory and disk in the temporary folder, or run on a cluster with --ray-address HOST:PORT "
              "(`ray start --head` prints it)")


class RayUnavailable(RuntimeError):
    """Ray did not start or answer; ``str()`` is one line naming the cause and ``--ray-address``."""


def split_address(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a ``host:port`` or ``ray://host:port`` address; None for ``auto``,
    ``local`` or anything without a numeric port (left to Ray)."""
    rest = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = rest.rstrip("/").rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def check_address(address: str | None, *, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Raise ``RayUnavailable`` when ``address`` names a port that does not accept a connection."""
    where = split_address(address) if address else None
    if where is None:
        return
    try:
        with socket.create_connection(where, timeout=timeout):
            return
    except OSError as exc:
        cause = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or type(exc).__name__)
        raise RayUnavailable(
            f"--ray-address {address}: nothing accepts a connection at {where[0]}:{where[1]} ({cause}); start "
            f"the cluster (`ray start --head` prints its address) or fix --ray-address (omit it for a local "
            f"Ray on this machine)") from None


class _DropAuthNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(AUTH_NOTICE)


def _quiet_auth_notice() -> None:
    logger = logging.getLogger(AUTH_LOGGER)
    if not any(isinstance(f, _DropAuthNotice) for f in logger.filters):
        logger.addFilter(_DropAuthNotice())


def start(address: str | None, **init_kwargs: Any) -> None:
    """``ray.init`` a local instance (``address`` None) or a cluster; ``RayUnavailable`` on failure."""
    import ray

    kwargs = dict(init_kwargs, logging_level=logging.WARNING)
    try:
        if address:
            ray.init(address=address, **kwargs)
        else:
            # "local": start a private instance, never attach to a cluster that `ray start` left
            # on this machine (that is what --ray-address is for).
            _quiet_auth_notice()
            ray.init(address="local", **kwargs)
    except Exception as exc:  # every failure of ray.init is the environment's, not the data's
        with contextlib.suppress(Exception):
            ray.shutdown()  # what a half-started instance left
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        cause = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
        if address:
            raise RayUnavailable(f"cannot connect to the Ray cluster at --ray-address {address} ({cause}); check "
                                 "that it runs (`ray status` on the head) and the address") from None
        raise RayUnavailable(f"a local Ray did not start on this machine ({cause}); {_FIX_LOCAL}") from None
