"""Trainer throughput: can the loader keep up (from local disk and from S3), and what do data +
bookkeeping cost per step?

    .venv/bin/python benchmarks/train/train.py [--config electra/configs/small.json] [--data CORPUS]
        [--s3] [--steps 30] [--warmup 10] [--global-batch 32] [--set key=value ...] [--loader-only]

Numbers from one process, same model, same engine:

1. **Loader samples/s**: ``electra.data.stream.TrainStream`` alone (the preset's worker count, read-ahead
   and micro batch) pulling one whole epoch as fast as possible, timed from a cold start: worker
   start-up, every shard read and its sha256 verified, every batch collated. Goal: >= 10x what
   the trainer consumes. ``--data`` may be any corpus location (``s3://bucket/corpus``).
   **Bytes per rank**: the same loader run for rank 0 then rank 1 of two simulated ranks, one
   after the other in this process, each printing the shard bytes it read against its share
   (``StreamPlan.rank_share``: the bytes of the shards its streams touch), and their ratio: 1
   means every byte read once; shards on the border of two loader workers' regions are read by
   both. ``--loader-only`` reports these figures without the trainer (items 2 and 3).
2. **Trainer samples/s and tokens/s end to end**: ``electra.run.trainer.Trainer.run`` (streaming,
   metrics every step, progress bar, a checkpoint at the end), measured from ``metrics.jsonl``
   over the steps after the warm-up. The warm-up is start-up, reported apart (``warmup_seconds``):
   each of the global batch's streams starts in another region of the corpus, so the first steps
   read the first shards of every stream (up to one per stream); after that a stream reads a shard
   once per shard-length of steps. A short run's window would time that burst of reads, not the
   steady state a long run lives in.
3. **Bare step**: the same engine stepping on the epoch's first batches already in memory (the
   trainer's own batches, so the same shapes), nothing else, measured right after the end-to-end
   run on the warmed-up engine.
   Overhead = 1 - end-to-end steps/s / bare steps/s: what data and bookkeeping cost.
4. **Plain step**: the same model, objective and optimiser on the same batches with no engine (fp32
   parameters, ``torch.autocast`` in a bf16 run; ``benchmarks/train/step.py``'s bare step), timed right
   after. ``engine_overhead_pct`` = 1 - bare / plain is what DeepSpeed's step costs (its bf16
   module and fp32 master copy, gradient buffers); ``overhead_vs_plain_pct`` is the trainer's
   whole distance from the step it runs. Goal: <= 10% on every CPU kind.

``--s3`` starts moto's S3 server on a free loopback port (``python -m moto.server``; the standard
``AWS_*`` variables point every client at it, DataLoader workers included), uploads the corpus
there, trains end to end from the S3 copy, and reports the loader figure for the S3 copy and the
local copy side by side, with the S3 loader's headroom over the trainer's consumption. A
loopback server has no network latency or bandwidth limit, so this measures the client path
(ranged GETs, hashing while reading, read-ahead threads), not a real store's distance.

Without ``--data`` a synthetic corpus at the preset's sequence length is generated (its
WordPiece vocabulary is a few hundred tokens, not 30522: the embedding and optimiser work are
smaller than the real preset's; the encoder work, which dominates, is the same). On a 2-core CPU
the preset's global batch (128) makes a step take tens of seconds, hence ``--global-batch``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from benchmarks.shared import load_test_helper
from common import storage
from electra.data import stream as sd
from electra.distributed.batch_geometry import batch_geometry
from electra.config import load_config
from electra.run.optim import clip_grad_norm
from pipelines import schema

if TYPE_CHECKING:
    from electra.run.trainer import Trainer

REPO = Path(__file__).resolve().parents[2]


def loader_rate(plan: sd.StreamPlan, *, workers: int, prefetch: int) -> float:
    """Samples/s of one epoch of ``plan`` (this rank's share) from a cold start (module docstring)."""
    stream = sd.TrainStream(plan, num_workers=workers, prefetch=prefetch)
    t0 = time.perf_counter()
    n = sum(len(b.keys) for b in stream.loader(0))
    return n / (time.perf_counter() - t0)


def rank_bytes(plan: sd.StreamPlan, *, world: int, workers: int, prefetch: int) -> list[dict]:
    """One epoch of the loader for each rank of ``world`` simulated ranks, one after the other in
    this process: the shard bytes each read against its share (the bytes of the shards its streams
    touch: what reading each byte once per rank costs). Prints one line per rank."""
    if plan.global_batch % world:
        print(f"bytes per rank: global batch {plan.global_batch} does not split over {world} ranks; skipped")
        return []
    rows = []
    for rank in range(world):
        p = dataclasses.replace(plan, rank=rank, world_size=world,
                                micro_batch=math.gcd(plan.micro_batch, plan.global_batch // world))
        stream = sd.TrainStream(p, num_workers=workers, prefetch=prefetch)
        sum(1 for _ in stream.loader(0))
        shards, share = p.rank_share(0)
        total = sum(s.bytes for s in p.shards)
        region = p.num_examples // (world * max(1, workers))
        if rank == 0 and p.shuffle_block > region:
            print(f"note: a shuffle block ({p.shuffle_block} examples) is larger than a loader worker's region "
                  f"(about {region}): every worker needs most of its rank's shards; a corpus large next to "
                  "the block (--synthetic-shards) shows the steady state")
        row = {"rank": rank, "world": world, "workers": workers, "bytes_read": stream.bytes_read,
               "share_bytes": share, "share_shards": len(shards), "split_shards": len(p.shards),
               "split_bytes": total, "read_over_share": round(stream.bytes_read / share, 3)}
        print(f"rank {rank}/{world} ({workers} loader workers): read {stream.bytes_read / 2**20:.2f} MiB, "
              f"share {share / 2**20:.2f} MiB ({len(shards)} of {len(p.shards)} shards, "
              f"{share / total:.0%} of the split), read/share {stream.bytes_read / share:.3f}")
        rows.append(row)
    return rows


def loader_plan(corpus: str, args: argparse.Namespace, seq_len: int) -> tuple[sd.StreamPlan, int, int]:
    """The preset's one-rank train plan over ``corpus`` (no trainer), its workers and read-ahead."""
    cfg = load_config(args.config, [f"train.global_batch_size={args.global_batch}", *args.set])
    geo = batch_geometry(cfg.train.global_batch_size, cfg.train.micro_batch_size, 1)
    shards, _ = sd.check_shards(sd.open_corpus(corpus, seq_len=seq_len), "train")
    plan = sd.StreamPlan(tuple(shards), seq_len, geo.global_batch, geo.micro_batch, seed=cfg.train.seed,
                         shuffle_block=cfg.data.shuffle_buffer, streams=cfg.data.streams)
    return plan, sd.loader_workers(cfg.data.num_workers), cfg.data.prefetch_shards


def loader_report(args: argparse.Namespace, *, data: str, s3_data: str | None, seq_len: int) -> dict:
    """Loader samples/s (local and, with --s3, S3) and bytes read per simulated rank, no trainer."""
    plan, workers, prefetch = loader_plan(s3_data or data, args, seq_len)
    rate = loader_rate(plan, workers=workers, prefetch=prefetch)
    out = {"global_batch": plan.global_batch, "micro_batch": plan.micro_batch, "streams": plan.streams_effective,
           "loader_workers": workers, "prefetch_shards": prefetch,
           "loader_epoch_samples": plan.steps_per_epoch * plan.per_rank,
           ("loader_s3_samples_per_sec" if s3_data else "loader_samples_per_sec"): round(rate, 1)}
    if s3_data:
        local = loader_rate(plan_for(data, plan, seq_len), workers=workers, prefetch=prefetch)
        out["loader_local_samples_per_sec"] = round(local, 1)
    out["bytes_per_rank"] = rank_bytes(plan, world=2, workers=args.rank_workers, prefetch=prefetch)
    return out


def plan_for(corpus: str, like: sd.StreamPlan, seq_len: int) -> sd.StreamPlan:
    """``like`` (rank, batch, seed, shuffle) over the train shards of another copy of the corpus."""
    shards, _ = sd.check_shards(sd.open_corpus(corpus, seq_len=seq_len), "train")
    return dataclasses.replace(like, shards=tuple(shards))


def step_batches(trainer: Trainer, *, steps: int) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    """The micro batches of the epoch's first ``steps`` steps, in memory: the bare and plain steps
    run the batches the trainer ran (their real-token counts, so their shapes, vary per step as in
    training; one batch repeated would hit warm kernel caches the trainer does not)."""
    stream = sd.TrainStream(trainer.train_plan, num_workers=0).loader(0)
    dev = trainer.engine.device
    micro = [(b.input_ids.to(dev), b.segment_ids.to(dev)) for _, b in zip(range(steps * trainer.accum), stream)]
    return [micro[i:i + trainer.accum] for i in range(0, len(micro), trainer.accum)]


def _rate(one, batches) -> float:
    one(batches[0])  # warm-up
    t0 = time.perf_counter()
    for step in batches:
        one(step)
    return len(batches) / (time.perf_counter() - t0)


def bare_step_rate(trainer: Trainer, batches) -> float:
    """Optimizer steps/s of the engine alone on in-memory batches."""
    eng = trainer.engine

    def one(step):
        for ids, seg in step:
            out = eng(ids, seg)
            eng.backward(out.loss)
            eng.step()
    return _rate(one, batches)


def plain_step_rate(cfg, batches) -> float:
    """Optimizer steps/s of the same model and objective with no engine: fp32 parameters, our
    optimiser, ``torch.autocast`` when the run is bf16, the same micro batches per step (the bare
    step of ``benchmarks/train/step.py``). What the trainer would cost if DeepSpeed cost nothing."""
    from benchmarks.train.step import Ours

    plain = Ours(cfg, cfg.train.precision == "bf16")

    def one(step):
        for ids, seg in step:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=plain.bf16):
                out = plain.obj(ids, seg)
            (out.loss / len(step)).backward()
        clip_grad_norm(plain.obj.parameters(), plain.clip)
        plain.opt.step()
        plain.opt.zero_grad(set_to_none=True)
    return _rate(one, batches)


def end_to_end(run_dir: Path, *, warmup: int) -> tuple[float, float, float]:
    """(steps/s, tokens/s) of the trainer after ``warmup`` steps, from metrics.jsonl, and the
    seconds of the warm-up steps (start-up: every stream's first shards are read then)."""
    recs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    recs = [r for r in recs if r.get("kind") == "train"]
    seconds = {r["step"]: r["tokens"] / r["tokens_per_sec"] for r in recs}
    steady = [r for r in recs if r["step"] > warmup]
    total = sum(seconds[r["step"]] for r in steady)
    return (len(steady) / total, sum(r["tokens"] for r in steady) / total,
            sum(t for step, t in seconds.items() if step <= warmup))


def make_corpus(root: Path, seq_len: int, shards: str = "4x600") -> Path:
    write_tiny_corpus = load_test_helper("electra._corpus").write_tiny_corpus
    count, size = (int(x) for x in shards.split("x"))
    return write_tiny_corpus(root, seq_len=seq_len, train_shards=(size,) * count, validation_shards=(64,),
                             vocab_size=1000)


@contextmanager
def loopback_s3(log_path: Path):
    """moto's S3 server on a free loopback port, with the AWS_* variables pointing at it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while True:  # readiness of the server this function started
                try:
                    urllib.request.urlopen(endpoint, timeout=2)
                    break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"moto server did not start on {endpoint}; see {log_path}")
                    time.sleep(0.2)
            os.environ.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="testing",
                              AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
            yield endpoint
        finally:
            proc.terminate()
            proc.wait(10)


def upload(corpus: str, bucket: str) -> str:
    upload_corpus = load_test_helper("electra._corpus").upload_corpus

    storage.url_to_fs(bucket)[0].mkdir(bucket.removeprefix("s3://"))
    return upload_corpus(corpus, f"{bucket}/corpus")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default=str(REPO / "electra/configs/small.json"), help="preset")
    ap.add_argument("--data", help="corpus location (default: a generated synthetic corpus)")
    ap.add_argument("--s3", action="store_true", help="also stream from a loopback S3 server (moto)")
    ap.add_argument("--steps", type=int, default=30, help="trainer steps")
    ap.add_argument("--warmup", type=int, default=10, help="steps left out of the end-to-end figure "
                    "(start-up: the first steps read the first shards of every stream)")
    ap.add_argument("--global-batch", type=int, default=32, help="train.global_batch_size")
    ap.add_argument("--set", action="append", default=[], help="config override (repeatable)")
    ap.add_argument("--seq-len", type=int, default=128, help="synthetic corpus's seq_len (preset leaves it open)")
    ap.add_argument("--synthetic-shards", default="4x600", help="synthetic train split: SHARDSxEXAMPLES")
    ap.add_argument("--rank-workers", type=int, default=2,
                    help="loader workers per simulated rank in the bytes-per-rank figure (2: the CUDA default)")
    ap.add_argument("--loader-only", action="store_true", help="only the loader figures (no trainer)")
    args = ap.parse_args()
    if not args.loader_only and args.steps <= args.warmup:
        ap.error(f"--steps {args.steps} leaves no step after the --warmup {args.warmup}: raise --steps")
    tmp = Path(tempfile.mkdtemp(prefix="bench_train_"))
    if args.data:  # the corpus's (the presets leave data.seq_len to it)
        seq_len = schema.Manifest.parse(schema.read_manifest_bytes(args.data), args.data).seq_len
    else:
        seq_len = load_config(args.config, args.set).data.seq_len or args.seq_len
    data = args.data or str(make_corpus(tmp / "corpus", seq_len, args.synthetic_shards))
    with loopback_s3(tmp / "moto.log") if args.s3 else nullcontext() as endpoint:
        s3_data = upload(data, "s3://bench-train") if endpoint else None
        if args.loader_only:
            result = loader_report(args, data=data, s3_data=s3_data, seq_len=seq_len)
        else:
            result = measure(args, tmp, data=data, s3_data=s3_data, seq_len=seq_len)
    print(json.dumps(result, indent=2))


def measure(args: argparse.Namespace, tmp: Path, *, data: str, s3_data: str | None, seq_len: int) -> dict:
    from electra.run.job import job_from_args
    from electra.run.runner import PretrainRunner
    from electra.train import parse_args

    sets = [f"train.global_batch_size={args.global_batch}", "train.log_every=1", "train.eval_every=0",
            f"train.save_every={10**9}", *args.set]
    argv = ["--config", args.config, "--data", s3_data or data, "--out", str(tmp / "run"),
            "--max-steps", str(args.steps)]
    runner = PretrainRunner(job_from_args(parse_args(argv + [x for s in sets for x in ("--set", s)])))
    runner.resolve()
    runner.prepare()
    trainer = runner.build()
    cfg = trainer.cfg
    runner.train()
    e2e_steps, e2e_tokens, startup = end_to_end(tmp / "run", warmup=args.warmup)
    # after the run, on the warmed-up engine, right next to the end-to-end window: measured
    # before it, the first steps' allocations made the bare step look 2-3x slower
    batches = step_batches(trainer, steps=max(4, args.steps - args.warmup + 1))
    bare = bare_step_rate(trainer, batches)
    plain = plain_step_rate(cfg, batches)
    consumed = e2e_steps * cfg.train.global_batch_size
    plan = trainer.train_plan
    workers, prefetch = sd.loader_workers(cfg.data.num_workers), cfg.data.prefetch_shards
    loader = loader_rate(plan, workers=workers, prefetch=prefetch)  # the copy the trainer read
    if s3_data is None:
        loaders = {"loader_samples_per_sec": round(loader, 1), "loader_headroom_x": round(loader / consumed, 1)}
    else:
        local = loader_rate(plan_for(data, plan, seq_len), workers=workers, prefetch=prefetch)
        loaders = {"loader_s3_samples_per_sec": round(loader, 1), "loader_local_samples_per_sec": round(local, 1),
                   "s3_loader_over_consumption_x": round(loader / consumed, 1),
                   "local_loader_over_consumption_x": round(local / consumed, 1)}
    loaders["bytes_per_rank"] = rank_bytes(plan, world=2, workers=args.rank_workers, prefetch=prefetch)
    return {
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "threads": torch.get_num_threads(), "precision": cfg.train.precision,
        "global_batch": cfg.train.global_batch_size, "micro_batch": plan.micro_batch, "seq_len": seq_len,
        "trained_from": s3_data or data, "loader_workers": workers,
        "prefetch_shards": prefetch, "loader_epoch_samples": plan.steps_per_epoch * plan.per_rank,
        "trainer_samples_per_sec": round(consumed, 2), **loaders,
        "warmup_steps": args.warmup, "warmup_seconds": round(startup, 2),
        "e2e_steps_per_sec": round(e2e_steps, 4), "bare_steps_per_sec": round(bare, 4),
        "plain_steps_per_sec": round(plain, 4),
        "e2e_tokens_per_sec": round(e2e_tokens, 1), "overhead_pct": round(100 * (1 - e2e_steps / bare), 2),
        "engine_overhead_pct": round(100 * (1 - bare / plain), 2),
        "overhead_vs_plain_pct": round(100 * (1 - e2e_steps / plain), 2),
        "mfu_last_step": _last_mfu(tmp / "run"),
    }


def _last_mfu(run_dir: Path) -> float | None:
    recs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return next((r["mfu"] for r in reversed(recs) if r.get("kind") == "train"), None)


if __name__ == "__main__":
    main()
