"""electra.run.summary (what a run prints at start) and the resolve phase's check that a run fits
the machine (electra.run.plan.check_fits_machine): a GPU-sized run on a CPU is refused in
one line with an estimate and the presets to use, unless train.allow_cpu."""
from __future__ import annotations

import re

import pytest
import torch

from common.config import ConfigError
from electra.distributed.batch_geometry import batch_geometry
from electra.config import load_config
from electra.run.job import PretrainJob
from electra.run.plan import CPU_STEP_FLOPS, check_fits_machine, duration, resolve, resolve_run_config
from electra.run.summary import human, parameter_counts, step_flops, summary_lines
from tests.electra._corpus import write_tiny_corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_tiny_corpus(tmp_path_factory.mktemp("corpus"), seq_len=32, train_shards=(9,), validation_shards=(4,))


@pytest.mark.parametrize("preset", ["tiny", "small"])
def test_parameter_counts_are_the_transformers_pair(preset):
    """The discriminator is transformers' ElectraForPreTraining; the pair is that plus the
    generator (ElectraForMaskedLM) without its embeddings, which ours shares."""
    import transformers as tf

    m = load_config(preset).model
    g = m.generator_sizes()
    common = dict(vocab_size=m.vocab_size, embedding_size=m.embedding_size, num_hidden_layers=m.num_layers,
                  max_position_embeddings=m.max_position_embeddings, type_vocab_size=m.type_vocab_size)
    with torch.device("meta"):
        disc = tf.ElectraForPreTraining(tf.ElectraConfig(hidden_size=m.hidden_size, num_attention_heads=m.num_heads,
                                                         intermediate_size=m.intermediate_size, **common))
        gen = tf.ElectraForMaskedLM(tf.ElectraConfig(hidden_size=g.hidden_size, num_attention_heads=g.num_heads,
                                                     intermediate_size=g.intermediate_size, **common))
    count = lambda mod: sum(p.numel() for p in mod.parameters())  # noqa: E731
    assert parameter_counts(m) == (count(disc) + count(gen) - count(gen.electra.embeddings), count(disc))


def test_the_paper_sizes():
    sizes = {n: round(parameter_counts(load_config(n).model)[1] / 1e6) for n in ("small", "base", "large")}
    assert sizes == {"small": 14, "base": 109, "large": 335}  # the paper's 14 M, 110 M, 335 M


def test_summary_is_the_differences_and_the_derived_values():
    cfg = resolve_run_config(load_config("small", ["train.max_steps=10", "objective.mask_prob=0.2"]),
                             corpus_seq_len=128, corpus_vocab_size=30522, precision="fp32")
    lines = summary_lines(cfg, batch_geometry(128, 32, 2), config="small", written_to="runs/a/config.json")
    assert lines[0] == ("config small; the full resolved config: runs/a/config.json; differs from the defaults "
                        "(ELECTRA-Small, electra/config.py) in:")
    assert lines[1:4] == ["  objective: mask_prob=0.2", "  data: seq_len=128", "  train: max_steps=10 precision=fp32"]
    derived = lines[4]
    # 128 = 32 x 2 ranks x 2; 128 x 128 tokens; int((0.2 + 0.005) x 128) = 26 masked positions
    for part in ("14.2 M parameters (discriminator 13.5 M)", "batch 128 = micro 32 x 2 ranks x 2 accumulation steps",
                 "16,384 tokens and", "26 masked positions per sequence of 128",
                 "10 steps (10,000 warm-up, LR 0.0005 decaying to 0 at 1,000,000); fp32"):
        assert part in derived, (part, derived)
    assert len(lines) == 5


@pytest.mark.parametrize("value,text", [(641_457, "641 k"), (14_196_219, "14.2 M"), (2.24e15, "2.24 P"), (12, "12")])
def test_human(value, text):
    assert human(value) == text


@pytest.mark.parametrize("seconds,text", [(4.5, "4.5 s"), (45, "45 s"), (750, "12 min"), (3 * 3600, "3 h"),
                                          (30000, "8.3 h"), (400000, "4.6 days"), (9e6, "104 days")])
def test_duration(seconds, text):
    assert duration(seconds) == text


