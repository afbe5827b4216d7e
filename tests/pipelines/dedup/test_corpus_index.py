"""The corpus's dedup index (``pipelines.dedup.corpus_index``): the written parts checked against
keys and partitions computed here, independently (hashlib's blake2b, murmur3's fmix64 in plain
Python integers, zlib's crc32 over the files' bytes), and the errors a damaged index gives."""
from __future__ import annotations

import hashlib
import json
import random
import shutil
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from pipelines.config import DedupConfig, ShuffleConfig
from pipelines.dedup import corpus_index
from pipelines.dedup.corpus_index import CorpusIndexError, index_partitions, open_index, write_index
from pipelines.engine import parts
from synthetic import prose

MASK64 = (1 << 64) - 1
NUM_PERM_BYTES = 14 * 8  # the default 14 bands x 8 rows, one byte (8 bits) each


# ----------------------------------------------------------------------------- references
def fmix64(x: int) -> int:
    """murmur3's 64-bit finaliser over Python integers (the reference, not common.hashing)."""
    x &= MASK64
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & MASK64
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & MASK64
    x ^= x >> 33
    return x


def partition_of(key: int, partitions: int) -> int:
    """The part of a signed int64 key: fmix64 of its two's-complement bits, mod P."""
    return fmix64(key & MASK64) % partitions


def text_key(text: str) -> tuple[int, int]:
    """blake2b-128 of the UTF-8 text as two little-endian signed int64 (h0, h1)."""
    d = hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()
    return (int.from_bytes(d[:8], "little", signed=True), int.from_bytes(d[8:], "little", signed=True))


def uid_of(doc_id: str) -> int:
    d = hashlib.blake2b(doc_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(d, "little") & ((1 << 63) - 1)


def read_ipc(path: Path) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(path.read_bytes())).read_all()


# ----------------------------------------------------------------------------- documents
GREEK = "Η γρήγορη καφέ αλεπού πηδάει πάνω από το τεμπέλικο σκυλί και τρέχει στο δάσος."
JAPANESE = "吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。"
NO_WORDS = ["", "...", "  ,;:!? \n\t ", "。、「」"]  # ASCII punctuation / whitespace, CJK punctuation


def documents() -> list[dict]:
    """20 prose documents, 3 of them again under other ids, Greek and Japanese text, and
    documents without a word."""
    texts = prose.documents(20, seed=7)
    texts += [texts[0], texts[0], texts[5], GREEK, GREEK, JAPANESE] + NO_WORDS
    rows = []
    for i, t in enumerate(texts):
        doc_id = f"gen0:{i}"
        rows.append({"id": doc_id, "uid": uid_of(doc_id), "text": t, "reason": "", "detail": ""})
    random.Random(1).shuffle(rows)
    return rows


def has_words(text: str) -> bool:
    return text not in NO_WORDS


def write_parts(ray, rows: list[dict], folder: Path, *, blocks: int = 2) -> parts.Parts:
    ds = ray.data.from_items(rows).repartition(blocks)
    out = parts.write_documents(ds, data=str(folder / "data"), rejected=str(folder / "rejected"),
                                prefix_chars=10, full_text=False)
    return parts.Parts(str(folder / "data"), tuple(out["files"]))


PARTITIONS = 4


@pytest.fixture(scope="module")
def written(ray_local, tmp_path_factory):
    """The index of ``documents()`` in 4 parts per kind (PART_BYTES made small for it)."""
    root = tmp_path_factory.mktemp("corpus_index")
    rows = documents()
    cfg = DedupConfig()
    # 30 documents x 416 bytes in parts of 4,000 bytes: ceil(12480 / 4000) = 4 parts.
    assert corpus_index.bytes_per_document(cfg) * len(rows) == 12480
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(corpus_index, "PART_BYTES", 4000)
        record = write_index(write_parts(ray_local, rows, root / "in"), cfg,
                             folder=str(root / "corpus" / "index" / "g0"), work=str(root / "work"),
                             shuffle_cfg=ShuffleConfig())
    return {"rows": rows, "record": record, "root": root, "folder": root / "corpus" / "index" / "g0", "cfg": cfg}


def _files(folder: Path, kind: str) -> dict[int, Path]:
    return {int(p.stem.split("-")[1]): p for p in sorted((folder / kind).glob("part-*.arrow"))}


