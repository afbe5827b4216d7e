"""Continue pre-training from a released ELECTRA pair, end to end, as a user would:

a released-style pair (made with transformers: random weights, a generator a quarter of the
discriminator's width, its own BERT-style vocab.txt) -> ``electra-build-corpus --tokenizer
PAIR/discriminator`` -> ``electra-train --init-from PAIR`` with lr 0 -> the run's export equals the
source pair tensor for tensor, bit for bit, and records the source (location and the sha256 of
the weight files, checked with hashlib). A pair whose generator carries a different copy of the
shared embeddings trains from the discriminator's and says so in one log line.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from cli.build_corpus import main as build_main
from synthetic import prose
from tests.electra._released_pair import released_pair

REPO = Path(__file__).resolve().parents[2]
TRAIN = ["--config", "tiny", "--precision", "fp32", "--max-steps", "2", "--micro-batch", "4",
         "--set", "train.global_batch_size=8", "--set", "optimizer.lr=0", "--set", "data.num_workers=0",
         "--set", "train.eval_every=0"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, ray_local, prefect_harness):
    root = tmp_path_factory.mktemp("continue")
    raw = root / "raw"
    raw.mkdir()
    with open(raw / "docs.jsonl", "w") as f:
        for doc in prose.documents(60, seed=11):
            f.write(json.dumps({"text": doc}) + "\n")
    (root / "corpus.json").write_text(json.dumps({"shard": {"min_shards_per_split": 1}}))
    pair = released_pair(root / "pair", do_lower_case=True)
    corpus = root / "corpus"
    assert build_main(["--source", str(raw), "--out", str(corpus), "--config", str(root / "corpus.json"),
                       "--tokenizer", str(pair / "discriminator"), "--seq-len", "64",
                       "--validation-fraction", "0.1", "--seed", "7"]) == 0
    return root, pair, corpus


def train(corpus, out, pair, *extra):
    p = subprocess.run([sys.executable, "electra/train.py", *TRAIN, "--data", str(corpus), "--out", str(out),
                        "--init-from", str(pair), *extra], cwd=REPO, capture_output=True, text=True, timeout=300,
                       env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1",
                            "HOME": str(Path.home())})
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout + p.stderr


def test_lr_0_exports_the_released_pair_bit_for_bit(inputs):
    root, pair, corpus = inputs
    train(corpus, root / "run", pair)
    for side in ("discriminator", "generator"):
        source = load_file(str(pair / side / "model.safetensors"))
        exported = load_file(str(root / "run" / "hf" / side / "model.safetensors"))
        # transformers ties the generator's output matrix to the embeddings and does not save it
        assert set(exported) == set(source) - {"generator_lm_head.weight"}, side
        for key, tensor in exported.items():
            assert tensor.dtype == source[key].dtype and torch.equal(tensor, source[key]), (side, key)
    lineage = json.loads((root / "run" / "lineage.json").read_text())
    want = {f"{side}/model.safetensors": hashlib.sha256((pair / side / "model.safetensors").read_bytes()).hexdigest()
            for side in ("discriminator", "generator")}
    assert (lineage["init_from"], lineage["kind"], lineage["weights"]) == (str(pair), "hf", want)
    config = json.loads((root / "run" / "hf" / "discriminator" / "config.json").read_text())
    assert config["electra_lineage"] == lineage and config["hidden_size"] == 64
    assert json.loads((root / "run" / "hf" / "generator" / "config.json").read_text())["hidden_size"] == 16


def test_a_generator_with_its_own_embeddings_uses_the_discriminators(inputs):
    root, _, corpus = inputs
    pair = released_pair(root / "pair2", generator_embeddings_differ=True)
    log = train(corpus, root / "run2", pair)
    lines = [x for x in log.splitlines() if "copy of the shared embeddings differs" in x]
    assert len(lines) == 1 and "word_embeddings.weight" in lines[0], log[-2000:]
    disc = load_file(str(pair / "discriminator" / "model.safetensors"))
    gen = load_file(str(root / "run2" / "hf" / "generator" / "model.safetensors"))
    key = "electra.embeddings.word_embeddings.weight"
    assert torch.equal(gen[key], disc[key])
