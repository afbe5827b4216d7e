"""Stage parts: written and summarised in one pass, read back whole, retried without duplicates."""
from __future__ import annotations

import pyarrow.parquet as pq

from pipelines import parts


def _docs(n: int) -> list[dict]:
    reasons = ["", "", "filter:min_words", "dedup:exact"]
    return [{"id": f"f:{i}", "uid": 1000 + i, "text": "é" * (i % 5) + "word " * (i % 7),
             "reason": reasons[i % 4], "detail": ""} for i in range(n)]


def test_write_parts_round_trip_and_summary(ray_local, tmp_path):
    rows = _docs(5000)
    ds = ray_local.data.from_items(rows, override_num_blocks=3)
    summary = parts.write_parts(ds, tmp_path / "docs", key="uid", summarise=parts.document_summary)
    files = sorted((tmp_path / "docs").glob("*.parquet"))
    assert len(files) == 3 and not list((tmp_path / "docs").glob(".*"))
    # small row groups: a later read can split a part into parallel tasks
    assert all(pq.ParquetFile(f).metadata.num_row_groups == -(-pq.ParquetFile(f).metadata.num_rows
                                                              // parts.ROW_GROUP_ROWS) for f in files)
    back = sorted(parts.read_parts(tmp_path, kept=None).take_all(), key=lambda r: r["uid"])
    assert back == rows
    kept = parts.read_parts(tmp_path, kept=True).take_all()
    dropped = parts.read_parts(tmp_path, kept=False).take_all()
    assert sorted(r["uid"] for r in kept) == [r["uid"] for r in rows if r["reason"] == ""]
    assert sorted(r["uid"] for r in dropped) == [r["uid"] for r in rows if r["reason"] != ""]

    stats = parts.document_stats(summary, seconds=2.0)
    want_bytes = {reason: sum(len(r["text"].encode()) for r in rows if r["reason"] == reason)
                  for reason in ("", "filter:min_words", "dedup:exact")}
    assert stats["documents_in"] == 5000 and stats["documents_out"] == 2500
    assert stats["dropped"] == {"dedup:exact": 1250, "filter:min_words": 1250}
    assert stats["bytes_out"] == want_bytes[""]
    assert stats["bytes_in"] == sum(want_bytes.values())
    assert stats["docs_per_sec"] == 2500.0


def test_a_retried_write_replaces_its_part(ray_local, tmp_path):
    """Part names hash the key column: writing the same blocks again adds no file."""
    ds = ray_local.data.from_items(_docs(300), override_num_blocks=2)
    parts.write_parts(ds, tmp_path, key="uid", summarise=parts.document_summary)
    first = sorted(p.name for p in tmp_path.glob("*.parquet"))
    parts.write_parts(ds, tmp_path, key="uid", summarise=parts.document_summary)
    assert sorted(p.name for p in tmp_path.glob("*.parquet")) == first and len(first) == 2


def test_empty_input_writes_nothing(ray_local, tmp_path):
    from ray.data.expressions import col

    ds = ray_local.data.from_items(_docs(10)).filter(expr=col("uid") < 0)
    rows = parts.write_parts(ds, tmp_path / "docs", key="uid", summarise=parts.document_summary)
    assert not list((tmp_path / "docs").glob("*.parquet"))
    assert parts.document_stats(rows, 1.0)["documents_in"] == 0
    assert parts.read_parts(tmp_path / "docs").count() == 0


def test_sum_by_adds_numeric_fields_per_group():
    rows = [{"split": "train", "examples": 2, "tokens": 10}, {"split": "validation", "examples": 1, "tokens": 3},
            {"split": "train", "examples": 5, "tokens": 7}]
    assert parts.sum_by(rows, "split") == {"train": {"examples": 7, "tokens": 17},
                                           "validation": {"examples": 1, "tokens": 3}}
