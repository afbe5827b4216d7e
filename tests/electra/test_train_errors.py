"""The trainer's operator surface: user errors are one line, found before any distributed start-up;
presets by name; outputs readable by others."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.electra._corpus import write_tiny_corpus

REPO = Path(__file__).resolve().parents[2]
# main() in a fresh interpreter, then: was DeepSpeed ever imported? (it is what starts the process
# group, builds C++ ops and takes tens of seconds): a deterministic "failed before start-up".
PROBE = ("import sys\nfrom electra.train import main\nrc = main(sys.argv[1:])\n"
         "print('deepspeed imported:', 'deepspeed' in sys.modules)\nsys.exit(rc)\n")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_tiny_corpus(tmp_path_factory.mktemp("corpus"), seq_len=32, train_shards=(9, 7), validation_shards=(6,))


def train(*args, timeout=60, env=None):
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "HOME": str(Path.home()),
           **(env or {})}
    return subprocess.run([sys.executable, "-c", PROBE, *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


def one_line_error(p) -> str:
    assert p.returncode == 2, p.stderr[-2000:]
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    assert "deepspeed imported: False" in p.stdout  # exit before any distributed start-up
    errors = [line for line in p.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, p.stderr
    return errors[0]


def test_missing_corpus_is_one_line_naming_it(tmp_path):
    line = one_line_error(train("--config", "tiny", "--data", str(tmp_path / "nowhere"), "--out", str(tmp_path / "r")))
    assert line.startswith("electra-train: error: ") and f"{tmp_path}/nowhere/manifest.json: no manifest" in line
    assert not (tmp_path / "r").exists()  # nothing written


def test_unknown_key_is_one_line_naming_it(corpus, tmp_path):
    line = one_line_error(train("--config", "tiny", "--data", str(corpus), "--out", str(tmp_path / "r"),
                                "--set", "train.max_step=3"))
    assert "unknown key(s) ['max_step']" in line and "max_steps" in line  # the known keys, to spot the typo


def test_bad_preset_is_one_line_listing_the_presets(corpus, tmp_path):
    line = one_line_error(train("--config", "huge", "--data", str(corpus), "--out", str(tmp_path / "r")))
    assert line == ("electra-train: error: --config huge: no such file and no such preset; presets: base, large, "
                    "mini, small, tiny (or give a path to a config JSON)")


def test_seq_len_mismatch_and_impossible_batch_split_are_one_line(corpus, tmp_path):
    line = one_line_error(train("--config", "tiny", "--data", str(corpus), "--out", str(tmp_path / "r"),
                                "--set", "data.seq_len=64"))
    assert "data.seq_len 64 but the corpus" in line and "packed at 32" in line
    # As rank 0 of 3 under a launcher (WORLD_SIZE is known before the process group exists):
    # tiny's global batch of 16 cannot be split over 3 ranks.
    line = one_line_error(train("--config", "tiny", "--data", str(corpus), "--out", str(tmp_path / "r"),
                                env={"RANK": "0", "WORLD_SIZE": "3"}))
    assert "train.global_batch_size 16 cannot be split over 3 ranks" in line


def test_remote_run_dir_is_one_line(corpus):
    line = one_line_error(train("--config", "tiny", "--data", str(corpus), "--out", "s3://b/run"))
    assert "--out s3://b/run: the run directory must be a local or shared-filesystem path" in line


def test_debug_shows_the_traceback(tmp_path):
    p = train("--config", "huge", "--data", str(tmp_path), "--out", str(tmp_path / "r"), "--debug")
    assert p.returncode != 0 and "Traceback" in p.stderr and "no such preset" in p.stderr


def test_flags_are_generated_from_the_train_section():
    import dataclasses

    from electra.config import TrainConfig
    from electra.pretrain_job import job_from_args
    from electra.train import parse_args

    a = parse_args(["--config", "c", "--data", "d", "--out", "o", "--max-steps", "3", "--micro-batch", "4",
                    "--no-tf32", "--precision", "fp32", "--set", "train.max_steps=5", "--local_rank", "0"])
    job = job_from_args(a)
    assert job.overrides == ["train.micro_batch_size=4", "train.max_steps=3", "train.precision=fp32",
                             "train.tf32=false", "train.max_steps=5"]  # --set last: it wins
    help_text = subprocess.run([sys.executable, "-m", "electra.train", "--help"], cwd=REPO, capture_output=True,
                               text=True, timeout=60).stdout
    for f in dataclasses.fields(TrainConfig):  # every train key has its flag
        assert f"--{f.name.replace('_', '-')}" in help_text, f.name
    with pytest.raises(SystemExit):
        parse_args(["--config", "c", "--data", "d", "--out", "o", "--precision", "fp8"])
