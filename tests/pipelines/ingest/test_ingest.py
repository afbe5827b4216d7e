"""Ingestion: formats × compressions, stable ids, text modes and every kind of bad input (sources:
``test_sources``)."""
from __future__ import annotations

import bz2
import dataclasses
import gzip
import json
import random
import tracemalloc
import zlib
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from common.hashing import stable_uid
from pipelines.config import IngestConfig
from pipelines.ingest import SourceError, Sources, ingest_dataset, read_documents, resolve_sources

CFG = IngestConfig()
STRICT = dataclasses.replace(CFG, detect_charset=False)  # non-UTF-8 stays ingest:invalid_utf8
COMPRESS = {
    None: lambda b: b,
    "gz": gzip.compress,
    "bz2": bz2.compress,
    "zst": lambda b: zstandard.ZstdCompressor().compress(b),
}
WORDS = "river city garden teacher engine market village window mountain library history".split()


def make_docs(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    docs = []
    for _ in range(n):
        lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) + "."
                 for _ in range(rng.randint(1, 3))]
        docs.append("\n".join(lines) + ("" if rng.random() < 0.5 else " café ☕"))
    return docs


def rows(path, cfg=CFG, name=None) -> list[dict]:
    out = []
    for batch in read_documents(str(path), cfg, name=name):
        assert set(batch) == {"id", "uid", "text", "reason", "detail", "url", "encoding"}
        assert len(batch["id"]) <= cfg.batch_size
        out += [{k: batch[k][i] for k in batch} for i in range(len(batch["id"]))]
    return out


def kept(rs) -> list[str]:
    return [r["text"] for r in rs if r["reason"] == ""]


def offset(row) -> int:
    return int(row["id"].rsplit(":", 1)[1])


def write(path: Path, payload: bytes, compression: str | None) -> Path:
    path = Path(f"{path}.{compression}") if compression else path
    path.write_bytes(COMPRESS[compression](payload))
    return path


def text_payload(docs):
    """Blank-line separated docs and the true byte offset of each."""
    payload, offsets = b"", []
    for d in docs:
        offsets.append(len(payload))
        payload += d.encode() + b"\n\n"
    return payload, offsets


def jsonl_payload(docs):
    payload, offsets = b"", []
    for d in docs:
        offsets.append(len(payload))
        payload += json.dumps({"text": d, "meta": 1}, ensure_ascii=False).encode() + b"\n"
    return payload, offsets


def parquet_payload(docs):
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"text": docs, "n": list(range(len(docs)))}), sink, row_group_size=7)
    return sink.getvalue().to_pybytes(), None


FORMATS = {"txt": text_payload, "jsonl": jsonl_payload, "parquet": parquet_payload}


# ---------------------------------------------------------------------------------------------
# Formats × compressions, stable ids
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("compression", list(COMPRESS))
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_format_and_compression(tmp_path, fmt, compression):
    docs = make_docs(23, seed=zlib.crc32(f"{fmt}-{compression}".encode()))
    payload, offsets = FORMATS[fmt](docs)
    path = write(tmp_path / f"docs.{fmt}", payload, compression)
    cfg = dataclasses.replace(CFG, batch_size=5)
    first, second = rows(path, cfg), rows(path, cfg)
    assert kept(first) == docs and all(r["reason"] == "" for r in first)
    assert [r["id"] for r in first] == [r["id"] for r in second]  # stable across reads
    assert [r["uid"] for r in first] == [stable_uid(r["id"]) for r in first]
    assert all(r["id"].startswith(f"{path}:") for r in first)
    if offsets is None:
        assert [r["id"] for r in first] == [f"{path}:row{i}" for i in range(len(docs))]
    else:
        assert [offset(r) for r in first] == offsets  # true offsets in the decompressed stream
        for r in first[:5]:
            start = offset(r)
            line = payload[start:payload.index(b"\n", start)]
            assert r["text"].encode().startswith(line) or json.loads(line)["text"] == r["text"]


def test_concatenated_compressed_members(tmp_path):
    # gzip members / zstd frames concatenated (as `cat a.gz b.gz` gives) read as one stream.
    for comp in ("gz", "zst"):
        path = tmp_path / f"multi.txt.{comp}"
        path.write_bytes(COMPRESS[comp](b"first doc here\n\n") + COMPRESS[comp](b"second doc here\n"))
        rs = rows(path)
        assert kept(rs) == ["first doc here", "second doc here"]
        assert [offset(r) for r in rs] == [0, 16]


