"""Training-dynamics regression test: a short run of the ``tiny`` preset on a fixed corpus of real
books stays within a measured band of its committed reference curve (tests/assets/curves/tiny_books.json).

The corpus is five named Gutenberg books built by the real builder (``cli.build_corpus --profile
books``, 4000-token vocabulary; ``benchmarks/train/reference_curves.py`` holds the recipe); its
fingerprint (sha256 over the tokenizer's and shards' sha256) must equal the asset's, so a builder
change that alters the data fails here with that message rather than as a curve drift. The run
trains ``STEPS`` steps of the preset's 300-step schedule (the LR schedule follows
``total_steps``, so these steps equal the reference's first ``STEPS``) with the preset's seed,
which is the reference's. Every logged ``gen_loss``, ``disc_loss``, ``disc_acc`` and ``disc_auc``
must be within the asset's band of the reference at the same step: band = max(K x seed spread,
floor), the spread being the median over logged steps of the range across three seeds of the same
run (values in the asset and tests/assets/curves/README.md). Replaying the reference seed moves
the values only by fp32 rounding (AMX vs AVX2 kernels, thread count); breaking the objective or the
optimiser moves them by several seed spreads.

Skipped when ../shared/data/corpus is absent.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from electra.config import load_config

from benchmarks.train import reference_curves as rc

REPO = Path(__file__).resolve().parents[2]
ASSET = REPO / "tests" / "assets" / "curves" / "tiny_books.json"
STEPS = 60

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not rc.GUTENBERG.is_dir(), reason=f"real books absent: {rc.GUTENBERG}")]


def test_tiny_on_books_stays_within_band_of_reference(tmp_path):
    asset = json.loads(ASSET.read_text())
    preset_seed = load_config(REPO / rc.PRESET).train.seed  # the preset's, or the default it keeps
    assert asset["seeds"][0] == preset_seed, "the reference must be the preset's seed"
    assert asset["band"]["metrics"].keys() == set(rc.METRICS)

    corpus = rc.build_fixed_corpus(tmp_path / "corpus")
    assert rc.corpus_fingerprint(corpus) == asset["corpus"]["fingerprint"], (
        "the builder now makes different data from the fixed books: if intended, regenerate the "
        "reference (tests/assets/curves/README.md)")

    run = tmp_path / "run"
    cmd = rc.train_command(corpus, run, steps=STEPS)
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:]

    points, _ = rc.read_metrics(run)
    log_every = asset["config"]["train"]["log_every"]
    assert [p["step"] for p in points] == list(range(log_every, STEPS + 1, log_every))
    bad = rc.check(points, asset)
    assert not bad, "training dynamics left the reference band:\n" + "\n".join(bad)
