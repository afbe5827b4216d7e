"""Stage parts: kept rows to Parquet, dropped rows to the quarantine, summarised in the same pass,
read back by the file list, retried without duplicates."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from common import storage
from pipelines.engine import parts
from pipelines.shard import example_summary

REASONS = ["", "", "filter:min_words", "dedup:exact"]


def _docs(n: int) -> list[dict]:
    return [{"id": f"f:{i}", "uid": 1000 + i, "text": "é" * (i % 5) + "word " * (i % 70),
             "reason": REASONS[i % 4], "detail": f"why {i}" if REASONS[i % 4] else ""} for i in range(n)]


def _quarantine(folder, files: list[dict]) -> list[dict]:
    out = []
    for f in files:
        blob = storage.read_bytes(storage.join(str(folder), f["name"]))
        lines = zstandard.ZstdDecompressor().decompressobj().decompress(blob).decode("utf-8").splitlines()
        assert len(lines) == f["rows"] and f["bytes"] == len(blob)
        out += [json.loads(line) for line in lines]
    return out


def _write(ds, root, **kw):
    kw.setdefault("prefix_chars", 20)
    kw.setdefault("full_text", False)
    return parts.write_documents(ds, data=str(Path(root) / "data"), rejected=str(Path(root) / "rejected"), **kw)


def test_write_documents_splits_kept_and_dropped_rows(ray_local, tmp_path):
    rows = _docs(5000)
    out = _write(ray_local.data.from_items(rows, override_num_blocks=3), tmp_path)
    data, rejected = tmp_path / "data", tmp_path / "rejected"
    # Kept rows only, all columns, in Parquet; nothing else in the folder.
    assert sorted(p.name for p in data.iterdir()) == [f["name"] for f in out["files"]]
    assert len(out["files"]) == 3 and all(f["name"].endswith(".parquet") for f in out["files"])
    # small row groups: a later read can split a part into parallel tasks
    for f in data.iterdir():
        meta = pq.ParquetFile(f).metadata
        assert meta.num_row_groups == -(-meta.num_rows // parts.ROW_GROUP_ROWS)
    back = sorted(parts.read_parts(str(data), out["files"]).take_all(), key=lambda r: r["uid"])
    assert back == [r for r in rows if r["reason"] == ""]
    assert sum(f["rows"] for f in out["files"]) == len(back)
    # Dropped rows: id, reason, detail, the text cut to its prefix, the full length.
    assert sorted(p.name for p in rejected.iterdir()) == [f["name"] for f in out["rejected"]]
    assert all(f["name"].endswith(".jsonl.zst") for f in out["rejected"])
    records = sorted(_quarantine(rejected, out["rejected"]), key=lambda r: r["id"])
    want = sorted(({"id": r["id"], "reason": r["reason"], "detail": r["detail"], "text": r["text"][:20],
                    "chars": len(r["text"])} for r in rows if r["reason"]), key=lambda r: r["id"])
    assert records == want
    assert any(r["chars"] > 20 for r in records)  # the cut happened
    # Counts and bytes per reason equal an independent count.
    counts = Counter(r["reason"] for r in rows)
    sizes = Counter()
    for r in rows:
        sizes[r["reason"]] += len(r["text"].encode())
    assert out["reasons"] == {k: [counts[k], sizes[k]] for k in counts}
    stats = parts.document_stats(out["reasons"])
    assert stats == {"documents_in": 5000, "documents_out": 2500,
                     "dropped": {"dedup:exact": 1250, "filter:min_words": 1250},
                     "bytes_in": sum(sizes.values()), "bytes_out": sizes[""]}


def test_full_text_keeps_the_whole_dropped_text(ray_local, tmp_path):
    rows = _docs(200)
    out = _write(ray_local.data.from_items(rows, override_num_blocks=2), tmp_path, prefix_chars=5, full_text=True)
    records = {r["id"]: r for r in _quarantine(tmp_path / "rejected", out["rejected"])}
    assert {i: (r["text"], r["chars"]) for i, r in records.items()} == \
        {r["id"]: (r["text"], len(r["text"])) for r in rows if r["reason"]}


def test_a_retried_write_replaces_its_part(ray_local, tmp_path):
    """Part names hash the rows' keys: writing the same blocks again adds no file."""
    ds = ray_local.data.from_items(_docs(300), override_num_blocks=2)
    first = _write(ds, tmp_path)
    names = sorted(p.name for p in (tmp_path / "data").iterdir())
    again = _write(ds, tmp_path)
    assert again == first and sorted(p.name for p in (tmp_path / "data").iterdir()) == names
    assert len(names) == 2 and len(list((tmp_path / "rejected").iterdir())) == 2


