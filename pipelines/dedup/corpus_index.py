"""The corpus's dedup index: what an append deduplicates new text against, without the old text.

Every build writes, for the documents it kept, the keys its two dedups compare, in
``index/<key>/`` of the corpus (one folder per generation, ``pipelines.schema.generations``):

* ``exact/``: ``(h0, h1, uid)``, the blake2b-128 of the text (``dedup.exact``'s key), 24 bytes;
* ``bands/``: ``(band, uid)``, one row per MinHash band (``dedup.near``'s LSH buckets), 16 bytes
  each, ``num_bands`` per document;
* ``docs/``: ``(uid, id, sketch)``, the document's id (what a quarantined duplicate names) and its
  b-bit sketch (``candidates.SKETCH_BITS``), which verifies an LSH candidate as near dedup does.

Each kind is hash-partitioned by its key into ``P`` parts (``part-NNNNN.arrow``, Arrow IPC,
sorted by key), ``P`` a power of two giving parts of about ``PART_BYTES``: so a probe for key
``k`` against generation ``g`` reads one part, ``hash(k) mod P_g``, and an append that probes in
``P_join = max P_g`` partitions (every ``P_g`` divides it) reads, per task, one part of each
generation. ``_index.json``, written last, records ``P``, the dedup settings the keys depend on
and every part's rows, bytes and crc32 (a part with no rows is not written, and a listed part
that is missing or altered is an error naming it). ``_index.json`` is sealed
(``common.sealed``: a ``"sha256"`` over its canonical JSON), since nothing else names
its bytes: a flipped digit of ``P`` would send every probe to the wrong part and miss duplicates
silently. A torn, unparseable or altered ``_index.json`` is one ``CorpusIndexError`` naming it
and its generation; one written before the seal is read unchecked.

Trade-offs. The index costs ~(24 + 16 b + ~150) bytes per document (b bands; ~400 at the
defaults), against the kilobytes of its text, and is written by one storage shuffle of those
rows. MinHash is computed once more here over the kept documents (near dedup's signatures are
not kept): the price of an index that holds only the survivors. datatrove keeps signatures per
bucket file and reports a placeholder for a match in the index; here a match names the document.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from common import storage
from pipelines.config import DedupConfig, ShuffleConfig
from pipelines.dedup import rows as doc_rows
from pipelines.dedup.candidates import SKETCH_BITS, sketch_bytes
from pipelines.dedup.exact import digest_rows
from pipelines.dedup.minhash import EMPTY, band_hashes, minhash_signatures
from pipelines.engine import written
from pipelines.engine.parts import Parts
from pipelines.engine.shuffle import PART, default_ranges, hash_partition, reduce, shuffle
from common.sealed import DamagedJSON, seal, unseal

KINDS = ("exact", "bands", "docs")
META = "_index.json"
FORMAT = 1
PART_BYTES = 64 << 20
DOC_ROW_BYTES = 160  # uid, an id of ~40 bytes, a 112-byte sketch


class CorpusIndexError(storage.StorageError):
    """An index part that is missing or damaged, or an index of other settings; names the file.
    A ``StorageError`` (so the command line prints its one line) that is not retried: reading
    the same bytes again gives the same answer."""


def keyed_settings(cfg: DedupConfig) -> dict[str, Any]:
    """The dedup settings the index's keys depend on (an append must use the same)."""
    return {"exact": cfg.exact, "near": cfg.near, "ngram": cfg.ngram, "spaceless_ngram": cfg.spaceless_ngram,
            "num_bands": cfg.num_bands, "rows_per_band": cfg.rows_per_band, "seed": cfg.seed,
            "sketch_bits": SKETCH_BITS}


def bytes_per_document(cfg: DedupConfig) -> int:
    return 24 * cfg.exact + (16 * cfg.num_bands + DOC_ROW_BYTES) * cfg.near + 8 + 40 * (not cfg.near)


def index_partitions(documents: int, cfg: DedupConfig, part_bytes: int = PART_BYTES) -> int:
    """The power of two of parts per kind giving parts of about ``part_bytes``."""
    need = max(1, math.ceil(documents * bytes_per_document(cfg) / part_bytes))
    return 1 << (need - 1).bit_length()


