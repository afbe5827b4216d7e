"""benchmarks/train_start.py --smoke: the start-up's store traffic per rank, counted by a proxy
in front of a real S3 server, before (every rank lists the shard folder once per split, the
rejected parts inline in the manifest) and after (rank 0 lists once, the list apart); and one
epoch's shard reads per node by real rank processes, without and with the node cache."""
from __future__ import annotations

import logging
import os

import pytest

from benchmarks import train_start


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    json_out = tmp_path_factory.mktemp("train_start") / "r.json"
    before = logging.root.manager.disable, os.environ.get("AWS_ENDPOINT_URL")
    out = train_start.main(["--smoke", "--ranks", "4", "--rejected", "300", "--json", str(json_out)])
    # run in this process: it leaves logging and the store variables as it found them
    assert (logging.root.manager.disable, os.environ.get("AWS_ENDPOINT_URL")) == before
    return out, json_out


def test_smoke_counts_one_listing_on_rank0_and_a_manifest_free_of_the_quarantine(smoke):
    out, json_out = smoke
    rows = {r["mode"]: r for r in out["startup"]}
    before, after = rows["before"], rows["after"]
    assert before["world"] == after["world"] == 4
    # before: every rank lists the one shard folder twice (train, validation); after: rank 0 once
    assert (before["total_lists"], before["rank0"]["LIST"], before["others_lists"]) == (8, 2, 6)
    assert (after["total_lists"], after["rank0"]["LIST"], after["others_lists"]) == (1, 1, 0)
    # the manifest no longer carries the 300 rejected parts: every rank downloads less
    size = out["manifest_bytes"]
    assert size["before"] - size["after"] > 300 * 100
    assert after["others_bytes"] < before["others_bytes"] - 300 * 100
    assert after["total_requests"] < before["total_requests"]
    # no rank's start writes to the store
    assert all(r["rank0"]["PUT"] == r["last"]["PUT"] == 0 for r in out["startup"])
    assert json_out.exists() and out["node_reads"][0]["world"] == 4


def test_smoke_node_reads_each_shard_once_through_the_node_cache(smoke):
    (row,) = smoke[0]["measured_reads"]  # 2 ranks per node sharing one stream, 2 loader workers each
    assert (row["world"], row["nodes"], row["ranks"]) == (4, 2, 2)
    # the proxy's count of shard bytes sent equals the loaders' own count, in both modes
    assert row["null"]["store_bytes"] == row["null"]["loader_store_bytes"] == row["null"]["decoded_bytes"]
    assert row["cache"]["store_bytes"] == row["cache"]["loader_store_bytes"] == row["distinct_bytes"]
    assert row["cache"]["over_distinct"] == 1.0 and row["null"]["over_distinct"] >= 3.0  # 4 consumers, one stream
    assert row["cache"]["decoded_bytes"] == row["null"]["decoded_bytes"]  # each worker still decodes its own
    assert row["cache_left"] == []  # every copy deleted, the run's folder removed at the ranks' exit


def test_smoke_resume_reads_the_shared_checkpoint_files_once_per_node(smoke):
    rows = {r["layout"]: r for r in smoke[0]["resume_reads"]}  # 4 ranks, 2 per node
    assert rows["universal"]["world"] == rows["direct"]["world"] == 4
    for row in rows.values():  # the model states (and the param groups) once per node; a rank's
        # partition, or the parameters its partition overlaps, read by it either way
        assert row["ranks_per_node"] == 2 and 1.05 < row["ratio"] < 2.0, row
        assert row["with_node_mb"] < row["without_node_mb"]
