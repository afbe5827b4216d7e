"""``--init-from`` without a corpus build: continuing from our own run or its export starts from
where that run ended (the validation loss, deterministic, equals the run's last one, far from a
random init's); ``--resume-schedule`` continues the step and learning rate; the user errors (a
corpus of another vocabulary, a setting against the checkpoint, a schedule from a Hugging Face
folder) are one line before any distributed start-up; the vocabulary identity against
transformers' own tokenizer. The released-pair round trip through build-corpus:
tests/flows/test_continue_pretraining.py."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from electra import vocabulary
from electra.optim import lr_multiplier
from electra.config import OptimizerConfig
from tests.electra._corpus import write_tiny_corpus
from tests.electra._released_pair import released_pair
from tests.electra.test_train import REPO, records, run
from tests.electra.test_train_errors import one_line_error, train as probe

BASE = ["--config", "tiny", "--precision", "fp32", "--micro-batch", "8", "--set", "train.global_batch_size=8",
        "--set", "model.max_position_embeddings=64", "--set", "data.num_workers=0", "--set", "optimizer.warmup_steps=2",
        "--set", "optimizer.total_steps=400", "--log-every", "1"]


def trainer(data, out, *extra, timeout=240):
    p = run([sys.executable, "electra/train.py", *BASE, "--data", str(data), "--out", str(out), *extra],
            timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout + p.stderr


def eval_loss(out, step):
    (rec,) = [r for r in records(out, "eval") if r["step"] == step]
    return rec["eval_loss"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A run whose losses clearly fell: 40 steps at lr 3e-3, evaluated at its end."""
    root = tmp_path_factory.mktemp("init")
    corpus = write_tiny_corpus(root / "c", seq_len=32, train_shards=(9, 7, 5, 11, 3), validation_shards=(6, 5))
    trainer(corpus, root / "a", "--max-steps", "40", "--eval-every", "40", "--set", "optimizer.lr=0.003")
    return corpus, root / "a"


@pytest.fixture(scope="module")
def random_init_loss(trained, tmp_path_factory):
    corpus, _ = trained
    out = tmp_path_factory.mktemp("r") / "run"
    trainer(corpus, out, "--max-steps", "1", "--eval-every", "1", "--set", "optimizer.lr=0")
    return eval_loss(out, 1)


@pytest.mark.parametrize("source", ["hf", "run"])
def test_continuing_starts_where_the_run_ended(trained, random_init_loss, tmp_path, source):
    corpus, a = trained
    ended = eval_loss(a, 40)
    assert random_init_loss - ended > 0.3  # the run learned something to continue from
    location = a / "hf" if source == "hf" else a
    log = trainer(corpus, tmp_path / "b", "--max-steps", "1", "--eval-every", "1", "--set", "optimizer.lr=0",
                  "--init-from", str(location))
    assert f"starting from {location.resolve()}" in log
    assert eval_loss(tmp_path / "b", 1) == pytest.approx(ended, rel=1e-6)  # lr 0: the same weights
    lineage = json.loads((tmp_path / "b" / "lineage.json").read_text())
    assert lineage["kind"] == source and lineage["init_from"] == str(location.resolve())
    exported = json.loads((tmp_path / "b" / "hf" / "discriminator" / "config.json").read_text())
    assert exported["electra_lineage"] == lineage


def test_resume_schedule_continues_step_and_learning_rate(trained, tmp_path):
    """The source trained at lr 3e-3, not the preset's: the continued schedule is the source's."""
    corpus, a = trained
    log = trainer(corpus, tmp_path / "b", "--max-steps", "43", "--init-from", str(a), "--resume-schedule")
    assert "continuing at step 40 on the new data" in log
    recs = records(tmp_path / "b")
    assert [r["step"] for r in recs] == [41, 42, 43]
    cfg = OptimizerConfig(lr=0.003, warmup_steps=2, total_steps=400)
    # the lr a record shows is the one its step trained with: the schedule's at the step before
    assert [r["lr"] for r in recs] == pytest.approx([0.003 * lr_multiplier(s, cfg) for s in (40, 41, 42)])
    assert json.loads((tmp_path / "b" / "config.json").read_text())["optimizer"]["lr"] == 0.003
    line = one_line_error(probe(*BASE, "--data", str(corpus), "--out", str(tmp_path / "c"), "--init-from", str(a),
                                "--resume-schedule", "--max-steps", "45", "--set", "optimizer.lr=0.1"))
    assert "optimizer.lr=0.1 contradicts --init-from" in line and "whose lr is 0.003" in line


