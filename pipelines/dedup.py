"""Exact and near-duplicate removal over Ray Data document rows (steps 3 and 4 of build-corpus).

Both stages take document rows (``id``, ``uid``, ``text``, ``reason``, ``detail``) and return the
same rows with ``reason``/``detail`` set on the duplicates they remove; rows that arrive with a
reason already pass through untouched. The kept copy of every group is the one with the smallest
uid, so the choice depends only on the documents, never on block layout or scheduling. Row order
is not preserved (both stages shuffle); sort by uid where order matters.

Exact dedup: blake2b-128 of the UTF-8 normalised text. Rows are hash-partitioned by the digest and
each partition is sorted by (digest, uid) in numpy: no process ever holds all hashes. A 128-bit
collision between different texts (~2**-64 for 2**32 documents) is accepted.

Near dedup, MinHash-LSH in four named stages sharing one ``DedupConfig`` (as datatrove splits it):

1. ``signature_buckets``: per batch, vectorised MinHash signatures (``pipelines.minhash``) cut
   into ``num_bands`` bands of ``rows_per_band`` values; one row (bucket, uid) per band.
2. ``bucket_edges``: rows grouped by bucket; every member is linked to the bucket's smallest uid
   (a star, ``k-1`` edges instead of ``k(k-1)/2`` pairs).
3. ``connected_components`` (``pipelines.components``): distributed large-star/small-star rounds
   until every cluster is a star around its smallest uid.
4. marking: every non-root member is marked ``dedup:near`` with the uid of the kept root. The
   member -> root table is small (16 bytes per near-duplicate), so it is broadcast to the tasks
   that read the documents (``_mark_members``) and the text is never shuffled; past
   ``BROADCAST_LIMIT`` members, documents and labels are co-partitioned by uid instead
   (``mark_near_duplicates``).

Shuffles go through ``group_apply``; with ``build.configure_data_context``'s sort-based shuffle
an empty input needs no special case.

A pair becomes a candidate with probability ``1 - (1 - s**r)**b`` at Jaccard ``s``; 14 bands of 8
rows put the 50% point at ``(1/14)**(1/8) ~ 0.72``. Candidates are not re-checked against their
true Jaccard (paper-style LSH, as datatrove does): the check would need both texts side by side
for every edge, i.e. another shuffle of the text, and the S-curve already makes pairs below ~0.5
unlikely to connect. Clusters are transitive (A~B, B~C removes C even if A and C are less
similar), which is the intended behaviour for near-duplicate chains such as edited copies.
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

import numpy as np
import ray

from pipelines.components import connected_components, default_partitions, group_apply
from pipelines.config import DedupConfig
from pipelines.minhash import EMPTY, band_hashes, minhash_signatures

EXACT, NEAR = "dedup:exact", "dedup:near"
BROADCAST_LIMIT = 20_000_000  # cluster members whose member -> root table (320 MB) is broadcast
_DOC, _LABEL = 0, 1


@dataclass
class DedupStats:
    """Counts for the manifest, set by ``exact_dedup``/``near_dedup`` when given ``stats=``."""
    exact_removed: int = 0
    near_removed: int = 0
    clusters: int = 0  # near-duplicate clusters with at least two documents
    cc_iterations: int = 0
    seconds: float = 0.0


def _as_str(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=object)


def _mark(batch: dict, removed: np.ndarray, keeper: np.ndarray, reason: str) -> dict:
    out = dict(batch)
    out["reason"] = _as_str(batch["reason"]).copy()
    out["detail"] = _as_str(batch["detail"]).copy()
    out["reason"][removed] = reason
    out["detail"][removed] = [f"duplicate of uid {k}" for k in keeper]
    return out


# ----------------------------------------------------------------------------- exact dedup

def _texts(batch: dict[str, np.ndarray], rows: np.ndarray | None = None) -> list[str]:
    """The ``text`` column as ``str``; anything else breaks the document-row contract."""
    texts = np.asarray(batch["text"], dtype=object)
    texts = texts if rows is None else texts[rows]
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
    if bad:
        ids = np.asarray(batch["id"], dtype=object)
        ids = ids if rows is None else ids[rows]
        raise TypeError(f"dedup: document {ids[bad[0]]!r} has a text of type "
                        f"{type(texts[bad[0]]).__name__}, expected str ({len(bad)} such rows)")
    return list(texts)


def _digest_columns(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    digests = [hashlib.blake2b(t.encode("utf-8", "surrogatepass"), digest_size=16).digest()
               for t in _texts(batch)]
    both = np.frombuffer(b"".join(digests), dtype="<i8").reshape(-1, 2) if digests \
        else np.zeros((0, 2), np.int64)
    out = dict(batch)
    out["_h0"], out["_h1"] = both[:, 0].copy(), both[:, 1].copy()
    return out


def exact_partition(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Within one hash partition: mark every copy but the smallest uid as ``dedup:exact``."""
    h0, h1 = batch.pop("_h0"), batch.pop("_h1")
    uid = np.asarray(batch["uid"], dtype=np.int64)
    active = _as_str(batch["reason"]) == ""
    idx = np.flatnonzero(active)
    order = idx[np.lexsort((uid[idx], h1[idx], h0[idx]))]
    if len(order) == 0:
        return batch
    key0, key1 = h0[order], h1[order]
    new_group = np.ones(len(order), dtype=bool)
    new_group[1:] = (key0[1:] != key0[:-1]) | (key1[1:] != key1[:-1])
    first = np.maximum.accumulate(np.where(new_group, np.arange(len(order)), 0))
    dup = ~new_group
    return _mark(batch, order[dup], uid[order[first[dup]]], EXACT)


