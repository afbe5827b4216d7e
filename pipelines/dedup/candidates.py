"""Near dedup's candidates: band keys shuffled with the document id only, each sketch once.

A candidate check compares two documents' sketches (``near``'s module docstring), and the
check runs where the bucket's members meet. Sending the 112-byte sketch along with each of a
document's 14 band rows shuffled 1,904 bytes per document, half the size of a typical web
page's text, although most buckets hold one document and are never checked. Here:

1. ``signature_rows`` (one read of the parts, MinHash once): per document, ``num_bands`` band
   rows ``(bucket, uid)`` keyed by bucket, and ONE sketch row ``(uid, file, sketch)`` keyed by
   uid, in one shuffle whose partition space has two halves: band rows in ``[0, P)``, sketch rows
   in ``[P, 2P)``, with ``2R`` ranges, so ranges ``[0, R)`` hold exactly the band rows and
   ``[R, 2R)`` the sketches (``map_file.range_bounds``), and each half is read by its own pass,
   every byte once.
2. ``shared_buckets`` (reduce of the band half): the memberships ``(uid, bucket)`` of every
   bucket that holds two documents or more, keyed by uid into the same partition numbers as the
   sketches (``[P, 2P)``, ``2R`` ranges): a second, small shuffle.
3. ``with_sketches`` (``pipelines.engine.join`` of the memberships with the sketch half, range
   by range): each membership gets its document's part index and sketch. These rows, and only
   these, are grouped by bucket and checked (``near.bucket_edges``, unchanged).

Shuffled per document: 14 band rows of ~32 bytes (key, uid, an unused file, an empty sketch's
offset, the partition) and one sketch row of ~150, plus ~160 bytes per membership of a shared
bucket (steps 2 and 3); measured in docs/build-corpus.md. The price: two shuffles more (a
fraction of a second each when small) and a join's two spills per reduce task.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from common import storage
from pipelines.config import DedupConfig, ShuffleConfig
from pipelines.dedup import rows as doc_rows
from pipelines.dedup.components import unique_pairs
from pipelines.dedup.minhash import EMPTY, band_hashes, minhash_signatures
from pipelines.engine.join import join
from pipelines.engine.parts import Parts
from pipelines.engine.raydata import partitions_for
from pipelines.engine.shuffle import PART, Shuffled, default_ranges, hash_partition, reduce, shuffle

SKETCH_BITS = 8
BAND_ROW_BYTES = 32  # key, uid, file (0), an empty sketch's offset; the partition (int32 in a map file)


def sketch_bytes(cfg: DedupConfig) -> int:
    return cfg.num_bands * cfg.rows_per_band * SKETCH_BITS // 8


def fixed_binary(rows: np.ndarray) -> pa.Array:
    rows = np.ascontiguousarray(rows, dtype=np.uint8)
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(rows.shape[1]), len(rows), [None, pa.py_buffer(rows)])


def sketch_matrix(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """The sketches of a fixed-size or (equal-length) variable binary column as an (n, bytes) array."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_fixed_size_binary(array.type):
        width = array.type.byte_width
        raw = np.frombuffer(array.buffers()[1], dtype=np.uint8)
        return raw[array.offset * width:(array.offset + len(array)) * width].reshape(len(array), width)
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int32)[array.offset:array.offset + len(array) + 1]
    widths = np.diff(offsets)
    if len(widths) and (widths != widths[0]).any():
        raise ValueError(f"sketches of different lengths: {sorted(set(widths.tolist()))[:4]} bytes")
    raw = np.frombuffer(array.buffers()[2], dtype=np.uint8) if len(array) else np.zeros(0, np.uint8)
    return raw[offsets[0]:offsets[-1]].reshape(len(array), int(widths[0]) if len(widths) else 0)


def signature_rows(batch: dict[str, np.ndarray], *, cfg: DedupConfig, partitions: int) -> pa.Table:
    """Step 1: for each active document with a word, ``num_bands`` band rows (key = bucket, empty
    sketch) in partitions ``[0, partitions)`` and one sketch row (key = uid) in
    ``[partitions, 2 partitions)``; columns key, uid, file, sketch (binary), ``_part``."""
    active = doc_rows.active(batch)
    texts = doc_rows.texts(batch, active)
    num_perm = cfg.num_bands * cfg.rows_per_band
    sigs = minhash_signatures(texts, cfg) if texts else np.zeros((0, num_perm), np.uint64)
    has_words = sigs[:, 0] != EMPTY
    sigs = sigs[has_words]
    n, bands = len(sigs), cfg.num_bands
    buckets = band_hashes(sigs, cfg).ravel()
    uid = np.asarray(batch["uid"], dtype=np.int64)[active][has_words]
    file = doc_rows.files(batch, active)[has_words]
    sketch = (sigs & np.uint64((1 << SKETCH_BITS) - 1)).astype(np.uint8)
    width = sketch.shape[1]
    offsets = np.concatenate([np.zeros(n * bands + 1, np.int32), np.arange(1, n + 1, dtype=np.int32) * width])
    sketches = pa.BinaryArray.from_buffers(pa.binary(), n * (bands + 1),
                                           [None, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(sketch))])
    return pa.table({"key": np.concatenate([buckets, uid]), "uid": np.concatenate([np.repeat(uid, bands), uid]),
                     "file": np.concatenate([np.zeros(n * bands, np.int64), file]), "sketch": sketches,
                     PART: np.concatenate([hash_partition(buckets, partitions),
                                           partitions + hash_partition(uid, partitions)])})