def test_ids_use_the_given_name_and_uids_hash_the_id(tmp_path):
    payload, offsets = text_payload(make_docs(9, seed=2))
    path = write(tmp_path / "docs.txt", payload, "gz")
    named = rows(path, name="sub/docs.txt.gz")
    assert [r["id"] for r in named] == [f"sub/docs.txt.gz:{o}" for o in offsets]
    assert [r["uid"] for r in named] == [stable_uid(r["id"]) for r in named]
    assert [r["text"] for r in named] == [r["text"] for r in rows(path)]  # only the ids differ


@pytest.mark.parametrize("mode,expected", [
    ("file", [(0, "alpha one\nalpha two\n\n\nbeta one\n  \ngamma")]),
    ("blank_line", [(0, "alpha one\nalpha two"), (22, "beta one"), (34, "gamma")]),
    ("line", [(0, "alpha one"), (10, "alpha two"), (22, "beta one"), (34, "gamma")]),
])
def test_text_modes(tmp_path, mode, expected):
    path = tmp_path / "modes.txt"
    path.write_bytes(b"alpha one\nalpha two\n\n\nbeta one\n  \ngamma\n")
    rs = rows(path, dataclasses.replace(CFG, text_mode=mode))
    assert [(offset(r), r["text"]) for r in rs] == expected


def test_crlf_and_bom(tmp_path):
    path = tmp_path / "win.txt"
    path.write_bytes("\ufeffdoc one\r\nstill one\r\n\r\ndoc two\r\n".encode())
    rs = rows(path)
    assert kept(rs) == ["doc one\r\nstill one", "doc two"] and [offset(r) for r in rs] == [0, 25]


def test_bad_config_is_an_error(tmp_path):
    (tmp_path / "a.txt").write_text("x")
    with pytest.raises(ValueError, match="text_mode"):
        rows(tmp_path / "a.txt", dataclasses.replace(CFG, text_mode="paragraph"))


