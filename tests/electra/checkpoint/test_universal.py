"""Resuming on another number of ranks: electra/checkpoint/universal.py and
electra.checkpoint.save_load.load_checkpoint(universal=True).

The plan (which layouts load directly, which go through DeepSpeed's universal checkpoint, which
are refused, and the one-line refusals) is tested on fabricated model-states files. The real
thing runs DeepSpeed ranks on CPU (tests/electra/_zero_worker.py: a tiny model with a tied
weight, a frozen parameter and a buffer, the project's optimiser and schedule): a ZeRO-1 fp32
checkpoint saved on 2 ranks resumes on 1, and one saved on 1 rank resumes on 2 (rank 0
converts, rank 1 waits); after the load the full fp32 masters, Adam moments, step counts, param
groups, LR scheduler and global step equal the saved ones exactly, the frozen parameter and the
buffer too, and the next step on the same global batch gives the parameters of the uninterrupted
run within fp32 rounding (the gradient sums run in another order). ZeRO-2, bf16 (BF16_Optimizer
with ZeRO-1, fp32 accumulation with ZeRO-2) and ZeRO-0 are the same check, marked slow.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from electra.checkpoint import run_layout as layout
from electra.checkpoint import universal as uc
from common.ports import free_port
from tests._opens import opens

REPO = Path(__file__).resolve().parents[3]
VENV_BIN = Path(sys.executable).parent
WORKER = "tests/electra/_zero_worker.py"


# ---------------------------------------------------------------- the plan, on fabricated files

def fake_checkpoint(run_dir: Path, *, world: int, stage: int, precision: str = "fp32", step: int = 5) -> Path:
    step_dir = layout.step_dir(run_dir, step)
    step_dir.mkdir(parents=True)
    ds = {"zero_optimization": {"stage": stage}, "bf16": {"enabled": precision == "bf16"},
          "fp16": {"enabled": precision == "fp16"}}
    name = "zero_pp_rank_0_mp_rank_00_model_states.pt" if stage == 3 else "mp_rank_00_model_states.pt"
    torch.save({"module": {"w": torch.ones(2)}, "ds_config": ds, "dp_world_size": world}, step_dir / name)
    meta = layout.CheckpointMeta(step=step, tokens_seen=0, data_position={}, manifest_sha256="m",
                                 tokenizer_sha256="t", config_hash="h", wall_time=0.0, world_size=world)
    (step_dir / layout.META).write_bytes(meta.to_json())
    return step_dir


@pytest.mark.parametrize("saved, now, universal", [
    ((2, 1, "fp32"), (1, 1, "fp32"), True),    # world change, ZeRO-1
    ((1, 2, "fp32"), (4, 2, "fp32"), True),    # world change, ZeRO-2
    ((2, 1, "bf16"), (2, 1, "fp32"), True),    # precision change: another optimiser, other partitions
    ((2, 1, "fp32"), (2, 2, "fp32"), True),    # stage 1 -> 2
    ((2, 1, "bf16"), (2, 1, "bf16"), False),   # as saved
    ((2, 0, "fp32"), (3, 0, "fp32"), False),   # ZeRO-0: replicated state
    ((2, 3, "bf16"), (2, 3, "bf16"), False),   # ZeRO-3 as saved
])
def test_plan(tmp_path, saved, now, universal):
    step_dir = fake_checkpoint(tmp_path, world=saved[0], stage=saved[1], precision=saved[2])
    plan = uc.plan_resume(step_dir, world_size=now[0], zero_stage=now[1], precision=now[2])
    assert (plan.saved_world_size, plan.saved_zero_stage, plan.saved_precision) == saved
    assert plan.universal is universal
    assert plan.load_dir == (tmp_path / "checkpoints" / "step_00000005.universal" if universal else step_dir)
    assert "\n" not in plan.message and f"on {saved[0]} rank(s)" in plan.message
    ds = uc.ds_config_for_resume({"zero_optimization": {"stage": now[1]}, "checkpoint": {"tag_validation": "Warn"}},
                                 plan)
    assert ds["checkpoint"] == {"tag_validation": "Warn", "load_universal": universal}


@pytest.mark.parametrize("saved, now, alternative", [
    ((2, 3, "fp32"), (1, 3, "fp32"), "resume on 2 rank(s) with ZeRO-3 fp32"),
    ((2, 2, "fp32"), (2, 3, "fp32"), "resume on 2 rank(s) with ZeRO-2 fp32"),
    ((4, 1, "fp32"), (2, 0, "fp32"), "stage=1 (or the other of 1/2, on any number of ranks)"),
    ((4, 0, "fp32"), (2, 1, "fp32"), "stage=0 (on any number of ranks)"),
    ((4, 0, "fp16"), (2, 0, "fp32"), "resume with train.precision=fp16"),
])
def test_refused_in_one_line_naming_both_world_sizes(tmp_path, saved, now, alternative):
    step_dir = fake_checkpoint(tmp_path, world=saved[0], stage=saved[1], precision=saved[2])
    with pytest.raises(uc.ResumeRefused) as err:
        uc.plan_resume(step_dir, world_size=now[0], zero_stage=now[1], precision=now[2])
    msg = str(err.value)
    assert isinstance(err.value, ValueError) and "\n" not in msg
    assert f"saved on {saved[0]} rank(s)" in msg and f"resuming on {now[0]} rank(s)" in msg
    assert alternative in msg and "step_00000005" in msg


def test_plan_needs_a_complete_checkpoint(tmp_path):
    step_dir = fake_checkpoint(tmp_path, world=2, stage=1)
    (step_dir / layout.META).unlink()
    with pytest.raises(ValueError, match="meta.json"):
        uc.plan_resume(step_dir, world_size=1, zero_stage=1, precision="fp32")


def test_no_plan_means_no_universal_load_and_the_input_is_not_changed():
    ds = {"checkpoint": {"load_universal": True}}
    assert uc.ds_config_for_resume(ds, None)["checkpoint"]["load_universal"] is False
    assert ds == {"checkpoint": {"load_universal": True}}


def test_prune_orphans_keeps_universal_folders_of_complete_checkpoints(tmp_path):
    kept = fake_checkpoint(tmp_path, world=2, stage=1, step=5)
    root = layout.checkpoints_dir(tmp_path)
    for name in ("step_00000005.universal", "step_00000003.universal", "step_00000003.universal.tmp-12",
                 "step_00000005.universal.tmp-13"):
        (root / name / "zero").mkdir(parents=True)
    removed = uc.prune_orphans(tmp_path)
    assert sorted(d.name for d in removed) == ["step_00000003.universal", "step_00000003.universal.tmp-12"]
    assert uc.universal_dir(kept).is_dir()
    assert [d.name for d in layout.step_dirs(tmp_path)] == ["step_00000005"]  # never listed as a checkpoint


class Agree:
    """A rank's side of the agreement, scripted: what the other ranks answer at each call."""

    def __init__(self, others_failed: list[bool]):
        self.others, self.said = list(others_failed), []

    def __call__(self, failed: bool) -> bool:
        self.said.append(failed)
        return failed or self.others.pop(0)