def shared_buckets(rows: pa.Table, *, partitions: int) -> dict[str, np.ndarray] | None:
    """Step 2, on a partition of band rows: ``(uid, bucket)`` of each member of a bucket of two
    documents or more, with its partition in the sketches' half (``partitions + hash(uid)``)."""
    key, uid, _ = unique_pairs(rows.column("key").to_numpy(), rows.column("uid").to_numpy())
    starts = np.flatnonzero(np.diff(key, prepend=key[:1] - 1)) if len(key) else np.zeros(0, np.int64)
    sizes = np.diff(np.append(starts, len(key)))
    shared = np.repeat(sizes >= 2, sizes)
    if not shared.any():
        return None
    uid, key = uid[shared], key[shared]
    return {"uid": uid, "bucket": key, PART: partitions + hash_partition(uid, partitions)}


def with_sketches(members: pa.Table | None, sketches: pa.Table | None) -> pa.Table | None:
    """Step 3, on one partition of the join: each membership ``(uid, bucket)`` with its
    document's part index and sketch: rows (bucket, uid, file, sketch) for ``near.bucket_edges``."""
    if members is None:
        return None
    mu = members.column("uid").to_numpy()
    su = sketches.column("uid").to_numpy() if sketches is not None else np.zeros(0, np.int64)
    order = np.argsort(su, kind="stable")
    at = np.minimum(np.searchsorted(su, mu, sorter=order), max(0, len(su) - 1))
    found = order[at] if len(su) else np.zeros(len(mu), np.int64)
    if not len(su) or (su[found] != mu).any():
        missing = mu[~np.isin(mu, su)][0]
        raise RuntimeError(f"near dedup: document uid {missing} is in a shared bucket but has no sketch "
                           "(the signature shuffle lost rows)")
    sketch = sketch_matrix(sketches.column("sketch"))[found]
    return pa.table({"bucket": members.column("bucket").to_numpy(), "uid": mu,
                     "file": sketches.column("file").to_numpy()[found], "sketch": fixed_binary(sketch)})


def candidate_rows(parts: Parts, cfg: DedupConfig, *, work: str,
                   shuffle_cfg: ShuffleConfig) -> tuple[Any, list[Shuffled], int]:
    """Steps 1-3: the membership rows with sketches (a lazy Dataset, to be grouped by bucket), the
    two shuffles it reads (remove them once it has been consumed) and the number of its rows."""
    options = shuffle_cfg.options()
    rows = parts.read(with_file=True).select_columns(["uid", "text", "reason", "id", "_file"])
    half = partitions_for(parts.rows * cfg.num_bands * BAND_ROW_BYTES, partition_bytes=shuffle_cfg.partition_bytes)
    ranges = 2 * default_ranges(half, shuffle_cfg.reduce_tasks)
    signatures = shuffle(rows.map_batches(signature_rows, batch_format="numpy",
                                          fn_kwargs={"cfg": cfg, "partitions": half}),
                         partitions=2 * half, ranges=ranges, folder=storage.join(work, "signatures"),
                         file_bytes=options["file_bytes"], slice_bytes=options["slice_bytes"], name="lsh_signatures")
    bands, sketch_half = range(ranges // 2), range(ranges // 2, ranges)
    members = reduce(signatures, shared_buckets, fn_kwargs={"partitions": half}, batch_format="pyarrow",
                     memory_bytes=options["memory_bytes"], ranges=bands)
    memberships = shuffle(members, partitions=2 * half, ranges=ranges, folder=storage.join(work, "members"),
                          file_bytes=options["file_bytes"], slice_bytes=options["slice_bytes"], name="lsh_members")
    # No shared bucket: nothing to join (the sketch half is then never read).
    joined = join(memberships, signatures, with_sketches, ranges=sketch_half if memberships.rows else [],
                  memory_bytes=options["memory_bytes"])
    return joined, [signatures, memberships], memberships.rows
