"""Damaged compressed input: no document decoded from a member that failed its check is kept."""
from __future__ import annotations

import bz2
import dataclasses
import gzip
import random

import pytest
import zstandard

from pipelines.ingest.integrity import verify
from tests.pipelines.ingest.test_ingest import CFG, kept, make_docs, offset, rows, text_payload

COMPRESSORS = {
    "gz": lambda b: gzip.compress(b, mtime=0),
    "bz2": lambda b: bz2.compress(b, 1),
    "zst": lambda b: zstandard.ZstdCompressor(write_checksum=True).compress(b),
}
KIND = {"gz": "gzip", "bz2": "bz2", "zst": "zstd"}


def damaged(blob: bytes, seed: int) -> bytes:
    """``blob`` with a few bytes flipped around its middle (headers and trailer untouched)."""
    rng = random.Random(seed)
    out = bytearray(blob)
    for _ in range(3):
        i = len(blob) // 2 + rng.randrange(-len(blob) // 8, len(blob) // 8)
        out[i] ^= 1 << rng.randrange(8)
    return bytes(out)


@pytest.mark.parametrize("comp", ["gz", "bz2", "zst"])
def test_damage_in_a_single_member_keeps_nothing_from_it(tmp_path, comp):
    docs = make_docs(2000, seed=31)
    payload, _ = text_payload(docs)
    for seed in range(3):
        path = tmp_path / f"one{seed}.txt.{comp}"
        path.write_bytes(damaged(COMPRESSORS[comp](payload), seed))
        check = verify(str(path), KIND[comp])
        assert check.end == 0 and check.members == 0 and "failed its check" in check.error
        rs = rows(path)
        assert kept(rs) == []  # not one document of the damaged member survives
        assert rs and {r["reason"] for r in rs} == {"ingest:corrupt_compression"}
        if comp == "gz":  # deflate decodes garbage up to the CRC: the case of the issue, reproduced
            assert len(rs) > 1000
        if len(rs) > 1:  # documents decoded before the check failed are each a row, with the reason
            assert "verified data ends at byte 0" in rs[0]["detail"]


@pytest.mark.parametrize("comp", ["gz", "bz2", "zst"])
def test_damage_in_the_second_member_keeps_exactly_the_first(tmp_path, comp):
    docs = make_docs(3000, seed=32)
    parts = [docs[:1000], docs[1000:2000], docs[2000:]]
    payloads = [text_payload(p)[0] for p in parts]
    whole_offsets = text_payload(docs)[1]
    blobs = [COMPRESSORS[comp](p) for p in payloads]
    path = tmp_path / f"multi.txt.{comp}"
    path.write_bytes(blobs[0] + damaged(blobs[1], 7) + blobs[2])
    check = verify(str(path), KIND[comp])
    assert check.end == len(payloads[0]) and check.members == 1
    rs = rows(path)
    good = [r for r in rs if r["reason"] == ""]
    assert [r["text"] for r in good] == parts[0]  # every kept text is an original, in order
    assert [offset(r) for r in good] == whole_offsets[:1000]
    bad = [r for r in rs if r["reason"]]
    assert bad and {r["reason"] for r in bad} == {"ingest:corrupt_compression"}
    assert all(offset(r) >= len(payloads[0]) for r in bad)
    assert f"verified data ends at byte {len(payloads[0])}" in bad[0]["detail"] or len(bad) == 1


def test_intact_members_and_padding_are_all_verified(tmp_path):
    docs = make_docs(50, seed=33)
    payload, offsets = text_payload(docs)
    path = tmp_path / "ok.txt.gz"
    path.write_bytes(gzip.compress(payload[:400]) + gzip.compress(payload[400:]) + b"\x00" * 64)
    check = verify(str(path), "gzip")
    assert check.end is None and check.members == 2
    rs = rows(path)
    assert kept(rs) == docs and [offset(r) for r in rs] == offsets


def test_utf16_file_with_damaged_second_member(tmp_path):
    docs = [f"Dokument {i}: Grüße aus Köln, café — {'x' * i}" for i in range(300)]
    text = "\ufeff" + "".join(d + "\n\n" for d in docs)
    raw = text.encode("utf-16-le")
    cut = len("".join(d + "\n\n" for d in docs[:100]).encode("utf-16-le")) + 2  # after doc 100, BOM included
    path = tmp_path / "u16.txt.gz"
    path.write_bytes(gzip.compress(raw[:cut]) + damaged(gzip.compress(raw[cut:]), 3))
    rs = rows(path)
    good = [r for r in rs if r["reason"] == ""]
    assert [r["text"] for r in good] == docs[:100]
    assert {r["encoding"] for r in good} == {"utf-16-le"}
    assert {r["reason"] for r in rs if r not in good} == {"ingest:corrupt_compression"}


def test_truncated_member_can_be_trusted_on_request(tmp_path):
    docs = make_docs(500, seed=34)
    payload, _ = text_payload(docs)
    blob = gzip.compress(payload)
    path = tmp_path / "cut.txt.gz"
    path.write_bytes(blob[: len(blob) * 3 // 4])
    assert verify(str(path), "gzip").error.endswith("is truncated (the file ends inside it)")
    assert kept(rows(path)) == []
    trusting = rows(path, dataclasses.replace(CFG, keep_truncated_member=True))
    good = kept(trusting)
    assert len(good) > 100 and good == docs[: len(good)]