def key_rows(batch: dict[str, np.ndarray], *, cfg: DedupConfig, exact: bool, near: bool,
             with_id: bool = True) -> dict[str, dict[str, Any]]:
    """Per kind, the key rows of the batch's active documents: ``exact`` (key=h0, aux=h1, uid,
    file), ``bands`` (key=band, uid, file, the document's sketch row), ``docs`` (key=uid, id, sketch)."""
    out: dict[str, dict[str, Any]] = {}
    active = doc_rows.active(batch)
    uid = np.asarray(batch["uid"], dtype=np.int64)[active]
    file = doc_rows.files(batch, active)
    ids = np.asarray(batch["id"], dtype=object)[active] if with_id else np.full(len(active), "", object)
    if exact:
        d = digest_rows(batch)
        out["exact"] = {"key": d["h0"], "aux": d["h1"], "uid": d["uid"], "file": d["file"]}
    width = sketch_bytes(cfg)
    sketch = np.zeros((len(active), width), np.uint8)
    if near:
        texts = doc_rows.texts(batch, active)
        num_perm = cfg.num_bands * cfg.rows_per_band
        sigs = minhash_signatures(texts, cfg) if texts else np.zeros((0, num_perm), np.uint64)
        words = sigs[:, 0] != EMPTY if len(sigs) else np.zeros(0, bool)
        sketch = (sigs & np.uint64((1 << SKETCH_BITS) - 1)).astype(np.uint8)
        bands = band_hashes(sigs[words], cfg) if words.any() else np.zeros((0, cfg.num_bands), np.int64)
        at = np.repeat(np.flatnonzero(words), cfg.num_bands)
        out["bands"] = {"key": np.asarray(bands, np.int64).ravel(), "aux": np.zeros(len(at), np.int64),
                        "uid": uid[at], "file": file[at], "row": at}
    out["docs"] = {"key": uid, "aux": np.zeros(len(uid), np.int64), "uid": uid, "file": file, "id": ids,
                   "sketch": sketch}
    return out


def binary_rows(rows: np.ndarray) -> pa.Array:
    """The rows of a 2-D uint8 array as a variable-width binary column (each row one value)."""
    width = rows.shape[1] if rows.ndim == 2 else 0
    offsets = np.arange(len(rows) + 1, dtype=np.int32) * width
    return pa.BinaryArray.from_buffers(pa.binary(), len(rows),
                                       [None, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(rows))])


def index_rows(batch: dict[str, np.ndarray], *, cfg: DedupConfig, partitions: int) -> pa.Table:
    """The index rows of a batch, one schema for all kinds (kind, key, aux, uid, id, sketch,
    ``_part`` = kind x partitions + hash(key))."""
    got = key_rows(batch, cfg=cfg, exact=cfg.exact, near=cfg.near)
    cols: dict[str, list] = {c: [] for c in ("kind", "key", "aux", "uid", "id", "sketch", PART)}
    width = sketch_bytes(cfg)
    for k, kind in enumerate(KINDS):
        if kind not in got:
            continue
        r = got[kind]
        n = len(r["key"])
        cols["kind"].append(np.full(n, k, np.int64))
        cols["key"].append(np.asarray(r["key"], np.int64))
        cols["aux"].append(np.asarray(r["aux"], np.int64))
        cols["uid"].append(np.asarray(r["uid"], np.int64))
        cols["id"].append(r["id"] if kind == "docs" else np.full(n, "", object))
        cols["sketch"].append(r["sketch"] if kind == "docs" else np.zeros((n, width), np.uint8))
        cols[PART].append(k * partitions + hash_partition(r["key"], partitions))
    return pa.table({"kind": np.concatenate(cols["kind"]), "key": np.concatenate(cols["key"]),
                     "aux": np.concatenate(cols["aux"]), "uid": np.concatenate(cols["uid"]),
                     "id": pa.array(np.concatenate(cols["id"]).tolist(), pa.string()),
                     "sketch": binary_rows(np.concatenate(cols["sketch"])), PART: np.concatenate(cols[PART])})


def _columns(kind: str, table: pa.Table) -> pa.Table:
    if kind == "exact":
        return pa.table({"h0": table.column("key"), "h1": table.column("aux"), "uid": table.column("uid")})
    if kind == "bands":
        return pa.table({"band": table.column("key"), "uid": table.column("uid")})
    return pa.table({"uid": table.column("uid"), "id": table.column("id"), "sketch": table.column("sketch")})


def part_uri(folder: str, kind: str, part: int) -> str:
    return storage.join(folder, kind, f"part-{part:05d}.arrow")


def _write_part(table: pa.Table, *, partition: int, partitions: int, folder: str) -> dict[str, np.ndarray]:
    k, p = divmod(partition, partitions)
    kind = KINDS[k]
    order = np.lexsort((table.column("aux").to_numpy(), table.column("uid").to_numpy(), table.column("key").to_numpy()))
    table = _columns(kind, table.take(pa.array(order)))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    data = sink.getvalue().to_pybytes()
    storage.write_bytes(part_uri(folder, kind, p), data)
    return {"kind": np.array([k]), "part": np.array([p]), "rows": np.array([table.num_rows]),
            "bytes": np.array([len(data)]), "crc": np.array([zlib.crc32(data)], np.int64)}


