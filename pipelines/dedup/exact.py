"""Exact dedup: documents with the same normalised text, all but the smallest uid removed.

Text is never shuffled. The stage reads its input parts twice: once to compute a key per active
document, the only thing that goes through a shuffle, and once to mark the removed documents in
place (``marks``). Key: blake2b-128 of the UTF-8 text, as rows ``(h0, h1, uid, file)`` (32
bytes), hash-partitioned by ``h0`` (a storage shuffle, ``pipelines.engine.shuffle``, with
partitions sized by the rows: ``raydata.partitions_for``); each partition is sorted by (digest,
uid) in numpy and every copy but the first becomes a mark ``(u, v, file)``. The kept copy is
the smallest uid, so the choice depends only on the documents, never on block layout. A 128-bit
collision between different texts (~2**-64 for 2**32 documents) is accepted.
"""
from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from common import storage
from pipelines.config import ShuffleConfig
from pipelines.dedup import rows as doc_rows
from pipelines.dedup.marks import build_marks, mark_parts
from pipelines.engine.parts import Parts
from pipelines.engine.raydata import partitions_for
from pipelines.engine.shuffle import group_apply

EXACT = "dedup:exact"
_ROW_BYTES = 32  # h0, h1, uid, file


def digest_rows(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """(h0, h1, uid, file) of every active document: the only columns exact dedup shuffles."""
    rows = doc_rows.active(batch)
    digests = [hashlib.blake2b(t.encode("utf-8", "surrogatepass"), digest_size=16).digest()
               for t in doc_rows.texts(batch, rows)]
    both = np.frombuffer(b"".join(digests), dtype="<i8").reshape(-1, 2) if digests \
        else np.zeros((0, 2), np.int64)
    return {"h0": both[:, 0].copy(), "h1": both[:, 1].copy(),
            "uid": np.asarray(batch["uid"], dtype=np.int64)[rows], "file": doc_rows.files(batch, rows)}


def exact_marks(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Within one hash partition: every copy but the smallest uid -> (member, keeper, member's file)."""
    h0, h1, uid, file = (np.asarray(batch[c], np.int64) for c in ("h0", "h1", "uid", "file"))
    order = np.lexsort((uid, h1, h0))
    if len(order) == 0:
        return {"u": np.zeros(0, np.int64), "v": np.zeros(0, np.int64), "file": np.zeros(0, np.int64)}
    key0, key1 = h0[order], h1[order]
    new_group = np.ones(len(order), dtype=bool)
    new_group[1:] = (key0[1:] != key0[:-1]) | (key1[1:] != key1[:-1])
    first = np.maximum.accumulate(np.where(new_group, np.arange(len(order)), 0))
    dup = ~new_group
    return {"u": uid[order[dup]], "v": uid[order[first[dup]]], "file": file[order[dup]]}


def exact_dedup(parts: Parts, *, work: str, shuffle: ShuffleConfig | None = None) -> tuple[Any, dict[str, Any]]:
    """Mark exact duplicates (same normalised text) ``dedup:exact``; keep the smallest uid.

    Runs the key shuffle and the marks shuffle now (their files under ``work``) and returns the
    marking pass lazily, with its statistics. The caller deletes ``work`` once it has run.
    """
    shuffle = shuffle or ShuffleConfig()
    keys = parts.read(with_file=True).map_batches(digest_rows, batch_format="numpy")
    pairs, sh = group_apply(keys, exact_marks, key="h0", partitions=partitions_for(
        parts.rows * _ROW_BYTES, partition_bytes=shuffle.partition_bytes), folder=storage.join(work, "digests"),
        name="exact_digests", **shuffle.options())
    marks = build_marks(pairs, num_files=len(parts.files), folder=storage.join(work, "marks"), name="exact_marks",
                        **shuffle.options())
    sh.remove()
    stats = {"exact_duplicates": marks.count, "shuffles": [sh.stats, marks.stats]}
    return mark_parts(parts, marks, EXACT), stats
