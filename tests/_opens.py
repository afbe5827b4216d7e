"""Count the files a process opens through Python's ``open`` under a folder: every open appends
the path to a log file (``O_APPEND``: one line per open, from any number of processes). Installed
in the process under test (or a child, before it starts work); ``torch.load`` and
``shutil.copyfile`` open files this way, whoever calls them, so the count does not depend on the
code under test reporting its own reads. (inotify would see every open, but merges identical
events still unread, so concurrent opens of one file can be counted once.)"""
from __future__ import annotations

import builtins
import os
from collections import Counter
from pathlib import Path


def log_opens(under: str | os.PathLike, log: str | os.PathLike) -> None:
    """From now on, in this process (and children it forks), every ``open`` of a file inside
    ``under`` appends that file's absolute path to ``log``."""
    real, root, log = builtins.open, os.path.abspath(under) + os.sep, str(log)

    def counted(file, *args, **kwargs):
        if isinstance(file, (str, os.PathLike)):
            path = os.path.abspath(file)
            if path.startswith(root):
                fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    os.write(fd, (path + "\n").encode())
                finally:
                    os.close(fd)
        return real(file, *args, **kwargs)

    builtins.open = counted


def opens(log: str | os.PathLike) -> Counter[Path]:
    """Opens per file so far (an absent log: none)."""
    try:
        return Counter(Path(line) for line in Path(log).read_text().splitlines())
    except FileNotFoundError:
        return Counter()
