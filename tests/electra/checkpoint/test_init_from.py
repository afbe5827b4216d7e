"""``--init-from`` without a corpus build: continuing from our own run or its export starts from
where that run ended (the validation loss, deterministic, equals the run's last one, far from a
random init's); ``--resume-schedule`` continues the step and learning rate; the user errors (a
corpus of another vocabulary, a setting against the checkpoint, a schedule from a Hugging Face
folder) are one line before any distributed start-up; the vocabulary identity against
transformers' own tokenizer. A released pair keeps its generator's own shape (an FFN of 2x its
width, other heads, fewer layers): it trains and exports a generator transformers loads with the
source's logits; what cannot be loaded is one line starting with ``--init-from LOCATION``; a
generator with its own copy of the embeddings is a warning naming both folders. The released-pair
round trip through build-corpus: tests/flows/test_continue_pretraining.py."""
from __future__ import annotations

import json
import logging
import math
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from electra.checkpoint import vocabulary
from electra.run.optim import lr_multiplier
from electra.config import ConfigError, ElectraConfig, ModelConfig, OptimizerConfig, load_config
from electra.checkpoint.init_from import apply_architecture, find_source, load_weights
from tests.electra._corpus import TOKENIZER_PATH, write_tiny_corpus
from tests.electra._released_pair import released_pair
from tests.electra.test_train import REPO, records, run
from tests.electra.test_train_errors import one_line_error, train as probe

BASE = ["--config", "tiny", "--precision", "fp32", "--micro-batch", "8", "--set", "train.global_batch_size=8",
        "--set", "model.max_position_embeddings=64", "--set", "data.num_workers=0", "--set", "optimizer.warmup_steps=2",
        "--set", "optimizer.total_steps=400", "--log-every", "1"]


# A released pair's architecture is its own (128 positions): only what is not architecture is set.
PAIR_RUN = ["--config", "tiny", "--precision", "fp32", "--micro-batch", "8", "--set", "train.global_batch_size=8",
            "--set", "data.num_workers=0", "--set", "optimizer.lr=0", "--set", "train.eval_every=0", "--log-every", "1"]
# Generators of released pairs outside Google's ratios (the pair's GEN: hidden 16, 1 head, FFN 64, 2 layers).
SHAPES = {"ffn_2x": dict(intermediate_size=32), "heads": dict(num_attention_heads=2),
          "shallow": dict(num_hidden_layers=1, num_attention_heads=4, intermediate_size=48)}


