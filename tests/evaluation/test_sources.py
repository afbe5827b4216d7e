"""Checkpoint resolution: HF folders, step dirs, run dirs, and the errors for anything else."""
from __future__ import annotations

import json

import pytest

from evaluation.sources import CheckpointError, resolve_checkpoint


def _fake_hf(folder):
    """Just the two files resolution looks for (loading is tested end to end elsewhere)."""
    (folder / "discriminator").mkdir(parents=True)
    (folder / "discriminator" / "config.json").write_text("{}")
    (folder / "discriminator" / "model.safetensors").write_bytes(b"")
    return folder


def _step(run, step, *, with_hf=True):
    d = run / "checkpoints" / f"step_{step:08d}"
    d.mkdir(parents=True)
    if with_hf:
        _fake_hf(d / "hf")
    (d / "meta.json").write_text(json.dumps({"step": step, "tokens_seen": 7}))
    return d


def test_hf_folders(tmp_path):
    hf = _fake_hf(tmp_path / "export")
    r = resolve_checkpoint(hf, export_dir=tmp_path / "x")
    assert (r.model_dir, r.source, r.step) == (hf / "discriminator", "hf-folder", None)
    assert resolve_checkpoint(hf / "discriminator", export_dir=tmp_path).model_dir == hf / "discriminator"


def test_step_and_run_dirs(tmp_path):
    run = tmp_path / "run"
    _step(run, 100)
    newest = _step(run, 200)
    (run / "checkpoints" / "step_00000300").mkdir()  # incomplete (no meta.json): ignored
    r = resolve_checkpoint(run, export_dir=tmp_path / "x")
    assert (r.step, r.source, r.run_dir) == (200, "step-export", run.resolve())
    assert r.model_dir == newest.resolve() / "hf" / "discriminator" and r.meta["tokens_seen"] == 7
    r100 = resolve_checkpoint(run / "checkpoints" / "step_00000100", export_dir=tmp_path)
    assert r100.step == 100


def test_step_without_export_falls_back_only_for_the_newest(tmp_path, monkeypatch):
    from electra.checkpoint import hf_export

    monkeypatch.delattr(hf_export, "export_checkpoint", raising=False)
    run = tmp_path / "run"
    old = _step(run, 1, with_hf=False)
    new = _step(run, 2, with_hf=False)
    _fake_hf(run / "hf")
    assert resolve_checkpoint(new, export_dir=tmp_path).source == "run-hf"
    with pytest.raises(CheckpointError, match="no HF export.*not the run's newest"):
        resolve_checkpoint(old, export_dir=tmp_path)


def test_not_a_checkpoint(tmp_path):
    with pytest.raises(CheckpointError, match="not a checkpoint; expected a discriminator folder"):
        resolve_checkpoint(tmp_path, export_dir=tmp_path / "x")


def test_a_run_means_the_same_checkpoint_to_training_export_and_evaluation(tmp_path):
    """The run's ``latest`` pointer names an older complete checkpoint (a kill between a newer
    commit's meta.json and the pointer swap): resume, export, --init-from and the evaluation
    all take the one ``run_layout.resolve_checkpoint`` names, the pointer's."""
    from electra.checkpoint import run_layout as layout
    from evaluation import eval_layout

    run = tmp_path / "run"
    pointed = _step(run, 100)
    _step(run, 200)
    (run / "checkpoints" / "latest").write_text("step_00000100\n")
    assert layout.find_latest(run) == pointed == layout.resolve_checkpoint(run)
    assert eval_layout.resolve_target(run) == pointed.resolve()
    assert eval_layout.default_out(run) == run.resolve() / "eval" / "step_00000100"
    r = resolve_checkpoint(run, export_dir=tmp_path / "x")
    assert (r.step, r.checkpoint, r.model_dir) == (100, str(run.resolve()), pointed.resolve() / "hf" / "discriminator")


def test_run_without_checkpoint_uses_its_export_and_gone_steps_stay_named(tmp_path):
    from evaluation import eval_layout

    run = tmp_path / "run"
    (run / "checkpoints" / "step_00000005").mkdir(parents=True)  # being written: not complete
    _fake_hf(run / "hf")
    assert eval_layout.resolve_target(run) == run.resolve()
    r = resolve_checkpoint(run, export_dir=tmp_path / "x")
    assert (r.source, r.model_dir, r.run_dir) == ("run-hf", run.resolve() / "hf" / "discriminator", run.resolve())
    gone = run / "checkpoints" / "step_00000009"  # pruned: the runner records the skip
    assert eval_layout.resolve_target(gone) == gone.resolve()