def test_a_failed_conversion_raises_on_every_rank_and_leaves_nothing(tmp_path):
    step_dir = fake_checkpoint(tmp_path, world=2, stage=1)  # no ZeRO partitions: the converter fails
    plan = uc.plan_resume(step_dir, world_size=3, zero_stage=1, precision="fp32")
    root = layout.checkpoints_dir(tmp_path)
    # this rank fails reading the checkpoint: it says so, then raises its own error
    agree = Agree([False, False, False])
    with pytest.raises(Exception, match="step_00000005") as failed:
        uc.prepare_universal(plan, rank=0, world_size=3, agree=agree)
    assert not isinstance(failed.value, RuntimeError)
    assert agree.said == [True, False, True]  # needs converting; cleaned; failed (no later step is reached)
    assert sorted(p.name for p in root.iterdir()) == ["step_00000005"]  # rank 0 removed its temporary folder
    # another rank failed (here: in the clean step): this one raises too, naming the step
    with pytest.raises(RuntimeError, match="failed on another rank in its clean step"):
        uc.prepare_universal(plan, rank=1, world_size=3, agree=Agree([True]))
    # every rank sees it complete: nobody converts; no universal plan: nothing to agree on
    (uc.universal_dir(step_dir) / "zero").mkdir(parents=True)
    (uc.universal_dir(step_dir) / "zero" / "optimizer_state.pt").write_bytes(b"x")
    agree = Agree([False, False])
    assert uc.prepare_universal(plan, rank=1, world_size=3, agree=agree) == uc.universal_dir(step_dir)
    assert agree.said == [False, False]  # nothing to convert; converted, as every rank sees
    # a rank that does not see it complete after the conversion (no shared filesystem): all raise
    with pytest.raises(RuntimeError, match="missing after the conversion"):
        uc.prepare_universal(plan, rank=1, world_size=3, agree=Agree([False, True]))
    same = uc.plan_resume(step_dir, world_size=2, zero_stage=1, precision="fp32")
    assert same.universal is False
    assert uc.prepare_universal(same, rank=1, world_size=2, agree=lambda f: pytest.fail("no agreement")) == step_dir