# ----------------------------------------------------------------------------- 1. the written index
def test_exact_parts_hold_each_documents_blake2b_in_its_fmix64_partition(written):
    folder, rows = written["folder"], written["rows"]
    assert written["record"]["partitions"] == PARTITIONS
    files = _files(folder, "exact")
    assert set(files) <= set(range(PARTITIONS)) and len(files) >= 2
    got = []
    for p, path in files.items():
        table = read_ipc(path)
        assert table.column_names == ["h0", "h1", "uid"]
        assert [str(t) for t in table.schema.types] == ["int64", "int64", "int64"]
        h0, h1, uid = (table.column(c).to_pylist() for c in ("h0", "h1", "uid"))
        assert all(partition_of(k, PARTITIONS) == p for k in h0), f"exact part {p}: a key of another part"
        assert list(zip(h0, uid)) == sorted(zip(h0, uid)), f"exact part {p}: not sorted by key"
        got += list(zip(h0, h1, uid))
    # One row per kept document (copies of one text each keep theirs), no other row.
    expected = sorted((*text_key(r["text"]), r["uid"]) for r in rows)
    assert sorted(got) == expected
    assert len(got) == len(rows) == 30
    # The three copies of text 0 share one key, in one part, under three uids.
    key0 = text_key(prose.documents(20, seed=7)[0])
    assert sum((h0, h1) == key0 for h0, h1, _ in got) == 3
    # Partitions with no key are not written; every written one is listed in _index.json.
    occupied = {partition_of(k, PARTITIONS) for k, _, _ in expected}
    assert set(files) == occupied


def test_docs_parts_carry_each_documents_id_and_bands_parts_its_band_keys(written):
    folder, rows = written["folder"], written["rows"]
    by_uid = {r["uid"]: r for r in rows}
    docs = []
    for p, path in _files(folder, "docs").items():
        table = read_ipc(path)
        assert table.column_names == ["uid", "id", "sketch"]
        uid = table.column("uid").to_pylist()
        assert uid == sorted(uid)
        assert all(partition_of(u, PARTITIONS) == p for u in uid)
        assert all(len(s) == NUM_PERM_BYTES for s in table.column("sketch").to_pylist())
        docs += list(zip(uid, table.column("id").to_pylist(), table.column("sketch").to_pylist()))
    assert sorted((u, i) for u, i, _ in docs) == sorted((r["uid"], r["id"]) for r in rows)
    sketch = {u: s for u, _, s in docs}
    # Equal texts, equal sketches; different texts with words, different sketches.
    worded = [r for r in rows if has_words(r["text"])]
    for a in worded:
        for b in worded:
            assert (sketch[a["uid"]] == sketch[b["uid"]]) == (a["text"] == b["text"])

    bands: dict[int, list[int]] = {}
    for p, path in _files(folder, "bands").items():
        table = read_ipc(path)
        assert table.column_names == ["band", "uid"]
        key, uid = table.column("band").to_pylist(), table.column("uid").to_pylist()
        assert all(partition_of(k, PARTITIONS) == p for k in key)
        assert list(zip(key, uid)) == sorted(zip(key, uid))
        for k, u in zip(key, uid):
            bands.setdefault(u, []).append(k)
    # 14 bands per document with a word (Greek and Japanese included), none for the others.
    assert set(bands) == {r["uid"] for r in worded}
    assert all(len(b) == 14 for b in bands.values())
    assert {by_uid[u]["text"] for u in bands} >= {GREEK, JAPANESE}
    for a in worded:
        for b in worded:
            shared = set(bands[a["uid"]]) & set(bands[b["uid"]])
            if a["text"] == b["text"]:
                assert sorted(bands[a["uid"]]) == sorted(bands[b["uid"]])
            else:  # unrelated texts share no LSH bucket
                assert not shared, (a["id"], b["id"])


