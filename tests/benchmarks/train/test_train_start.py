"""benchmarks/train/start.py --smoke: the start-up's store traffic per rank, counted by a proxy
in front of a real S3 server, before (every rank lists the shard folder once per split, the
rejected parts inline in the manifest), at 835e044 (rank 0 lists once, the list apart, every rank
reads the manifest) and after (rank 0 alone reads the corpus and broadcasts its plan), also per
corpus size; and one epoch's shard reads per node by real rank processes, without and with the
node cache."""
from __future__ import annotations

import logging
import os

import pytest

from benchmarks.train import start as train_start


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
    before, manifest, after = rows["before"], rows["manifest"], rows["after"]
    assert before["world"] == manifest["world"] == after["world"] == 4
    # before: every rank lists the one shard folder twice (train, validation); since: rank 0 once
    assert (before["total_lists"], before["rank0"]["LIST"], before["others_lists"]) == (8, 2, 6)
    for row in (manifest, after):
        assert (row["total_lists"], row["rank0"]["LIST"], row["others_lists"]) == (1, 1, 0)
    # the manifest no longer carries the 300 rejected parts: every rank downloads less
    size = out["manifest_bytes"]
    assert size["before"] - size["after"] > 300 * 100
    assert manifest["others_bytes"] < before["others_bytes"] - 300 * 100
    assert after["total_requests"] < manifest["total_requests"] < before["total_requests"]
    # now the ranks other than 0 read nothing from the store: all ranks' traffic is rank 0's
    assert after["others_requests"] == after["others_bytes"] == 0
    assert after["rank0"] == manifest["rank0"] and after["total_bytes"] == after["rank0"]["bytes"]
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


def test_smoke_simulates_the_cluster_shape_per_corpus_size(smoke):
    """Part 4: per simulated size and rank count, the start-up bytes per rank (the manifest grows
    with the shards) and the count pass before and after, which counted the same consumers."""
    rows = smoke[0]["scale"]
    assert [(r["corpus"], r["world"]) for r in rows] == [("1 GB", 4), ("100 GB", 4)]
    small, large = rows
    assert (small["shards"], large["shards"]) == (5, 500)
    # 100 x the shards: the manifest's per-shard part 100 x as large, the head the same
    per_shard = (large["manifest_bytes"] - small["manifest_bytes"]) / 495
    assert 150 < per_shard < 400 and small["manifest_bytes"] - 5 * per_shard < 8000
    assert all(r["startup_bytes_all_ranks"] == 4 * r["startup_bytes_per_rank"] for r in rows)
    # after: rank 0's bytes alone; the plan it broadcasts grows with the shards, not the store reads
    assert all(r["after_bytes_all_ranks"] == r["startup_bytes_per_rank"] and r["after_bytes_other_rank"] == 0
               for r in rows)
    assert 150 < (large["broadcast_bytes_per_rank"] - small["broadcast_bytes_per_rank"]) / 495 < 400
    assert all(r["pass_after_s"] > 0 and r["pass_before_s"] > 0 for r in rows)
    assert large["pass_before_derived"] and large["pass_walked_steps"] == 200 < large["steps"]


def test_smoke_ranks_other_than_0_read_nothing_from_the_store_whatever_the_corpus_size(smoke):
    """Per corpus size (4 and 64 train shards): before, every rank read the manifest, which grows
    with the shards; now rank 0 alone reads the corpus and the others receive its plan, whose
    pickled size grows with the shards instead (over the network, not from the store)."""
    rows = {(r["shards"], r["mode"]): r for r in smoke[0]["startup_sizes"]}
    assert sorted(rows) == [(4, "after"), (4, "manifest"), (64, "after"), (64, "manifest")]
    for shards in (4, 64):
        before, after = rows[shards, "manifest"], rows[shards, "after"]
        assert before["world"] == after["world"] == 4 and before["ranks_run"] == after["ranks_run"] == 3
        assert after["rank1"]["requests"] == after["rank1"]["bytes"] == after["last"]["bytes"] == 0
        assert after["rank0"] == before["rank0"]  # rank 0's start-up is the one it was
        assert after["total_bytes"] == after["rank0"]["bytes"]
        # before: each other rank fetched the manifest (and the tokenizer); the manifest is counted
        # by the store's own size of it
        assert before["rank1"]["requests"] == 4 and before["rank1"]["bytes"] > before["manifest_bytes"]
        assert before["total_bytes"] == before["rank0"]["bytes"] + 3 * before["rank1"]["bytes"]
    small, large = rows[4, "manifest"], rows[64, "manifest"]
    grew = large["manifest_bytes"] - small["manifest_bytes"]
    assert large["rank1"]["bytes"] - small["rank1"]["bytes"] == grew > 60 * 150
    # the broadcast carries the plan: a few kB plus a few hundred bytes a shard
    per_shard = (rows[64, "after"]["broadcast_bytes"] - rows[4, "after"]["broadcast_bytes"]) / 60
    assert 100 < per_shard < 400 and rows[4, "after"]["broadcast_bytes"] < 10_000
