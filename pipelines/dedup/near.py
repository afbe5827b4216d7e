"""Near dedup: MinHash-LSH candidates, verified, clustered, all but the smallest uid removed.

Four named steps sharing one ``DedupConfig`` (as datatrove splits them), moving no text:

1. candidates (``pipelines.dedup.candidates``): vectorised MinHash signatures
   (``pipelines.dedup.minhash``) cut into ``num_bands`` bands of ``rows_per_band`` values; band
   keys are shuffled with the document id only, and each document's sketch (the low
   ``SKETCH_BITS`` bits of every signature value: b-bit MinHash, Li & König 2010, 112 bytes
   instead of 896) once, by id; the sketch is joined to the document's memberships of buckets
   that hold two documents or more: rows (bucket, uid, file, sketch) for those only.
2. ``bucket_edges``: those rows grouped by bucket (a storage shuffle); every member is checked
   against the bucket's smallest uid before it is linked to it: the estimated Jaccard of their
   sketches must reach ``jaccard_threshold``. Members that fail are checked against the
   smallest of the failed ones, and so on for ``ANCHOR_ROUNDS`` rounds, so a bucket holding two
   unrelated groups (e.g. pages sharing a long header but nothing else) gives two verified
   stars, or none, never one false cluster.
3. ``connected_components`` (``pipelines.dedup.components``): distributed large-star/small-star
   rounds until every cluster is a star around its smallest uid; each node's part index rides
   along.
4. marking (``marks``): every non-root member is marked ``dedup:near`` with the uid of the kept
   root, joined to its part by the part index.

Why verify. A pair becomes a candidate with probability ``1 - (1 - s**r)**b`` at Jaccard ``s``
(14 bands of 8 rows: 50% at ~0.72), but a band also collides when the minima of its 8
permutations all fall in a shared part of two documents: 1,000 pages with a 200-word header and
different 500-word bodies (Jaccard ~0.16) produced header-only buckets, and without a check
every member of such a bucket was unioned and removed. Estimated Jaccard from b-bit sketches:
two values agree with probability ``J + (1 - J) / 2**b``; with 112 values and b = 8 the standard
error is ~0.04 at J = 0.75, against a margin of ~0.5 for the header case. True Jaccard on
shingles (NeMo Curator's check) would need both texts side by side for every edge, i.e. a
shuffle of the text. Clusters stay transitive (A~B, B~C removes C even if A and C are less
similar), the intended behaviour for chains of edited copies; each link of a chain is verified.
``jaccard_threshold: null`` turns the check off (datatrove's behaviour).

Shuffle partitions follow the rows shuffled (``raydata.partitions_for``), not the CPUs.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from common import storage
from pipelines.config import DedupConfig, ShuffleConfig
from pipelines.dedup.candidates import SKETCH_BITS, candidate_rows, sketch_bytes, sketch_matrix
from pipelines.dedup.components import connected_components
from pipelines.dedup.marks import build_marks, mark_parts
from pipelines.dedup.minhash import lsh_threshold
from pipelines.engine.parts import Parts
from pipelines.engine.raydata import partitions_for
from pipelines.engine.shuffle import group_apply

NEAR = "dedup:near"
ANCHOR_ROUNDS = 4
_REFUSED = -10  # marker row of bucket_edges: candidates the similarity check refused
_KEY_BYTES = 24  # bucket, uid, file


def estimated_jaccard(a: np.ndarray, b: np.ndarray, bits: int = SKETCH_BITS) -> np.ndarray:
    """Jaccard estimate per row pair of b-bit sketches: agreement corrected for chance matches."""
    if len(a) == 0:
        return np.zeros(0)
    chance = 2.0 ** -bits
    agree = (a == b).mean(axis=1)
    return np.clip((agree - chance) / (1 - chance), 0.0, 1.0)


def bucket_edges(table: pa.Table, *, threshold: float | None) -> dict[str, np.ndarray]:
    """Step 2: within a partition of buckets, link each member to its bucket's smallest verified
    uid (see the module docstring); edges (u, v, fu, fv) with v < u."""
    bucket = table.column("bucket").to_numpy().astype(np.int64)
    uid = table.column("uid").to_numpy().astype(np.int64)
    file = table.column("file").to_numpy().astype(np.int64)
    sketch = sketch_matrix(table.column("sketch"))
    order = np.lexsort((uid, bucket))
    bucket, uid, file, sketch = bucket[order], uid[order], file[order], sketch[order]
    distinct = np.ones(len(uid), dtype=bool)
    distinct[1:] = (bucket[1:] != bucket[:-1]) | (uid[1:] != uid[:-1])
    pool = distinct.copy()  # rows not yet linked nor used as a root
    out: list[tuple[np.ndarray, np.ndarray]] = []
    refused = 0
    for _ in range(ANCHOR_ROUNDS if threshold is not None else 1):
        idx = np.flatnonzero(pool)
        if len(idx) < 2:
            break
        b = bucket[idx]
        first = np.ones(len(idx), dtype=bool)
        first[1:] = b[1:] != b[:-1]
        roots = idx[np.maximum.accumulate(np.where(first, np.arange(len(idx)), 0))]
        members, their_roots = idx[~first], roots[~first]
        if len(members) == 0:
            break
        ok = np.ones(len(members), dtype=bool) if threshold is None else \
            estimated_jaccard(sketch[members], sketch[their_roots]) >= threshold
        out.append((members[ok], their_roots[ok]))
        refused += int(np.count_nonzero(~ok))
        pool[idx[first]] = False  # a root is done: its verified members are linked to it
        pool[members[ok]] = False
    m = np.concatenate([x for x, _ in out]) if out else np.zeros(0, np.int64)
    r = np.concatenate([y for _, y in out]) if out else np.zeros(0, np.int64)
    # One marker row (u < 0, which the component rounds skip): the checks that failed.
    return {"u": np.append(uid[m], _REFUSED), "v": np.append(uid[r], refused),
            "fu": np.append(file[m], 0), "fv": np.append(file[r], 0)}


def _refused(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    mark = batch["u"] == _REFUSED
    return {"n": batch["v"][mark]}


def _member_pairs(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {"u": batch["u"], "v": batch["v"], "file": batch["fu"]}


def near_dedup(parts: Parts, cfg: DedupConfig, *, work: str,
               shuffle: ShuffleConfig | None = None) -> tuple[Any, dict[str, Any]]:
    """Mark near-duplicates (verified MinHash-LSH clusters) ``dedup:near``; keep the smallest uid.

    Signatures, buckets and verified bucket edges run now, then the component rounds and the
    marks shuffle (files under ``work``, which the caller deletes once the returned marking pass
    has run). Raises ``ComponentsNotConverged`` past ``cfg.max_cc_iterations`` rounds.
    """
    shuffle = shuffle or ShuffleConfig()
    candidates, inputs, members = candidate_rows(parts, cfg, work=work, shuffle_cfg=shuffle)
    partitions = partitions_for(members * (_KEY_BYTES + sketch_bytes(cfg)), partition_bytes=shuffle.partition_bytes)
    edges, sh = group_apply(candidates, bucket_edges, key="bucket", partitions=partitions,
                            folder=storage.join(work, "buckets"), name="lsh_buckets", batch_format="pyarrow",
                            fn_kwargs={"threshold": cfg.jaccard_threshold}, **shuffle.options())
    edges = edges.materialize()
    for done in (*inputs, sh):
        done.remove()
    comps = connected_components(edges, max_iterations=cfg.max_cc_iterations, work=storage.join(work, "cc"),
                                   shuffle=shuffle)
    pairs = comps.edges.map_batches(_member_pairs, batch_format="numpy")
    marks = build_marks(pairs, num_files=len(parts.files), folder=storage.join(work, "marks"), name="near_marks",
                        **shuffle.options())
    refused = sum(int(r["n"]) for r in edges.map_batches(_refused, batch_format="numpy").take_all())
    stats = {"near_duplicates": marks.count, "clusters": comps.clusters, "cc_iterations": comps.iterations,
             "refused_checks": refused, "lsh_threshold": round(lsh_threshold(cfg), 4),
             "jaccard_threshold": cfg.jaccard_threshold,
             "shuffles": [*(i.stats for i in inputs), sh.stats, *comps.shuffles, marks.stats]}
    return mark_parts(parts, marks, NEAR), stats
