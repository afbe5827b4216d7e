"""A free loopback port for a process group's rendezvous, a test server or a proxy.

The usual way, ``bind(("127.0.0.1", 0))`` and close, returns one of the OS's *ephemeral* ports:
the pool every outgoing TCP connection and every other ``bind(0)`` on the machine draws from. The
port is free when returned and bound by its user a moment (or seconds: a DeepSpeed launcher
starting its ranks) later; in between, any connection of any process may take it, and the
rendezvous fails with EADDRINUSE. Seen in CI, with parallel test workers, Ray and moto all
connecting on loopback.

So the port is drawn at random *below* the ephemeral range (Linux's
``/proc/sys/net/ipv4/ip_local_port_range``, 32768-60999 by default), where the OS hands nothing
out by itself, and above 20000 (Ray's worker processes take 10002-19999 by default); it is checked
free by binding it. Only another caller like this one can take it, and two random draws from
~12,000 ports rarely meet. The draw uses its own generator, never the ``random`` module's state
(a seeded run must not change with how many ports it opened). Where that window is empty (an
unusual ``ip_local_port_range``) or no drawn port is free, the OS picks, as before.
"""
from __future__ import annotations

import random
import socket
from pathlib import Path

LOWEST = 20_000  # above Ray's default worker ports (10002-19999)
RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
DRAWS = 64
_draw = random.SystemRandom()


def ephemeral_start(path: Path = RANGE_FILE) -> int | None:
    """The first port of the OS's ephemeral range, or None where the OS does not say (not Linux)."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback port free at the time of the call, outside the OS's ephemeral range if it can."""
    top = ephemeral_start()
    if top is not None and top - LOWEST >= DRAWS:
        for _ in range(DRAWS):
            port = _draw.randrange(LOWEST, top)
            if _bindable(port):
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
