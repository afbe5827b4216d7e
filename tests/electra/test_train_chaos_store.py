"""Pre-training from an s3:// corpus through a store that keeps failing: every per-step loss is
bitwise the loss of the same run reading the corpus straight from the store.

The store is moto behind ``S3Proxy.chaos`` (seeded): 15% of requests 503 SlowDown, 3% of
connections dropped unanswered, a share of GETs cut short and one stalled past s3fs's read
timeout, for the whole run. The trainer is one CPU rank (``electra/train.py`` as the user runs
it, 2 loader workers) with the clients' own retries at their defaults. A run's corpus is a few
dozen requests, so the shares of cuts and stalls are higher than a soak's: every kind must
reach the run for the test to say anything (asserted).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests._s3proxy import S3Proxy
from tests.electra._corpus import TOKENIZER_PATH, upload_corpus, write_tiny_corpus

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
FLAGS = ["--config", "electra/configs/tiny.json", "--set", "data.seq_len=32", "--set", "train.log_every=1",
         "--set", "data.shuffle_buffer=16", "--set", "optimizer.warmup_steps=2", "--set", "optimizer.total_steps=40",
         "--set", "model.max_position_embeddings=64", "--set", "data.num_workers=2", "--max-steps", "6",
         "--save-every", "3", "--micro-batch", "4", "--seed", "7", "--set", "train.global_batch_size=8",
         "--set", "train.eval_every=3"]
CHAOS = {"seed": 7, "slowdown": 0.15, "drop": 0.03, "cut": 0.08, "stall": 0.05, "stall_s": 16.0, "stalls": 1}


def train(data: str, out: Path, endpoint: str) -> list[dict]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(REPO),
           "AWS_ENDPOINT_URL": endpoint}
    env.pop("ELECTRA_STORE_RETRY_SECONDS", None)  # the default budget, as a user has it
    p = subprocess.run([sys.executable, "electra/train.py", *FLAGS, "--data", data, "--out", str(out)], cwd=REPO,
                       env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return [json.loads(ln) for ln in (out / "metrics.jsonl").read_text().splitlines()]


def losses(metrics: list[dict]) -> list[tuple]:
    keys = ("loss", "gen_loss", "disc_loss", "gen_acc", "disc_acc", "grad_norm", "tokens")
    return [(r["kind"], r["step"], *(r.get(k) for k in keys)) for r in metrics if r.get("kind") in ("train", "eval")]


def test_training_through_a_store_failing_a_share_of_all_requests_has_the_clean_losses(tmp_path, s3_server):
    corpus = write_tiny_corpus(tmp_path / "corpus", seq_len=32, train_shards=(9, 7, 5, 11, 3), validation_shards=(6, 5))
    data = upload_corpus(corpus, s3_server.bucket("trainchaos") + "/corpus")
    clean = losses(train(data, tmp_path / "clean", s3_server.endpoint))
    with S3Proxy(s3_server.endpoint) as proxy:
        proxy.chaos(**CHAOS)
        chaos = losses(train(data, tmp_path / "chaos", proxy.endpoint))
    counts = dict(proxy.counts)
    print(counts)
    for outcome in ("slowdown", "reset", "cut", "stall", "forward"):
        assert counts.get(outcome, 0) > 0, (outcome, counts)
    assert [r[:2] for r in clean] == [("train", s) for s in (1, 2, 3)] + [("eval", 3)] + \
        [("train", s) for s in (4, 5, 6)] + [("eval", 6)], clean
    assert chaos == clean
    tokenizer = (corpus / TOKENIZER_PATH / "tokenizer.json").read_bytes()
    assert (tmp_path / "chaos" / "tokenizer" / "tokenizer.json").read_bytes() == tokenizer