def test_shares_are_dealt_largest_first():
    from electra.checkpoint.universal_conversion import dealt

    names, sizes = ["a", "b", "c", "d", "e"], [10, 40, 30, 20, 40]
    shares = [dealt(names, sizes, r, 2) for r in range(2)]
    assert shares == [["b", "c", "a"], ["e", "d"]]  # 40, 30, 10 and 40, 20
    assert sorted(shares[0] + shares[1]) == names
    assert dealt(names, sizes, 0, 1) == ["b", "e", "c", "d", "a"]


class EngineShell:
    """What load_checkpoint asks an engine before it loads anything."""

    def __init__(self, *, stage=1, bf16=False, universal=False):
        self.stage, self.bf16, self.universal = stage, bf16, universal

    def load_universal_checkpoint(self):
        return self.universal

    def zero_optimization_stage(self):
        return self.stage

    def bfloat16_enabled(self):
        return self.bf16

    def fp16_enabled(self):
        return False

    def load_checkpoint(self, *args, **kwargs):
        raise AssertionError("must refuse before DeepSpeed loads")


def test_load_checkpoint_refuses_a_direct_load_that_needs_the_universal_one(tmp_path):
    """The trainer calling load_checkpoint as before, on 1 rank, a ZeRO-1 checkpoint of 2 ranks:
    one line saying what to do, not DeepSpeed's refusal (or a silent mis-load after a precision
    change)."""
    from electra.checkpoint import save_load as ck

    step_dir = fake_checkpoint(tmp_path, world=2, stage=1)
    with pytest.raises(uc.ResumeRefused) as err:
        ck.load_checkpoint(EngineShell(stage=1), step_dir, rank=0)
    msg = str(err.value)
    assert "\n" not in msg and "saved on 2 rank(s)" in msg and "resuming on 1 rank(s)" in msg
    assert "universal" in msg and f"{uc.CONVERT_COMMAND} {step_dir}" in msg
    with pytest.raises(uc.ResumeRefused, match="ZeRO-3"):
        ck.load_checkpoint(EngineShell(stage=3), step_dir, rank=0)
    with pytest.raises(RuntimeError, match="load_universal"):  # engine built without ds_config_for_resume
        ck.load_checkpoint(EngineShell(stage=1), step_dir, rank=0, universal=True)
    with pytest.raises(FileNotFoundError, match="prepare_universal"):  # not converted
        ck.load_checkpoint(EngineShell(stage=1, universal=True), step_dir, rank=0, universal=True)


# ---------------------------------------------------------------- real DeepSpeed ranks

def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}


def worker(mode: str, run: Path, out: Path, *, ranks: int, stage: int = 1, precision: str = "fp32",
           extra: tuple[str, ...] = ()) -> Path:
    args = [WORKER, mode, "--run", str(run), "--out", str(out), "--stage", str(stage), "--precision", precision,
            *extra]
    if ranks == 1:
        cmd = [sys.executable, *args]
    else:
        cmd = [str(VENV_BIN / "deepspeed"), "--num_gpus", str(ranks), "--master_port", str(free_port()), *args]
    p = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=400)
    assert p.returncode == 0, (p.stdout + p.stderr)[-6000:]
    return out


