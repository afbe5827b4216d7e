"""Exact and near-duplicate removal over Ray Data document rows, moving no text.

Both stages take document rows (``id``, ``uid``, ``text``, ``reason``, ``detail``) and return the
same rows, in the same blocks, with ``reason``/``detail`` set on the duplicates they remove
(rows that arrive with a reason pass through untouched). The kept copy of every group is the one
with the smallest uid, so the choice depends only on the documents, never on block layout.

Text is never shuffled. Each stage reads the documents twice: once to compute small keys per
document, which are the only thing that goes through a shuffle, and once to mark the removed
documents in place. Between the two passes the driver gathers the *marks*: (member uid, uid of
the document it duplicates), 16 bytes per removed document, sorted by member uid and put into
Ray's object store in pieces of at most ``MARK_PIECE_ROWS`` rows (``Marks``). A marking task
fetches the pieces one after another and looks its uids up with a binary search, so its memory
is one piece and a node fetches each piece once into its shared object store whatever the
number of tasks. This replaces a shuffle join of the documents with the marks, which would move
every text across the cluster once more.

Exact dedup: blake2b-128 of the UTF-8 normalised text; rows ``(h0, h1, uid)`` (24 bytes) are
hash-partitioned by ``h0`` and each partition is sorted by (digest, uid) in numpy. A 128-bit
collision between different texts (~2**-64 for 2**32 documents) is accepted.

Near dedup, MinHash-LSH in four named steps sharing one ``DedupConfig`` (as datatrove splits it):

1. ``signature_buckets``: vectorised MinHash signatures (``pipelines.dedup.minhash``) cut into
   ``num_bands`` bands of ``rows_per_band`` values; one row (bucket, uid) per band.
2. ``bucket_edges``: rows grouped by bucket; every member linked to the bucket's smallest uid
   (a star, ``k-1`` edges instead of ``k(k-1)/2`` pairs).
3. ``connected_components`` (``pipelines.dedup.components``): distributed large-star/small-star
   rounds until every cluster is a star around its smallest uid.
4. marking: every non-root member is marked ``dedup:near`` with the uid of the kept root.

Shuffle partitions follow the number of shuffled rows (``raydata.partitions_for``), which the
caller passes as ``num_docs`` (the previous stage's output count), not the CPUs of the cluster.

A pair becomes a candidate with probability ``1 - (1 - s**r)**b`` at Jaccard ``s``; 14 bands of 8
rows put the 50% point at ``(1/14)**(1/8) ~ 0.72``. Candidates are not re-checked against their
true Jaccard (paper-style LSH, as datatrove does): the check would need both texts side by side
for every edge, i.e. a shuffle of the text. Clusters are transitive (A~B, B~C removes C even if
A and C are less similar), the intended behaviour for chains of edited copies.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray

from pipelines.dedup.components import connected_components, unique_pairs
from pipelines.config import DedupConfig
from pipelines.dedup.minhash import EMPTY, band_hashes, lsh_threshold, minhash_signatures
from pipelines.engine.raydata import gather_columns, group_apply, partitions_for

EXACT, NEAR = "dedup:exact", "dedup:near"
MARK_PIECE_ROWS = 16_000_000  # 256 MB of (member, root) pairs per object-store piece
_EXACT_ROW_BYTES = 24  # h0, h1, uid
_BUCKET_ROW_BYTES = 16  # bucket, uid


def _as_str(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=object)


def _active(batch: dict[str, np.ndarray]) -> np.ndarray:
    return np.flatnonzero(_as_str(batch["reason"]) == "")


def _texts(batch: dict[str, np.ndarray], rows: np.ndarray) -> list[str]:
    """The ``text`` column at ``rows`` as ``str``; anything else breaks the document contract."""
    texts = np.asarray(batch["text"], dtype=object)[rows]
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
    if bad:
        ids = np.asarray(batch["id"], dtype=object)[rows]
        raise TypeError(f"dedup: document {ids[bad[0]]!r} has a text of type "
                        f"{type(texts[bad[0]]).__name__}, expected str ({len(bad)} such rows)")
    return list(texts)


# ----------------------------------------------------------------------------- marks
@dataclass
class Marks:
    """Removed documents: member uid -> kept uid, sorted by member, in object-store pieces."""
    pieces: list[ray.ObjectRef]
    count: int

    @classmethod
    def build(cls, member: np.ndarray, root: np.ndarray, *, piece_rows: int = MARK_PIECE_ROWS) -> Marks:
        order = np.argsort(member, kind="stable")
        member, root = np.asarray(member, np.int64)[order], np.asarray(root, np.int64)[order]
        step = max(1, int(piece_rows))
        pieces = [ray.put((member[i:i + step], root[i:i + step])) for i in range(0, len(member), step)]
        return cls(pieces=pieces, count=len(member))


def _mark_batch(batch: dict[str, np.ndarray], *, pieces: list[ray.ObjectRef], reason: str) -> dict:
    uid = np.asarray(batch["uid"], dtype=np.int64)
    active = _as_str(batch["reason"]) == ""
    out = dict(batch)
    out["reason"] = _as_str(batch["reason"]).copy()
    out["detail"] = _as_str(batch["detail"]).copy()
    for ref in pieces:
        member, root = ray.get(ref)
        pos = np.minimum(np.searchsorted(member, uid), len(member) - 1)
        hit = np.flatnonzero((member[pos] == uid) & active)
        out["reason"][hit] = reason
        out["detail"][hit] = [f"duplicate of uid {k}" for k in root[pos[hit]]]
    return out


def mark_documents(ds: Any, marks: Marks, reason: str) -> Any:
    """``ds`` with every active row whose uid is a member of ``marks`` marked ``reason`` (lazy)."""
    if marks.count == 0:
        return ds
    return ds.map_batches(_mark_batch, batch_format="numpy",
                          fn_kwargs={"pieces": marks.pieces, "reason": reason})


# ----------------------------------------------------------------------------- exact dedup
def digest_rows(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """(h0, h1, uid) of every active document: the only columns exact dedup shuffles."""
    rows = _active(batch)
    digests = [hashlib.blake2b(t.encode("utf-8", "surrogatepass"), digest_size=16).digest()
               for t in _texts(batch, rows)]
    both = np.frombuffer(b"".join(digests), dtype="<i8").reshape(-1, 2) if digests \
        else np.zeros((0, 2), np.int64)
    return {"h0": both[:, 0].copy(), "h1": both[:, 1].copy(),
            "uid": np.asarray(batch["uid"], dtype=np.int64)[rows]}


def exact_marks(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Within one hash partition: every copy but the smallest uid -> (member, keeper)."""
    h0, h1, uid = (np.asarray(batch[c], np.int64) for c in ("h0", "h1", "uid"))
    order = np.lexsort((uid, h1, h0))
    if len(order) == 0:
        return {"u": np.zeros(0, np.int64), "v": np.zeros(0, np.int64)}
    key0, key1 = h0[order], h1[order]
    new_group = np.ones(len(order), dtype=bool)
    new_group[1:] = (key0[1:] != key0[:-1]) | (key1[1:] != key1[:-1])
    first = np.maximum.accumulate(np.where(new_group, np.arange(len(order)), 0))
    dup = ~new_group
    return {"u": uid[order[dup]], "v": uid[order[first[dup]]]}


