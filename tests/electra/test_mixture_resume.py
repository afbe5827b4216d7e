"""A weighted mixture end to end: the trainer on two corpora (1:3) stopped and resumed on one rank,
and stopped on two ranks (``deepspeed --num_gpus 2``, two CPU ranks) and resumed on one, trains
on the same global batches as an uninterrupted run (read from the sample log, whose keys name the
corpus first); per-corpus metrics in metrics.jsonl; a changed weight refuses the resume."""
from __future__ import annotations

from collections import Counter

import pytest

from electra.checkpoint import run_layout as layout
from tests.electra._corpus import write_tiny_corpus
from tests.electra.test_elastic_resume import global_batches
from tests.electra.test_train import records, run, train_cmd
from common.ports import free_port

pytestmark = pytest.mark.slow  # five trainer launches

# A: 35 examples, B: 14, weights 1:3 -> 12 of A and 37 of B per epoch (B 2.6x); global batch 8 from 8
# streams: 6 steps per epoch, so 8 steps cross the epoch boundary; the stop at 3 is mid-epoch.
STEPS, STOP = 8, 3
FLAGS = ["--micro-batch", "2", "--save-every", "3", "--set", "train.global_batch_size=8", "--set",
         "train.eval_every=0", "--set", "data.log_samples=true", "--set", "optimizer.lr=0.003",
         "--set", "data.weights=[1,3]"]


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("mixture")
    a = write_tiny_corpus(root / "a", seq_len=32, train_shards=(9, 7, 5, 11, 3), validation_shards=(6, 5))
    b = write_tiny_corpus(root / "b", seq_len=32, train_shards=(6, 8), validation_shards=(4,), seed=9,
                          tokenizer_from=a)
    return a, b


def train(corpora, out, world, max_steps, *extra):
    launcher = ["--num_gpus", "2", "--master_port", str(free_port())] if world == 2 else None
    cmd = train_cmd(corpora[0], out, "--data", str(corpora[1]), "--max-steps", str(max_steps), *FLAGS, *extra,
                    launcher=launcher)
    p = run(cmd, timeout=400)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p.stdout + p.stderr


@pytest.fixture(scope="module")
def reference(corpora, tmp_path_factory):
    out = tmp_path_factory.mktemp("reference")
    train(corpora, out, 2, STEPS)
    batches = global_batches(out)
    assert sorted(batches) == list(range(1, STEPS + 1)) and all(len(b) == 8 for b in batches.values())
    # epoch 0 (steps 1-6) trains 48 of its 49 examples: 12 of A and 37 of B, less the one left over
    epoch0 = Counter(k[0] for s in range(1, 7) for k in batches[s])
    assert epoch0[0] in (11, 12) and epoch0[0] + epoch0[1] == 48, epoch0
    b_keys = Counter(tuple(k) for s in range(1, 7) for k in batches[s] if k[0] == 1)
    assert len(b_keys) == 14 and max(b_keys.values()) == 3  # all of B, repeated (2.6x)
    return out, batches


def test_per_corpus_metrics_are_logged(reference):
    out, batches = reference
    recs = records(out)  # train.log_every=1 (tests.electra.test_train.COMMON)
    assert [r["step"] for r in recs] == list(range(1, STEPS + 1))
    for r in recs:
        keys = batches[r["step"]]
        assert [r["source0_examples"], r["source1_examples"]] == [sum(k[0] == j for k in keys) for j in (0, 1)]
        assert all(r[f"source{j}_disc_loss"] > 0 for j in (0, 1) if r[f"source{j}_examples"])


@pytest.mark.parametrize("before", [1, 2])
def test_a_stopped_mixture_resumes_on_one_rank_with_the_same_batches(corpora, reference, tmp_path, before):
    out = tmp_path / "run"
    train(corpora, out, before, STOP)
    meta = layout.CheckpointMeta.read(layout.find_latest(out))
    assert (meta.step, meta.world_size) == (STOP, before)
    log = train(corpora, out, 1, STEPS)
    assert f"saved on {before} ranks, now 1" in log
    assert global_batches(out) == reference[1]


def test_other_weights_refuse_the_resume_in_one_line(corpora, tmp_path):
    out = tmp_path / "run"
    train(corpora, out, 1, 1)
    cmd = train_cmd(corpora[0], out, "--data", str(corpora[1]), "--max-steps", "2", *FLAGS,
                    "--set", "data.weights=[1,1]")
    p = run(cmd, timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-2000:]
    (line,) = [x for x in p.stderr.splitlines() if "error:" in x]
    assert "the corpora or their weights differ from the checkpoint's" in line