def exact_dedup(ds: ray.data.Dataset, *, stats: DedupStats | None = None,
                num_partitions: int | None = None) -> ray.data.Dataset:
    """Mark exact duplicates (same normalised text) ``dedup:exact``; keep the smallest uid.

    Lazy: hashing, the shuffle and the marking run when the result is consumed (one Ray Data
    execution). With ``stats`` the result is materialised and ``stats.exact_removed``/``seconds``
    are set.
    """
    start = time.perf_counter()
    parts = num_partitions or default_partitions()
    keyed = ds.map_batches(_digest_columns, batch_format="numpy")
    out = group_apply(keyed, exact_partition, key="_h0", num_partitions=parts)
    if stats is not None:
        out = out.materialize()
        stats.exact_removed = count_reason(out, EXACT)
        stats.seconds += time.perf_counter() - start
    return out


def count_reason(ds: ray.data.Dataset, reason: str) -> int:
    """Number of rows whose ``reason`` equals ``reason`` (counted per batch, summed)."""
    def count(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"n": np.array([np.count_nonzero(_as_str(batch["reason"]) == reason)])}

    return int(sum(r["n"] for r in ds.map_batches(count, batch_format="numpy").take_all()))


# ----------------------------------------------------------------------------- near dedup

def signature_buckets(batch: dict[str, np.ndarray], *, cfg: DedupConfig) -> dict[str, np.ndarray]:
    """Stage 1: one (bucket, uid) row per band of every kept document with at least one word."""
    active = np.flatnonzero(_as_str(batch["reason"]) == "")
    texts = _texts(batch, active)
    sigs = minhash_signatures(texts, cfg)
    has_words = sigs[:, 0] != EMPTY if len(texts) else np.zeros(0, bool)
    keys = band_hashes(sigs[has_words], cfg)
    uid = np.asarray(batch["uid"], dtype=np.int64)[active][has_words]
    return {"bucket": keys.ravel(), "uid": np.repeat(uid, cfg.num_bands)}