def test_the_line_between_a_cpu_run_and_a_gpu_run():
    """Decided by FLOPs per optimizer step (the same answer on any machine, under any load):
    small on its corpus length and tiny/mini pass; base and large do at any length."""
    flops = {(n, s): step_flops(load_config(n, [f"data.seq_len={s}"]))
             for n, s in (("tiny", 128), ("mini", 128), ("small", 128), ("base", 32), ("large", 32))}
    assert max(flops[k] for k in (("tiny", 128), ("mini", 128), ("small", 128))) < CPU_STEP_FLOPS
    assert min(flops[("base", 32)], flops[("large", 32)]) > CPU_STEP_FLOPS


def test_a_gpu_preset_on_a_cpu_is_refused_naming_the_fix(corpus, tmp_path):
    plan = resolve(PretrainJob("large", str(corpus), str(tmp_path / "run")), world_size=1, precision="fp32")
    with pytest.raises(ConfigError) as err:
        check_fits_machine(plan, cuda=False)
    line = str(err.value)
    assert "\n" not in line
    flops = 3 * 2048 * 32 * 2 * 24 * (4 * 1024 ** 2 + 2 * 1024 * 4096)  # the discriminator layers alone
    assert flops < step_flops(plan.cfg) < 1.5 * flops
    m = re.fullmatch(r"--config large is sized for GPUs and this machine has none: (?P<flops>[\d.]+ TFLOP) per "
                     r"optimizer step \(2048 x 32 tokens\), at least (?P<time>[\d.]+) (?P<unit>s|min|h|days) per "
                     r"step at this CPU's measured (?P<rate>[\d.]+) (?P<prefix>[GT])FLOP/s \(fp32 matmuls\); "
                     r"on a CPU use --config tiny or mini, or --allow-cpu \(train.allow_cpu=true\) to run it anyway",
                     line)
    assert m, line
    assert m["flops"] == human(step_flops(plan.cfg), "FLOP")
    seconds = float(m["time"]) * {"s": 1, "min": 60, "h": 3600, "days": 86400}[m["unit"]]
    rate = float(m["rate"]) * {"G": 1e9, "T": 1e12}[m["prefix"]]
    assert seconds == pytest.approx(step_flops(plan.cfg) / rate, rel=0.1)  # the time is FLOPs / the rate
    assert check_fits_machine(plan, cuda=True) is None  # a GPU machine: nothing to say
    allowed = resolve(PretrainJob("large", str(corpus), str(tmp_path / "run"), ["train.allow_cpu=true"]),
                      world_size=1, precision="fp32")
    assert re.match(r"[\d.]+ TFLOP per optimizer step .* per step at this CPU's measured", check_fits_machine(
        allowed, cuda=False))
    tiny = resolve(PretrainJob("tiny", str(corpus), str(tmp_path / "run")), world_size=1, precision="fp32")
    assert check_fits_machine(tiny, cuda=False) is None
    assert not (tmp_path / "run").exists()  # resolving writes nothing


def test_a_scaled_warm_up_says_its_share(tmp_path, corpus):
    """The derived line of a shortened schedule (electra.config.load_run_config): the warm-up's
    steps and the preset's share; a resumed run keeps the warm-up it started with."""
    import json

    from electra.run.plan import keep_started_warmup

    job = PretrainJob("base", str(corpus), str(tmp_path / "run"), ["optimizer.total_steps=20000"])
    plan = resolve(job, world_size=1, precision="fp32")
    assert plan.cfg.optimizer.warmup_steps == 261 and tuple(plan.warmup_from) == (10_000, 766_000)
    derived = summary_lines(plan.cfg, plan.geometry, config="base", written_to="c.json",
                            warmup_from=plan.warmup_from)[-1]
    assert "(261 warm-up: 1.3% of 20,000, base's share (10,000 of 766,000), LR 0.0002 decaying to 0 at 20,000)" \
        in derived
    run = tmp_path / "old"  # a run started before warm-ups were scaled: 10,000 of its 20,000
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"optimizer": {"warmup_steps": 10_000, "total_steps": 20_000}}))
    kept, share = keep_started_warmup(plan.cfg, plan.warmup_from, run)
    assert kept.optimizer.warmup_steps == 10_000 and share is None
    (run / "config.json").write_text(json.dumps({"optimizer": {"warmup_steps": 10_000, "total_steps": 766_000}}))
    assert keep_started_warmup(plan.cfg, plan.warmup_from, run) == (plan.cfg, plan.warmup_from)  # another total
