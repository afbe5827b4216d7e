"""How the evaluation's bookkeeping grows with the number of checkpoints: the scan's listing of
pending checkpoints, the skip log, and the trainer's policy + prune at a commit.

    python benchmarks/evaluate/eval_scan.py [--sizes 10,100,1000,10000]

Builds fake runs of N complete checkpoints (``meta.json`` only; no weights: the cost measured is
the listing and the marker files, not the data), a tenth of them with an evaluation, a tenth
pinned and N/10 lines in ``skipped.jsonl``, then times, per size, in the same process:
``pending_checkpoints`` (what the hourly scan lists), ``eval_handoff.skipped`` (the log read per
run and per claim) and ``apply_policy`` + ``run_layout.prune`` (what the trainer adds to each
commit). Prints seconds and microseconds per checkpoint: flat per-checkpoint cost = linear.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from electra.checkpoint import eval_handoff as handoff
from electra.checkpoint import run_layout as layout
from evaluation.pending import pending_checkpoints


def fake_run(root: Path, n: int) -> Path:
    run = root / f"runs_{n}" / "run"
    (run / layout.CONFIG).parent.mkdir(parents=True, exist_ok=True)
    (run / layout.CONFIG).write_text(json.dumps({"train": {"keep_last": n}}))  # prune keeps all
    for i in range(1, n + 1):
        d = layout.step_dir(run, i)
        d.mkdir(parents=True)
        if i % 10 == 1:
            handoff.pin(d)
        (d / layout.META).write_text(json.dumps({"step": i}))
        if i % 10 == 2:
            out = layout.eval_dir(run, d.name)
            out.mkdir(parents=True)
            (out / "results.json").write_text("{}")
        if i % 10 == 3:
            handoff.record_skip(run, i, "benchmark")
    return run


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="10,100,1000,10000")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"{'checkpoints':>11} | {'scan listing':>14} | {'skip log':>14} | {'policy + prune':>14}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            run = fake_run(Path(tmp), n)
            scan_s, todo = timed(lambda: pending_checkpoints(run.parent))
            log_s, skips = timed(lambda: handoff.skipped(run))
            policy_s, _ = timed(lambda: (handoff.apply_policy(run, max_pending=10 ** 9, keep_every=0,
                                                              save_every=1), layout.prune(run, n)))
            assert len(skips) == len([i for i in range(1, n + 1) if i % 10 == 3])
            assert len(todo) == n - len(skips) - len([i for i in range(1, n + 1) if i % 10 == 2])
            cells = [f"{s:.4f} s {1e6 * s / n:5.0f} µs" for s in (scan_s, log_s, policy_s)]
            print(f"{n:>11} | " + " | ".join(f"{c:>14}" for c in cells), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
