"""Kills of the whole process tree during training AND during recovery: a seeded schedule of SIGKILLs
of the deepspeed launcher's process group (launcher and both CPU ranks, as a node failure would),
at hook points (``electra.run.trainer.TrainHooks``: no race with wall-clock time), each followed by a
rerun of the same command. After every kill ``latest`` names a complete checkpoint whose sums
verify (hashlib over each file); the final per-step losses equal an uninterrupted run's, bitwise.
"""
from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess

import pytest

from electra.checkpoint import run_layout as layout
from common.ports import free_port
from tests.electra.checkpoint.test_sums import independent_sums, written_sums
from tests.electra.test_train import REPO, VENV_BIN, env, records, trajectory, train_cmd

pytestmark = pytest.mark.slow

MAX_STEPS = 8
SAVES = (2, 4, 6, 8)
FLAGS = ["--max-steps", str(MAX_STEPS), "--micro-batch", "2", "--save-every", "2", "--seed", "11",
         "--set", "train.global_batch_size=8", "--set", "train.eval_every=4",
         "--set", "deepspeed.zero_optimization.stage=2", "--set", "optimizer.lr=0.003"]


def launch(corpus, out, *hooks, extra=()):
    """``deepspeed --num_gpus 2`` in its own session: a hook's ``--kill-group`` kills exactly this tree.
    The master port is picked free, then bound by the launched rank 0: another test process can
    take it in between (a CI run's launch failed at the rendezvous with EADDRINUSE, before any
    step or checkpoint); such a launch is made again on another port."""
    for _ in range(3):
        p = _launch_once(corpus, out, *hooks, extra=extra)
        if p.returncode != 1 or "EADDRINUSE" not in p.stderr:
            return p
    return p


def _launch_once(corpus, out, *hooks, extra=()):
    launcher = [str(VENV_BIN / "deepspeed"), "--num_gpus", "2", "--master_port", str(free_port())]
    script = ["tests/electra/_train_with_hooks.py", "--kill-group", *hooks] if hooks else ["electra/train.py"]
    cmd = [*launcher, *script, *train_cmd(corpus, out, *FLAGS, *extra)[2:]]
    with subprocess.Popen(cmd, cwd=REPO, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=400)  # a guard against a hang only
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the launcher's whole tree, not the launcher alone
            raise
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def assert_latest_verifies(out, why):
    latest = layout.find_latest(out)
    assert latest is not None, why
    assert (layout.checkpoints_dir(out) / layout.LATEST).read_text().strip() == latest.name, why
    assert layout.is_complete(latest) and layout.CheckpointMeta.read(latest).sums, why
    files, listed = independent_sums(latest), written_sums(latest)
    assert {"rng_rank0.json", "rng_rank1.json", "zero_pp_rank_1_mp_rank_00_optim_states.pt"} <= set(listed), why
    assert {name: files.get(name) for name in listed} == listed, why
    return latest


@pytest.fixture(scope="module")
def uninterrupted(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("kills") / "baseline"
    p = launch(corpus, out)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return out


def test_seeded_kills_during_training_and_recovery_resume_bitwise(corpus, uninterrupted, tmp_path):
    rng = random.Random(45)  # after step 3 (not a save: its logged step is redone), in save 6
    after = rng.randint(1, MAX_STEPS - 3)  # a random step (a save step or not)
    resumes_at = after - after % 2
    in_save = rng.choice([s for s in SAVES if resumes_at < s < MAX_STEPS])  # a save the rerun reaches
    schedule = [("after step", ["--kill-after-step", str(after)]), ("in save", ["--kill-in-save", str(in_save)]),
                ("in resume", ["--kill-in-resume"])]
    out = tmp_path / "run"
    for kind, hooks in schedule:
        why = f"kill {kind} (schedule: after step {after}, in save {in_save}, in resume)"
        p = launch(corpus, out, *hooks)
        assert p.returncode == -signal.SIGKILL, why + "\n" + p.stdout[-2000:] + p.stderr[-2000:]
        latest = assert_latest_verifies(out, why)
        if kind == "after step":
            assert latest.name == layout.step_name(resumes_at), why
        elif kind == "in save":  # DeepSpeed's files of the killed save are there, uncommitted
            partial = layout.step_dir(out, in_save)
            assert any(partial.glob("*.pt")) and not layout.is_complete(partial), why
            assert latest.name == layout.step_name(in_save - 2), why
        else:  # the resume loaded the checkpoint and was killed before its first step
            assert latest.name == layout.step_name(in_save - 2), why
            assert "resumed from" not in p.stdout + p.stderr, why  # killed inside the load
            assert max(r["step"] for r in records(out)) == in_save, why  # nothing logged after
    p = launch(corpus, out)  # the same command, no kill
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert f"resumed from {layout.step_dir(out, in_save - 2)}" in p.stdout + p.stderr
    assert_latest_verifies(out, "final")
    assert trajectory(out) == trajectory(uninterrupted)
    assert records(out, "eval") == records(uninterrupted, "eval")


def test_a_damaged_partition_of_rank_1_stops_both_ranks_in_one_line(corpus, uninterrupted, tmp_path):
    """Only rank 1 reads its partition: the ranks agree before DeepSpeed's load, so rank 0 stops too
    (no collective left waiting) and says rank 1's line; exit status 2, no step after."""
    out = tmp_path / "run"
    shutil.copytree(uninterrupted, out)
    target = layout.step_dir(out, MAX_STEPS) / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    data = bytearray(target.read_bytes())
    data[len(data) // 3] ^= 0x04
    target.write_bytes(bytes(data))
    p = launch(corpus, out, extra=["--max-steps", str(MAX_STEPS + 2)])
    assert p.returncode == 2, p.stdout[-3000:] + p.stderr[-3000:]
    errors = [line for line in (p.stdout + p.stderr).splitlines() if "electra-train: error:" in line]
    assert len(errors) == 1, errors
    assert errors[0].endswith(f"electra-train: error: {target}: sha256 differs from the sum written at save "
                              f"(damaged after the save); delete step_{MAX_STEPS:08d} to resume from "
                              f"step_{MAX_STEPS - 2:08d}, or restore the file")
    assert max(r["step"] for r in records(out)) == MAX_STEPS and "resumed from" not in p.stdout + p.stderr
