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


def train_ranks(*args, world=2, timeout=300):
    """``train(*args)`` as ranks 0..world-1 of one launch (the launcher's variables), run at once."""
    from common.ports import free_port

    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "HOME": str(Path.home()),
           "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    procs = [subprocess.Popen([sys.executable, "-c", PROBE, *args], cwd=REPO, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)})
             for r in range(world)]
    outs = [p.communicate(timeout=timeout) for p in procs]
    return [subprocess.CompletedProcess(p.args, p.returncode, out, err) for p, (out, err) in zip(procs, outs)]


def one_line_error(p, *, started: bool = False) -> str:
    """The one error line of ``p``; unless ``started`` (an error of several ranks' corpus, which
    rank 0 hands to the others over the process group), found before any distributed start-up."""
    assert p.returncode == 2, p.stderr[-2000:]
    assert "Traceback" not in p.stderr, p.stderr[-2000:]
    assert started or "deepspeed imported: False" in p.stdout  # exit before any distributed start-up
    errors = [line for line in p.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, p.stderr
    return errors[0]


def test_missing_corpus_is_one_line_naming_it(tmp_path):
    line = one_line_error(train("--config", "tiny", "--data", str(tmp_path / "nowhere"), "--out", str(tmp_path / "r")))
    assert line.startswith("electra-train: error: ") and f"{tmp_path}/nowhere/manifest.json: no manifest" in line
    assert not (tmp_path / "r").exists()  # nothing written


def test_unknown_key_is_one_line_naming_it(corpus, tmp_path):
    """A --set typo is the --set item's fault (not the preset's), with the closest valid key."""
    line = one_line_error(train("--config", "tiny", "--data", str(corpus), "--out", str(tmp_path / "r"),
                                "--set", "train.max_step=3"))
    assert line == ("electra-train: error: --set train.max_step=3: unknown key 'max_step' in train; "
                    "did you mean train.max_steps?")
    mine = tmp_path / "mine.json"  # a typo in the user's own file names the file
    mine.write_text('{"optimizer": {"lr": 1e-4, "warmup": 2}}')
    line = one_line_error(train("--config", str(mine), "--data", str(corpus), "--out", str(tmp_path / "r")))
    assert line.startswith(f"electra-train: error: {mine}: config.optimizer: unknown key(s) ['warmup']; known keys: ")
    assert line.endswith("; did you mean warmup_steps?")


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="the refusal is for machines without a GPU")
@pytest.mark.parametrize("preset", ["large", "base"])
def test_a_gpu_preset_on_a_cpu_is_refused_in_one_line_naming_the_fix(preset, corpus, tmp_path):
    """A first-contact path: `--config large` on a laptop used to build a 335 M-parameter model
    and sit at 0/N for minutes; now one line, before any distributed start-up, with the
    estimated time per step and the presets to use (electra.run.plan.check_fits_machine)."""
    line = one_line_error(train("--config", preset, "--data", str(corpus), "--out", str(tmp_path / "r"),
                                "--max-steps", "2"))
    assert line.startswith(f"electra-train: error: --config {preset} is sized for GPUs and this machine has none: ")
    assert " per step at this CPU's measured " in line
    assert line.endswith("; on a CPU use --config tiny or mini, or --allow-cpu (train.allow_cpu=true) to run it anyway")
    assert not (tmp_path / "r").exists()  # nothing written, nothing to clean up


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
    from electra.run.job import job_from_args
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


def test_an_empty_train_split_names_the_cause_and_the_flag(tmp_path):
    # one long book drew validation at build time: the trainer says why there is nothing to read
    only_validation = write_tiny_corpus(tmp_path / "corpus", seq_len=32, train_shards=(), validation_shards=(6,))
    line = one_line_error(train("--config", "tiny", "--data", str(only_validation), "--out", str(tmp_path / "run")))
    assert "train split is empty" in line and "went to validation" in line
    assert "--validation-fraction 0" in line and str(only_validation) in line