def test_read_parts_reads_only_the_listed_files(ray_local, tmp_path):
    rows = [r for r in _docs(400) if r["reason"] == ""]
    out = _write(ray_local.data.from_items(rows, override_num_blocks=2), tmp_path)
    data = tmp_path / "data"
    # Leftovers of a killed attempt: a stray part, and a half-written one.
    pq.write_table(pa.Table.from_pylist([{**rows[0], "uid": 1}]), data / "part-stray.parquet")
    (data / "part-half.parquet").write_bytes(b"PAR1 not finished")
    back = parts.read_parts(str(data), out["files"]).take_all()
    assert sorted(r["uid"] for r in back) == [r["uid"] for r in rows]
    first = parts.read_parts(str(data), out["files"][:1]).take_all()
    assert len(first) == out["files"][0]["rows"] < len(rows)
    assert parts.read_parts(str(data), []).count() == 0


def test_empty_input_writes_nothing(ray_local, tmp_path):
    from ray.data.expressions import col

    ds = ray_local.data.from_items(_docs(10)).filter(expr=col("uid") < 0)
    out = _write(ds, tmp_path)
    assert (len(out["files"]), len(out["rejected"])) == (0, 0)
    assert not (tmp_path / "data").exists() and not (tmp_path / "rejected").exists()
    assert parts.document_stats(out["reasons"])["documents_in"] == 0
    assert parts.document_stats({}) == {"documents_in": 0, "documents_out": 0, "dropped": {},
                                        "bytes_in": 0, "bytes_out": 0}


def test_write_examples_sums_the_summary_of_every_block(ray_local, tmp_path):
    rng = np.random.default_rng(1)
    rows = []
    for uid in range(100, 160):
        for ordinal in range(int(rng.integers(1, 4))):
            n = int(rng.integers(3, 40))
            rows.append({"uid": uid, "ordinal": ordinal, "split": "validation" if uid % 7 == 0 else "train",
                         "input_ids": rng.integers(5, 999, n).astype(np.int32).tolist(), "b_start": n})
    out = parts.write_examples(ray_local.data.from_items(rows, override_num_blocks=4),
                               data=str(tmp_path / "ex"), summarise=example_summary)
    want = {}
    for r in rows:
        s = want.setdefault(r["split"], {"examples": 0, "tokens": 0, "documents": 0})
        s["examples"] += 1
        s["tokens"] += len(r["input_ids"])
        s["documents"] += r["ordinal"] == 0
    assert out["splits"] == want and list(out["splits"]) == sorted(want)
    assert sum(f["rows"] for f in out["files"]) == len(rows) and len(out["files"]) == 4
    back = parts.read_parts(str(tmp_path / "ex"), out["files"]).take_all()
    key = lambda r: (r["uid"], r["ordinal"])  # noqa: E731
    assert sorted(([*key(r), list(r["input_ids"])] for r in back)) == \
        sorted([*key(r), r["input_ids"]] for r in rows)


def test_part_names_depend_on_the_keys_only():
    a = [np.array([3, 1, 2])]
    assert parts.part_name(a, "parquet") == parts.part_name([np.array([3, 1, 2], np.uint64)], "parquet")
    assert parts.part_name(a, "parquet").startswith("part-") and parts.part_name(a, "parquet").endswith(".parquet")
    assert parts.part_name(a, "parquet") != parts.part_name([np.array([3, 1, 4])], "parquet")
    assert parts.part_name(a, "parquet")[:-8] == parts.part_name(a, "jsonl.zst")[:-10]
    two = parts.part_name([np.array([1, 2]), np.array([0, 0])], "parquet")
    assert two != parts.part_name([np.array([1, 2]), np.array([0, 1])], "parquet")
    table = pa.table({"uid": list(range(5000))})
    assert parts.parquet_bytes(table) == parts.parquet_bytes(table)  # deterministic bytes


