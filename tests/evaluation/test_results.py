"""Seed files for resume, provenance helpers and the loss curve of a run cut mid-write."""
from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path


from evaluation.results import (SeedResult, TaskResult, code_version, hash_files,
                                      load_seed, load_task, resume_key, save_seed, save_task,
                                      seed_path)


def test_seed_file_round_trip_and_key(tmp_path):
    seed = SeedResult(seed=3, metrics={"accuracy": 75.0}, predictions="p/seed3.jsonl",
                      train_loss=[0.7, 0.5], steps=4, seconds=1.5, run_id="abc")
    save_seed(tmp_path, "RTE", seed, key="k1")
    assert load_seed(tmp_path, "RTE", 3, key="k1") == seed
    assert load_seed(tmp_path, "RTE", 3, key="k2") is None  # other checkpoint/recipe/data
    assert load_seed(tmp_path, "RTE", 4, key="k1") is None  # never ran
    path = seed_path(tmp_path, "RTE", 3)
    path.write_text(path.read_text()[:20])  # cut file: redone, not an error
    assert load_seed(tmp_path, "RTE", 3, key="k1") is None


def test_task_file_round_trip(tmp_path):
    result = TaskResult(task="SQuAD1.1", primary="f1", seeds=[SeedResult(
        seed=0, metrics={"f1": 50.0, "exact": 40.0}, predictions="p")],
        num_train=5, data_files={"a": "00"})
    save_task(tmp_path, result, key="k")
    assert load_task(tmp_path, "SQuAD1.1", key="k").to_dict() == result.to_dict()
    assert load_task(tmp_path, "SQuAD1.1", key="other") is None


def test_resume_key_changes_with_any_input():
    base = dict(checkpoint="c", recipe={"lr": 1e-4}, data_files={"f": "aa"})
    key = resume_key(**base)
    assert key == resume_key(**{**base, "recipe": {"lr": 1e-4}})
    assert key != resume_key(**{**base, "checkpoint": "d"})
    assert key != resume_key(**{**base, "recipe": {"lr": 2e-4}})
    assert key != resume_key(**{**base, "data_files": {"f": "ab"}})


def test_hash_files_matches_hashlib(tmp_path):
    big = tmp_path / "big.bin"
    big.write_bytes(bytes(range(256)) * 9000)  # > one 1 MiB read block
    small = tmp_path / "small.tsv"
    small.write_text("a\tb\n")
    assert hash_files([big, small]) == {str(p): hashlib.sha256(p.read_bytes()).hexdigest()
                                        for p in (big, small)}


def test_code_version_is_the_git_commit():
    root = Path(__file__).resolve().parents[2]
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                            text=True, check=True).stdout.strip()
    assert code_version().removeprefix("git:").removesuffix("+dirty") == commit


def test_baseline_round_trip_and_older_files_without_it():
    baseline = {"name": "majority class '1'", "prediction": "1",
                "metrics": {"accuracy": 68.38, "f1": 81.22}}
    result = TaskResult(task="MRPC", primary="accuracy", seeds=[SeedResult(
        seed=0, metrics={"accuracy": 80.0, "f1": 85.0}, predictions="p")], baseline=baseline)
    as_json = json.loads(json.dumps(result.to_dict()))
    assert as_json["baseline"] == baseline
    assert TaskResult.from_dict(as_json).to_dict() == result.to_dict()
    older = {k: v for k, v in as_json.items() if k != "baseline"}  # results.json before it
    loaded = TaskResult.from_dict(older)
    assert loaded.baseline is None and loaded.seeds == result.seeds
    assert loaded.to_dict()["baseline"] is None
