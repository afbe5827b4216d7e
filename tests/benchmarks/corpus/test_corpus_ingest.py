"""benchmarks/corpus/ingest: a tiny run of the side-by-side ingest benchmark, its files checked
with zstandard and pyarrow directly."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
import zstandard

from benchmarks.corpus import ingest as corpus_ingest


def test_split_and_one_task_runs_agree_on_every_format(tmp_path, ray_local):
    results = corpus_ingest.run(0.5, cpus=2, tasks=3, out=tmp_path, frame_mb=0.05, row_group_mb=0.05)
    assert [r["format"] for r in results] == list(corpus_ingest.FORMATS)
    jsonl = (tmp_path / "jsonl" / "corpus.jsonl").read_bytes()
    texts = [json.loads(line)["text"] for line in jsonl.splitlines()]
    assert {r["rows"] for r in results} == {len(texts)}  # each run (split or not) saw every record
    assert all(r["split_tasks"] == 3 and r["split_mb_s"] > 0 and r["one_task_mb_s"] > 0 for r in results)
    for fmt in ("jsonl.zst", "seekable.jsonl.zst"):  # both hold the corpus, frame after frame
        blob = (tmp_path / fmt / "corpus.jsonl.zst").read_bytes()
        out, rest = [], blob
        while rest:
            d = zstandard.ZstdDecompressor().decompressobj()
            out.append(d.decompress(rest))
            rest = d.unused_data
        assert b"".join(out) == jsonl
    table = pq.read_table(tmp_path / "parquet" / "corpus.parquet")
    assert table.column("text").to_pylist() == texts
    assert pq.ParquetFile(tmp_path / "parquet" / "corpus.parquet").metadata.num_row_groups > 3