def test_the_record_lists_every_part_with_its_rows_bytes_and_crc(written):
    folder, rows, cfg = written["folder"], written["rows"], written["cfg"]
    meta = json.loads((folder / "_index.json").read_text())
    assert meta["partitions"] == PARTITIONS and meta["documents"] == len(rows) == 30
    assert meta["settings"] == {"exact": True, "near": True, "ngram": cfg.ngram, "spaceless_ngram": cfg.spaceless_ngram,
                                "num_bands": 14, "rows_per_band": 8, "seed": cfg.seed, "sketch_bits": 8}
    worded = sum(has_words(r["text"]) for r in rows)
    assert meta["rows"] == {"exact": 30, "bands": 14 * worded, "docs": 30}
    total = 0
    for kind in ("exact", "bands", "docs"):
        files = _files(folder, kind)
        listed = meta["parts"][kind]
        assert [p for p, *_ in listed] == sorted(files)  # exactly the files there, in order
        for p, n, size, crc in listed:
            data = files[p].read_bytes()
            assert size == len(data) and crc == zlib.crc32(data)
            assert n == read_ipc(files[p]).num_rows
            total += size
        assert sum(n for _, n, _, _ in listed) == meta["rows"][kind]
    assert meta["bytes"] == total
    # write_index's answer is the record without its parts (and its seal: the sha256 of the
    # rest as compact, key-sorted JSON; common.sealed)
    seal = meta.pop("sha256")
    assert seal == hashlib.sha256(json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert written["record"] == {k: v for k, v in meta.items() if k != "parts"}
    # ... and open_index reads the same parts back through GenerationIndex.read
    index = open_index(str(written["root"] / "corpus"), 0, "g0", "index/g0", cfg)
    assert index.partitions == PARTITIONS and index.folder == str(folder)
    for kind in ("exact", "bands", "docs"):
        for p in range(PARTITIONS):
            table, n = index.read(kind, p)
            path = folder / kind / f"part-{p:05d}.arrow"
            if path.exists():
                assert table.equals(read_ipc(path)) and n == path.stat().st_size
            else:
                assert (table, n) == (None, 0)


def test_one_part_per_kind_for_a_small_corpus(ray_local, tmp_path):
    rows = documents()[:6]
    record = write_index(write_parts(ray_local, rows, tmp_path / "in", blocks=1), DedupConfig(),
                         folder=str(tmp_path / "idx"), work=str(tmp_path / "w"), shuffle_cfg=ShuffleConfig())
    assert record["partitions"] == 1 and record["documents"] == 6
    for kind in ("exact", "docs"):
        assert sorted(p.name for p in (tmp_path / "idx" / kind).iterdir()) == ["part-00000.arrow"]
    table = read_ipc(tmp_path / "idx" / "exact" / "part-00000.arrow")
    assert sorted(zip(table.column("h0").to_pylist(), table.column("h1").to_pylist())) == \
        sorted(text_key(r["text"]) for r in rows)


# ----------------------------------------------------------------------------- 2. partitions
def test_index_partitions_are_powers_of_two_that_grow_with_the_documents():
    cfg = DedupConfig()
    per_doc = corpus_index.bytes_per_document(cfg)
    # ~400 bytes a document at the defaults (24 exact + 14 x 16 bands + ~160 docs)
    assert 24 + 14 * 16 + 150 <= per_doc <= 24 + 14 * 16 + 200
    for tiny in (0, 1, 10, 1000):
        assert index_partitions(tiny, cfg) == 1
    sizes = [10**6, 10**7, 10**8, 10**9]
    got = [index_partitions(n, cfg) for n in sizes]
    assert got == sorted(set(got)) and len(set(got)) == 4  # strictly growing
    for n, p in zip(sizes, got):
        assert p & (p - 1) == 0  # a power of two
        # the smallest power of two whose parts hold at most PART_BYTES
        assert n * per_doc <= p * corpus_index.PART_BYTES < 2 * n * per_doc
    assert got == [8, 64, 1024, 8192]  # 416 B/doc: 6.2, 62, 620, 6199 parts of 64 MiB rounded up
    # exact-only indexes are smaller: fewer parts for as many documents
    assert index_partitions(10**8, DedupConfig(near=False)) < got[2]
    assert index_partitions(10**6, cfg, part_bytes=1 << 20) == 512  # ceil(396.7) -> 512


# ----------------------------------------------------------------------------- 3. damage
@pytest.fixture
def copy(written, tmp_path):
    """A private copy of the written corpus index (the module's stays intact)."""
    shutil.copytree(written["folder"], tmp_path / "corpus" / "index" / "g0")
    return tmp_path / "corpus", written["cfg"]


def test_a_damaged_part_is_an_error_naming_its_file(copy):
    corpus, cfg = copy
    path = sorted((corpus / "index" / "g0" / "docs").glob("part-*.arrow"))[0]
    p = int(path.stem.split("-")[1])
    index = open_index(str(corpus), 0, "g0", "index/g0", cfg)
    table, _ = index.read("docs", p)
    assert table.num_rows > 0
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CorpusIndexError, match="damaged") as err:
        index.read("docs", p)
    assert str(path) in str(err.value)
    # a truncated part too
    path.write_bytes(bytes(data[:-10]))
    with pytest.raises(CorpusIndexError) as err:
        index.read("docs", p)
    assert str(path) in str(err.value) and f"{len(data) - 10} bytes" in str(err.value)


