"""Large files read as several tasks: Parquet by row group, zstd by frame through a seek table.

The reference is always a whole-file read of the same file: the tasks of a partition together
give exactly its rows, with its ids. Seekable zstd files are written here straight from the spec
(facebook/zstd contrib/seekable_format): independent frames, then a skippable frame holding one
(Compressed_Size, Decompressed_Size[, Checksum]) entry per frame and the 9-byte footer.
"""
from __future__ import annotations

import dataclasses
import json
import os
import struct

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from pipelines.ingest import read_documents
from pipelines.ingest.seekable import seek_table
from tests.pipelines.ingest.test_ingest import CFG, jsonl_payload, make_docs, text_payload
from tests.pipelines.ingest.test_text_stream import tricky_jsonl, tricky_text


def seekable_zstd(payload: bytes, cuts: list[int], *, checksums: bool = False) -> bytes:
    """``payload`` as one zstd frame per piece between ``cuts``, plus the seek table."""
    bounds = [0, *cuts, len(payload)]
    frames, entries = [], []
    for a, b in zip(bounds, bounds[1:]):
        frame = zstandard.ZstdCompressor(level=3, write_checksum=True).compress(payload[a:b])
        frames.append(frame)
        # The entry's checksum is the low 32 bits of the XXH64 of the content: exactly what the
        # frame's own content checksum (its last 4 bytes) holds.
        entries.append(struct.pack("<II", len(frame), b - a) + (frame[-4:] if checksums else b""))
    body = b"".join(entries) + struct.pack("<IBI", len(frames), 0x80 if checksums else 0, 0x8F92EAB1)
    return b"".join(frames) + struct.pack("<II", 0x184D2A5E, len(body)) + body


def every(step: int, n: int) -> list[int]:
    return list(range(step, n, step))


def as_tuples(batches) -> list[tuple]:
    return [(b["id"][i], b["text"][i], b["reason"][i]) for b in batches for i in range(len(b["id"]))]


def whole(path, cfg) -> list[tuple]:
    return as_tuples(read_documents(str(path), cfg, name="f"))