def assert_resumed(saved: dict, loaded: dict, uninterrupted_next: dict, resumed_next: dict) -> None:
    names = list(saved["fp32"])
    assert names == list(loaded["fp32"]) and "emb.weight" in names and "frozen.weight" not in names
    for key in ("fp32", "exp_avg", "exp_avg_sq"):  # gathered to full tensors: exactly the saved ones
        for n in names:
            assert torch.equal(saved[key][n], loaded[key][n]), (key, n)
    assert saved["step"] == loaded["step"] == [3, 3]
    assert saved["groups"] == loaded["groups"]  # lr, betas, eps and each group's weight decay
    assert [g["weight_decay"] for g in loaded["groups"]] == [0.01, 0.0]
    assert saved["last_epoch"] == loaded["last_epoch"] == 3
    assert saved["global_steps"] == loaded["global_steps"] == 3
    assert torch.equal(saved["frozen"], loaded["frozen"]) and torch.equal(saved["buffer"], loaded["buffer"])
    for n in names:  # the module's (tied) parameters are the masters
        assert torch.equal(loaded["module"][n], loaded["fp32"][n].to(loaded["module"][n].dtype)), n
    for n in names:  # the next step: the same global batch, the same update within fp32 rounding
        before, want, got = saved["fp32"][n], uninterrupted_next["fp32"][n], resumed_next["fp32"][n]
        assert (want - before).abs().max() > 1e-3  # it did move
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert resumed_next["step"] == [4, 4] and resumed_next["last_epoch"] == 4


def assert_same_as_deepspeeds(step_dir: Path, work: Path) -> None:
    """``step_dir``'s universal folder holds what ``ds_to_universal.main`` (``uc.convert``) makes
    of a copy of ``step_dir``: the same files, each loading to equal values."""
    copy = layout.checkpoints_dir(work) / step_dir.name
    shutil.copytree(step_dir, copy)
    ours, ref = uc.universal_dir(step_dir), uc.convert(copy)
    files = sorted(p.relative_to(ours) for p in ours.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(ref) for p in ref.rglob("*") if p.is_file())
    assert len(files) > 20
    for rel in files:
        a, b = torch.load(ours / rel, weights_only=False), torch.load(ref / rel, weights_only=False)
        assert_equal(a, b, str(rel))


def assert_equal(a, b, where: str) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), where
        for k in a:
            assert_equal(a[k], b[k], f"{where}[{k}]")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_equal(x, y, f"{where}[{i}]")
    elif hasattr(a, "__dict__"):  # DeepSpeed's loss scaler: equal fields
        assert type(a) is type(b), where
        assert_equal(vars(a), vars(b), where)
    else:
        assert a == b, where


def load(out: Path, name: str) -> dict:
    return torch.load(out / name, weights_only=False)


@pytest.mark.slow  # three launches of the DeepSpeed launcher (make test-all)
def test_zero1_resumes_from_2_ranks_on_1_and_from_1_rank_on_2(tmp_path):
    """2 -> 1 and 1 -> 2 with ZeRO-1 fp32: the universal conversion, the load, the next step."""
    a_run, b_run = tmp_path / "run_a", tmp_path / "run_b"
    a_train = worker("train", a_run, tmp_path / "a_train", ranks=2)
    a_resume = worker("resume", a_run, tmp_path / "a_resume", ranks=1)
    b_train = worker("train", b_run, tmp_path / "b_train", ranks=1)
    # both ranks convert (rank 0 extracts the one partition file, the merges are dealt between
    # them) and load through one node's checkpoint mirror
    b_resume = worker("resume", b_run, tmp_path / "b_resume", ranks=2,
                      extra=("--node-cache", str(tmp_path / "node"), "--log-opens", str(tmp_path / "opens.log")))

    for resume, saved_world in ((a_resume, 2), (b_resume, 1)):
        plan = json.loads((resume / "plan.json").read_text())
        assert plan["universal"] is True and plan["saved_world_size"] == saved_world
    assert_resumed(load(a_train, "saved.pt"), load(a_resume, "loaded.pt"), load(a_train, "next.pt"),
                   load(a_resume, "next.pt"))
    assert_resumed(load(b_train, "saved.pt"), load(b_resume, "loaded.pt"), load(b_train, "next.pt"),
                   load(b_resume, "next.pt"))
    # the 2-rank run's next step, the reference the brief asks for, on both sides of the 1 -> 2 resume
    for n, want in load(a_train, "next.pt")["fp32"].items():
        torch.testing.assert_close(load(b_resume, "next.pt")["fp32"][n], want, rtol=1e-5, atol=1e-6)

    # the universal folder: a committed sibling, no leftovers, reused as it is
    root = layout.checkpoints_dir(b_run)
    step_dir = root / "step_00000003"
    out = uc.universal_dir(step_dir)
    # the load, both ranks on one node: every file opened once for the node, those both ranks
    # load (the model states, the param groups, the parameters both partitions overlap) through
    # the mirror (tests/electra/checkpoint/test_mirror.py: without it, once per rank that loads);
    # the saved partition by the rank extracting it and by rank 0 for the common state, and once
    # more by the rank of its share checking it against its sum before the conversion (electra.checkpoint.sums)
    read = opens(tmp_path / "opens.log")
    assert read[out / "mp_rank_00_model_states.pt"] == read[out / "zero" / "optimizer_state.pt"] == 1
    params = {f: n for f, n in read.items() if f.parent.parent == out / "zero"}
    assert len(params) == 4 * 6 and set(params.values()) == {1}, params  # 6 trained tensors (one tied) x 4 states
    loads = json.loads((b_resume / "universal_loads.json").read_text())
    assert set(loads[0]) & set(loads[1]) and set(loads[0]) != set(loads[1])  # shared and own parameters
    assert read[step_dir / "zero_pp_rank_0_mp_rank_00_optim_states.pt"] == 3
    assert not any((tmp_path / "node").iterdir())
    assert sorted(p.name for p in root.iterdir() if p.name.startswith("step_")) == [
        "step_00000003", "step_00000003.universal"]
    assert not (root / "latest_universal").exists()
    assert (out / "mp_rank_00_model_states.pt").is_file() and (out / "zero" / "optimizer_state.pt").is_file()
    assert {p.name for p in (out / "zero" / "proj.weight").iterdir()} == {"fp32.pt", "exp_avg.pt", "exp_avg_sq.pt",
                                                                          "step.pt"}
    # the split conversions (2 -> 1: one rank, two partition files; 1 -> 2: two ranks) wrote what
    # DeepSpeed's own converter writes from the same checkpoints
    for run in (a_run, b_run):
        assert_same_as_deepspeeds(layout.checkpoints_dir(run) / "step_00000003", tmp_path / f"ref_{run.name}")
    before = (out / "zero" / "proj.weight" / "fp32.pt").stat().st_mtime_ns
    assert uc.convert(step_dir) == out
    assert (out / "zero" / "proj.weight" / "fp32.pt").stat().st_mtime_ns == before


