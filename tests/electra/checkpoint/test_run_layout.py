"""electra/checkpoint/run_layout.py: names, listing, the latest pointer's fallback, pruning, meta.json.

Directories are built by hand here (with literal names, an independent spelling of the layout),
so a change of the layout that the readers do not follow shows up as a failure.
"""
from __future__ import annotations

import json

import pytest

from electra.checkpoint import run_layout as layout

META = {"step": 0, "tokens_seen": 0, "data_position": {"epoch": 0, "batch": 0}, "manifest_sha256": "m",
        "tokenizer_sha256": "t", "config_hash": "h", "wall_time": 1.5}


def make_step(run, step, *, complete=True):
    d = run / "checkpoints" / f"step_{step:08d}"
    d.mkdir(parents=True)
    (d / "mp_rank_00_model_states.pt").write_bytes(b"x")
    if complete:
        (d / "meta.json").write_text(json.dumps({**META, "step": step, "tokens_seen": 10 * step}))
    return d


def test_names():
    assert layout.step_name(1234) == "step_00001234" and layout.step_of("step_00001234") == 1234
    assert layout.step_of("step_latest") is None and layout.step_of("other") is None
    assert layout.step_dir("/r", 7).as_posix() == "/r/checkpoints/step_00000007"
    assert layout.run_dir_of("/r/checkpoints/step_00000007").as_posix() == "/r"
    assert layout.run_dir_of("/r/elsewhere/step_00000007") is None
    assert layout.eval_dir("/r", "step_00000007").as_posix() == "/r/eval/step_00000007"


def test_listing_is_complete_dirs_oldest_first(tmp_path):
    assert layout.step_dirs(tmp_path) == [] and layout.find_latest(tmp_path) is None
    for s in (20, 3, 100):
        make_step(tmp_path, s)
    make_step(tmp_path, 200, complete=False)  # interrupted write: never listed
    (tmp_path / "checkpoints" / "step_junk").mkdir()  # not a step name: ignored
    (tmp_path / "checkpoints" / "step_00000050").write_text("a file, not a dir")
    assert [d.name for d in layout.step_dirs(tmp_path)] == ["step_00000003", "step_00000020", "step_00000100"]
    assert layout.find_latest(tmp_path).name == "step_00000100"  # no pointer: the newest complete


def test_latest_pointer_and_its_fallback(tmp_path):
    for s in (2, 4):
        make_step(tmp_path, s)
    make_step(tmp_path, 6, complete=False)
    pointer = tmp_path / "checkpoints" / "latest"
    pointer.write_text("step_00000002\n")
    assert layout.find_latest(tmp_path).name == "step_00000002"  # the pointer wins when complete
    pointer.write_text("step_00000006\n")  # names an incomplete dir
    assert layout.find_latest(tmp_path).name == "step_00000004"
    pointer.write_text("step_00000099\n")  # names nothing
    assert layout.find_latest(tmp_path).name == "step_00000004"


def test_prune_and_clean_incomplete(tmp_path):
    for s in (1, 2, 3, 4):
        make_step(tmp_path, s)
    partial = make_step(tmp_path, 5, complete=False)
    removed = layout.prune(tmp_path, keep_last=2)
    assert [d.name for d in removed] == ["step_00000001", "step_00000002"]
    assert partial.is_dir()  # pruning counts and deletes complete checkpoints only
    assert layout.clean_incomplete(tmp_path) == [partial] and not partial.exists()
    assert sorted(d.name for d in (tmp_path / "checkpoints").iterdir()) == ["step_00000003", "step_00000004"]


def test_prune_never_deletes_a_pinned_checkpoint(tmp_path):
    for s in (1, 2, 3, 4):
        make_step(tmp_path, s)
    (tmp_path / "checkpoints" / "step_00000001" / "eval_pending.json").write_text("{}")  # waiting
    (tmp_path / "checkpoints" / "step_00000003" / "eval_claimed.json").write_text("{}")  # in evaluation
    assert layout.is_pinned(tmp_path / "checkpoints" / "step_00000001") and not layout.is_pinned(tmp_path)
    removed = layout.prune(tmp_path, keep_last=1)
    assert [d.name for d in removed] == ["step_00000002"]
    assert sorted(d.name for d in (tmp_path / "checkpoints").iterdir()) == [
        "step_00000001", "step_00000003", "step_00000004"]
    (tmp_path / "checkpoints" / "step_00000003" / "eval_claimed.json").unlink()
    assert [d.name for d in layout.prune(tmp_path, keep_last=1)] == ["step_00000003"]


