"""benchmarks/train_start.py --smoke: the start-up's store traffic per rank, counted by a proxy
in front of a real S3 server, before (every rank lists the shard folder once per split, the
rejected parts inline in the manifest) and after (rank 0 lists once, the list apart)."""
from __future__ import annotations

from benchmarks import train_start


def test_smoke_counts_one_listing_on_rank0_and_a_manifest_free_of_the_quarantine(tmp_path):
    out = train_start.main(["--smoke", "--ranks", "4", "--rejected", "300", "--json", str(tmp_path / "r.json")])
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
    assert (tmp_path / "r.json").exists() and out["node_reads"][0]["world"] == 4
