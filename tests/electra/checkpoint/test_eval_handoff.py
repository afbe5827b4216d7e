"""electra/checkpoint/eval_handoff.py: pins, release (with its prune to config.json's keep_last), the skip
policy, skipped.jsonl, the claim race, the auto setting; and one real training run that pins.

Run directories are built by hand with literal names (``eval_pending.json``, ``skipped.jsonl``),
an independent spelling of the contract the evaluation side reads.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from electra.checkpoint import eval_handoff as handoff
from electra.checkpoint import run_layout as layout
from electra.config import TrainConfig, load_config

REPO = Path(__file__).resolve().parents[3]
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def make_step(run: Path, step: int, *, pinned: bool = False, complete: bool = True) -> Path:
    d = run / "checkpoints" / f"step_{step:08d}"
    d.mkdir(parents=True)
    (d / "mp_rank_00_model_states.pt").write_bytes(b"x")
    if pinned:
        (d / "eval_pending.json").write_text(json.dumps({"step": step, "pinned_at": "2024-01-01T00:00:00Z"}))
    if complete:
        (d / "meta.json").write_text(json.dumps({"step": step}))
    return d


def names(run: Path) -> list[str]:
    return sorted(d.name for d in (run / "checkpoints").glob("step_*"))


def write_config(run: Path, keep_last) -> None:
    (run / "config.json").write_text(json.dumps({"train": {"keep_last": keep_last, "save_every": 2}}))


def skip_lines(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "eval" / "skipped.jsonl").read_text().splitlines()]


def test_pin_is_a_json_file_in_the_step_dir(tmp_path):
    d = make_step(tmp_path, 4, complete=False)
    path = handoff.pin(d)
    assert path == d / "eval_pending.json" and handoff.is_pinned(d)
    rec = json.loads(path.read_text())
    assert rec["step"] == 4 and ISO.match(rec["pinned_at"])
    assert handoff.pending(tmp_path) == []  # not committed yet: nothing to evaluate
    (d / "meta.json").write_text("{}")
    assert handoff.pending(tmp_path) == [d]


def test_prune_keeps_pinned_and_uncommitted_ones(tmp_path):
    for s in (1, 2, 3):
        make_step(tmp_path, s, pinned=s == 1)
    make_step(tmp_path, 4, pinned=True)
    writing = make_step(tmp_path, 5, pinned=True, complete=False)  # a commit in progress
    removed = layout.prune(tmp_path, keep_last=1)
    assert [d.name for d in removed] == ["step_00000002", "step_00000003"]
    assert names(tmp_path) == ["step_00000001", "step_00000004", "step_00000005"]
    assert (writing / "eval_pending.json").is_file()
    assert [d.name for d in handoff.pending(tmp_path)] == ["step_00000001", "step_00000004"]


def test_release_prunes_to_keep_last_of_config_json(tmp_path):
    write_config(tmp_path, 2)
    for s in (2, 4, 6, 8):
        make_step(tmp_path, s, pinned=True)
    assert handoff.release(tmp_path / "checkpoints" / "step_00000006") == []  # among the newest 2
    pruned = handoff.release(tmp_path / "checkpoints" / "step_00000002")
    assert [d.name for d in pruned] == ["step_00000002"]
    assert names(tmp_path) == ["step_00000004", "step_00000006", "step_00000008"]
    handoff.release(tmp_path / "checkpoints" / "step_00000004")
    handoff.release(tmp_path / "checkpoints" / "step_00000008")
    assert names(tmp_path) == ["step_00000006", "step_00000008"] and handoff.pending(tmp_path) == []
    assert not (tmp_path / "eval").exists()  # evaluated, none skipped


def test_release_of_a_vanished_dir_records_the_skip_and_does_not_crash(tmp_path):
    write_config(tmp_path, 1)
    make_step(tmp_path, 2, pinned=True)
    gone = tmp_path / "checkpoints" / "step_00000004"
    assert handoff.release(gone, skipped_reason="checkpoint vanished before its evaluation") == []
    assert [(r["step"], r["reason"]) for r in skip_lines(tmp_path)] == [
        (4, "checkpoint vanished before its evaluation")]
    handoff.record_skip(tmp_path, 6, "another")
    assert handoff.skipped(tmp_path) == {4: "checkpoint vanished before its evaluation", 6: "another"}
    assert names(tmp_path) == ["step_00000002"]  # still pinned


@pytest.mark.parametrize("config", [None, "{", '{"train": {}}', '{"train": {"keep_last": 0}}'])
def test_release_without_a_readable_keep_last_unpins_but_does_not_prune(tmp_path, caplog, config):
    if config is not None:
        (tmp_path / "config.json").write_text(config)
    for s in (2, 4):
        d = make_step(tmp_path, s, pinned=True)
    assert handoff.release(tmp_path / "checkpoints" / "step_00000002") == []
    assert names(tmp_path) == ["step_00000002", "step_00000004"] and handoff.pending(tmp_path) == [d]
    assert "not pruning" in caplog.text


def test_policy_skips_the_oldest_waiting_non_milestones(tmp_path):
    # save_every 2, keep_every 2: steps 4, 8, 12 are milestones.
    for s in (2, 4, 6, 8, 10, 12):
        make_step(tmp_path, s, pinned=True)
    got = handoff.apply_policy(tmp_path, max_pending=3, keep_every=2, save_every=2)
    assert got == [2, 6, 10]  # 6 pending > 3 -> 2, then 6, then 10; only milestones left
    assert [layout.step_of(d) for d in handoff.pending(tmp_path)] == [4, 8, 12]
    lines = skip_lines(tmp_path)
    assert [r["step"] for r in lines] == [2, 6, 10]
    assert [r["reason"] for r in lines] == [
        f"evaluation slower than checkpointing: {n} checkpoints pending > eval_max_pending=3; "
        "the newest pending are evaluated first" for n in (6, 5, 4)]
    assert all(ISO.match(r["at"]) and set(r) == {"step", "reason", "at"} for r in lines)
    # Milestones only: over the limit, but nothing more is skipped.
    make_step(tmp_path, 16, pinned=True)
    assert handoff.apply_policy(tmp_path, max_pending=3, keep_every=2, save_every=2) == []
    assert handoff.apply_policy(tmp_path, max_pending=1, keep_every=0, save_every=2) == [4, 8, 12]
    assert sorted(handoff.skipped(tmp_path)) == [2, 4, 6, 8, 10, 12]


def test_a_claimed_checkpoint_is_never_skipped_and_a_skipped_one_cannot_be_claimed(tmp_path):
    for s in (2, 4, 6):
        make_step(tmp_path, s, pinned=True)
    d2, d4, d6 = handoff.pending(tmp_path)
    assert handoff.claim(d2) and handoff.claim(d2)  # again: e.g. after an evaluation that died
    assert not (d2 / "eval_pending.json").exists() and (d2 / "eval_claimed.json").is_file()
    assert handoff.is_pinned(d2) and layout.prune(tmp_path, 1) == [] and len(handoff.pending(tmp_path)) == 3
    assert handoff.apply_policy(tmp_path, max_pending=1, keep_every=0, save_every=2) == [4]  # 2 is in evaluation
    assert not handoff.claim(d4)  # the policy won the race for it
    assert [d.name for d in layout.prune(tmp_path, 1)] == ["step_00000004"]
    write_config(tmp_path, 1)
    assert handoff.release(d2) == [d2] and not handoff.is_pinned(d2)  # evaluated: claim and pin gone
    assert names(tmp_path) == ["step_00000006"]


def test_cut_last_line_of_skipped_jsonl_is_tolerated(tmp_path):
    handoff.record_skip(tmp_path, 2, "first")
    path = tmp_path / "eval" / "skipped.jsonl"
    with open(path, "a") as f:
        f.write('{"step": 4, "reas')  # a crash mid-append
    assert handoff.skipped(tmp_path) == {2: "first"}
    handoff.record_skip(tmp_path, 6, "after the crash")  # starts on a line of its own
    assert handoff.skipped(tmp_path) == {2: "first", 6: "after the crash"}
    assert path.read_text().splitlines()[-1].startswith('{"step": 6,')
    assert handoff.skipped(tmp_path / "nowhere") == {}


@pytest.mark.parametrize("override, message", [
    ("train.eval_max_pending=0", "eval_max_pending must be >= 1"),
    ("train.eval_keep_every=-1", "eval_keep_every must be >= 0"),
    ("train.keep_last=0", "keep_last must be >= 1"),
    ("train.keep_until_evaluated=maybe", r"keep_until_evaluated: 'maybe' fits none|expected bool"),
])
def test_bad_values_are_load_time_errors(override, message):
    from common.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        load_config("tiny", [override])


def test_auto_follows_the_prefect_api(tmp_path, monkeypatch):
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path))  # no profile file: only the environment counts
    monkeypatch.delenv("PREFECT_PROFILE", raising=False)
    cfg = load_config("tiny", ["train.keep_until_evaluated=null", "train.eval_max_pending=2",
                               "train.eval_keep_every=5", "train.save_every=10"]).train
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    assert cfg.keep_until_evaluated is None and handoff.policy_for(cfg) is None
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")
    assert handoff.policy_for(cfg) == handoff.Policy(max_pending=2, keep_every=5, save_every=10)
    off = load_config("tiny", ["train.keep_until_evaluated=false"]).train
    assert handoff.policy_for(off) is None  # explicit beats auto
    monkeypatch.delenv("PREFECT_API_URL")
    on = load_config("tiny", ["train.keep_until_evaluated=true"]).train
    assert handoff.policy_for(on) == handoff.Policy(max_pending=3, keep_every=0, save_every=100)
    assert TrainConfig().keep_until_evaluated is None  # the default is auto


def test_the_evaluation_side_imports_it_without_torch(tmp_path):
    make_step(tmp_path, 2, pinned=True)
    write_config(tmp_path, 1)
    code = ("import sys\nfrom electra.checkpoint import eval_handoff as h\n"
            f"h.release({str(tmp_path / 'checkpoints' / 'step_00000002')!r}, skipped_reason='r')\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'deepspeed')))")
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert (p.returncode, p.stdout.strip()) == (0, "[]"), p.stderr[-2000:]
    assert handoff.skipped(tmp_path) == {2: "r"}


def test_real_run_pins_skips_and_ends_with_keep_last_after_release(corpus, tmp_path):
    """8 steps, a checkpoint every 2, keep_last 1, at most 2 waiting, milestones every 2nd
    checkpoint (steps 4, 8): the policy skips 2 (at step 6) and 6 (at step 8)."""
    out = tmp_path / "run"
    cmd = [sys.executable, "electra/train.py", "--config", "tiny", "--data", str(corpus), "--out", str(out),
           "--max-steps", "8", "--save-every", "2", "--micro-batch", "4",
           *[arg for kv in ("data.seq_len=32", "model.max_position_embeddings=64", "data.num_workers=0",
                            "data.shuffle_buffer=16", "optimizer.warmup_steps=2", "optimizer.total_steps=40",
                            "train.global_batch_size=4", "train.eval_every=1000", "train.log_every=4",
                            "train.keep_last=1", "train.keep_until_evaluated=true", "train.eval_max_pending=2",
                            "train.eval_keep_every=2") for arg in ("--set", kv)]]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(REPO),
               PREFECT_HOME=str(tmp_path / "prefect"))  # no API: no events, and "true" is not auto
    p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    assert names(out) == ["step_00000004", "step_00000008"]
    assert [d.name for d in handoff.pending(out)] == names(out)
    assert [json.loads((d / "eval_pending.json").read_text())["step"] for d in handoff.pending(out)] == [4, 8]
    assert [r["step"] for r in skip_lines(out)] == [2, 6]
    assert all("eval_max_pending=2" in r for r in handoff.skipped(out).values())
    assert json.loads((out / "config.json").read_text())["train"]["keep_until_evaluated"] is True
    # The evaluation side: newest first, release after the results.
    assert handoff.release(out / "checkpoints" / "step_00000008") == []  # the newest is kept anyway
    assert [d.name for d in handoff.release(out / "checkpoints" / "step_00000004")] == ["step_00000004"]
    assert names(out) == ["step_00000008"] and handoff.pending(out) == []
    assert layout.find_latest(out).name == "step_00000008"