def trainer(data, out, *extra, timeout=240, base=BASE):
    p = run([sys.executable, "electra/train.py", *base, "--data", str(data), "--out", str(out), *extra],
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
    assert line.startswith(f"electra-train: error: --init-from {a}: its lr is 0.003, but optimizer.lr=0.1 is set; "
                           "drop the setting")


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
    assert line.startswith(f"electra-train: error: --init-from {pair}: its vocabulary (353 tokens")
    assert f"the corpus {corpus}'s (" in line
    assert f"rebuild the corpus with electra-build-corpus --tokenizer {pair}/discriminator" in line
    line = one_line_error(probe(*BASE, "--data", str(corpus), "--out", str(tmp_path / "r"), "--init-from", str(a),
                                "--set", "model.hidden_size=128"))
    assert line.startswith(f"electra-train: error: --init-from {a}: its hidden_size is 64, but model.hidden_size=128 "
                           "is set; drop the setting (the architecture comes from the checkpoint)")
    line = one_line_error(probe(*BASE, "--data", str(corpus), "--out", str(tmp_path / "r"), "--init-from",
                                str(a / "hf"), "--resume-schedule"))
    assert "is a Hugging Face folder, which holds no optimiser state" in line
    for side in ("discriminator", "generator"):  # a vocabulary padded beyond its tokenizer
        config = json.loads((pair / side / "config.json").read_text())
        (pair / side / "config.json").write_text(json.dumps({**config, "vocab_size": 360}))
    line = one_line_error(probe("--config", "tiny", "--data", str(corpus), "--out", str(tmp_path / "r"),
                                "--init-from", str(pair)))
    assert line.startswith(f"electra-train: error: --init-from {pair}: its embeddings have 360 rows but its "
                           "tokenizer") and "353 tokens" in line
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


# ------------------------------------------------------------------------------ a released generator's own shape
@pytest.fixture(scope="module")
def pair_corpus(tmp_path_factory):
    """A corpus the pairs below are tokenised with (they carry its tokenizer files)."""
    return write_tiny_corpus(tmp_path_factory.mktemp("pair_corpus") / "c", seq_len=32, train_shards=(9, 7),
                             validation_shards=(6,))


def generator_logits(folder):
    from transformers import ElectraForMaskedLM

    ids = torch.randint(5, 200, (2, 24), generator=torch.Generator().manual_seed(3))
    model = ElectraForMaskedLM.from_pretrained(str(folder)).eval()
    with torch.no_grad():
        return model(input_ids=ids, token_type_ids=torch.zeros_like(ids)).logits


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_released_generator_of_its_own_shape_trains_and_exports_as_it_came(pair_corpus, tmp_path, shape):
    """lr 0: a step (and a resumed second one) leave the weights as loaded; the export holds the
    generator's real shape and gives the source generator's logits in transformers."""
    pair = released_pair(tmp_path / "pair", generator=SHAPES[shape], tokenizer=pair_corpus / TOKENIZER_PATH)
    out = tmp_path / "run"
    log = trainer(pair_corpus, out, "--max-steps", "1", "--init-from", str(pair), base=PAIR_RUN)
    assert f"starting from {pair}" in log
    trainer(pair_corpus, out, "--max-steps", "2", base=PAIR_RUN)  # resumes with the run's own config
    recs = records(out)
    assert [r["step"] for r in recs] == [1, 2] and all(math.isfinite(r["loss"]) for r in recs)
    source = json.loads((pair / "generator" / "config.json").read_text())
    exported = json.loads((out / "hf" / "generator" / "config.json").read_text())
    keys = ("hidden_size", "num_attention_heads", "intermediate_size", "num_hidden_layers")
    assert {k: exported[k] for k in keys} == {k: source[k] for k in keys}
    assert torch.equal(generator_logits(out / "hf" / "generator"), generator_logits(pair / "generator"))
    raw = json.loads((out / "config.json").read_text())  # the run's config: the shape, round-tripped
    model = ElectraConfig.from_dict(raw, source="run config").model
    assert raw == ElectraConfig.from_dict(raw, source="run config").to_dict()
    assert (model.generator_hidden_size, *model.generator_sizes()[1:], model.generator_depth) == \
        tuple(source[k] for k in keys)


def test_what_a_released_pair_cannot_be_is_one_line_starting_with_init_from(pair_corpus, tmp_path):
    pair = released_pair(tmp_path / "pair", generator=SHAPES["ffn_2x"], tokenizer=pair_corpus / TOKENIZER_PATH)
    args = [*PAIR_RUN, "--data", str(pair_corpus), "--out", str(tmp_path / "r"), "--init-from", str(pair)]
    line = one_line_error(probe(*args, "--set", "model.num_layers=3"))
    assert line.startswith(f"electra-train: error: --init-from {pair}: its num_layers is 2, but model.num_layers=3 "
                           "is set; drop the setting")
    line = one_line_error(probe(*args, "--set", "model.generator_intermediate_size=64"))  # the derived size
    assert line.startswith(f"electra-train: error: --init-from {pair}: its generator_intermediate_size is 32, but "
                           "model.generator_intermediate_size=64 is set; drop the setting")
    config = json.loads((pair / "generator" / "config.json").read_text())
    (pair / "generator" / "config.json").write_text(json.dumps({**config, "embedding_size": 16}))
    line = one_line_error(probe(*args))
    assert line.startswith(f"electra-train: error: --init-from {pair}: {pair}/generator/config.json: generator and "
                           "discriminator differ in embedding_size 16 vs 32, but the two share one embedding block")
    assert line.endswith("take discriminator/ and generator/ from the same release")
    assert not (tmp_path / "r").exists()


def test_a_config_json_that_does_not_describe_its_weights_is_refused_naming_it(tmp_path):
    pair = released_pair(tmp_path / "pair", generator=SHAPES["ffn_2x"])
    config = json.loads((pair / "generator" / "config.json").read_text())
    (pair / "generator" / "config.json").write_text(json.dumps({**config, "intermediate_size": 64}))
    source = find_source(str(pair))  # configs only: the derived shape, a generator FFN of 64
    with pytest.raises(ValueError) as err:
        load_weights(source, source.model)
    assert str(err.value).startswith(f"--init-from {pair}: {pair}/generator/config.json: does not describe the "
                                     "weights beside it")
    assert "generator.layers.0.ffn_in.weight is [32, 16] in the weights, [64, 16] by config.json" in str(err.value)


def test_a_generator_size_left_derived_is_compared_as_the_size_it_derives():
    source = ModelConfig(hidden_size=64, num_heads=2, generator_fraction=0.25, generator_intermediate_size=32)
    took = apply_architecture(ElectraConfig(), source, {"generator_num_heads": 1, "generator_num_layers": 12},
                              where="--init-from P")  # derived there: 16 // 64 -> 1 head, the 12 layers
    assert took.model == source
    for user, message in (({"generator_num_heads": 2}, "its generator_num_heads is 1, but model.generator_num_heads=2"),
                          ({"generator_intermediate_size": None},
                           "its generator_intermediate_size is 32, but model.generator_intermediate_size=null")):
        with pytest.raises(ConfigError, match=f"^--init-from P: {message} is set"):
            apply_architecture(ElectraConfig(), source, user, where="--init-from P")


def test_the_generator_shape_keys_are_checked_when_loaded():
    cfg = load_config("tiny", ["model.generator_num_heads=2", "model.generator_intermediate_size=40",
                               "model.generator_num_layers=1"])
    assert (*cfg.model.generator_sizes(), cfg.model.generator_depth) == (16, 2, 40, 1)
    assert ElectraConfig.from_dict(cfg.to_dict()) == cfg
    for item, message in (("model.generator_num_heads=3", "generator hidden size 16 is not divisible by its 3 heads"),
                          ("model.generator_num_layers=0", "generator_num_layers must be positive"),
                          ("model.generator_intermediate_size=1.5", "generator_intermediate_size")):
        with pytest.raises(ConfigError, match=message):
            load_config("tiny", [item])


def test_a_generator_with_its_own_embeddings_is_a_warning_naming_both_folders(tmp_path, caplog):
    """The discriminator's copy is used (the Hugging Face import refuses such a pair instead)."""
    from electra.checkpoint.hf_export import import_hf

    pair = released_pair(tmp_path / "pair", generator_embeddings_differ=True)
    source = find_source(str(pair))
    with caplog.at_level(logging.INFO, logger="electra.train"):
        state = load_weights(source, source.model)
    (record,) = [r for r in caplog.records if "shared embeddings" in r.getMessage()]
    message = record.getMessage()
    assert record.levelno == logging.WARNING, message
    assert message.startswith(f"--init-from {pair}: the generator's copy of the shared embeddings differs")
    assert f"generator {pair}/generator, discriminator {pair}/discriminator" in message
    assert f"using the discriminator's copy ({pair}/discriminator) for both networks" in message
    disc = load_file(str(pair / "discriminator" / "model.safetensors"))
    assert torch.equal(state["embeddings.word_embeddings.weight"], disc["electra.embeddings.word_embeddings.weight"])
    with pytest.raises(ValueError, match="disagree on the shared"):
        import_hf(pair)
