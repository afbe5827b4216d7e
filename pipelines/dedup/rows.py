"""Document rows as dedup sees them: which rows are still active, their texts, their part."""
from __future__ import annotations

import numpy as np

from pipelines.engine.parts import FILE_COLUMN


def as_str(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=object)


def active(batch: dict[str, np.ndarray]) -> np.ndarray:
    """Indices of the rows no earlier stage has dropped (only those are deduplicated)."""
    return np.flatnonzero(as_str(batch["reason"]) == "")


def texts(batch: dict[str, np.ndarray], rows: np.ndarray) -> list[str]:
    """The ``text`` column at ``rows`` as ``str``; anything else breaks the document contract."""
    values = np.asarray(batch["text"], dtype=object)[rows]
    bad = [i for i, t in enumerate(values) if not isinstance(t, str)]
    if bad:
        ids = np.asarray(batch["id"], dtype=object)[rows]
        raise TypeError(f"dedup: document {ids[bad[0]]!r} has a text of type "
                        f"{type(values[bad[0]]).__name__}, expected str ({len(bad)} such rows)")
    return list(values)


def files(batch: dict[str, np.ndarray], rows: np.ndarray) -> np.ndarray:
    """The input part of each row at ``rows`` (``_file``; 0 when the rows carry none)."""
    if FILE_COLUMN not in batch:
        return np.zeros(len(rows), np.int64)
    return np.asarray(batch[FILE_COLUMN], np.int64)[rows]
