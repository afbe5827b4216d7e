"""benchmarks/train/node_cache_bound.py: one --smoke run; its JSON checked for structure and for what holds
on any machine (no speed assertion): more ranks a node hold more copies and queue more batches."""
from __future__ import annotations

import json

from benchmarks.train import node_cache_bound


def test_smoke_run(tmp_path):
    out = tmp_path / "bound.json"
    assert node_cache_bound.main(["--smoke", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["ranks_per_node"] for r in rows] == [1, 2]
    assert all(r["baseline_s"] > 0 and r["bound_s"] > 0 for r in rows)
    assert rows[1]["copies_mb"] > rows[0]["copies_mb"] > 0 and rows[1]["queued_mb"] == 2 * rows[0]["queued_mb"]
