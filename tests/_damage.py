"""Damaging a stored file the way disks and copy tools do, for the tests that check a reader names
it: one bit of the middle byte flipped (same size, other bytes), or the file cut to half."""
from __future__ import annotations

from pathlib import Path

DAMAGES = ("flip", "truncate")


def damage(path: Path, how: str) -> None:
    """Flip one bit of the middle byte, or keep the first half of the file."""
    data = bytearray(path.read_bytes())
    if how == "flip":
        data[len(data) // 2] ^= 0x01
    else:
        del data[len(data) // 2:]
    path.write_bytes(bytes(data))