def test_documents_on_s3(ray_s3):
    """Ray tasks write parts straight to the bucket; the driver reads back exactly those."""
    ray, s3 = ray_s3
    root = s3.bucket("parts") + "/stage"
    rows = _docs(120)
    out = parts.write_documents(ray.data.from_items(rows, override_num_blocks=2), data=f"{root}/data",
                                rejected=f"{root}/rejected", prefix_chars=8, full_text=False)
    assert storage.listdir(f"{root}/data") == [f["name"] for f in out["files"]]
    back = parts.read_parts(f"{root}/data", out["files"]).take_all()
    assert sorted(r["uid"] for r in back) == [r["uid"] for r in rows if r["reason"] == ""]
    records = _quarantine(f"{root}/rejected", out["rejected"])
    assert sorted(r["id"] for r in records) == sorted(r["id"] for r in rows if r["reason"])
    assert all(len(r["text"]) <= 8 for r in records)


def test_row_groups_are_bounded_by_bytes_so_whole_books_split_into_read_tasks():
    import io

    books = pa.table({"uid": list(range(12)), "text": ["x" * (1 << 20)] * 12})  # 12 MB in 12 rows
    meta = pq.ParquetFile(io.BytesIO(parts.parquet_bytes(books))).metadata
    sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    assert sum(sizes) == 12 and max(sizes) <= parts.ROW_GROUP_BYTES // (1 << 20) and len(sizes) >= 3
    small = pa.table({"uid": list(range(5000)), "text": ["short text"] * 5000})
    meta = pq.ParquetFile(io.BytesIO(parts.parquet_bytes(small))).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [2048, 2048, 904]


def _reference_plan(files: list[dict]) -> list[dict]:
    """The read plan written out part by part (the rule in ``Parts.tasks``' docstring)."""
    total = sum(f["bytes"] for f in files)
    target = max(1, min(parts.READ_TASK_BYTES, -(-total // parts.MIN_READ_TASKS)))
    tasks = []
    for index, f in enumerate(files):
        groups = max(1, f["row_groups"])
        k = max(1, min(groups, -(-f["bytes"] // target)))
        for j in range(k):
            a, b = groups * j // k, groups * (j + 1) // k
            tasks.append({"index": index, "name": f["name"], "first": a, "end": b, "groups": groups,
                          "bytes": f["bytes"] * (b - a) // groups})
    return sorted(tasks, key=lambda t: (-t["bytes"], t["index"], t["first"]))


def test_read_plan_cuts_parts_into_runs_of_row_groups_largest_first():
    rng = np.random.default_rng(7)
    for total_mb, n in ((1, 5), (200, 40), (5000, 300)):  # below MIN_READ_TASKS x the target, and far above
        sizes = rng.integers(0, 2 * total_mb * (1 << 20) // n, n)
        files = [{"name": f"part-{i:03d}.parquet", "rows": 10, "bytes": int(s), "row_groups": int(g)}
                 for i, (s, g) in enumerate(zip(sizes, rng.integers(1, 64, n)))]
        plan = parts.Parts("x", tuple(files)).tasks()
        assert plan.to_pylist() == _reference_plan(files)
        covered = sorted((t["index"], t["first"], t["end"]) for t in plan.to_pylist())
        runs = {}
        for index, first, end in covered:  # each part's row groups exactly once, in runs
            assert first == runs.get(index, 0) and end > first
            runs[index] = end
        assert runs == {i: max(1, f["row_groups"]) for i, f in enumerate(files)}
    assert parts.Parts("x", ()).tasks().num_rows == 0


def test_parts_split_into_many_tasks_read_every_row_once(ray_local, tmp_path, monkeypatch):
    """Tasks of one part in different blocks, several blocks per part: every row once, with its
    part's index."""
    monkeypatch.setattr(parts, "ROW_GROUP_ROWS", 7)
    monkeypatch.setattr(parts, "READ_TASK_BYTES", 300)
    rows = [r for r in _docs(400) if r["reason"] == ""]
    files = [parts.write_parquet(str(tmp_path), f"part-{i}.parquet", pa.Table.from_pylist(rows[i::3]))
             for i in range(3)]  # written here, where the row groups are patched small
    listed = parts.Parts(str(tmp_path), tuple(files))
    assert min(f["row_groups"] for f in files) >= 9 and listed.tasks().num_rows > 3 * len(files)
    back = listed.read(with_file=True).take_all()
    assert sorted(r["uid"] for r in back) == [r["uid"] for r in rows]
    for index in range(3):
        assert sorted(r["uid"] for r in back if r["_file"] == index) == sorted(r["uid"] for r in rows[index::3])
