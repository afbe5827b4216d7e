"""The mode a published file or folder gets: what ``open()``/``mkdir()`` would give it under the
user's umask (0644/0755 under umask 022, 0640/0750 under 027, ...).

``tempfile.mkstemp`` creates its file 0600 and ``tempfile.mkdtemp`` its folder 0700 whatever the
umask, which is right for scratch space and wrong for anything renamed into place as an output
(another user of the group, a serving process or a later job could not read it). Every piece of
the project that publishes through a temporary file or folder calls ``apply_umask`` on it before
the rename, so there is one rule in one place.
"""
from __future__ import annotations

import os
import threading

_LOCK = threading.Lock()


def _proc_umask() -> int | None:
    """The umask as Linux reports it (``Umask:`` in /proc/self/status, kernel >= 4.7), or None."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return None


def umask() -> int:
    """The process's current umask, read without changing it where the OS allows.

    ``os.umask`` can only be read by setting it, and it is process-global: between the set and
    the restore, a file that another thread creates gets the probe value instead of the user's.
    So on Linux it is read from /proc (no change at all), and it is read per call rather than
    once at import, so a program that sets its umask after importing us is obeyed. Elsewhere it
    is set and restored under a lock (two probes cannot interleave and leave the probe value
    behind), and the probe value is 0o077: a file another thread creates in that instant gets a
    stricter mode, never a looser one.
    """
    mask = _proc_umask()
    if mask is not None:
        return mask
    with _LOCK:
        mask = os.umask(0o077)
        os.umask(mask)
    return mask


def umask_mode(*, directory: bool = False) -> int:
    """``0o666 & ~umask`` for a file, ``0o777 & ~umask`` for a folder."""
    return (0o777 if directory else 0o666) & ~umask()


def apply_umask(target: int | str | os.PathLike, *, directory: bool = False) -> int:
    """Give ``target`` (an open file descriptor, or a path) the mode ``open()`` or ``mkdir()``
    would have given it under the current umask; returns that mode.

    Call it on a ``tempfile.mkstemp`` file (ideally on its descriptor, before writing) or a
    ``tempfile.mkdtemp`` folder (``directory=True``) that is about to be renamed into place."""
    mode = umask_mode(directory=directory)
    if isinstance(target, int):
        os.fchmod(target, mode)
    else:
        os.chmod(target, mode)
    return mode
