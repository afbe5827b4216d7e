"""Elastic resume: a run stopped mid-epoch on W ranks and resumed on W' ranks trains, step by step,
on the same global batches as an uninterrupted run (read from the sample log), with ZeRO-0 and
with ZeRO-1 through DeepSpeed's universal checkpoint. Real processes: ``deepspeed --num_gpus 2``
(two CPU ranks) and plain one-process runs.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from electra.checkpoint import run_layout as layout
from common.ports import free_port
from electra.data.sample_log import read_sample_log
from tests.electra.test_train import records, run, train_cmd

pytestmark = pytest.mark.slow  # seven trainer launches

# 35 examples; global batch 8 from gcd(8, 64) = 8 streams of 4 examples: 4 steps per epoch. 7 steps
# cross the epoch boundary; the stop at step 3 is mid-epoch. Micro batch 2: accumulation 4 on one
# rank, 2 on two.
STEPS, STOP = 7, 3
FLAGS = ["--micro-batch", "2", "--save-every", "3", "--set", "train.global_batch_size=8", "--set",
         "train.eval_every=0", "--set", "data.log_samples=true", "--set", "optimizer.lr=0.003"]


def cmd(data, out, world, max_steps, *extra):
    launcher = ["--num_gpus", "2", "--master_port", str(free_port())] if world == 2 else None
    return train_cmd(data, out, "--max-steps", str(max_steps), *FLAGS, *extra, launcher=launcher)


def train(data, out, world, max_steps, *extra):
    p = run(cmd(data, out, world, max_steps, *extra), timeout=400)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p.stdout + p.stderr


def global_batches(out) -> dict[int, list]:
    """step -> the step's examples in canonical order: rank 0's keys, then rank 1's (when it ran)."""
    logs = [read_sample_log(out, r) for r in (0, 1) if (Path(out) / "samples" / f"rank{r}.jsonl").exists()]
    return {s: [k for log in logs for k in log.get(s, [])] for s in sorted(logs[0])}


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory):
    """The uninterrupted run on two ranks."""
    out = tmp_path_factory.mktemp("reference")
    train(corpus, out, 2, STEPS)
    batches = global_batches(out)
    assert sorted(batches) == list(range(1, STEPS + 1)) and all(len(b) == 8 for b in batches.values())
    epoch0 = [k for s in (1, 2, 3, 4) for k in batches[s]]
    assert len(set(epoch0)) == 32  # nothing repeated within an epoch
    return batches


@pytest.mark.parametrize("before,after", [(2, 1), (1, 2)])
def test_resume_on_another_number_of_ranks_sees_the_same_global_batches(corpus, reference, tmp_path, before, after):
    out = tmp_path / "run"
    train(corpus, out, before, STOP)
    meta = layout.CheckpointMeta.read(layout.find_latest(out))
    assert (meta.step, meta.world_size, meta.data_position) == (STOP, before, {"epoch": 0, "step": STOP})
    if before > after:  # a run killed after its checkpoint leaves later steps in every rank's log
        with (out / "samples" / "rank1.jsonl").open("a") as f:
            for step in (STOP + 1, STOP + 2):
                f.write(json.dumps({"step": step, "keys": [[-1, step]]}) + "\n")
    log = train(corpus, out, after, STEPS)
    assert f"saved on {before} ranks, now {after}" in log
    assert global_batches(out) == reference  # every step, in order: nothing repeated or skipped
    assert [r["step"] for r in records(out)] == list(range(1, STEPS + 1))
    assert json.loads((out / "deepspeed_config.json").read_text())["gradient_accumulation_steps"] == 8 // (2 * after)


def test_zero1_resumes_on_one_rank_through_the_universal_checkpoint(corpus, reference, tmp_path):
    out = tmp_path / "run"
    zero1 = ("--set", "deepspeed.zero_optimization.stage=1")
    train(corpus, out, 2, STOP, *zero1)
    log = train(corpus, out, 1, STEPS, *zero1)
    assert "universal" in log  # converted once, then loaded on one rank
    assert global_batches(out) == reference
    losses = [r["loss"] for r in records(out)]
    assert len(losses) == STEPS and all(x == x for x in losses)  # finite: the optimiser state came along


def test_a_resume_with_another_global_batch_is_refused_in_one_line(corpus, tmp_path):
    out = tmp_path / "run"
    train(corpus, out, 1, 1)
    p = run(cmd(corpus, out, 1, 2, "--set", "train.global_batch_size=16"), timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    (line,) = [x for x in p.stderr.splitlines() if "error:" in x]
    assert "saved with train.global_batch_size 8, now 16" in line
