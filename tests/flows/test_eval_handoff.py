"""The checkpoint hand-off end to end: a real training run that checkpoints faster than it is
evaluated, scans of its runs folder in between, and nothing lost without a recorded reason.

The trainer (tiny preset, CPU) saves every 10 steps with ``keep_last`` 1, pins every checkpoint
(``train.keep_until_evaluated``) and lets at most 2 wait (``eval_max_pending``). Scans run inside
the trainer's ``after_step`` hook right after the commits of steps 20 and 50 (chosen steps, no
timing race), and once more after training. Expected, from the contract alone:

* step 20: 10 and 20 wait; the scan evaluates 20, then 10 (newest first), releasing each;
* step 50: 30, 40 and 50 wait > 2: the trainer's policy skips 30 (the oldest) with a reason;
  the scan evaluates 50, then 40;
* after training: the last scan evaluates 60, whose release prunes the run to ``keep_last``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from electra.checkpoint import eval_handoff as handoff
from electra.checkpoint import run_layout as layout
from evaluation import report
from tests.electra._corpus import write_tiny_corpus
from tests.evaluation.glue_files import write_keyword_sst2

REPO = Path(__file__).resolve().parents[2]
SCAN = {"tasks": "SST-2", "seeds": 1, "recipe": {"epochs": 1, "batch_size": 8, "max_seq_len": 32,
                                                  "max_eval_examples": 8, "num_threads": 1}}


def test_every_checkpoint_is_evaluated_or_skipped_with_a_reason(prefect_harness, tmp_path):
    from prefect.settings import PREFECT_API_URL

    from flows.evaluate_new_checkpoints import evaluate_new_checkpoints

    corpus = write_tiny_corpus(tmp_path / "corpus", seq_len=32)
    glue = tmp_path / "glue"
    write_keyword_sst2(glue, n_train=16, n_dev=8)
    runs, scan_log = tmp_path / "runs", tmp_path / "scans.jsonl"
    run = runs / "r1"
    scan = {"runs": str(runs), "glue_dir": str(glue), **SCAN}
    cmd = [sys.executable, "tests/flows/_train_with_scans.py", "--scan-after", "20,50",
           "--scan-args", json.dumps(scan), "--scan-log", str(scan_log),
           "--config", "tiny", "--data", str(corpus), "--out", str(run), "--max-steps", "60",
           "--save-every", "10", "--micro-batch", "4",
           *[arg for kv in ("data.seq_len=32", "model.max_position_embeddings=64",
                            "data.num_workers=0", "optimizer.warmup_steps=2",
                            "optimizer.total_steps=60", "train.global_batch_size=4",
                            "train.eval_every=1000", "train.keep_last=1",
                            "train.keep_until_evaluated=true", "train.eval_max_pending=2")
             for arg in ("--set", kv)]]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": str(REPO), "PREFECT_API_URL": PREFECT_API_URL.value()}
    p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]

    scans = [json.loads(line) for line in scan_log.read_text().splitlines()]
    evaluated = lambda outcome: [layout.step_of(s) for s in outcome["evaluated"]]  # noqa: E731
    assert [(s["after_step"], evaluated(s["outcome"])) for s in scans] == [(20, [20, 10]), (50, [50, 40])]
    assert [layout.step_of(d) for d in handoff.pending(run)] == [60]  # committed, not evaluated yet
    last = evaluate_new_checkpoints(**scan)
    assert evaluated(last) == [60] and last["skipped"] == {} and last["in_progress"] == {}

    skipped = handoff.skipped(run)
    assert list(skipped) == [30] and "eval_max_pending=2" in skipped[30]
    for step in (10, 20, 40, 50, 60):
        results = report.read_results(layout.eval_dir(run, layout.step_name(step)))
        assert results["step"] == step and list(results["tasks"]) == ["SST-2"] and not results["failed"]
    assert not (layout.eval_dir(run, layout.step_name(30))).exists()
    # every committed checkpoint accounted for; on disk only keep_last, nothing pinned
    assert [d.name for d in layout.step_dirs(run)] == [layout.step_name(60)]
    assert handoff.pending(run) == []
    assert evaluate_new_checkpoints(**scan) == {"evaluated": [], "in_progress": {}, "skipped": {}}