def test_a_missing_listed_part_is_an_error_naming_it(copy):
    corpus, cfg = copy
    path = sorted((corpus / "index" / "g0" / "exact").glob("part-*.arrow"))[-1]
    path.unlink()
    index = open_index(str(corpus), 0, "g0", "index/g0", cfg)
    with pytest.raises(CorpusIndexError, match="missing") as err:
        index.read("exact", int(path.stem.split("-")[1]))
    assert str(path) in str(err.value)
    # the other parts still read
    others = [int(p.stem.split("-")[1]) for p in (corpus / "index" / "g0" / "exact").glob("part-*.arrow")]
    assert others and all(index.read("exact", p)[0].num_rows > 0 for p in others)


def test_open_index_refuses_other_dedup_settings_and_a_missing_record(copy):
    corpus, cfg = copy
    meta = corpus / "index" / "g0" / "_index.json"
    for other in (DedupConfig(num_bands=13), DedupConfig(rows_per_band=7), DedupConfig(seed=2), DedupConfig(ngram=6),
                  DedupConfig(near=False), DedupConfig(spaceless_ngram=2)):
        with pytest.raises(CorpusIndexError, match="dedup settings") as err:
            open_index(str(corpus), 0, "g0", "index/g0", other)
        assert str(meta) in str(err.value)
    # the verification threshold is not part of the keys: any is fine
    index = open_index(str(corpus), 3, "g3", "index/g0", DedupConfig(jaccard_threshold=0.9))
    assert (index.number, index.name, index.partitions) == (3, "g3", PARTITIONS)
    meta.unlink()
    with pytest.raises(CorpusIndexError, match="missing") as err:
        open_index(str(corpus), 0, "g0", "index/g0", cfg)
    assert str(meta) in str(err.value)


def test_index_rows_of_a_batch_skip_dropped_documents_and_name_their_partition():
    """``index_rows`` (the map side of write_index) on a batch, without Ray: rows of active
    documents only, ``_part`` = kind x P + fmix64(key) mod P."""
    texts = [prose.documents(1, seed=3)[0], GREEK, "...", JAPANESE]
    ids = ["k:0", "k:1", "k:2", "k:3"]
    batch = {"id": np.array(ids, object), "uid": np.array([uid_of(i) for i in ids], np.int64),
             "text": np.array(texts, object), "reason": np.array(["", "filter:lang", "", ""], object),
             "detail": np.array([""] * 4, object)}
    table = corpus_index.index_rows(batch, cfg=DedupConfig(), partitions=8)
    kind, key, aux, uid, part = (table.column(c).to_pylist() for c in ("kind", "key", "aux", "uid", "_part"))
    active = [0, 2, 3]  # k:1 was dropped by an earlier stage
    exact = [(k, a, u) for t, k, a, u in zip(kind, key, aux, uid) if t == 0]
    assert sorted(exact) == sorted((*text_key(texts[i]), uid_of(ids[i])) for i in active)
    docs = [(k, u, i) for t, k, u, i in zip(kind, key, uid, table.column("id").to_pylist()) if t == 2]
    assert sorted(docs) == sorted((uid_of(ids[i]), uid_of(ids[i]), ids[i]) for i in active)
    band_uids = [u for t, u in zip(kind, uid) if t == 1]
    assert sorted(band_uids) == sorted([uid_of("k:0")] * 14 + [uid_of("k:3")] * 14)  # "..." has no word
    assert all(p == t * 8 + partition_of(k, 8) for t, k, p in zip(kind, key, part))
    assert table.num_rows == 3 + 28 + 3
