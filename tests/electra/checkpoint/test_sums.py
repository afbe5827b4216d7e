"""electra/checkpoint/sums.py: every file of a committed checkpoint is checked against the sha256
and size its rank wrote at save; a damaged one stops the resume in one line (exit 2) before any
step. The sums are checked here with hashlib over the files, not with the module's own hashing.

The runs are real (``electra/train.py``, one CPU process, ZeRO-2 so the checkpoint has an optimiser
partition file); each damage case resumes a copy of one committed run.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch

from electra.checkpoint import save_load as ck
from electra.checkpoint import sums as sums
from electra.checkpoint import run_layout as layout
from tests.electra.test_train import records, run, train_cmd

FLAGS = ["--micro-batch", "4", "--seed", "3", "--save-every", "2", "--set", "train.global_batch_size=4",
         "--set", "train.eval_every=0", "--set", "deepspeed.zero_optimization.stage=2"]


def independent_sums(step_dir: Path) -> dict:
    """name -> (sha256, size), by hashlib over each file's bytes."""
    return {f.name: (hashlib.sha256(f.read_bytes()).hexdigest(), f.stat().st_size)
            for f in step_dir.iterdir() if f.is_file()}


def written_sums(step_dir: Path) -> dict:
    out = {}
    for f in sorted(step_dir.glob("sums_rank*.json")):
        for name, s in json.loads(f.read_text())["files"].items():
            assert name not in out, f"{name} listed by two ranks"
            out[name] = (s["sha256"], s["size"])
    return out


@pytest.fixture(scope="module")
def committed(corpus, tmp_path_factory):
    """A run of 4 steps with checkpoints at steps 2 and 4 (sums written by this code)."""
    out = tmp_path_factory.mktemp("sums") / "run"
    p = run(train_cmd(corpus, out, *FLAGS, "--max-steps", "4"))
    assert p.returncode == 0, p.stderr[-3000:]
    return out


def test_sums_written_at_save_match_an_independent_sha256_of_every_file(committed):
    for step in (2, 4):
        step_dir = layout.step_dir(committed, step)
        assert layout.CheckpointMeta.read(step_dir).sums is True
        files = independent_sums(step_dir)
        listed = written_sums(step_dir)
        # every file of the step dir except the commit marker and the sums themselves has its sum
        assert set(files) - set(listed) == {layout.META, "sums_rank0.json"}
        assert {"mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_optim_states.pt",
                "rng_rank0.json"} <= set(listed)
        assert {name: files[name] for name in listed} == listed


def test_unit_round_trip_and_one_line_naming_the_file_and_the_fix(tmp_path):
    class Engine:  # DeepSpeed's side of a save: files written through its checkpoint engine
        class checkpoint_engine:  # noqa: N801
            @staticmethod
            def save(state, path):
                torch.save(state, path)

        def save_checkpoint(self, root, tag, save_latest):
            (Path(root) / tag).mkdir(parents=True, exist_ok=True)
            path = Path(root) / tag / "mp_rank_00_model_states.pt"
            self.checkpoint_engine.save({"w": torch.arange(1000.0)}, str(path))

    meta = lambda s: layout.CheckpointMeta(step=s, tokens_seen=0, data_position={}, manifest_sha256="m",  # noqa: E731
                                           tokenizer_sha256="t", config_hash="h", wall_time=0.0)
    for s in (2, 4):
        ck.save_checkpoint(Engine(), tmp_path, meta(s), rank=0, keep_last=5, barrier=lambda: None)
    step_dir = layout.step_dir(tmp_path, 4)
    files, listed = independent_sums(step_dir), written_sums(step_dir)
    assert set(listed) == {"mp_rank_00_model_states.pt", "rng_rank0.json"}
    assert {n: files[n] for n in listed} == listed
    model = step_dir / "mp_rank_00_model_states.pt"
    sums.verify(model)  # intact
    copy = tmp_path / "node" / "copy.pt"  # a node mirror's copy is checked as its source
    copy.parent.mkdir()
    copy.write_bytes(model.read_bytes()[:-1] + bytes([model.read_bytes()[-1] ^ 0x01]))
    with pytest.raises(sums.DamagedCheckpoint, match=f"^{model}: sha256 differs"):
        sums.verify(copy, as_path=model)
    data = bytearray(model.read_bytes())
    data[len(data) // 2] ^= 0x01
    model.write_bytes(bytes(data))
    with pytest.raises(sums.DamagedCheckpoint) as err:
        sums.verify(model)
    assert str(err.value) == (f"{model}: sha256 differs from the sum written at save (damaged after the save); "
                              "delete step_00000004 to resume from step_00000002, or restore the file")
    first = layout.step_dir(tmp_path, 2) / "rng_rank0.json"
    first.write_bytes(first.read_bytes()[:-5])
    with pytest.raises(sums.DamagedCheckpoint, match=r"rng_rank0.json: \d+ bytes where \d+ were written at save "
                       r"\(damaged after the save\); delete step_00000002 to start from step 0, or restore the file"):
        sums.read_checked(first)


def damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "flip":
        b = bytearray(data)
        b[len(b) // 2] ^= 0x10
        path.write_bytes(bytes(b))
    else:
        path.write_bytes(data[: len(data) * 2 // 3])


@pytest.mark.parametrize("how", ["flip", "truncate"])
@pytest.mark.parametrize("name", ["mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_optim_states.pt",
                                  "rng_rank0.json"])
def test_damaged_file_stops_the_resume_in_one_line_before_any_step(corpus, committed, tmp_path, name, how):
    out = tmp_path / "run"
    shutil.copytree(committed, out)
    target = layout.step_dir(out, 4) / name
    damage(target, how)
    p = run(train_cmd(corpus, out, *FLAGS, "--max-steps", "6"))
    assert p.returncode == 2, p.stderr[-3000:]
    errors = [line for line in p.stderr.splitlines() if "error" in line.lower()]
    problem = "sha256 differs from the sum written at save" if how == "flip" else "bytes where"
    assert len(errors) == 1 and errors[0].startswith(f"electra-train: error: {target}: "), p.stderr[-3000:]
    assert problem in errors[0] and errors[0].endswith(
        "(damaged after the save); delete step_00000004 to resume from step_00000002, or restore the file")
    assert [r["step"] for r in records(out)] == [1, 2, 3, 4]  # no step after the error
    assert "resumed from" not in p.stderr


def test_checkpoint_without_sums_loads_with_one_line_saying_it_cannot_be_checked(corpus, committed, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(committed, out)
    step_dir = layout.step_dir(out, 4)
    for f in step_dir.glob("sums_rank*.json"):  # as written before sums existed
        f.unlink()
    meta = json.loads((step_dir / layout.META).read_text())
    del meta["sums"], meta["sha256"]
    (step_dir / layout.META).write_text(json.dumps(meta))
    p = run(train_cmd(corpus, out, *FLAGS, "--max-steps", "6"))
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stderr.count("has no checkpoint sums (written before they existed): its files cannot be checked") == 1
    assert [r["step"] for r in records(out)] == [1, 2, 3, 4, 5, 6]
    assert layout.CheckpointMeta.read(layout.step_dir(out, 6)).sums is True  # new checkpoints have them
