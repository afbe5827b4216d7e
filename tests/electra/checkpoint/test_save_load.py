"""electra/checkpoint/save_load.py (commit protocol, latest pointer, pruning on save, RNG round trip) and
electra/checkpoint/deepspeed_states.py (safe loading). The layout alone (listing, fallback, prune, meta) is
tests/electra/checkpoint/test_run_layout.py.

The end-to-end paths (DeepSpeed save/load, a kill during a checkpoint write, exact resume) run
in tests/electra/test_train.py with the real trainer.
"""
from __future__ import annotations

import json
import pickle
import random
from dataclasses import asdict

from pathlib import Path

import numpy as np
import pytest
import torch

from electra.checkpoint import save_load as ck
from electra.checkpoint import eval_handoff as handoff
from electra.checkpoint import run_layout as layout
from electra.checkpoint.deepspeed_states import install_safe_loader


def meta(step):
    return layout.CheckpointMeta(step=step, tokens_seen=10 * step, data_position={"epoch": 0, "batch": step},
                             manifest_sha256="m", tokenizer_sha256="t", config_hash="h", wall_time=1.0)


class FakeEngine:
    """Stands in for DeepSpeed's engine in the commit-protocol tests only (the protocol, not the
    engine, is under test here; test_train.py runs the real one)."""

    def __init__(self, fail=False):
        self.fail = fail

    def save_checkpoint(self, root, tag, save_latest):
        assert save_latest is False  # our own pointer, written only after the commit
        (Path(root) / tag).mkdir(parents=True, exist_ok=True)
        (Path(root) / tag / "mp_rank_00_model_states.pt").write_bytes(b"state")
        if self.fail:
            raise KeyboardInterrupt  # interrupted mid-write


def test_step_name_and_latest_pointer(tmp_path):
    assert layout.step_name(1234) == "step_00001234"
    assert layout.find_latest(tmp_path) is None
    for s in (2, 4):
        ck.save_checkpoint(FakeEngine(), tmp_path, meta(s), rank=0, keep_last=5, barrier=lambda: None)
    assert (tmp_path / "checkpoints" / "latest").read_text().strip() == "step_00000004"
    latest = layout.find_latest(tmp_path)
    assert latest.name == "step_00000004"
    read = asdict(layout.CheckpointMeta.read(latest))
    want = {**asdict(meta(4)), "sums": True}  # the commit says its sums were written (electra.checkpoint.sums)
    assert {k: v for k, v in read.items() if k != "saved_at"} == {k: v for k, v in want.items() if k != "saved_at"}
    assert json.loads((latest / "rng_rank0.json").read_text()).keys() >= {"python", "numpy", "torch"}


def test_interrupted_write_leaves_previous_loadable(tmp_path):
    ck.save_checkpoint(FakeEngine(), tmp_path, meta(2), rank=0, keep_last=5, barrier=lambda: None)
    with pytest.raises(KeyboardInterrupt):
        ck.save_checkpoint(FakeEngine(fail=True), tmp_path, meta(4), rank=0, keep_last=5, barrier=lambda: None)
    assert (tmp_path / "checkpoints" / "step_00000004").is_dir()
    assert layout.find_latest(tmp_path).name == "step_00000002"
    removed = layout.clean_incomplete(tmp_path)
    assert [d.name for d in removed] == ["step_00000004"]
    assert not (tmp_path / "checkpoints" / "step_00000004").exists()
    assert layout.find_latest(tmp_path).name == "step_00000002"


def test_kill_before_commit_hook_never_publishes(tmp_path):
    ck.save_checkpoint(FakeEngine(), tmp_path, meta(2), rank=0, keep_last=5, barrier=lambda: None)

    def die():
        raise SystemExit(9)

    with pytest.raises(SystemExit):
        ck.save_checkpoint(FakeEngine(), tmp_path, meta(4), rank=0, keep_last=5, barrier=lambda: None,
                           before_commit=die)
    assert not (tmp_path / "checkpoints" / "step_00000004" / layout.META).exists()
    assert layout.find_latest(tmp_path).name == "step_00000002"


def test_keep_last_k(tmp_path):
    for s in range(1, 6):
        ck.save_checkpoint(FakeEngine(), tmp_path, meta(s), rank=0, keep_last=2, barrier=lambda: None)
    left = sorted(d.name for d in (tmp_path / "checkpoints").glob("step_*"))
    assert left == ["step_00000004", "step_00000005"]


def test_pinned_commit_policy_then_prune(tmp_path):
    """The pin is in the step dir before meta.json; an evaluator pruning during the commit leaves
    the dir being written alone; the policy skips before the prune; pinned ones survive it."""
    policy = handoff.Policy(max_pending=2, keep_every=2, save_every=2)
    seen = []

    def evaluator_prunes_meanwhile(step):
        d = layout.step_dir(tmp_path, step)
        seen.append(((d / "eval_pending.json").is_file(), (d / layout.META).exists()))
        layout.prune(tmp_path, 1)  # as release() would, concurrently with the commit
        assert (d / "eval_pending.json").is_file()

    for s in (2, 4, 6, 8):
        ck.save_checkpoint(FakeEngine(), tmp_path, meta(s), rank=0, keep_last=1, barrier=lambda: None,
                           before_commit=lambda s=s: evaluator_prunes_meanwhile(s), handoff=policy)
    assert seen == [(True, False)] * 4
    left = sorted(d.name for d in (tmp_path / "checkpoints").glob("step_*"))
    assert left == ["step_00000004", "step_00000008"]  # milestones (every 2nd checkpoint), pinned
    assert handoff.skipped(tmp_path).keys() == {2, 6}
    ck.save_checkpoint(FakeEngine(), tmp_path, meta(10), rank=0, keep_last=1, barrier=lambda: None)  # no pin
    left = sorted(d.name for d in (tmp_path / "checkpoints").glob("step_*"))
    assert left == ["step_00000004", "step_00000008", "step_00000010"]  # pins still respected
    assert not (tmp_path / "checkpoints" / "step_00000010" / "eval_pending.json").exists()


def test_rng_state_round_trip_through_json():
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    state = json.loads(json.dumps(ck.rng_state()))
    first = (random.random(), np.random.rand(), torch.rand(3))
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    ck.set_rng_state(state)
    again = (random.random(), np.random.rand(), torch.rand(3))
    assert first[0] == again[0] and first[1] == again[1] and torch.equal(first[2], again[2])


class _Evil:
    def __reduce__(self):
        return (print, ("pwned",))


class _Inner:
    def load(self, path, map_location=None):  # DeepSpeed's own: unrestricted pickle
        return torch.load(path, map_location=map_location, weights_only=False)


class _EngineShell:
    checkpoint_engine = _Inner()


def test_safe_loader_refuses_pickled_code_but_reads_tensors(tmp_path):
    shell = _EngineShell()
    install_safe_loader(shell)
    install_safe_loader(shell)  # idempotent
    good = tmp_path / "good.pt"
    torch.save({"w": torch.arange(4), "step": 3, "scaler": _safe_scaler()}, good)
    out = shell.checkpoint_engine.load(str(good))
    assert out["w"].tolist() == [0, 1, 2, 3] and out["step"] == 3
    bad = tmp_path / "bad.pt"
    torch.save({"x": _Evil()}, bad)
    with pytest.raises(pickle.UnpicklingError):
        shell.checkpoint_engine.load(str(bad))


def _safe_scaler():
    from deepspeed.runtime.fp16.loss_scaler import LossScaler

    return LossScaler(1.0)
