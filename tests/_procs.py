"""Running a command that may be killed (or kill itself) without leaking its children.

A CLI that starts a Prefect server or Ray leaves those children behind when it is SIGKILLed, and
they hold the parent's stdout open: ``subprocess.run(capture_output=True)`` would then wait for
them forever. Here the command runs in its own session with output to a file; once it exits, the
whole process group is killed.
"""
from __future__ import annotations

import os
import signal
import subprocess
import tempfile
from typing import NamedTuple


class Finished(NamedTuple):
    returncode: int
    output: str  # stdout, with stderr unless ``separate_stderr``
    stderr: str = ""  # with ``separate_stderr`` only


def run_in_group(cmd: list[str], *, cwd: str, env: dict[str, str], timeout: float = 600,
                 separate_stderr: bool = False) -> Finished:
    with tempfile.TemporaryFile("w+") as log, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log,
                                stderr=err if separate_stderr else subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        log.seek(0)
        err.seek(0)
        return Finished(code, log.read(), err.read())


def kill_mentioning(text: str) -> None:
    """SIGKILL every process whose command line mentions ``text`` (e.g. a Ray cluster's own
    ``--temp-dir``, which every process of its nodes names, the log and autoscaler monitors
    too: they name the GCS by the node's resolved IP, so a port match misses them). Repeated
    until none is left, in case one was being spawned during a pass."""
    for _ in range(5):
        found = 0
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    mentions = text.encode() in f.read()
            except OSError:
                continue
            if mentions and int(pid) != os.getpid():
                found += 1
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if not found:
            return


def mapped_shm_files() -> set[str]:
    """Every /dev/shm file some live process of ours has mapped (from /proc/*/maps)."""
    mapped = set()
    for maps in os.listdir("/proc"):
        if not maps.isdigit():
            continue
        try:
            with open(f"/proc/{maps}/maps") as f:
                for line in f:
                    at = line.find("/dev/shm/")
                    if at >= 0:
                        mapped.add(line[at:].rstrip("\n").removesuffix(" (deleted)"))
        except OSError:  # gone, or another user's
            continue
    return mapped
