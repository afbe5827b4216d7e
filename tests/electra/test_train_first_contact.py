"""What a newcomer's first runs say (issue 48): a shortened schedule keeps the preset's share of
warm-up, a corpus that its weight repeats too often is warned about once, and DeepSpeed's lines
that ask nothing of the user are gone.

Two real runs of the trainer, ``tiny`` for 2 steps of a 20-step schedule, ZeRO-1 (where DeepSpeed
said "untested optimizer"), on a mixture whose second corpus (2 examples) ``data.weights=[1,3]``
repeats 14x per epoch: ``electra-train`` as one process, and ``deepspeed --num_gpus 2`` (two CPU
ranks), where every rank resolves the run and the warning must still come once.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from electra.config import OptimizerConfig
from common.ports import free_port
from electra.run.optim import lr_multiplier
from tests.electra._corpus import write_tiny_corpus

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
ARGS = ["--config", "tiny", "--max-steps", "2", "--set", "optimizer.total_steps=20", "--set", "data.weights=[1,3]",
        "--set", "deepspeed.zero_optimization.stage=1", "--set", "data.num_workers=0"]
REPEATED = "data.weights repeat its 2 train examples 14x per epoch"
# DeepSpeed's lines of every CPU run before issue 48 (the last only from its launcher, which is not ours)
NOISE = ("Setting accelerator to CPU", "ZeRO with an untested optimizer", "Unable to find hostfile")


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("mix")
    big = write_tiny_corpus(root / "big", seq_len=32, train_shards=(9, 7, 5, 11, 3), validation_shards=(6, 5))
    two = write_tiny_corpus(root / "two", seq_len=32, train_shards=(2,), validation_shards=(1,),
                            tokenizer_from=big, seed=2)
    return big, two


def trainer(prog: list[str], corpora, out: Path) -> str:
    """Run ``prog`` (the trainer, maybe under a launcher) on the mixture; its stdout and stderr."""
    env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}  # the trainer must set it itself
    env.update(OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(REPO))
    big, two = corpora
    p = subprocess.run([*prog, *ARGS, "--data", str(big), "--data", str(two), "--out", str(out)], cwd=REPO,
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p.stdout + p.stderr


@pytest.fixture(scope="module")
def one_process(corpora, tmp_path_factory):
    out = tmp_path_factory.mktemp("one") / "run"
    return out, trainer([str(VENV_BIN / "electra-train")], corpora, out)


@pytest.fixture(scope="module")
def two_ranks(corpora, tmp_path_factory):
    out = tmp_path_factory.mktemp("two") / "run"
    launcher = [str(VENV_BIN / "deepspeed"), "--num_gpus", "2", "--master_port", str(free_port()), "electra/train.py"]
    return out, trainer(launcher, corpora, out)


def test_a_shortened_schedule_keeps_the_presets_share_of_warm_up(one_process):
    """--set optimizer.total_steps=20 on tiny (30 warm-up of 300): 2 warm-up steps, not 30 (a
    run that never reached its peak rate); the derived line says the count and the share."""
    out, output = one_process
    (derived,) = [line for line in output.splitlines() if "derived: " in line]
    assert "2 steps (2 warm-up: 10% of 20, tiny's share (30 of 300), LR 0.0005 decaying to 0 at 20)" in derived
    opt = json.loads((out / "config.json").read_text())["optimizer"]
    assert (opt["warmup_steps"], opt["total_steps"]) == (2, 20)
    (last,) = [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r["kind"] == "train"]
    assert last["step"] == 2  # the rate of its second step: half the peak, as a 2-step warm-up gives
    assert last["lr"] == pytest.approx(5e-4 * lr_multiplier(1, OptimizerConfig(warmup_steps=2, total_steps=20)))


@pytest.mark.parametrize("run", ["one_process", "two_ranks"])
def test_a_corpus_its_weight_repeats_more_than_the_threshold_is_warned_about_once(run, corpora, request):
    _, output = request.getfixturevalue(run)
    warnings = [line for line in output.splitlines() if REPEATED in line]
    assert len(warnings) == 1, output[-3000:]
    assert f"--data {corpora[1]}: " in warnings[0] and "(more than 10x" in warnings[0]  # mixture.REPEAT_WARNING
    assert "give it more text, or a weight of at most 1.18 (data.weights" in warnings[0]  # 10x: 20 of 37
    assert sum(f"--data {corpora[0]}: data.weights repeat" in line for line in output.splitlines()) == 0


def test_a_cpu_run_prints_none_of_deepspeeds_noise(one_process):
    out, output = one_process
    assert json.loads((out / "deepspeed_config.json").read_text())["zero_optimization"]["stage"] == 1
    assert [line for line in output.splitlines() if any(n in line for n in NOISE)] == []
    assert "done: step 2" in output


def test_the_ranks_print_no_untested_optimizer_line(two_ranks):
    """Under the launcher the ranks' own lines are quiet; the launcher's (its accelerator guess, the
    hostfile) are DeepSpeed's program: docs/pretrain.md gives its quiet form."""
    _, output = two_ranks
    assert "ZeRO with an untested optimizer" not in output and "done: step 2" in output
