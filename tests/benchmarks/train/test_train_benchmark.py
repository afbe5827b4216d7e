"""benchmarks/train/train.py: one short run of the command as a user types it (tiny preset, CPU), its
JSON checked against what the run directory and the shards say independently."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def result() -> dict:
    p = subprocess.run([sys.executable, "benchmarks/train/train.py", "--config", "electra/configs/tiny.json",
                        "--steps", "5", "--warmup", "2", "--global-batch", "8", "--set", "train.micro_batch_size=4",
                        "--synthetic-shards", "6x200"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout[p.stdout.rindex("\n{\n") + 1:])


def test_the_three_rates_and_the_warmup_are_reported(result):
    assert result["precision"] == "fp32" and result["global_batch"] == 8 and result["micro_batch"] == 4
    # "auto" loader workers on a CPU: in the training process
    assert result["loader_workers"] == 0
    assert result["warmup_steps"] == 2 and result["warmup_seconds"] > 0
    for key in ("e2e_steps_per_sec", "bare_steps_per_sec", "plain_steps_per_sec"):
        assert result[key] > 0, key
    # the percentages are the rates' ratios (rounded to 4 and 2 digits)
    assert result["overhead_vs_plain_pct"] == pytest.approx(
        100 * (1 - result["e2e_steps_per_sec"] / result["plain_steps_per_sec"]), abs=0.05)
    # samples/s the trainer consumed = its steps/s times the global batch
    assert result["trainer_samples_per_sec"] == pytest.approx(8 * result["e2e_steps_per_sec"], rel=1e-3)


def test_each_simulated_rank_reads_its_share_at_least_once_and_never_more_than_once_per_worker(result):
    rows = result["bytes_per_rank"]
    assert [r["rank"] for r in rows] == [0, 1] and all(r["workers"] == 2 for r in rows)
    for r in rows:
        # every shard the rank's streams touch is read; no worker reads a shard twice
        assert r["share_bytes"] <= r["bytes_read"] <= r["workers"] * r["share_bytes"]
        assert r["share_bytes"] <= r["split_bytes"] and r["share_shards"] <= r["split_shards"] == 6
