"""benchmarks/train/check.py on a real tiny CPU run: the figures it reads from metrics.jsonl, and
its export check, which must pass on the trainer's export and fail on a tampered one."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from benchmarks.train import check as train_check
from tests.electra._corpus import write_tiny_corpus

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("train_check")
    data = write_tiny_corpus(tmp / "c", seq_len=32, train_shards=(9, 7), validation_shards=(6, 5))
    cmd = [sys.executable, "electra/train.py", "--config", "electra/configs/tiny.json", "--data", str(data),
           "--out", str(tmp / "run"), "--max-steps", "6", "--micro-batch", "4", "--log-every", "2",
           "--eval-every", "3", "--set", "train.global_batch_size=8", "--set", "data.seq_len=32",
           "--set", "model.max_position_embeddings=64", "--set", "data.num_workers=0"]
    p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    return tmp / "run"


def test_figures_come_from_the_records_after_the_first(run_dir):
    recs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in recs if r["kind"] == "train"]
    got = train_check.training_figures(run_dir)
    assert got["steps"] == 6 and got["windows"] == len(train) == 3
    # steps/s of a window: its steps over its seconds (tokens / tokens per second)
    rates = sorted(2 / (r["tokens"] / r["tokens_per_sec"]) for r in train[1:])
    assert got["steps_per_s"] == pytest.approx(sum(rates) / 2)  # median of two
    assert got["first"]["loss"] == train[0]["loss"] and got["last"]["gen_loss"] == train[-1]["gen_loss"]
    assert [e["step"] for e in got["eval"]] == [3, 6]
    assert got["max_memory_gib"] is None  # a CPU run records no device memory


def test_export_check_passes_on_the_export_and_fails_on_a_tampered_one(run_dir, tmp_path):
    out = tmp_path / "check.json"
    assert train_check.main([str(run_dir), "--json", str(out)]) == 0
    export = json.loads(out.read_text())["export"]
    assert export["ok"] and export["discriminator_max_rel_diff"] < 1e-5
    weights = run_dir / "hf" / "discriminator" / "model.safetensors"
    state = load_file(str(weights))
    key = next(k for k in state if "discriminator_predictions.dense_prediction.weight" in k)
    state[key] = state[key] + 0.5
    save_file(state, str(weights), metadata={"format": "pt"})
    assert train_check.main([str(run_dir), "--json", str(out)]) == 1
    assert not json.loads(out.read_text())["export"]["ok"]
