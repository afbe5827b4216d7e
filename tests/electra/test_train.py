"""The trainer end to end on CPU: 2 DeepSpeed ranks, exact resume after SIGKILL, a kill during a
checkpoint write, the Hugging Face export, a corpus streamed from a loopback S3 server. Real
processes, real DeepSpeed, tiny model and corpus.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from electra.checkpoint import run_layout as layout
from electra.checkpoint.deepspeed_states import checkpoint_state_dict
from common.ports import free_port
from electra.checkpoint.hf_export import export_checkpoint
from electra.data.sample_log import read_sample_log
from electra.train import parse_args
from tests.electra._corpus import TOKENIZER_PATH, shard_path, upload_corpus, write_tiny_corpus

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
COMMON = ["--config", "electra/configs/tiny.json", "--set", "data.seq_len=32", "--set", "train.log_every=1",
          "--set", "data.shuffle_buffer=16", "--set", "optimizer.warmup_steps=2", "--set",
          "optimizer.total_steps=40", "--set", "model.max_position_embeddings=64", "--set", "data.num_workers=2"]


def env(**extra):
    e = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(REPO)}
    return {**e, **{k: str(v) for k, v in extra.items()}}


def train_cmd(data, out, *extra, launcher=None, kill_after_step=None, kill_in_checkpoint=None):
    hooks = [*(["--kill-after-step", str(kill_after_step)] if kill_after_step else []),
             *(["--kill-in-checkpoint", str(kill_in_checkpoint)] if kill_in_checkpoint else [])]
    script = ["tests/electra/_train_with_hooks.py", *hooks] if hooks else ["electra/train.py"]
    prog = [str(VENV_BIN / "deepspeed"), *launcher, *script] if launcher else [sys.executable, *script]
    return [*prog, *COMMON, "--data", str(data), "--out", str(out), *extra]


def run(cmd, timeout=240, **extra_env):
    p = subprocess.run(cmd, cwd=REPO, env=env(**extra_env), capture_output=True, text=True, timeout=timeout)
    return p


def records(run_dir, kind="train"):
    lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("kind") == kind]


def trajectory(run_dir):
    keys = ("loss", "gen_loss", "disc_loss", "gen_acc", "disc_acc", "lr", "grad_norm", "tokens")
    return [(r["step"], *(r[k] for k in keys)) for r in records(run_dir)]


SINGLE = ["--max-steps", "8", "--save-every", "2", "--micro-batch", "4", "--seed", "7",
          "--set", "train.global_batch_size=8", "--set", "train.eval_every=4"]


@pytest.fixture(scope="module")
def baseline(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("baseline")
    p = run(train_cmd(corpus, out, *SINGLE))
    assert p.returncode == 0, p.stderr[-3000:]
    return out


def test_cli_surface_is_frozen():
    a = parse_args(["--config", "c", "--data", "d", "--out", "o", "--max-steps", "3", "--save-every", "2",
                    "--seed", "5", "--micro-batch", "4", "--set", "optimizer.lr=1", "--set", "a.b=2",
                    "--local_rank", "0"])
    got = [getattr(a, f"train.{k}") for k in ("max_steps", "save_every", "seed", "micro_batch_size")]
    assert (got, a.overrides, a.local_rank) == ([3, 2, 5, 4], ["optimizer.lr=1", "a.b=2"], 0)


def test_baseline_run_layout_and_metrics(baseline):
    recs = records(baseline)
    assert [r["step"] for r in recs] == list(range(1, 9))
    for field in ("loss", "gen_loss", "disc_loss", "gen_acc", "disc_acc", "disc_precision", "disc_recall",
                  "lr", "grad_norm", "tokens_per_sec", "mfu"):
        assert all(field in r for r in recs), field
    assert all(r["grad_norm"] > 0 and r["tokens_per_sec"] > 0 for r in recs)
    assert [r["step"] for r in records(baseline, "eval")] == [4, 8]
    cfg = json.loads((baseline / "config.json").read_text())
    assert cfg["model"]["vocab_size"] == 200 and cfg["train"]["seed"] == 7
    ds = json.loads((baseline / "deepspeed_config.json").read_text())
    assert ds["gradient_accumulation_steps"] == 2 and ds["train_batch_size"] == 8
    steps = sorted(d.name for d in (baseline / "checkpoints").glob("step_*"))
    assert steps == ["step_00000004", "step_00000006", "step_00000008"]  # keep_last 3
    meta = layout.CheckpointMeta.read(baseline / "checkpoints" / "step_00000008")
    assert meta.step == 8 and meta.tokens_seen == sum(r["tokens"] for r in records(baseline))
    # 35 examples, global batch 8 from 8 streams of 4 examples: 4 steps per epoch, 3 left over
    assert meta.data_position == {"epoch": 2, "step": 0} and meta.global_batch_size == 8
    assert (baseline / "tensorboard").is_dir() and any((baseline / "tensorboard").iterdir())


def test_sigkill_at_random_step_resumes_bitwise(corpus, baseline, tmp_path):
    # SIGKILL by fault injection right after step 5 (no race with a polling loop): an odd step, so
    # the resume starts at the step-4 checkpoint, which follows the step-4 evaluation, and the
    # killed run's logged step 5 is dropped and redone.
    kill_after = 5
    out = tmp_path / "run"
    p = run(train_cmd(corpus, out, *SINGLE, kill_after_step=kill_after))
    assert p.returncode == -signal.SIGKILL
    assert [r["step"] for r in records(out)] == list(range(1, kill_after + 1))
    p = run(train_cmd(corpus, out, *SINGLE))
    assert p.returncode == 0, p.stderr[-3000:]
    assert f"(step {kill_after - kill_after % 2}," in p.stderr  # the last checkpoint (save_every 2)
    assert trajectory(out) == trajectory(baseline), f"killed after step {kill_after}"
    assert records(out, "eval") == records(baseline, "eval")


def test_kill_during_checkpoint_write_keeps_previous(corpus, baseline, tmp_path):
    out = tmp_path / "run"
    p = run(train_cmd(corpus, out, *SINGLE, kill_in_checkpoint=6))
    assert p.returncode != 0  # SIGKILLed inside save_checkpoint, after DeepSpeed wrote its files
    partial = out / "checkpoints" / "step_00000006"
    assert partial.is_dir() and any(partial.glob("*.pt")) and not (partial / layout.META).exists()
    assert layout.find_latest(out).name == "step_00000004"
    p = run(train_cmd(corpus, out, *SINGLE))
    assert p.returncode == 0, p.stderr[-3000:]
    assert "step_00000004 (step 4" in p.stderr and "removed incomplete checkpoint" in p.stderr
    assert trajectory(out) == trajectory(baseline)


def test_export_loads_in_transformers_with_trainer_logits(corpus, baseline):
    from transformers import ElectraForPreTraining

    from electra.config import load_config
    from electra.model.networks import ElectraForPretraining

    cfg = load_config(baseline / "config.json")  # the resolved config is a loadable config
    ours = ElectraForPretraining(cfg.model)
    state = torch.load(baseline / "checkpoints" / "step_00000008" / "mp_rank_00_model_states.pt",
                       weights_only=True)["module"]
    ours.load_state_dict({k.removeprefix("model."): v for k, v in state.items() if k.startswith("model.")})
    ours.eval()
    hf = ElectraForPreTraining.from_pretrained(baseline / "hf" / "discriminator").eval()
    ids = torch.tensor([[2, 17, 40, 99, 3, 55, 61, 3, 0, 0], [2, 8, 9, 10, 11, 12, 3, 150, 151, 3]])
    seg = torch.tensor([[0] * 5 + [1] * 3 + [0] * 2, [0] * 7 + [1] * 3])
    with torch.no_grad():
        want = ours.discriminator_logits(ids, seg, ids != 0)
        got = hf(input_ids=ids, token_type_ids=seg, attention_mask=(ids != 0).long()).logits
    mask = ids != 0
    assert torch.allclose(got[mask], want[mask], atol=1e-5), (got - want).abs().max()


def test_corpus_streamed_from_s3_trains_exactly_as_the_local_copy(corpus, baseline, s3_server, tmp_path):
    data = upload_corpus(corpus, s3_server.bucket() + "/corpus")
    out = tmp_path / "run"
    p = run(train_cmd(data, out, *SINGLE[2:], "--max-steps", "4"))  # same flags, 4 of the baseline's 8 steps
    assert p.returncode == 0, p.stderr[-3000:]
    assert trajectory(out) == trajectory(baseline)[:4]
    assert records(out, "eval") == records(baseline, "eval")[:1]  # the eval at step 4
    tokenizer = (corpus / TOKENIZER_PATH / "tokenizer.json").read_bytes()
    assert (out / "tokenizer" / "tokenizer.json").read_bytes() == tokenizer  # the run's local copy ...
    assert (out / "hf" / "discriminator" / "tokenizer.json").read_bytes() == tokenizer  # ... exported


TWO_RANK_FLAGS = ["--micro-batch", "2", "--save-every", "3", "--set", "train.global_batch_size=8", "--set",
                  "train.eval_every=0", "--set", "deepspeed.zero_optimization.stage=2", "--set",
                  "data.skip_corrupt=true", "--set", "optimizer.lr=0.003", "--set", "data.log_samples=true"]


def two_rank_cmd(data, out, max_steps):
    launcher = ["--num_gpus", "2", "--master_port", str(free_port())]
    return train_cmd(data, out, "--max-steps", str(max_steps), *TWO_RANK_FLAGS, launcher=launcher)


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory):
    """``deepspeed --num_gpus 2`` (two CPU ranks), ZeRO-2, 2 loader workers per rank, on 35 examples
    in 5 shards (+1 corrupt shard, skipped): divisible by neither 2 ranks nor 2 x 2 workers."""
    tmp = tmp_path_factory.mktemp("two_ranks")
    data = write_tiny_corpus(tmp / "c", seq_len=32, train_shards=(9, 7, 5, 11, 3, 4), validation_shards=(6,))
    bad = shard_path(data, "train", 5)
    bad.write_bytes(bad.read_bytes()[:2000])
    out = tmp / "run"
    p = run(two_rank_cmd(data, out, 6))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return data, out


def rank_keys(out, steps):
    logs = [read_sample_log(out, r) for r in (0, 1)]
    return [[k for s in steps for k in log[s]] for log in logs]


def test_two_ranks_zero2_disjoint_equal_loss_falls(two_rank_run):
    _, out = two_rank_run
    # 35 examples in 8 streams of 4: 4 global steps of 8 per epoch, 4 examples per rank per step
    for steps, n in (((1, 2, 3, 4), 16), ((5, 6), 8)):
        a, b = rank_keys(out, steps)
        assert len(a) == len(b) == n  # equal steps on both ranks
        assert len(set(a) | set(b)) == len(a) + len(b)  # disjoint ranks, no duplicate in the epoch
    losses = [r["gen_loss"] for r in records(out)]  # the generator's MLM loss falls from the first steps
    assert len(losses) == 6 and sum(losses[-2:]) < sum(losses[:2]), losses
    data_rec = records(out, "data")[0]
    assert data_rec["skipped_count"] == 1 and data_rec["skipped_shards"][0].endswith("train-000005.tar")
    ckpt = out / "checkpoints" / "step_00000006"
    assert {f.name for f in ckpt.glob("zero_pp_rank_*")} == {"zero_pp_rank_0_mp_rank_00_optim_states.pt",
                                                            "zero_pp_rank_1_mp_rank_00_optim_states.pt"}
    assert {f.name for f in ckpt.glob("rng_rank*.json")} == {"rng_rank0.json", "rng_rank1.json"}
    assert layout.CheckpointMeta.read(ckpt).data_position == {"epoch": 1, "step": 2}


@pytest.mark.slow
def test_two_ranks_rerun_resumes_from_latest(two_rank_run):
    data, out = two_rank_run
    p = run(two_rank_cmd(data, out, 8))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "resumed from" in p.stdout + p.stderr and "step_00000006 (step 6" in p.stdout + p.stderr
    assert [r["step"] for r in records(out)] == list(range(1, 9))
    assert layout.CheckpointMeta.read(layout.find_latest(out)).data_position == {"epoch": 2, "step": 0}
    # the resumed steps read the rest of epoch 1: still disjoint from what ranks read before
    a, b = rank_keys(out, (5, 6, 7, 8))
    assert len(a) + len(b) == 32 and len(set(a) | set(b)) == 32


def test_run_config_is_resolved_once_into_a_new_frozen_config():
    import dataclasses

    from electra.config import load_config
    from electra.run.plan import resolve_run_config

    requested = load_config(REPO / "electra/configs/small.json", ["train.precision=bf16"])
    resolved = resolve_run_config(requested, corpus_seq_len=64, corpus_vocab_size=200, precision="fp32")
    assert (resolved.model.vocab_size, resolved.train.precision, resolved.data.seq_len) == (200, "fp32", 64)
    assert (requested.model.vocab_size, requested.train.precision, requested.data.seq_len) == (30522, "bf16", None)
    want = requested.to_dict()
    want["model"]["vocab_size"], want["train"]["precision"], want["data"]["seq_len"] = 200, "fp32", 64
    assert resolved.to_dict() == want  # nothing else changed
    same = resolve_run_config(resolved, corpus_seq_len=64, corpus_vocab_size=200, precision="fp32")
    assert same is resolved
    with pytest.raises(dataclasses.FrozenInstanceError):
        resolved.model.vocab_size = 5
    with pytest.raises(ValueError, match="resolved run config.model: pad_token_id outside the vocabulary"):
        resolve_run_config(load_config(REPO / "electra/configs/small.json", ["model.pad_token_id=300"]),
                           corpus_seq_len=128, corpus_vocab_size=200, precision="bf16")


def test_launch_as_a_module_under_the_deepspeed_launcher(corpus, tmp_path):
    """``deepspeed --module electra.train`` (one CPU rank): the run directory is complete and its
    config.json is exactly the resolved config."""
    from electra.config import load_config
    from electra.run.job import job_from_args
    from electra.run.plan import resolve

    out = tmp_path / "run"
    flags = ["--max-steps", "2", "--save-every", "1", "--micro-batch", "4", "--set", "train.global_batch_size=4",
             "--set", "train.eval_every=0"]
    launcher = [str(VENV_BIN / "deepspeed"), "--num_gpus", "1", "--master_port",
                str(free_port()), "--module", "electra.train"]
    p = run([*launcher, *COMMON, "--data", str(corpus), "--out", str(out), *flags])
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert [d.name for d in layout.step_dirs(out)] == ["step_00000001", "step_00000002"]
    assert layout.find_latest(out) == layout.step_dir(out, 2)
    assert (out / "checkpoints" / "latest").read_text().strip() == "step_00000002"
    assert [r["step"] for r in records(out)] == [1, 2]
    assert (out / "tokenizer" / "tokenizer.json").is_file() and (out / "hf" / "discriminator").is_dir()
    want = resolve(job_from_args(parse_args([*COMMON, "--data", str(corpus), "--out", str(out), *flags])),
                   world_size=1).cfg
    assert json.loads((out / "config.json").read_text()) == want.to_dict()
    assert load_config(out / "config.json") == want


def test_deepspeed_config_owns_batch_clip_and_precision():
    from electra.config import load_config
    from electra.distributed.deepspeed_glue import deepspeed_config

    cfg = load_config(REPO / "electra/configs/small.json", ["train.precision=fp32", "optimizer.grad_clip=0.5"])
    ds = deepspeed_config(cfg, world_size=2)
    assert (ds["train_batch_size"], ds["train_micro_batch_size_per_gpu"], ds["gradient_accumulation_steps"]) == (128, 32, 2)
    assert ds["gradient_clipping"] == 0.5 and not ds["bf16"]["enabled"] and not ds["fp16"]["enabled"]
    assert ds["zero_optimization"]["stage"] == cfg.deepspeed["zero_optimization"]["stage"]
    assert deepspeed_config(load_config(REPO / "electra/configs/small.json"), 1)["bf16"]["enabled"]
    with pytest.raises(ValueError, match="128 cannot be split over 3 ranks"):
        deepspeed_config(cfg, world_size=3)


def test_metrics_truncated_to_the_resumed_step(tmp_path):
    from electra.run.metrics_log import truncate_after

    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"kind": "train", "step": s, "loss": float(s)}) for s in range(1, 8)]
    path.write_text("\n".join(lines) + '\n{"kind": "train", "st')  # the kill cut the last line
    truncate_after(path, 4)
    assert [json.loads(x)["step"] for x in path.read_text().splitlines()] == [1, 2, 3, 4]


def test_peak_flops_table_and_override():
    from electra.run.metrics_log import peak_flops, train_record

    assert peak_flops("bf16", 1e15) == 1e15
    assert peak_flops("bf16") > peak_flops("fp32") > 0
    rec = train_record(3, {"loss": 1.0}, tokens=1000, seconds=2.0, lr=1e-4, grad_norm=0.5,
                       flops_per_token=1e9, peak=1e12, world_size=2)
    assert rec["tokens_per_sec"] == 500 and rec["mfu"] == pytest.approx(500 * 1e9 / 2e12)


def test_precision_fallback_only_off_gpu():
    from electra.distributed.deepspeed_glue import effective_precision


    assert effective_precision("fp32") == "fp32"
    got = effective_precision("bf16")
    if torch.cuda.is_available():
        assert got == "bf16"
    else:
        flags = Path("/proc/cpuinfo").read_text()
        assert got == ("bf16" if "amx_bf16" in flags or "avx512_bf16" in flags else "fp32")
        assert effective_precision("fp16") == "fp32"


def _disc_logits(model_dir):
    from transformers import ElectraForPreTraining

    hf = ElectraForPreTraining.from_pretrained(model_dir).eval()
    ids = torch.tensor([[2, 17, 40, 99, 3, 55, 61, 3]])
    with torch.no_grad():
        return hf(input_ids=ids, token_type_ids=torch.zeros_like(ids)).logits


def test_export_checkpoint_of_the_final_step_equals_the_run_export(baseline, tmp_path):
    step = layout.find_latest(baseline)
    out = export_checkpoint(step, tmp_path / "exp")
    assert (out / "discriminator" / "tokenizer.json").is_file()  # the run's own tokenizer copy
    assert torch.allclose(_disc_logits(out / "discriminator"), _disc_logits(baseline / "hf" / "discriminator"),
                          atol=1e-6)


def test_export_checkpoint_gathers_zero2_partitions(two_rank_run, tmp_path):
    _, out = two_rank_run
    step = out / "checkpoints" / "step_00000006"
    state = checkpoint_state_dict(step)
    assert all(v.dtype == torch.float32 and v.numel() > 0 for v in state.values())
    exported = export_checkpoint(step, tmp_path / "exp")
    assert torch.isfinite(_disc_logits(exported / "discriminator")).all()
    with pytest.raises(FileNotFoundError, match="not a complete checkpoint"):
        export_checkpoint(tmp_path, tmp_path / "x")


def test_tiny_preset_trains_on_two_cpu_ranks_as_shipped_and_outputs_are_readable(corpus, tmp_path):
    """``deepspeed --num_gpus 2 electra/train.py --config tiny`` with no batch flags: the preset's
    global batch of 16 is split over 2 ranks by lowering the micro batch (16 -> 8), logged. Under
    umask 022 every file of the run directory is 0644 and every folder 0755."""
    out = tmp_path / "run"
    cmd = [str(VENV_BIN / "deepspeed"), "--num_gpus", "2", "--master_port", str(free_port()), "electra/train.py",
           "--config", "tiny", "--data", str(corpus), "--out", str(out), "--max-steps", "2"]
    p = subprocess.run(cmd, cwd=REPO, env=env(), capture_output=True, text=True, timeout=300,
                       preexec_fn=lambda: os.umask(0o022))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "train.micro_batch_size 16 -> 8" in p.stdout + p.stderr
    ds = json.loads((out / "deepspeed_config.json").read_text())
    assert (ds["train_batch_size"], ds["train_micro_batch_size_per_gpu"], ds["gradient_accumulation_steps"]) == (16, 8, 1)
    assert [r["step"] for r in records(out)] == [2]  # log_every 10: the last step is logged
    assert layout.find_latest(out).name == "step_00000002"
    modes = {p.relative_to(out).as_posix(): p.stat().st_mode & 0o777 for p in out.rglob("*")}
    wrong = {k: oct(m) for k, m in modes.items() if m != (0o755 if (out / k).is_dir() else 0o644)}
    assert not wrong and "hf/discriminator/model.safetensors" in modes and "config.json" in modes, wrong