def test_a_corpus_smaller_than_one_global_batch_is_one_line_naming_the_batch_it_fills(tmp_path):
    """Issue 48: 1 example under tiny's global batch of 16 was a `[rank0]: Traceback` from the loader,
    after DeepSpeed had started. Now one line from the manifests' counts, on one rank or several,
    alone or mixed, naming the size and the largest global batch it fills (a multiple of the ranks)."""
    small = write_tiny_corpus(tmp_path / "small", seq_len=32, train_shards=(3, 2), validation_shards=(1,))
    line = one_line_error(train("--config", "tiny", "--data", str(small), "--out", str(tmp_path / "r")))
    assert line == (f"electra-train: error: --data {small}: 5 train examples cannot fill one global batch of 16 "
                    "(train.global_batch_size); the largest global batch it fills is 5: train with "
                    "--global-batch-size 5, or on more text")
    other = write_tiny_corpus(tmp_path / "other", seq_len=32, train_shards=(4,), validation_shards=(1,),
                              tokenizer_from=small)
    line = one_line_error(train("--config", "tiny", "--data", str(small), "--data", str(other), "--set",
                                "data.weights=[1,3]", "--out", str(tmp_path / "r")))
    assert line.startswith(f"electra-train: error: --data {small}, {other}: 9 train examples cannot fill")
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_on_two_ranks_rank0s_corpus_error_reaches_the_other_rank_as_one_line(tmp_path):
    """Rank 0 alone reads the corpus; its error reaches rank 1 once the process group exists
    (electra.run.shared_plan), or rank 1 would wait for it in the rendezvous: both stop, rank 0
    says it in one line, rank 1 says nothing."""
    small = write_tiny_corpus(tmp_path / "small", seq_len=32, train_shards=(3, 2), validation_shards=(1,))
    zero, one = train_ranks("--config", "tiny", "--data", str(small), "--out", str(tmp_path / "r"))
    line = one_line_error(zero, started=True)
    assert "5 train examples cannot fill one global batch of 16" in line and line.endswith(
        "the largest global batch it fills on 2 ranks is 4: train with --global-batch-size 4, or on more text")
    assert one.returncode == 2 and "Traceback" not in one.stderr and "error:" not in one.stderr, one.stderr[-2000:]
    # rank 1 did not read the corpus and stop on its own: it heard of the error in the process group
    assert "deepspeed imported: True" in one.stdout, one.stdout
    assert not (tmp_path / "r").exists()


def test_help_says_each_flag_and_its_default_in_words():
    """Issue 48: --tf32 carried the whole fast-path paragraph (torch.compile, activation
    checkpointing), and None defaults read "default None" (--keep-until-evaluated: on/off/auto)."""
    text = subprocess.run([sys.executable, "-m", "electra.train", "--help"], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO),
                                                      "COLUMNS": "2000"}).stdout
    flags: dict[str, str] = {}  # each flag's entry: its line and the help lines under it
    for line in text.splitlines():
        if line.strip().startswith("--"):
            flag = line.split()[0].rstrip(",")
            flags[flag] = line
        elif flags and line.startswith(" " * 8):
            flags[flag] += " " + line.strip()
    assert "torch.compile" not in flags["--tf32"] and "TF32" in flags["--tf32"]
    assert "default None" not in text
    assert "default: on when a Prefect API is configured" in flags["--keep-until-evaluated"]
    assert "default: optimizer.total_steps" in flags["--max-steps"]


def test_a_shard_altered_after_the_manifest_is_one_line_naming_it_when_the_loader_meets_it(tmp_path):
    """Same size, other bytes: found mid-epoch by the loader worker reading it (sha256 against the
    manifest), which torch re-raises with the worker's traceback as its message: the one line
    printed is the original error's, naming the shard; exit status 2."""
    import json

    corpus = write_tiny_corpus(tmp_path / "c", seq_len=32, train_shards=(10, 7, 13), validation_shards=(6,))
    shard = next(s["path"] for s in json.loads((corpus / "manifest.json").read_text())["shards"]
                 if s["split"] == "train")
    blob = bytearray((corpus / shard).read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    (corpus / shard).write_bytes(bytes(blob))
    p = train("--config", "tiny", "--data", str(corpus), "--out", str(tmp_path / "r"), "--set", "data.seq_len=32",
              "--set", "model.max_position_embeddings=64", "--set", "data.num_workers=2", "--max-steps", "2",
              "--micro-batch", "4", "--set", "train.global_batch_size=8", "--set", "train.eval_every=0", timeout=300)
    line = one_line_error(p, started=True)
    assert line == (f"electra-train: error: {corpus / shard}: sha256 differs from the manifest (altered after the "
                    "manifest was written)"), line
    assert not (tmp_path / "r" / "checkpoints" / "latest").exists()