def test_a_run_started_from_a_checkpoint_resumes_with_its_own_architecture(trained, tmp_path):
    """The source has 1 layer, the preset 2: the rerun without --init-from keeps the run's own."""
    corpus, a = trained
    one = tmp_path / "one"
    trainer(corpus, one, "--max-steps", "2", "--set", "model.num_layers=1")
    trainer(corpus, tmp_path / "b", "--max-steps", "2", "--init-from", str(one))
    log = trainer(corpus, tmp_path / "b", "--max-steps", "4")  # resumes: no --init-from given again
    assert "resumed from" in log and "model from the run" in log
    assert json.loads((tmp_path / "b" / "config.json").read_text())["model"]["num_layers"] == 1
    assert [r["step"] for r in records(tmp_path / "b")] == [1, 2, 3, 4]
    log = trainer(corpus, tmp_path / "b", "--max-steps", "5", "--init-from", str(a))  # another source
    assert f"--init-from {a} is not used (the run started from {one})" in log


def test_user_errors_are_one_line_before_start_up(trained, tmp_path):
    corpus, a = trained
    pair = released_pair(tmp_path / "pair")
    line = one_line_error(probe("--config", "tiny", "--data", str(corpus), "--out", str(tmp_path / "r"),
                                "--init-from", str(pair)))
    assert f"--init-from {pair}: its vocabulary (353 tokens" in line and f"the corpus {corpus}'s (" in line
    assert f"rebuild the corpus with electra-build-corpus --tokenizer {pair}/discriminator" in line
    line = one_line_error(probe(*BASE, "--data", str(corpus), "--out", str(tmp_path / "r"), "--init-from", str(a),
                                "--set", "model.hidden_size=128"))
    assert "model.hidden_size=128 contradicts --init-from" in line and "whose hidden_size is 64" in line
    line = one_line_error(probe(*BASE, "--data", str(corpus), "--out", str(tmp_path / "r"), "--init-from",
                                str(a / "hf"), "--resume-schedule"))
    assert "is a Hugging Face folder, which holds no optimiser state" in line
    config = json.loads((pair / "discriminator" / "config.json").read_text())
    (pair / "discriminator" / "config.json").write_text(json.dumps({**config, "vocab_size": 360}))
    line = one_line_error(probe("--config", "tiny", "--data", str(corpus), "--out", str(tmp_path / "r"),
                                "--init-from", str(pair)))
    assert "its embeddings have 360 rows but its tokenizer" in line and "353 tokens" in line
    line = one_line_error(probe(*BASE, "--data", str(corpus), "--out", str(tmp_path / "r"), "--init-from",
                                str(tmp_path / "nowhere")))
    assert "--init-from" in line and "no such folder" in line
    assert not (tmp_path / "r").exists()


def test_the_vocabulary_identity_matches_transformers(tmp_path):
    from transformers import AutoTokenizer

    pair = released_pair(tmp_path / "pair", do_lower_case=False)
    tok = AutoTokenizer.from_pretrained(str(pair / "discriminator"))
    v = vocabulary.from_folder(str(pair / "discriminator"))
    assert v.size == len(tok) and v.lowercase is False
    assert v.specials == {t: tok.convert_tokens_to_ids(t) for t in vocabulary.SPECIAL}
    (pair / "discriminator" / "tokenizer.json").unlink()  # vocab.txt alone: the same identity
    assert vocabulary.from_folder(str(pair / "discriminator")) == v._replace(where=str(pair / "discriminator" /
                                                                                        "vocab.txt"))
    lowered = vocabulary.from_folder(str(released_pair(tmp_path / "lower", do_lower_case=True) / "discriminator"))
    assert v.differences(lowered) == ["lower-casing False vs True"]