def write_index(parts: Parts, cfg: DedupConfig, *, folder: str, work: str, shuffle_cfg: ShuffleConfig) -> dict[str, Any]:
    """Write the index of the documents in ``parts`` into ``folder``; returns its record (also
    written there as ``_index.json``, last)."""
    options = shuffle_cfg.options()
    partitions = index_partitions(parts.rows, cfg, PART_BYTES)
    rows = parts.read().select_columns(["uid", "text", "reason", "id"])
    sh = shuffle(rows.map_batches(index_rows, batch_format="numpy", fn_kwargs={"cfg": cfg, "partitions": partitions}),
                 partitions=len(KINDS) * partitions, folder=storage.join(work, "index"), name="index",
                 ranges=default_ranges(len(KINDS) * partitions, shuffle_cfg.reduce_tasks),
                 file_bytes=options["file_bytes"], slice_bytes=options["slice_bytes"])
    listed: dict[str, list[list[int]]] = {kind: [] for kind in KINDS}
    if sh.rows:
        done = reduce(sh, _write_part, batch_format="pyarrow", with_partition=True, memory_bytes=options["memory_bytes"],
                      fn_kwargs={"partitions": partitions, "folder": folder})
        for batch in done.iter_batches(batch_size=4096, batch_format="numpy"):
            for k, p, r, b, c in zip(*(batch[c] for c in ("kind", "part", "rows", "bytes", "crc"))):
                listed[KINDS[int(k)]].append([int(p), int(r), int(b), int(c)])
            written.add(files=len(batch["part"]), nbytes=int(np.sum(batch["bytes"])))
    sh.remove()
    for kind in KINDS:
        listed[kind].sort()
    record = {"format": FORMAT, "partitions": partitions, "documents": parts.rows, "settings": keyed_settings(cfg),
              "rows": {kind: sum(r for _, r, _, _ in listed[kind]) for kind in KINDS},
              "bytes": sum(b for kind in KINDS for _, _, b, _ in listed[kind]), "parts": listed}
    storage.write_bytes(storage.join(folder, META), seal(record))  # checked by open_index
    return {k: v for k, v in record.items() if k != "parts"}


@dataclass(frozen=True)
class GenerationIndex:
    """One earlier generation's index, as an append probes it."""
    number: int  # the generation's position in the manifest (0: the first build)
    name: str
    folder: str  # its location (a URI or path)
    partitions: int
    parts: dict[str, dict[int, tuple[int, int, int]]]  # kind -> part -> (rows, bytes, crc32)

    def read(self, kind: str, part: int) -> tuple[pa.Table | None, int]:
        """Part ``part`` of ``kind`` (None when it has no rows) and the bytes read."""
        listed = self.parts.get(kind, {}).get(part)
        if listed is None:
            return None, 0
        uri = part_uri(self.folder, kind, part)
        try:
            data = storage.read_bytes(uri)
        except storage.MissingObject:
            raise CorpusIndexError(f"{uri}: listed in {META} but missing; the corpus's index of generation "
                              f"{self.number} is damaged (build the corpus again)") from None
        if len(data) != listed[1] or zlib.crc32(data) != listed[2]:
            raise CorpusIndexError(f"{uri}: damaged: {len(data)} bytes, crc32 {zlib.crc32(data):#010x}, written as "
                              f"{listed[1]} bytes, {listed[2]:#010x}; the dedup index of generation {self.number} "
                              f"({self.name}) cannot be trusted (build the corpus again)")
        return pa.ipc.open_stream(pa.py_buffer(data)).read_all(), len(data)


def open_index(corpus: str, number: int, name: str, rel: str, cfg: DedupConfig) -> GenerationIndex:
    """Generation ``number``'s index (``rel``: its folder in the corpus), checked against ``cfg``."""
    folder = storage.join(corpus, rel)
    uri = storage.join(folder, META)
    try:
        data = storage.read_bytes(uri)
    except storage.MissingObject:
        raise CorpusIndexError(f"{uri}: missing; the corpus names it as generation {number}'s dedup index "
                          "(build the corpus again)") from None
    fix = f"the dedup index of generation {number} ({name}) cannot be trusted (build the corpus again)"
    try:
        record = unseal(data, uri, what=META, fix=fix)
        parts = {kind: {int(p): (int(r), int(b), int(c)) for p, r, b, c in record["parts"].get(kind, [])}
                 for kind in KINDS}
        partitions = int(record["partitions"])
    except DamagedJSON as exc:
        raise CorpusIndexError(str(exc)) from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # torn or not an index record
        raise CorpusIndexError(f"{uri}: unreadable {META} ({type(exc).__name__}: "
                               f"{str(exc).splitlines()[0] if str(exc) else ''}); {fix}") from None
    if record.get("settings") != keyed_settings(cfg):
        raise CorpusIndexError(f"{uri}: written with dedup settings {record.get('settings')}, not this build's "
                          f"{keyed_settings(cfg)}")
    return GenerationIndex(number=number, name=name, folder=folder, partitions=partitions, parts=parts)