@pytest.mark.slow
# The GPU presets' own layout (bf16 + ZeRO-1: DeepSpeed's BF16_Optimizer). ZeRO-2 fp32/bf16 take
# the same universal route (checked by hand; each case costs a minute of CI), ZeRO-0 loads
# directly (tests/electra/test_elastic_resume.py resumes it 2 -> 1 through the trainer).
@pytest.mark.parametrize("stage, precision", [(1, "bf16")])
def test_other_stages_and_precisions_resume_from_2_ranks_on_1(tmp_path, stage, precision):
    """BF16_Optimizer (bf16 + ZeRO-1): universal. bf16 runs on this CPU's fallbacks: the model is tiny."""
    run = tmp_path / "run"
    train = worker("train", run, tmp_path / "train", ranks=2, stage=stage, precision=precision)
    resume = worker("resume", run, tmp_path / "resume", ranks=1, stage=stage, precision=precision)
    assert json.loads((resume / "plan.json").read_text())["universal"] is (stage > 0)
    assert_resumed(load(train, "saved.pt"), load(resume, "loaded.pt"), load(train, "next.pt"),
                   load(resume, "next.pt"))


def test_the_conversion_wait_is_sized_by_the_optimiser_state(tmp_path):
    """The ranks wait for each other in the conversion by its bytes, not DeepSpeed's fixed 10 minutes."""
    step = tmp_path / "step_00000010"
    step.mkdir()
    assert uc.conversion_timeout(step) == uc.CONVERSION_MARGIN_SECONDS
    (step / "mp_rank_00_model_states.pt").write_bytes(b"\0" * (3 << 20))  # not optimiser state: not counted
    for r in range(2):
        (step / f"bf16_zero_pp_rank_{r}_mp_rank_00_optim_states.pt").write_bytes(b"\0" * (10 << 20))
    want = uc.CONVERSION_MARGIN_SECONDS + (20 << 20) / uc.CONVERSION_BYTES_PER_SECOND
    assert uc.conversion_timeout(step) == want
    # Large's optimiser state (~4 GB) at the assumed rate: more than DeepSpeed's 10 minutes
    assert uc.CONVERSION_MARGIN_SECONDS + (4 << 30) / uc.CONVERSION_BYTES_PER_SECOND > 600
