"""benchmarks/train/mixture_choice.py: one --smoke run; its JSON checked for structure and for what the
two choices must show whatever the machine: equal takes, the window's equal chance, the previous
choice's bias at a take smaller than a shard (no speed assertion)."""
from __future__ import annotations

import json

from benchmarks.train import mixture_choice


def test_smoke_run(tmp_path):
    out = tmp_path / "choice.json"
    assert mixture_choice.main(["--smoke", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    args = result["args"]
    assert [r["shards"] for r in result["rows"]] == [n for n in args["shards"] for _ in args["rates"]]
    for row in result["rows"]:
        for name in ("previous", "window"):
            assert row[name]["ms_per_epoch"] > 0 and row[name]["shards_per_epoch"] >= 1
        if row["rate"] > 1:  # a repeated source opens every shard either way
            assert row["previous"]["shards_per_epoch"] == row["window"]["shards_per_epoch"] == row["shards"]
    chance = result["equal_chance"]
    for rate, res in chance.items():
        for name in ("previous", "window"):
            assert abs(res[name]["per_epoch_rate"] - float(rate)) < 1e-3  # the exact take, both
        assert abs(res["window"]["second_over_first_half"] - 1) < 0.02
        assert abs(res["window"]["short_over_long_shards"] - 1) < 0.05
        assert res["window"]["min_distinct_share"] == 1.0  # never an example twice in an epoch
    small = chance[str(min(args["rates"]))]["previous"]  # a take below a shard: prefixes favoured
    assert small["second_over_first_half"] < 0.6
