"""Numerics of the trainer: evaluation leaves every RNG stream alone, bf16 runs export their fp32
master weights, fp32 gradient accumulation in the DeepSpeed config, the discriminator AUC, the
GPU fast path (activation checkpointing, FusedAdam) against the plain path.

The bf16 run is a real in-process ``Trainer`` (one gloo rank, DeepSpeed ZeRO-1 -> BF16_Optimizer)
on a tiny corpus; a CPU without native bf16 is made to keep bf16 (``FORCE_BF16_ENV``), which is
slow per FLOP but the model is tiny.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from electra.checkpoint import save_load as ck
from electra.checkpoint import run_layout as layout
from electra.checkpoint.deepspeed_states import checkpoint_state_dict
from electra.checkpoint.hf_export import export_checkpoint
from electra.config import ModelConfig, ObjectiveConfig, OptimizerConfig, load_config
from electra.distributed.deepspeed_glue import FORCE_BF16_ENV, checkpoint_forward, deepspeed_config
from electra.model.auc import AUC_BINS, AUC_RANGE, auc_from_histogram, auc_histogram
from electra.run.metrics_log import MetricWindow
from tests.electra._corpus import write_tiny_corpus

REPO = Path(__file__).resolve().parents[3]
CUDA = torch.cuda.is_available()


@pytest.fixture(scope="module")
def bf16_run(tmp_path_factory):
    """A 2-step bf16 run (accumulation 2); RNG snapshots around an evaluation before training."""
    from electra.distributed import deepspeed_glue as D
    from electra.train import parse_args
    from electra.run.job import job_from_args
    from electra.run.runner import PretrainRunner

    tmp = tmp_path_factory.mktemp("bf16")
    # 11 validation examples: one global batch of 8 to evaluate on
    data = write_tiny_corpus(tmp / "c", seq_len=32, train_shards=(9, 7), validation_shards=(6, 5))
    saved_env = dict(os.environ)
    os.environ[FORCE_BF16_ENV] = "1"
    try:
        runner = PretrainRunner(job_from_args(parse_args([
            "--config", "electra/configs/tiny.json", "--data", str(data), "--out", str(tmp / "run"),
            "--max-steps", "2", "--micro-batch", "4", "--set", "train.global_batch_size=8",
            "--set", "data.seq_len=32", "--set", "model.max_position_embeddings=64", "--set", "data.num_workers=0",
            "--set", "train.precision=bf16", "--set", "deepspeed.zero_optimization.stage=1",
            "--set", "train.eval_every=0", "--set", "optimizer.lr=0.01", "--set", "optimizer.warmup_steps=0"])))
        runner.resolve()
        runner.prepare()
        trainer = runner.build()
        before = ck.rng_state()
        assert trainer.evaluate() is not None  # an evaluation ran (drew masks under its own seed)
        after = ck.rng_state()
        runner.train()
        runner.export()
        masters = trainer.fp32_model().state_dict()
        module = {k: v.detach().cpu().clone() for k, v in trainer.engine.module.model.state_dict().items()}  # masters: CPU
        yield {"trainer": trainer, "before": before, "after": after, "masters": masters, "module": module,
               "run": tmp / "run"}
    finally:
        D.shutdown()
        os.environ.clear()
        os.environ.update(saved_env)


def test_evaluation_leaves_every_rng_stream_unchanged(bf16_run):
    assert bf16_run["after"] == bf16_run["before"]  # python, numpy, torch CPU (+ every CUDA device)


@pytest.mark.skipif(not CUDA, reason="CUDA generators need a GPU")
def test_evaluation_leaves_cuda_rng_unchanged(bf16_run):
    assert "cuda" in bf16_run["before"] and bf16_run["after"]["cuda"] == bf16_run["before"]["cuda"]


def test_bf16_run_uses_bf16_params_and_fp32_masters(bf16_run):
    engine = bf16_run["trainer"].engine
    assert type(engine.optimizer).__name__ == "BF16_Optimizer"  # fp32 accumulation with ZeRO-1
    assert all(v.dtype == torch.bfloat16 for v in bf16_run["module"].values())
    masters = bf16_run["masters"]
    assert all(v.dtype == torch.float32 for v in masters.values())
    # the masters are not the bf16 weights: the update moved them by less than bf16 resolves
    differs = [k for k, v in masters.items() if not torch.equal(v, bf16_run["module"][k].float())]
    assert len(differs) == len(masters)
    assert all(torch.equal(v.bfloat16(), bf16_run["module"][k]) for k, v in masters.items())


def test_final_export_equals_the_checkpointed_fp32_masters(bf16_run):
    from safetensors.torch import load_file

    from electra.checkpoint.hf_export import to_hf
    from electra.model.networks import ElectraForPretraining

    run = bf16_run["run"]
    step = layout.find_latest(run)
    files = checkpoint_state_dict(step)  # read back from the BF16_Optimizer partition files
    state = {k.removeprefix("model."): v for k, v in files.items() if k.startswith("model.")}
    assert all(torch.equal(state[k], v) for k, v in bf16_run["masters"].items())
    model = ElectraForPretraining(load_config(run / "config.json").model)
    model.load_state_dict(state)
    want_disc, want_gen = to_hf(model)
    for folder, want in (("discriminator", want_disc), ("generator", want_gen)):
        got = load_file(str(run / "hf" / folder / "model.safetensors"))
        assert set(got) == set(want) and all(torch.equal(got[k], want[k]) for k in want), folder
    exported = export_checkpoint(step, run / "exp")  # the offline export reads the same masters
    got = load_file(str(exported / "discriminator" / "model.safetensors"))
    assert all(torch.equal(got[k], want_disc[k]) for k in want_disc)


def test_bf16_metrics_carry_disc_auc(bf16_run):
    import json

    recs = [json.loads(x) for x in (bf16_run["run"] / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in recs if r["kind"] == "train"]
    assert [r["step"] for r in train] == [2] and 0.0 <= train[0]["disc_auc"] <= 1.0  # log_every 10: the last step
    assert [r for r in recs if r["kind"] == "eval"][0]["eval_disc_auc"] is not None


def test_deepspeed_config_accumulates_and_reduces_bf16_grads_in_fp32():
    cfg = load_config(REPO / "electra/configs/large.json")
    ds = deepspeed_config(cfg, world_size=8)
    assert ds["bf16"]["enabled"] and ds["data_types"] == {"grad_accum_dtype": "fp32"}
    assert ds["communication_data_type"] == "fp32" and ds["gradient_accumulation_steps"] == 2048 // (32 * 8)
    fp32 = deepspeed_config(load_config(REPO / "electra/configs/large.json", ["train.precision=fp32"]), 8)
    assert "data_types" not in fp32 and "communication_data_type" not in fp32
    with pytest.raises(ValueError, match="bf16 needs deepspeed.zero_optimization.stage >= 1"):
        deepspeed_config(load_config(REPO / "electra/configs/large.json",
                                     ["deepspeed.zero_optimization.stage=0"]), 8)


def test_new_knobs_are_strict():
    from electra.config import ConfigError

    cfg = load_config(REPO / "electra/configs/base.json", ["optimizer.fused=off", "train.compile=true",
                                                           "train.activation_checkpointing=true"])
    assert (cfg.optimizer.fused, cfg.train.compile, cfg.train.activation_checkpointing, cfg.train.tf32) == \
        ("off", True, True, True)
    for bad in ("optimizer.fused=yes", "train.compile=1", "train.tf32=on"):
        with pytest.raises(ConfigError):
            load_config(REPO / "electra/configs/base.json", [bad])


def _sklearn_auc(scores, labels):
    from sklearn.metrics import roc_auc_score

    return roc_auc_score(labels.numpy(), scores.numpy())


def test_auc_histogram_equals_sklearn_on_bin_aligned_scores():
    g = torch.Generator().manual_seed(3)
    width = 2 * AUC_RANGE / AUC_BINS
    bins = torch.randint(0, AUC_BINS, (4000,), generator=g)
    labels = torch.rand(4000, generator=g) < torch.sigmoid((bins.float() - AUC_BINS / 2) / 600)
    scores = -AUC_RANGE + (bins.float() + 0.5) * width  # bin centres: ties only where sklearn sees ties
    weights = torch.rand(4000, generator=g) < 0.8  # padding is left out
    got = auc_from_histogram(auc_histogram(scores, labels, weights))
    assert got == pytest.approx(_sklearn_auc(scores[weights], labels[weights]), abs=1e-12)


def test_auc_streams_over_micro_batches_like_one_batch():
    g = torch.Generator().manual_seed(5)
    logits = torch.randn(6, 4, 32, generator=g) * 3
    labels = torch.rand(6, 4, 32, generator=g) < torch.sigmoid(logits)
    weights = torch.rand(6, 4, 32, generator=g) < 0.9
    window = MetricWindow(torch.device("cpu"))
    for i in range(6):  # a stand-in with the ObjectiveOutput fields the window reads
        fields = {f: torch.tensor(0.0) for f in ("loss", "gen_loss", "disc_loss", "gen_acc", "disc_acc",
                                                 "disc_precision", "disc_recall", "replaced_frac")}
        out = type("Out", (), {**fields, "num_tokens": weights[i].sum(),
                               "disc_hist": auc_histogram(logits[i], labels[i], weights[i])})
        window.add(out)
    means, tokens, _ = window.flush()
    assert tokens == int(weights.sum())
    want = _sklearn_auc(logits[weights], labels[weights])
    assert means["disc_auc"] == pytest.approx(want, abs=2e-3)  # continuous scores: binning error only
    assert auc_from_histogram(torch.zeros(2 * AUC_BINS)) is None  # no positives: undefined, not 0.5


def test_window_leaves_excluded_time_out_of_its_seconds(monkeypatch):
    """Evaluations and checkpoints (``trainer._outside``) do not count in tokens/s and MFU; a fake
    clock makes the seconds exact."""
    from electra.run import metrics_log

    now = [100.0]
    monkeypatch.setattr(metrics_log.time, "perf_counter", lambda: now[0])
    window = MetricWindow(torch.device("cpu"))
    now[0] += 7.0  # 7 s of training ...
    window.exclude(5.0)  # ... of which 5 s were an evaluation
    assert window.flush()[2] == pytest.approx(2.0)
    now[0] += 3.0
    assert window.flush()[2] == pytest.approx(3.0)  # a flush starts the next window afresh


def test_activation_checkpointing_gives_the_same_gradients_and_rng_stream():
    from electra.model.networks import ElectraForPretraining
    from electra.model.objective import ElectraObjective, SpecialTokens

    def grads(checkpointed: bool):
        torch.manual_seed(0)
        cfg = ModelConfig(vocab_size=50, embedding_size=16, hidden_size=32, num_layers=2, num_heads=2,
                          intermediate_size=64, max_position_embeddings=16)
        model = ElectraForPretraining(cfg)
        if checkpointed:
            for layer in [*model.generator.layers, *model.discriminator.layers]:
                checkpoint_forward(layer)
        obj = ElectraObjective(model, ObjectiveConfig(), SpecialTokens(), 16)
        ids = torch.randint(5, 50, (3, 16))
        ids[:, 0], ids[:, -1] = 2, 3
        obj(ids).loss.backward()
        return {k: p.grad.clone() for k, p in model.named_parameters()}, torch.get_rng_state()

    (plain, rng_plain), (ckpt, rng_ckpt) = grads(False), grads(True)
    assert torch.equal(rng_plain, rng_ckpt)
    assert all(torch.allclose(plain[k], ckpt[k], rtol=1e-5, atol=1e-7) for k in plain)


@pytest.mark.skipif(not CUDA, reason="DeepSpeed FusedAdam is a CUDA kernel")
@pytest.mark.parametrize("bias_correction", [False, True])
def test_fused_adam_equals_adam_weight_decay(bias_correction):
    from electra.run.optim import AdamWeightDecay, fused_adam

    cfg = OptimizerConfig(lr=1e-2, bias_correction=bias_correction)
    g = torch.Generator(device="cuda").manual_seed(0)
    w = torch.randn(64, 33, device="cuda", generator=g)
    b = torch.randn(33, device="cuda", generator=g)
    ours = [w.clone().requires_grad_(), b.clone().requires_grad_()]
    theirs = [w.clone().requires_grad_(), b.clone().requires_grad_()]
    opt_a = AdamWeightDecay([{"params": [ours[0]], "weight_decay": 0.01}, {"params": [ours[1]], "weight_decay": 0.0}],
                            lr=cfg.lr, eps=cfg.eps, weight_decay=0.01, bias_correction=bias_correction)
    try:
        opt_b = fused_adam([{"params": [theirs[0]], "weight_decay": 0.01},
                            {"params": [theirs[1]], "weight_decay": 0.0}], cfg)
    except Exception as exc:  # the op cannot be built on this machine (no nvcc / ninja)
        pytest.skip(f"DeepSpeed FusedAdam op unavailable: {exc}")
    for _ in range(5):
        grads = [torch.randn(p.shape, device="cuda", generator=g) for p in ours]
        for params, opt in ((ours, opt_a), (theirs, opt_b)):
            for p, gr in zip(params, grads):
                p.grad = gr.clone()
            opt.step()
    # The fused kernel rounds differently (measured on an H100: 1.9e-6 after 5 steps, ~4e-5 of the
    # distance moved); a wrong bias correction, decay mode or decay group is off by >= 2e-3 of it.
    for a, c, start in zip(ours, theirs, (w, b)):
        moved = (a - start).abs().max()
        assert (a - c).abs().max() <= 2e-4 * moved, ((a - c).abs().max(), moved)


@pytest.mark.skipif(not CUDA, reason="TF32 is a CUDA setting")
def test_fast_path_turns_on_tf32_on_cuda():
    from electra.distributed.deepspeed_glue import configure_fast_path
    from electra.model.networks import ElectraForPretraining

    cfg = load_config(REPO / "electra/configs/tiny.json", ["train.precision=fp32"])
    assert "tf32" in configure_fast_path(cfg, ElectraForPretraining(cfg.model))
    assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