def test_meta_round_trip_and_errors(tmp_path):
    d = make_step(tmp_path, 8)
    meta = layout.CheckpointMeta.read(d)
    assert (meta.step, meta.tokens_seen, meta.wall_time, meta.world_size, meta.data_sha256) == (8, 80, 1.5, 1, "")
    (d / "meta.json").write_bytes(meta.to_json())
    assert layout.CheckpointMeta.read(d) == meta and json.loads((d / "meta.json").read_text())["step"] == 8
    (d / "meta.json").write_text("{")
    with pytest.raises(ValueError, match=r"step_00000008/meta.json: unreadable checkpoint meta"):
        layout.read_meta(d)
    (d / "meta.json").write_text(json.dumps({"step": 8}))  # parses, but lacks required fields
    assert layout.read_meta(d) == {"step": 8}
    with pytest.raises(ValueError, match=r"meta.json: unreadable checkpoint meta .*missing"):
        layout.CheckpointMeta.read(d)
    (d / "meta.json").write_text("[1]")
    with pytest.raises(ValueError, match="expected a JSON object"):
        layout.read_meta(d)


def test_resolve_checkpoint_one_rule_and_one_line_errors(tmp_path):
    """The checkpoint a path names: a complete step dir is itself, a run folder the one training
    resumes from (the ``latest`` pointer when it names a complete dir); anything else is one line
    naming the path and what to give."""
    run = tmp_path / "run"
    for s in (2, 4):
        make_step(run, s)
    partial = make_step(run, 6, complete=False)
    assert layout.resolve_checkpoint(run) == run / "checkpoints" / "step_00000004"
    assert layout.resolve_checkpoint(run / "checkpoints" / "step_00000002").name == "step_00000002"
    (run / "checkpoints" / "latest").write_text("step_00000002\n")
    assert layout.resolve_checkpoint(run).name == "step_00000002" == layout.find_latest(run).name
    (tmp_path / "file").write_text("")
    (tmp_path / "empty_run" / "checkpoints").mkdir(parents=True)
    cases = {tmp_path / "nope": "nope: no such folder; give a checkpoint folder RUN/checkpoints/step_N",
             tmp_path / "file": "file: not a folder; give",
             partial: f"step_00000006: not a complete checkpoint (no meta.json: an interrupted write); "
                      f"pass another step folder or the run folder {run}",
             tmp_path / "empty_run": "empty_run: no complete checkpoint in",
             tmp_path: f"{tmp_path}: neither a checkpoint folder nor a run folder; give"}
    for path, message in cases.items():
        with pytest.raises(layout.NoCheckpoint) as err:
            layout.resolve_checkpoint(path)
        assert message in str(err.value) and "\n" not in str(err.value)
        assert isinstance(err.value, FileNotFoundError)  # callers catching OSError still do
    with pytest.raises(layout.NoCheckpoint, match=r"nope: no such folder; give my forms$"):
        layout.resolve_checkpoint(tmp_path / "nope", forms="my forms")
    (tmp_path / "config_only").mkdir()
    (tmp_path / "config_only" / "config.json").write_text("{}")  # the trainer started, saved nothing
    with pytest.raises(layout.NoCheckpoint, match="no complete checkpoint in"):
        layout.resolve_checkpoint(tmp_path / "config_only")


def test_meta_json_is_sealed_and_a_changed_digit_is_named(tmp_path):
    """``meta.json`` carries the sha256 of its own content (common.sealed): a digit changed in it
    (here the step) is one error naming the file, never read as another step; a hand-written
    meta without the field reads as before."""
    import hashlib

    step_dir = tmp_path / "checkpoints" / "step_00000004"
    step_dir.mkdir(parents=True)
    meta = layout.CheckpointMeta(step=4, tokens_seen=1234, data_position={"epoch": 0, "step": 4},
                                 manifest_sha256="m", tokenizer_sha256="t", config_hash="c", wall_time=1.5)
    (step_dir / layout.META).write_bytes(meta.to_json())
    written = json.loads((step_dir / layout.META).read_text())
    body = {k: v for k, v in written.items() if k != "sha256"}  # an independent recomputation
    assert written["sha256"] == hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"))
                                               .encode()).hexdigest()
    assert layout.CheckpointMeta.read(step_dir) == meta
    text = (step_dir / layout.META).read_text()
    (step_dir / layout.META).write_text(text.replace('"tokens_seen": 1234', '"tokens_seen": 1235'))
    with pytest.raises(ValueError, match=r"step_00000004/meta\.json: damaged checkpoint meta: .*delete "
                                          r"step_00000004 to resume from the checkpoint before it"):
        layout.CheckpointMeta.read(step_dir)
    (step_dir / layout.META).write_text(json.dumps(body))
    assert layout.CheckpointMeta.read(step_dir) == meta
