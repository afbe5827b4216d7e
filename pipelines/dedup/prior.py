"""Deduplication of an append against the corpus it grows: the index probed, the text never read.

An append (``build-corpus --append``) runs exact and near dedup within its new text as any build
does, then drops each new document that duplicates a document of an earlier generation, found
in their indexes (``pipelines.dedup.corpus_index``):

1. probe: the new documents' key rows (exact: the text's blake2b-128; near: the MinHash band keys
   with the document's sketch) go through one storage shuffle into ``P_join = max P_g``
   partitions by the same hash as the indexes; the task of partition ``j`` reads part
   ``j mod P_g`` of each generation ``g`` (one GET each) and returns the matching pairs
   (new uid, its part, old uid, generation): exact on both halves of the digest, near on a band.
2. resolve: the pairs are few (true duplicates and band collisions), so the driver groups them by
   the old document's ``docs`` part and one task per part reads it: the old document's id, and for
   near its sketch, whose estimated Jaccard with the new one's must reach
   ``dedup.jaccard_threshold`` (the check ``near.bucket_edges`` makes).
3. marking: each new document with a verified match is dropped (``dedup:exact`` / ``dedup:near``)
   and its quarantined record names the document it duplicates: id, uid and generation (the
   earliest generation, then the smallest uid, when several match).

Cost: the new text's key rows and, per generation, the index parts the probe tasks read (a part
is read by ``P_join / P_g`` tasks); nothing of the old text or shards. The pairs and the matches
are held on the driver (tens of bytes each): bounded by the new documents, not the corpus.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import pyarrow as pa

from common import storage
from pipelines.config import DedupConfig, ShuffleConfig
from pipelines.dedup.candidates import sketch_bytes, sketch_matrix
from pipelines.dedup.corpus_index import CorpusIndexError, GenerationIndex, binary_rows, key_rows
from pipelines.dedup.near import estimated_jaccard
from pipelines.engine.parts import Parts
from pipelines.engine.shuffle import PART, default_ranges, hash_partition, reduce, shuffle

def _probe_rows(batch: dict[str, np.ndarray], *, cfg: DedupConfig, kind: str, partitions: int) -> pa.Table:
    got = key_rows(batch, cfg=cfg, exact=kind == "exact", near=kind == "bands", with_id=False)
    r = got[kind]
    sketch = got["docs"]["sketch"][r["row"]] if kind == "bands" else np.zeros((len(r["key"]), 0), np.uint8)
    return pa.table({"key": np.asarray(r["key"], np.int64), "aux": np.asarray(r["aux"], np.int64),
                     "uid": np.asarray(r["uid"], np.int64), "file": np.asarray(r["file"], np.int64),
                     "sketch": binary_rows(sketch),
                     PART: hash_partition(np.asarray(r["key"], np.int64), partitions)})


def _probe(table: pa.Table, *, partition: int, kind: str, priors: list[GenerationIndex]) -> dict[str, Any] | None:
    """Partition ``partition`` of the new key rows against each generation's matching part."""
    key = table.column("key").to_numpy()
    aux = table.column("aux").to_numpy()
    out: list[dict[str, np.ndarray]] = []
    read = 0
    for g in priors:
        old, n = g.read(kind, partition % g.partitions)
        read += n
        if old is None:
            continue
        okey = old.column("h0" if kind == "exact" else "band").to_numpy()
        oaux = old.column("h1").to_numpy() if kind == "exact" else np.zeros(len(okey), np.int64)
        ouid = old.column("uid").to_numpy()
        lo, hi = np.searchsorted(okey, key, "left"), np.searchsorted(okey, key, "right")  # parts are sorted by key
        counts = hi - lo
        rows = np.repeat(np.arange(len(key)), counts)
        # the index rows lo[i] .. hi[i] - 1 of every new row i, in one pass
        at = np.repeat(lo, counts) + np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)
        hit = oaux[at] == aux[rows]
        rows, at = rows[hit], at[hit]
        out.append({"row": rows, "v": ouid[at], "g": np.full(len(rows), g.number, np.int64)})
    rows = np.concatenate([o["row"] for o in out]) if out else np.zeros(0, np.int64)
    # and one marker row (u = -1): the index bytes this task read
    return {"u": np.append(table.column("uid").to_numpy()[rows], -1),
            "file": np.append(table.column("file").to_numpy()[rows], -1),
            "v": np.append(np.concatenate([o["v"] for o in out]) if out else np.zeros(0, np.int64), read),
            "g": np.append(np.concatenate([o["g"] for o in out]) if out else np.zeros(0, np.int64), -1),
            "sketch": pa.concat_arrays([table.column("sketch").take(pa.array(rows)).combine_chunks(),
                                        pa.array([b""], pa.binary())])}


def _resolve(prior: GenerationIndex, part: int, v: np.ndarray, sketches: np.ndarray,
             threshold: float | None) -> tuple[np.ndarray, list[str], int]:
    """For the old uids ``v`` of one ``docs`` part: whether each candidate is verified, and the
    old document's id."""
    docs, read = prior.read("docs", part)
    if docs is None:
        raise CorpusIndexError(f"{prior.folder}: generation {prior.number}'s index has no docs part {part} for uid {v[0]}")
    duid = docs.column("uid").to_numpy()
    at = np.searchsorted(duid, v)
    at = np.minimum(at, len(duid) - 1)
    if (duid[at] != v).any():
        raise CorpusIndexError(f"{prior.folder}: uid {v[duid[at] != v][0]} is in the index's keys but not its docs")
    ids = [docs.column("id")[int(i)].as_py() for i in at]
    if threshold is None or sketches.shape[1] == 0:
        return np.ones(len(v), bool), ids, read
    old = sketch_matrix(docs.column("sketch"))[at]
    return estimated_jaccard(sketches, old) >= threshold, ids, read