def exact_dedup(ds: Any, *, num_docs: int, piece_rows: int = MARK_PIECE_ROWS) -> tuple[Any, dict[str, int]]:
    """Mark exact duplicates (same normalised text) ``dedup:exact``; keep the smallest uid.

    Runs the digest shuffle now and returns the marking pass lazily, with its statistics.
    """
    pairs = ds.select_columns(["uid", "text", "reason", "id"]).map_batches(digest_rows, batch_format="numpy")
    marks = group_apply(pairs, exact_marks, key="h0",
                        num_partitions=partitions_for(num_docs * _EXACT_ROW_BYTES))
    found = gather_columns(marks, ("u", "v"))
    table = Marks.build(found["u"], found["v"], piece_rows=piece_rows)
    return mark_documents(ds, table, EXACT), {"exact_duplicates": table.count}


# ----------------------------------------------------------------------------- near dedup
def signature_buckets(batch: dict[str, np.ndarray], *, cfg: DedupConfig) -> dict[str, np.ndarray]:
    """Step 1: one (bucket, uid) row per band of every active document with at least one word."""
    active = _active(batch)
    texts = _texts(batch, active)
    sigs = minhash_signatures(texts, cfg)
    has_words = sigs[:, 0] != EMPTY if len(texts) else np.zeros(0, bool)
    keys = band_hashes(sigs[has_words], cfg)
    uid = np.asarray(batch["uid"], dtype=np.int64)[active][has_words]
    return {"bucket": keys.ravel(), "uid": np.repeat(uid, cfg.num_bands)}


def bucket_edges(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Step 2: within a partition of buckets, link every member to its bucket's smallest uid."""
    bucket, uid = unique_pairs(batch["bucket"], batch["uid"])
    first = np.ones(len(bucket), dtype=bool)
    first[1:] = bucket[1:] != bucket[:-1]
    root = uid[np.maximum.accumulate(np.where(first, np.arange(len(uid)), 0))]
    member = ~first
    return {"u": uid[member], "v": root[member]}


def near_dedup(ds: Any, cfg: DedupConfig, *, num_docs: int,
               piece_rows: int = MARK_PIECE_ROWS) -> tuple[Any, dict[str, int]]:
    """Mark near-duplicates (MinHash-LSH clusters) ``dedup:near``; keep the smallest uid.

    Signatures, buckets and bucket edges run as one Ray Data execution, then the component
    rounds; the marking pass is returned lazily with the statistics (clusters, members, rounds).
    Raises ``ComponentsNotConverged`` past ``cfg.max_cc_iterations`` rounds.
    """
    cols = ds.select_columns(["uid", "text", "reason", "id"])
    buckets = cols.map_batches(signature_buckets, batch_format="numpy", fn_kwargs={"cfg": cfg})
    parts = partitions_for(num_docs * cfg.num_bands * _BUCKET_ROW_BYTES)
    edges = group_apply(buckets, bucket_edges, key="bucket", num_partitions=parts).materialize()
    comps = connected_components(edges, max_iterations=cfg.max_cc_iterations)
    found = gather_columns(comps.edges, ("u", "v")) if comps.members else {"u": np.zeros(0), "v": np.zeros(0)}
    table = Marks.build(found["u"], found["v"], piece_rows=piece_rows)
    stats = {"near_duplicates": table.count, "clusters": comps.clusters, "cc_iterations": comps.iterations,
             "lsh_threshold": round(lsh_threshold(cfg), 4)}
    return mark_documents(ds, table, NEAR), stats