def split(path, cfg, tasks: int) -> list[tuple]:
    """What ``plan_reads`` makes of the file for ``tasks`` tasks, read task by task."""
    size = os.path.getsize(path)
    step = -(-size // tasks)
    out = []
    for lo in range(0, size, step):
        end = lo + step if lo + step < size else None
        out += as_tuples(read_documents(str(path), cfg, start=lo, end=end, name="f", size=size))
    return out


# ---------------------------------------------------------------------------------------------
# Seekable zstd
# ---------------------------------------------------------------------------------------------
def test_seek_table_is_read_as_written(tmp_path):
    payload = text_payload(make_docs(300, seed=41))[0]
    cuts = every(997, len(payload))
    for checksums in (False, True):
        blob = seekable_zstd(payload, cuts, checksums=checksums)
        path = tmp_path / f"t{checksums}.txt.zst"
        path.write_bytes(blob)
        frames = seek_table(str(path), len(blob))
        bounds = [0, *cuts, len(payload)]
        assert [(f.d_start, f.d_size) for f in frames] == [(a, b - a) for a, b in zip(bounds, bounds[1:])]
        for f in frames:  # each entry locates a frame that decompresses to its piece on its own
            piece = zstandard.ZstdDecompressor().decompress(blob[f.start:f.start + f.size])
            assert piece == payload[f.d_start:f.d_end]
    plain = tmp_path / "plain.txt.zst"
    plain.write_bytes(zstandard.ZstdCompressor().compress(payload))
    assert seek_table(str(plain), plain.stat().st_size) is None
    lying = bytearray(seekable_zstd(payload, cuts))
    lying[-13] ^= 1  # the last entry's Decompressed_Size: sizes still add up, table still trusted...
    lying[-17] ^= 1  # ...but its Compressed_Size no longer fills the file: no seek table
    (tmp_path / "lying.txt.zst").write_bytes(bytes(lying))
    assert seek_table(str(tmp_path / "lying.txt.zst"), len(lying)) is None


@pytest.mark.parametrize("name,mode", [("t.txt", "blank_line"), ("t.txt", "line"), ("t.jsonl", "blank_line")])
@pytest.mark.parametrize("frame", [1, 3, 16, 61, 400])
def test_frames_partition_the_documents(tmp_path, name, mode, frame):
    """Frames cut anywhere (inside lines, between \\r and \\n, in runs of blank lines, in a long
    whitespace line) and tasks cut anywhere: the rows and ids of a whole-file read, each once."""
    payload = tricky_jsonl() if name.endswith(".jsonl") else tricky_text() + b"\n\n" + b" " * 300 + b"\n\nend\n"
    path = tmp_path / f"{name}.zst"
    path.write_bytes(seekable_zstd(payload, every(frame, len(payload))))
    cfg = dataclasses.replace(CFG, text_mode=mode, max_document_bytes=200)
    reference = whole(path, cfg)
    plain = tmp_path / name
    plain.write_bytes(payload)
    assert reference == whole(plain, cfg) and len(reference) > 10  # the seek table is invisible
    for tasks in (2, 3, 7, 16):
        assert split(path, cfg, tasks) == reference, tasks


def test_large_jsonl_split_by_frames_with_checksummed_table(tmp_path):
    docs = make_docs(3000, seed=42)
    payload, offsets = jsonl_payload(docs)
    path = tmp_path / "big.jsonl.zst"
    path.write_bytes(seekable_zstd(payload, every(4096, len(payload)), checksums=True))
    reference = whole(path, CFG)
    assert [t for _, t, _ in reference] == docs and [i for i, _, _ in reference] == [f"f:{o}" for o in offsets]
    for tasks in (2, 5, 11):
        assert split(path, CFG, tasks) == reference


def test_zstd_without_a_seek_table_is_read_whole_by_the_first_range(tmp_path):
    payload = text_payload(make_docs(400, seed=43))[0]
    path = tmp_path / "plain.txt.zst"
    # Several frames, but no table: where they start is unknown without decoding what precedes.
    path.write_bytes(b"".join(zstandard.ZstdCompressor().compress(payload[a:a + 5000])
                              for a in range(0, len(payload), 5000)))
    size = path.stat().st_size
    first = as_tuples(read_documents(str(path), CFG, start=0, end=size // 3, name="f", size=size))
    rest = as_tuples(read_documents(str(path), CFG, start=size // 3, end=None, name="f", size=size))
    assert first == whole(path, CFG) and rest == []


def test_utf16_seekable_file_is_transcoded_whole_by_the_first_task(tmp_path):
    docs = [f"Dokument {i}: Grüße aus Köln — {'x' * (i % 40)}" for i in range(200)]
    payload = ("\ufeff" + "".join(d + "\n\n" for d in docs)).encode("utf-16-le")
    path = tmp_path / "u16.txt.zst"
    path.write_bytes(seekable_zstd(payload, every(1000, len(payload))))
    reference = whole(path, CFG)
    assert [t for _, t, _ in reference] == docs
    assert split(path, CFG, 4) == reference


def test_damaged_frame_in_a_split_read(tmp_path):
    """A task trusts its own frames: a damaged frame quarantines the rest of its task; the next
    task, whose look-back frame it is, cannot find its first document and says so in one row;
    every other task keeps exactly what it keeps in the undamaged file."""
    docs = make_docs(2000, seed=44)
    payload, offsets = text_payload(docs)
    clean = seekable_zstd(payload, every(2048, len(payload)))
    frames = seek_table(_write(tmp_path / "clean.txt.zst", clean), len(clean))
    tasks, size = 8, len(clean)
    starts = list(range(0, size, -(-size // tasks)))
    first_of_k = next(f for f in frames if f.start >= starts[4])  # task 4's first frame
    bad = frames[first_of_k.index - 1]  # the last frame of task 3, task 4's look-back
    blob = bytearray(clean)
    blob[bad.start + bad.size // 2] ^= 0x55
    _write(tmp_path / "bad.txt.zst", bytes(blob))
    before, after = _per_task(tmp_path / "clean.txt.zst", starts), _per_task(tmp_path / "bad.txt.zst", starts)
    assert [after[j] for j in (0, 1, 2, 5, 6, 7)] == [before[j] for j in (0, 1, 2, 5, 6, 7)]
    assert all(r == "" for j in (0, 1, 2, 5, 6, 7) for _, _, r, _ in after[j])
    by_offset = dict(zip(offsets, docs))
    good3 = [(i, t) for i, t, r, _ in after[3] if r == ""]
    assert good3 and all(by_offset[int(i[2:])] == t and int(i[2:]) < bad.d_start for i, t in good3)
    assert after[3][-1][2] == "ingest:corrupt_compression"
    assert f"zstd frame {bad.index + 1} failed its check" in after[3][-1][3]
    ((rid, _, reason, detail),) = after[4]
    assert rid == f"f:{first_of_k.d_start}" and reason == "ingest:corrupt_compression"
    assert f"zstd frame {bad.index + 1} failed its check" in detail and "none of them is read" in detail


def _write(path, blob: bytes) -> str:
    path.write_bytes(blob)
    return str(path)


def _per_task(path, starts: list[int]) -> list[list[tuple]]:
    size = os.path.getsize(path)
    bounds = [*starts[1:], None]
    return [[(b["id"][i], b["text"][i], b["reason"][i], b["detail"][i])
             for b in read_documents(str(path), CFG, start=lo, end=hi, name="f", size=size)
             for i in range(len(b["id"]))] for lo, hi in zip(starts, bounds)]


# ---------------------------------------------------------------------------------------------
# Parquet
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dictionary", [True, False])
def test_parquet_row_groups_partition_the_rows(tmp_path, dictionary):
    docs = make_docs(500, seed=45)
    docs[17], docs[300] = None, "   "
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"n": list(range(500)), "text": docs}), path, row_group_size=23,
                   use_dictionary=dictionary)
    reference = whole(path, CFG)
    assert [i for i, _, _ in reference] == [f"f:row{n}" for n in range(500)]
    assert [r for _, _, r in reference].count("ingest:empty_document") == 2
    assert pq.ParquetFile(path).metadata.num_row_groups == 22
    for tasks in (2, 3, 7, 40, 200):
        assert split(path, CFG, tasks) == reference, tasks


def test_parquet_file_level_rows_come_from_the_first_range_only(tmp_path):
    pq.write_table(pa.table({"body": [f"x{i}" * 50 for i in range(300)]}), tmp_path / "nocol.parquet",
                   row_group_size=10)
    (tmp_path / "junk.parquet").write_bytes(b"this is not parquet at all" * 100)
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), tmp_path / "zero.parquet")
    for name, reason in (("nocol", "ingest:missing_field"), ("junk", "ingest:bad_parquet"),
                         ("zero", "ingest:empty_file")):
        assert [r for _, _, r in split(tmp_path / f"{name}.parquet", CFG, 5)] == [reason], name


def test_json_records_stay_whole_across_tasks(tmp_path):
    """JSONL records split by frames parse to the same documents (no record is cut)."""
    docs = [json.dumps({"text": d}) for d in make_docs(50, seed=46)]
    payload = ("\n".join(docs) + "\n").encode()
    path = tmp_path / "r.jsonl.zst"
    path.write_bytes(seekable_zstd(payload, every(50, len(payload))))
    assert [t for _, t, _ in split(path, CFG, 6)] == [json.loads(d)["text"] for d in docs]