# ---------------------------------------------------------------------------------------------
# Bad input: never fatal, always counted with a reason
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("comp", ["gz", "bz2", "zst"])
def test_truncated_compressed_file_keeps_documents_before_damage(tmp_path, comp):
    docs = make_docs(3000, seed=3)
    payload, offsets = text_payload(docs)
    # bz2 decodes whole blocks only: level 1 (100 kB blocks) so the first half holds whole blocks.
    blob = bz2.compress(payload, 1) if comp == "bz2" else COMPRESS[comp](payload)
    path = tmp_path / f"cut.txt.{comp}"
    path.write_bytes(blob[: len(blob) // 2])
    # By default the cut member cannot be verified: none of its documents is kept.
    strict = rows(path)
    assert {r["reason"] for r in strict} == {"ingest:corrupt_compression"} and len(strict) > 100
    assert "truncated" in strict[0]["detail"]
    rs = rows(path, dataclasses.replace(CFG, keep_truncated_member=True))
    assert [r["id"] for r in rs] == [r["id"] for r in strict]
    good, bad = rs[:-1], rs[-1]
    assert bad["reason"] == "ingest:corrupt_compression" and "byte" in bad["detail"]
    assert all(r["reason"] == "" for r in good) and len(good) > 100
    assert kept(good) == docs[: len(good)]  # an exact prefix of the documents, none altered
    assert [offset(r) for r in good] == offsets[: len(good)]
    assert offset(bad) in offsets and offset(bad) > offsets[len(good) - 1]


def test_not_actually_compressed(tmp_path):
    path = tmp_path / "liar.txt.gz"
    path.write_bytes(b"plain text pretending to be gzip\n")
    rs = rows(path)
    assert [r["reason"] for r in rs] == ["ingest:corrupt_compression"]


def test_binary_file(tmp_path):
    rng = random.Random(5)
    path = tmp_path / "blob.txt"
    path.write_bytes(bytes(rng.randrange(256) for _ in range(5000)) + b"\x00" * 16)
    rs = rows(path)
    assert [(r["reason"], offset(r)) for r in rs] == [("ingest:binary", 0)]


def test_invalid_utf8_rejects_only_that_document(tmp_path):
    path = tmp_path / "mixed.txt"
    path.write_bytes(b"good one\n\ngood two\nmore\n\nbad line ok\nbroken \xff\xfe here\n\ngood three\n")
    rs = rows(path, STRICT)
    assert kept(rs) == ["good one", "good two\nmore", "good three"]
    (bad,) = [r for r in rs if r["reason"]]
    assert bad["reason"] == "ingest:invalid_utf8" and bad["detail"].startswith("line 7:")
    assert offset(bad) == 25 and "\\xff\\xfe" in bad["text"]


def test_empty_file_and_empty_documents(tmp_path):
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "blank.txt").write_bytes(b"\n \n\t\n")
    (tmp_path / "empty.jsonl").write_bytes(b"")
    (tmp_path / "empty.txt.gz").write_bytes(gzip.compress(b""))
    for name in ("empty.txt", "blank.txt", "empty.jsonl", "empty.txt.gz"):
        assert [r["reason"] for r in rows(tmp_path / name)] == ["ingest:empty_file"], name
    assert [r["reason"] for r in rows(tmp_path / "blank.txt", dataclasses.replace(CFG, text_mode="file"))] == [
        "ingest:empty_document"]
    (tmp_path / "docs.jsonl").write_text('{"text": "kept"}\n{"text": "   "}\n{"text": ""}\n\n')
    rs = rows(tmp_path / "docs.jsonl")
    assert [r["reason"] for r in rs] == ["", "ingest:empty_document", "ingest:empty_document"]
    assert rs[2]["detail"] == "line 3: empty text"


def test_bad_json_lines(tmp_path):
    path = tmp_path / "recs.jsonl"
    path.write_bytes(b'{"text": "one"}\n{not json\n{"body": "x"}\n[1, 2]\n{"text": 5}\n'
                     b'{"text": "bad \xff utf8"}\n{"text": "two"}\n')
    rs = rows(path, STRICT)
    assert [r["reason"] for r in rs] == ["", "ingest:bad_json", "ingest:missing_field", "ingest:missing_field",
                                         "ingest:missing_field", "ingest:invalid_utf8", ""]
    assert kept(rs) == ["one", "two"]
    assert [r["detail"].split(":")[0].split(",")[0] for r in rs[1:6]] == [f"line {n}" for n in range(2, 7)]
    assert rs[4]["detail"] == "line 5: field 'text' is int, not a string"
    assert rs[1]["detail"] == "line 2, column 2: Expecting property name enclosed in double quotes"


def test_json_that_python_rejects_late(tmp_path):
    path = tmp_path / "odd.jsonl"
    path.write_bytes(b"[" * 100_000 + b"\n" + b'{"n": ' + b"9" * 5000 + b"}\n"
                     + b'{"text": "lone \\ud800 surrogate"}\n{"text": "fine"}\n')
    rs = rows(path)
    assert [r["reason"] for r in rs] == ["ingest:bad_json", "ingest:bad_json", "ingest:invalid_utf8", ""]
    assert rs[1]["detail"].startswith("line 2: ValueError") and "surrogate" in rs[2]["detail"]


def test_oversize_single_line_is_skipped_not_held(tmp_path):
    big = b"x" * (10 << 20)
    path = tmp_path / "huge.txt"
    path.write_bytes(b"before doc\n\n" + big + b"\n\nafter doc\n")
    cfg = dataclasses.replace(CFG, max_document_bytes=1 << 20)
    tracemalloc.start()
    rs = rows(path, cfg)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 6 << 20  # the 10 MB line never sat in memory whole
    assert kept(rs) == ["before doc", "after doc"]
    assert [offset(r) for r in rs] == [0, 12, 12 + len(big) + 2]
    assert rs[1]["reason"] == "ingest:oversize" and f"{len(big) + 1} bytes" in rs[1]["detail"]
    assert len(rs[1]["text"]) <= 10 * 1024


def test_oversize_multi_line_document_and_jsonl_record(tmp_path):
    cfg = dataclasses.replace(CFG, max_document_bytes=100)
    path = tmp_path / "long.txt"
    path.write_text("short\n\n" + "a line of text\n" * 20 + "\nend\n")
    rs = rows(path, cfg)
    assert [r["reason"] for r in rs] == ["", "ingest:oversize", ""] and kept(rs) == ["short", "end"]
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps({"text": "y" * 500}) + "\n" + json.dumps({"text": "ok"}) + "\n")
    assert [r["reason"] for r in rows(path, cfg)] == ["ingest:oversize", ""]


def test_bad_parquet(tmp_path):
    (tmp_path / "junk.parquet").write_bytes(b"this is not parquet at all" * 10)
    assert [r["reason"] for r in rows(tmp_path / "junk.parquet")] == ["ingest:bad_parquet"]
    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "nocol.parquet")
    (r,) = rows(tmp_path / "nocol.parquet")
    assert r["reason"] == "ingest:missing_field" and "body" in r["detail"]
    pq.write_table(pa.table({"text": [1, 2]}), tmp_path / "ints.parquet")
    assert [r["reason"] for r in rows(tmp_path / "ints.parquet")] == ["ingest:missing_field"]
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), tmp_path / "zero.parquet")
    assert [r["reason"] for r in rows(tmp_path / "zero.parquet")] == ["ingest:empty_file"]
    pq.write_table(pa.table({"text": ["a", None, " ", "b"]}), tmp_path / "nulls.parquet")
    rs = rows(tmp_path / "nulls.parquet")
    assert [r["reason"] for r in rs] == ["", "ingest:empty_document", "ingest:empty_document", ""]