def prior_matches(parts: Parts, priors: list[GenerationIndex], cfg: DedupConfig, *, kind: str, work: str,
                  shuffle_cfg: ShuffleConfig) -> dict[str, Any]:
    """The documents of ``parts`` that duplicate one of ``priors`` (``kind``: ``exact`` or
    ``bands``): sorted arrays ``u`` (new uid), ``v`` (old uid), ``g`` (generation number), ``id``
    (old id), and statistics."""
    import ray

    if not priors or not parts.rows:
        return {"u": np.zeros(0, np.int64), "v": np.zeros(0, np.int64), "g": np.zeros(0, np.int64), "id": [],
                "stats": {"candidates": 0, "matches": 0, "refused": 0, "index_bytes_read": 0}}
    options = shuffle_cfg.options()
    partitions = max(p.partitions for p in priors)
    rows = parts.read(with_file=True).select_columns(["uid", "text", "reason", "id", "_file"])
    sh = shuffle(rows.map_batches(_probe_rows, batch_format="numpy",
                                  fn_kwargs={"cfg": cfg, "kind": kind, "partitions": partitions}),
                 partitions=partitions, folder=storage.join(work, f"prior-{kind}"), name=f"prior_{kind}",
                 ranges=default_ranges(partitions, shuffle_cfg.reduce_tasks),
                 file_bytes=options["file_bytes"], slice_bytes=options["slice_bytes"])
    got: dict[str, list] = defaultdict(list)
    read = 0
    if sh.rows:
        probed = reduce(sh, _probe, batch_format="pyarrow", with_partition=True, memory_bytes=options["memory_bytes"],
                        fn_kwargs={"kind": kind, "priors": priors})
        for batch in probed.iter_batches(batch_size=65536, batch_format="pyarrow"):
            marker = batch.column("u").to_numpy() == -1
            read += int(batch.column("v").to_numpy()[marker].sum())
            rows = pa.array(np.flatnonzero(~marker))
            for c in ("u", "file", "v", "g"):
                got[c].append(batch.column(c).to_numpy()[~marker])
            got["sketch"].append(batch.column("sketch").take(rows).combine_chunks())
    sh.remove()
    u, v, g = (np.concatenate(got[c]) if got[c] else np.zeros(0, np.int64) for c in ("u", "v", "g"))
    width = sketch_bytes(cfg) if kind == "bands" else 0
    sketch = sketch_matrix(pa.chunked_array(got["sketch"], pa.binary()).combine_chunks()) if len(u) and width \
        else np.zeros((len(u), 0), np.uint8)
    # One check per (new, old) pair, however many bands they share.
    _, first = np.unique(np.stack([u, v, g]).T, axis=0, return_index=True) if len(u) else (None, np.zeros(0, np.int64))
    first = np.sort(first)
    u, v, g, sketch = u[first], v[first], g[first], sketch[first]
    by_number = {p.number: p for p in priors}
    groups: dict[tuple[int, int], np.ndarray] = {}
    for gi, prior in by_number.items():  # by (generation, the old document's docs part)
        mine = np.flatnonzero(g == gi)
        part = hash_partition(v[mine], prior.partitions)
        for q in np.unique(part):
            groups[(gi, int(q))] = mine[part == q]
    resolve = ray.remote(_resolve)
    futures = {key: resolve.remote(by_number[key[0]], key[1], v[idx], sketch[idx], cfg.jaccard_threshold)
               for key, idx in groups.items()}
    ok = np.zeros(len(u), bool)
    ids = np.full(len(u), "", object)
    for key, fut in futures.items():
        idx = groups[key]
        good, names, n = ray.get(fut)
        ok[idx], ids[idx] = good, names
        read += n
    # Per new document, the earliest generation's smallest uid.
    keep = np.flatnonzero(ok)
    order = keep[np.lexsort((v[keep], g[keep], u[keep]))]
    lead = np.ones(len(order), bool)
    lead[1:] = u[order][1:] != u[order][:-1]
    chosen = order[lead]
    return {"u": u[chosen], "v": v[chosen], "g": g[chosen], "id": ids[chosen].tolist(),
            "stats": {"candidates": int(len(u)), "matches": int(len(chosen)), "refused": int((~ok).sum()),
                      "index_bytes_read": read}}


def apply_matches(table: pa.Table, *, matches: dict[str, Any], names: dict[int, str], reason: str) -> pa.Table:
    """Rows with an active uid in ``matches`` dropped with ``reason``, the record naming the old
    document (id, uid, generation number and name)."""
    u = matches["u"]
    if not len(u) or table.num_rows == 0:
        return table
    uid = table.column("uid").to_numpy(zero_copy_only=False).astype(np.int64)
    reasons = np.asarray(table.column("reason").to_pylist(), dtype=object)
    details = np.asarray(table.column("detail").to_pylist(), dtype=object)
    pos = np.minimum(np.searchsorted(u, uid), len(u) - 1)
    hit = np.flatnonzero((u[pos] == uid) & (reasons == ""))
    if not len(hit):
        return table
    reasons[hit] = reason
    details[hit] = [f"duplicate of document {matches['id'][p]!r} (uid {matches['v'][p]}) of generation "
                    f"{matches['g'][p]} ({names[int(matches['g'][p])]})" for p in pos[hit]]
    i, j = table.column_names.index("reason"), table.column_names.index("detail")
    table = table.set_column(i, "reason", pa.array(reasons.tolist(), pa.string()))
    return table.set_column(j, "detail", pa.array(details.tolist(), pa.string()))
