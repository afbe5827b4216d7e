"""The no-pre-training baseline export: the trainer's own step 0, loadable like any export."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from electra.random_init import export_random_init
from tests.electra._corpus import write_tiny_corpus
from tests.electra.test_train import COMMON, REPO, env

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_tiny_corpus(tmp_path_factory.mktemp("corpus"), seq_len=32, train_shards=(6, 5),
                             validation_shards=(4,))


def _weights(folder):
    return load_file(str(folder / "discriminator" / "model.safetensors"))


def _overrides():
    it = iter(COMMON[2:])  # COMMON is ["--config", X, "--set", KV, ...]
    return [kv for flag, kv in zip(it, it) if flag == "--set"]


def test_default_seed_equals_the_trainers_first_weights(corpus, tmp_path):
    # One step at warm-up's lr 0 leaves AdamW's weights (decay is scaled by lr too) as initialised,
    # so the trainer's final export is its step-0 model, built by the trainer's own code path.
    run = tmp_path / "run"
    p = subprocess.run([sys.executable, "electra/train.py", *COMMON, "--data", str(corpus), "--out", str(run),
                        "--max-steps", "1", "--micro-batch", "4", "--set", "train.global_batch_size=4"],
                       cwd=REPO, env=env(), capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    out = export_random_init(COMMON[1], str(corpus), tmp_path / "random", overrides=_overrides())
    trained, random_init = _weights(run / "hf"), _weights(out)
    assert trained.keys() == random_init.keys()
    for name in trained:
        assert torch.equal(trained[name], random_init[name]), name
    for f in ("config.json", "tokenizer.json", "vocab.txt"):
        assert (out / "discriminator" / f).is_file(), f
    assert (run / "hf" / "discriminator" / "tokenizer.json").read_bytes() == \
        (out / "discriminator" / "tokenizer.json").read_bytes()


def test_seed_changes_the_weights_and_transformers_loads_it(corpus, tmp_path):
    from transformers import ElectraForPreTraining

    a = export_random_init(COMMON[1], str(corpus), tmp_path / "a", seed=1, overrides=_overrides())
    b = export_random_init(COMMON[1], str(corpus), tmp_path / "b", seed=2, overrides=_overrides())
    wa, wb = _weights(a), _weights(b)
    emb = next(k for k in wa if k.endswith("word_embeddings.weight"))
    assert not torch.equal(wa[emb], wb[emb])
    model = ElectraForPreTraining.from_pretrained(str(a / "discriminator"))
    assert model.config.vocab_size == wa[emb].shape[0]
    assert torch.equal(model.state_dict()[emb], wa[emb])