# ---------------------------------------------------------------------------------------------
# Ray Data: good and bad files together
# ---------------------------------------------------------------------------------------------
def test_ingest_dataset_mix_of_good_and_bad_files(tmp_path, ray_local):
    docs = make_docs(60, seed=11)
    payload, _ = text_payload(docs[:20])
    (tmp_path / "a.txt").write_bytes(payload)
    (tmp_path / "b.txt.gz").write_bytes(gzip.compress(text_payload(docs[20:40])[0]))
    (tmp_path / "c.jsonl.zst").write_bytes(COMPRESS["zst"](jsonl_payload(docs[40:50])[0] + b"{oops\n"))
    pq.write_table(pa.table({"text": docs[50:]}), tmp_path / "d.parquet", row_group_size=4)
    cut = gzip.compress(text_payload(make_docs(2000, seed=12))[0])
    (tmp_path / "bad-cut.txt.gz").write_bytes(cut[: len(cut) // 2])
    (tmp_path / "bad-binary.txt").write_bytes(b"\x00\x01\x02" * 100)
    (tmp_path / "bad-empty.txt").write_bytes(b"")
    (tmp_path / "bad-utf8.txt").write_bytes(b"fine doc\n\nbroken caf\xc3\xa9 \xc3\x28 doc\n")  # damaged UTF-8
    (tmp_path / "latin.txt").write_bytes("Caf\u00e9 cr\u00e8me \u201cbr\u00fbl\u00e9e\u201d\n".encode("cp1252"))
    (tmp_path / "bad-oversize.txt").write_bytes(b"z" * 50_000 + b"\n\nshort neighbour\n")
    paths = resolve_sources([str(tmp_path)])
    cfg = dataclasses.replace(CFG, batch_size=8, max_document_bytes=20_000)
    ds = ingest_dataset(paths, cfg)
    schema = ds.schema()
    assert list(schema.names) == ["id", "uid", "text", "reason", "detail", "url", "encoding"]
    assert [str(t) for t in schema.types] == ["string", "int64", "string", "string", "string", "string", "string"]
    out = ds.take_all()
    good = [r for r in out if r["reason"] == ""]
    ids = [r["id"] for r in out]
    assert len(ids) == len(set(ids))  # nothing read twice
    folder = tmp_path.name  # names start with the source folder's own name
    assert {r["id"].rsplit(":", 1)[0] for r in out} == {f"{folder}/{Path(f).name}" for f in paths.files}
    from_good_files = [r["text"] for r in good if not r["id"].startswith((f"{folder}/bad-", f"{folder}/latin"))]
    assert Counter(from_good_files) == Counter(docs)  # every good document exactly once
    assert [(r["text"], r["encoding"]) for r in good if "latin" in r["id"]] == [
        ("Caf\u00e9 cr\u00e8me \u201cbr\u00fbl\u00e9e\u201d", "cp1252")]
    assert {"fine doc", "short neighbour"} <= {r["text"] for r in good}
    reasons = Counter(r["reason"] for r in out if r["reason"])
    assert reasons.pop("ingest:corrupt_compression") > 100  # the cut gzip member: nothing kept from it
    assert reasons == {"ingest:binary": 1, "ingest:empty_file": 1,
                       "ingest:invalid_utf8": 1, "ingest:bad_json": 1, "ingest:oversize": 1}
    assert {r["uid"] for r in out} == {stable_uid(i) for i in ids}
    # Reading big files as byte ranges in parallel gives the same rows.
    split = ingest_dataset(paths, cfg, split_bytes=300).take_all()
    assert sorted((r["id"], r["text"], r["reason"]) for r in split) == sorted(
        (r["id"], r["text"], r["reason"]) for r in out)


def test_ingest_dataset_rejects_empty_sources():
    with pytest.raises(SourceError):
        ingest_dataset(Sources((), "", ""), CFG)


def test_batches_are_capped_by_rows_and_by_characters(tmp_path, monkeypatch):
    import pipelines.ingest as ingest

    docs = [f"document number {i:03d} with some text" for i in range(25)]  # 36 chars each
    (tmp_path / "d.txt").write_text("\n\n".join(docs))
    sizes = [len(b["id"]) for b in read_documents(str(tmp_path / "d.txt"), dataclasses.replace(CFG, batch_size=10))]
    assert sizes == [10, 10, 5]
    monkeypatch.setattr(ingest.documents, "BATCH_CHARS", 100)
    batches = list(read_documents(str(tmp_path / "d.txt"), dataclasses.replace(CFG, batch_size=10)))
    assert [len(b["id"]) for b in batches] == [3] * 8 + [1]
    assert [t for b in batches for t in b["text"]] == docs