def bucket_edges(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Stage 2: within a partition of buckets, link every member to its bucket's smallest uid."""
    pairs = np.unique(np.stack([batch["bucket"], batch["uid"]], axis=1), axis=0)
    bucket, uid = pairs[:, 0], pairs[:, 1]
    first = np.ones(len(bucket), dtype=bool)
    first[1:] = bucket[1:] != bucket[:-1]
    root = uid[np.maximum.accumulate(np.where(first, np.arange(len(uid)), 0))]
    member = ~first
    return {"u": uid[member], "v": root[member]}


def _doc_rows(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = dict(batch)
    out["_kind"] = np.full(len(batch["uid"]), _DOC, dtype=np.int64)
    out["_root"] = np.full(len(batch["uid"]), -1, dtype=np.int64)
    return out


def _label_rows(batch: dict[str, np.ndarray], *, columns: dict[str, str]) -> dict:
    """Cluster edges as rows of the document schema (empty strings/zeros), for the union."""
    n = len(batch["u"])
    out = {name: (np.full(n, "", dtype=object) if kind == "str" else np.zeros(n, dtype=kind))
           for name, kind in columns.items()}
    out.update(uid=batch["u"], _kind=np.full(n, _LABEL, dtype=np.int64), _root=batch["v"])
    return out


def _column_kinds(ds: ray.data.Dataset) -> dict[str, str]:
    import pyarrow as pa

    kinds = {}
    for name, typ in zip(ds.schema().names, ds.schema().types):
        if pa.types.is_string(typ) or pa.types.is_large_string(typ):
            kinds[name] = "str"
        elif pa.types.is_integer(typ) or pa.types.is_floating(typ):
            kinds[name] = typ.to_pandas_dtype().__name__
        else:
            raise TypeError(f"near_dedup: unsupported column {name!r} of type {typ}")
    return kinds


def mark_near_duplicates(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Stage 4: within a uid partition, mark documents that have a cluster root ``dedup:near``."""
    kind, root = batch.pop("_kind"), batch.pop("_root")
    labels = kind == _LABEL
    docs = {k: np.asarray(v)[~labels] for k, v in batch.items()}
    label_uid, label_root = np.asarray(batch["uid"])[labels], root[labels]
    order = np.argsort(label_uid, kind="stable")
    return _mark_members_in(docs, label_uid[order], label_root[order])


def _mark_members(batch: dict[str, np.ndarray], *, members: ray.ObjectRef) -> dict[str, np.ndarray]:
    """Stage 4, broadcast form: mark documents found in the (sorted) member -> root arrays."""
    return _mark_members_in(batch, *ray.get(members))


def _mark_members_in(docs: dict[str, np.ndarray], member_uid: np.ndarray,
                     member_root: np.ndarray) -> dict[str, np.ndarray]:
    """Mark kept documents whose uid is in ``member_uid`` (sorted) ``dedup:near`` of its root."""
    uid = np.asarray(docs["uid"], dtype=np.int64)
    pos = np.minimum(np.searchsorted(member_uid, uid), max(len(member_uid) - 1, 0))
    hit = (member_uid[pos] == uid) if len(member_uid) else np.zeros(len(uid), bool)
    hit &= _as_str(docs["reason"]) == ""
    return _mark(docs, np.flatnonzero(hit), member_root[pos[hit]], NEAR)


def _star_arrays(edges: ray.data.Dataset) -> tuple[np.ndarray, np.ndarray]:
    """The star-forest edges as (member uids sorted, their roots), gathered from the blocks."""
    blocks = ray.get(edges.to_numpy_refs())
    u, v = (np.concatenate([np.zeros(0, np.int64)] + [np.asarray(b[c], np.int64) for b in blocks])
            for c in ("u", "v"))
    order = np.argsort(u, kind="stable")
    return u[order], v[order]


def near_dedup(ds: ray.data.Dataset, cfg: DedupConfig, *, stats: DedupStats | None = None,
               num_partitions: int | None = None, broadcast_limit: int = BROADCAST_LIMIT) -> ray.data.Dataset:
    """Mark near-duplicates (MinHash-LSH clusters) ``dedup:near``; keep the smallest uid.

    Signatures, buckets and bucket edges run as one Ray Data execution, then the component
    rounds; the marking pass over the documents is returned lazily (``ds`` is read a second
    time: re-reading Parquet is cheaper than holding every text in the object store). When the
    clusters have at most ``broadcast_limit`` members (16 bytes each) their member -> root table
    is broadcast to the marking tasks through the object store, so the text is never shuffled;
    above it, documents and labels meet in a shuffle by uid. With ``stats``, ``near_removed``,
    ``clusters``, ``cc_iterations`` and ``seconds`` are set. Raises ``ComponentsNotConverged``
    past ``cfg.max_cc_iterations`` rounds.
    """
    start = time.perf_counter()
    parts = num_partitions or default_partitions()
    buckets = ds.map_batches(signature_buckets, batch_format="numpy", fn_kwargs={"cfg": cfg})
    edges = group_apply(buckets, bucket_edges, key="bucket", num_partitions=parts).materialize()
    comps = connected_components(edges, max_iterations=cfg.max_cc_iterations, num_partitions=parts)
    if comps.members == 0:
        out = ds
    elif comps.members <= broadcast_limit:
        members = ray.put(_star_arrays(comps.edges))
        out = ds.map_batches(_mark_members, batch_format="numpy", fn_kwargs={"members": members})
    else:
        both = ds.map_batches(_doc_rows, batch_format="numpy").union(
            comps.edges.map_batches(_label_rows, batch_format="numpy",
                                    fn_kwargs={"columns": _column_kinds(ds)}))
        out = group_apply(both, mark_near_duplicates, key="uid", num_partitions=parts)
    if stats is not None:
        out = out.materialize()
        stats.near_removed = comps.members
        stats.clusters = comps.clusters
        stats.cc_iterations = comps.iterations
        stats.seconds += time.perf_counter() - start
    return out


def dedup(ds: ray.data.Dataset, cfg: DedupConfig, *,
          num_partitions: int | None = None) -> tuple[ray.data.Dataset, DedupStats]:
    """Both stages as the config enables them; returns the marked rows and their statistics."""
    stats = DedupStats()
    if cfg.exact:
        ds = exact_dedup(ds, stats=stats, num_partitions=num_partitions)
    if cfg.near:
        ds = near_dedup(ds, cfg, stats=stats, num_partitions=num_partitions)
    return ds, stats
