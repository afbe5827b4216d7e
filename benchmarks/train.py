"""Trainer throughput: can the loader keep up, and what do data + bookkeeping cost per step?

    .venv/bin/python benchmarks/train.py [--config electra/configs/small.json] [--data CORPUS]
        [--steps 12] [--global-batch 32] [--set key=value ...]

Three numbers from one process, same model, same engine:

1. **Loader samples/s**: ``electra.data.TrainStream`` alone (the preset's worker count, micro
   batch), batches pulled as fast as possible. Goal: >= 10x what the trainer consumes.
2. **Trainer samples/s and tokens/s end to end**: ``electra.train.Trainer.run`` (streaming,
   metrics every step, progress bar, a checkpoint at the end), measured from ``metrics.jsonl``
   over the steps after the warm-up.
3. **Bare step**: the same engine stepping on one batch already in memory, nothing else,
   measured right after the end-to-end run on the warmed-up engine.
   Overhead = 1 - end-to-end steps/s / bare steps/s. Goal: <= 5%.

Without ``--data`` a synthetic corpus at the preset's sequence length is generated (its
WordPiece vocabulary is a few hundred tokens, not 30522: the embedding and optimiser work are
smaller than the real preset's; the encoder work, which dominates, is the same). On a 2-core CPU
the preset's global batch (128) makes a step take tens of seconds, hence ``--global-batch``.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from electra import data as sd  # noqa: E402
from electra.train import Trainer, parse_args  # noqa: E402


def loader_rate(trainer: Trainer, *, batches: int) -> float:
    """Samples/s the preset's DataLoader delivers on its own."""
    stream = sd.TrainStream(trainer._plan("train"), num_workers=trainer.cfg.data.num_workers)
    it = iter(stream)
    next(it)  # worker start-up is a one-off per epoch, not throughput
    t0 = time.perf_counter()
    n = sum(len(next(it).keys) for _ in range(batches))
    return n / (time.perf_counter() - t0)


def bare_step_rate(trainer: Trainer, *, steps: int) -> float:
    """Optimizer steps/s of the engine alone on one in-memory batch."""
    batch = next(iter(sd.EpochStream(trainer._plan("train"), 0)))
    ids, seg = batch.input_ids.to(trainer.engine.device), batch.segment_ids.to(trainer.engine.device)
    eng = trainer.engine

    def one():
        for _ in range(trainer.accum):
            out = eng(ids, seg)
            eng.backward(out.loss)
            eng.step()

    one()
    t0 = time.perf_counter()
    for _ in range(steps):
        one()
    return steps / (time.perf_counter() - t0)


def end_to_end(run_dir: Path, *, warmup: int) -> tuple[float, float]:
    """(steps/s, tokens/s) of the trainer after ``warmup`` steps, from metrics.jsonl."""
    recs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    recs = [r for r in recs if r.get("kind") == "train" and r["step"] > warmup]
    seconds = sum(r["tokens"] / r["tokens_per_sec"] for r in recs)
    return len(recs) / seconds, sum(r["tokens"] for r in recs) / seconds


def make_corpus(root: Path, seq_len: int) -> Path:
    sys.path.insert(0, str(REPO))
    from tests.electra._corpus import write_tiny_corpus

    return write_tiny_corpus(root, seq_len=seq_len, train_shards=(600, 600, 600, 600), validation_shards=(64,),
                             vocab_size=1000)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default=str(REPO / "electra/configs/small.json"))
    ap.add_argument("--data")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--global-batch", type=int, default=32)
    ap.add_argument("--set", action="append", default=[])
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench_train_"))
    seq_len = json.loads(Path(args.config).read_text())["data"]["seq_len"]
    data = args.data or str(make_corpus(tmp / "corpus", seq_len))
    sets = [f"train.global_batch_size={args.global_batch}", "train.log_every=1", "train.eval_every=0",
            f"train.save_every={10**9}", *args.set]
    argv = ["--config", args.config, "--data", data, "--out", str(tmp / "run"), "--max-steps", str(args.steps)]
    trainer = Trainer(parse_args(argv + [x for s in sets for x in ("--set", s)]))
    micro = trainer.cfg.train.micro_batch_size
    trainer.run()
    e2e_steps, e2e_tokens = end_to_end(tmp / "run", warmup=args.warmup)
    # after the run, on the warmed-up engine, right next to the end-to-end window: measured
    # before it, the first steps' allocations made the bare step look 2-3x slower
    bare = bare_step_rate(trainer, steps=max(3, args.steps - args.warmup))
    loader = loader_rate(trainer, batches=64)
    consumed = e2e_steps * trainer.cfg.train.global_batch_size
    result = {
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "threads": torch.get_num_threads(), "precision": trainer.cfg.train.precision,
        "global_batch": trainer.cfg.train.global_batch_size, "micro_batch": micro, "seq_len": seq_len,
        "loader_samples_per_sec": round(loader, 1), "trainer_samples_per_sec": round(consumed, 2),
        "loader_headroom_x": round(loader / consumed, 1),
        "e2e_steps_per_sec": round(e2e_steps, 4), "bare_steps_per_sec": round(bare, 4),
        "e2e_tokens_per_sec": round(e2e_tokens, 1),
        "overhead_pct": round(100 * (1 - e2e_steps / bare), 2),
        "mfu_last_step": _last_mfu(tmp / "run"),
    }
    print(json.dumps(result, indent=2))


def _last_mfu(run_dir: Path) -> float | None:
    recs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return next((r["mfu"] for r in reversed(recs) if r.get("kind") == "train"), None)


if __name__ == "__main__":
    main()
