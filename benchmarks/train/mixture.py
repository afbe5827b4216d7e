"""Weighted mixtures of corpora at scale: the sample order, the start-up and the loader with
several ``--data`` corpora.

    .venv/bin/python benchmarks/train/mixture.py [--sources 1,10,30,100] [--shards 1000]
        [--startup-sources 1,10,30,100] [--rounds 3] [--json OUT] [--smoke]

Three measurements, in one process:

1. **Sample order** (``electra.data.mixture`` + ``electra.data.sample_order``; no I/O). For each number of
   sources ``S`` in ``--sources``: ``S x --shards`` synthetic shard references (``--examples``
   per shard, varied +-25% by a seeded rng), weights alternating 1 and 3 (one source: no weights and
   no mixture, as the trainer builds it). Timed apart, each the best of ``--repeats`` (the block
   permutations' cache emptied before each): (a) building the plan: ``takes_for`` + ``Mixture`` +
   ``StreamPlan``; (b) one epoch's ``ordered_shards(0)`` (every slice of the epoch, permuted, and
   their bounds); (c) loader worker 0 of 2's ``schedule(0, segments(0, 2))`` for rank 0 of
   ``--world-size`` ranks at the given global batch, micro batch, streams and shuffle block: what a
   worker computes when its epoch starts (it calls ``ordered_shards`` itself, so (c) includes (b)).
   Each is timed with the garbage collector on (as the trainer runs) and off: the collector's
   full passes walk every live object, so their cost depends on the heap, not on the call alone.
   Each is then run once more under ``tracemalloc`` for its peak Python memory (numpy's buffers
   included: numpy reports them to tracemalloc). Growth: each figure at the largest size over the
   smallest, divided by the ratio of their shard counts; 1 means linear in sources x shards. The
   per-shard cost (µs and bytes per shard) is printed for every size, so a step between two sizes
   shows where it happens.
2. **Start-up** over ``S`` real local corpora (``--startup-sources``), written once by the tests'
   tiny-corpus writer (``--startup-shards`` train shards of ``--startup-examples`` each, one
   validation shard, all sharing the first corpus's tokenizer): ``open_corpora`` +
   ``.shards("train")`` + ``.shards("validation")``, the trainer's start-up path, best of
   ``--repeats`` seconds, and the calls it makes to ``common.storage.read_bytes``, ``list_sizes``
   and ``info``, counted by wrapping those three module functions (restored afterwards; the
   corpus modules call them through the module, so every call is seen). The files are in the page
   cache: this is the cost of the calls and of parsing, not of a store's latency, which the call
   counts stand in for.
3. **Loader, two sources vs one.** Corpus A of ``--loader-shards`` shards and the mixture A' + B
   (half the shards each, the same shard size, so the same examples in total) with weights 1 and
   3 (A' is taken half, B one and a half times). Each is opened through ``open_corpora`` like the
   trainer's, and ``TrainStream(plan, num_workers=0)`` pulls one whole epoch (every shard read,
   verified and decoded, every micro batch collated) at the trainer's default streams and shuffle
   block. Rounds alternate one, two, one, two, ... (``--rounds`` each, after ``--warmup`` untimed
   epochs of each), so drifting load on shared cores hits both; the medians' ratio two / one is
   compared with the goal (>= 0.95). The same ratio over the process's CPU time (every thread's,
   the shard readers' included) is printed beside it: less sensitive to other work on the cores.
   The mixture's share of rows from B is reported as a check.

``--smoke`` shrinks every size (a few seconds; the test's configuration). The CPU (model name,
amx_bf16 / avx512_bf16 flags) and the load average, before and after, are printed beside the
figures: on shared cores, compare only figures taken in one run.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
import tracemalloc
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

import numpy as np

from benchmarks.shared import load_test_helper
from benchmarks.shared.machine import finish, machine, machine_line, smoke_sizes
from common import storage
from electra.data import sample_order
from electra.data.corpus import ShardRef
from electra.data.corpus_set import open_corpora
from electra.data.stream import TrainStream
from electra.data.mixture import Mixture, takes_for
from electra.data.sample_order import StreamPlan

COUNTED = ("read_bytes", "list_sizes", "info")
GOAL = 0.95
SMOKE = {"sources": "1,2,3", "shards": 20, "examples": 200, "startup_sources": "1,2,3", "startup_shards": 2,
         "startup_examples": 4, "loader_shards": 6, "loader_examples": 40, "loader_seq_len": 32,
         "loader_global_batch": 16, "loader_micro_batch": 8, "rounds": 1, "warmup": 0, "repeats": 1}


# ------------------------------------------------------------------------------ measuring
def measure(fn: Callable[[], Any], repeats: int) -> tuple[dict[str, float], Any]:
    """Best-of-``repeats`` seconds with the garbage collector on (as the trainer runs) and off,
    then one run under tracemalloc for the peak; each run starts after a full collection with the
    block permutations' cache empty."""
    def run() -> tuple[float, Any]:
        sample_order._block_perm.cache_clear()
        gc.collect()
        start = time.perf_counter()
        value = fn()
        return time.perf_counter() - start, value

    best, off, value = float("inf"), float("inf"), None
    for _ in range(max(1, repeats)):
        seconds, value = run()
        best = min(best, seconds)
        gc.disable()
        try:
            off = min(off, run()[0])
        finally:
            gc.enable()
    sample_order._block_perm.cache_clear()
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return {"seconds": best, "seconds_gc_off": off, "peak_mb": peak / 2 ** 20}, value


def weights_for(sources: int) -> list[float]:
    return [1.0 if j % 2 == 0 else 3.0 for j in range(sources)]


def growth(first: dict, last: dict, key: str, fields: tuple[str, ...]) -> dict[str, float]:
    """Each figure's ratio largest / smallest, and that ratio per the ratio of ``key``."""
    size = last[key] / first[key]
    out = {f"{key}_ratio": size}
    for f in fields:
        a, b = _get(first, f), _get(last, f)
        out[f] = b / a if a else float("inf")
        out[f"{f}_per_{key}"] = out[f] / size
    return out


def _get(d: dict, dotted: str) -> float:
    for part in dotted.split("."):
        d = d[part]
    return d


def verdict(per_unit: float) -> str:
    return "linear" if 0.67 <= per_unit <= 1.5 else "super-linear" if per_unit > 1.5 else "sub-linear"


# ------------------------------------------------------------------------------ 1. sample order
def synthetic_shards(sources: int, per_source: int, examples: int, seed: int) -> tuple[tuple[ShardRef, ...], list[int]]:
    rng = np.random.default_rng([seed, sources])
    counts = rng.integers(int(examples * 0.75), int(examples * 1.25) + 1, size=(sources, per_source))
    shards = tuple(ShardRef(f"mem://corpus{j:03d}/shards/g0/train-{i:06d}.tar", n, n * 64, "0" * 64)
                   for j in range(sources) for i, n in enumerate(counts[j].tolist()))
    return shards, counts.sum(1).tolist()


def order_size(sources: int, args) -> dict[str, Any]:
    shards, sizes = synthetic_shards(sources, args.shards, args.examples, args.seed)

    def build() -> StreamPlan:
        mixture = Mixture((args.shards,) * sources, takes_for(sizes, weights_for(sources))) if sources > 1 else None
        return StreamPlan(shards, 128, args.global_batch, args.micro_batch, rank=0, world_size=args.world_size,
                          seed=args.seed, shuffle_block=args.shuffle_block, streams=args.streams, mixture=mixture)

    build_m, plan = measure(build, args.repeats)
    segments = plan.segments(0, 2)
    ordered_m, (ordered, bounds) = measure(lambda: plan.ordered_shards(0), args.repeats)
    sched_m, sched = measure(lambda: plan.schedule(0, segments), args.repeats)
    takes = list(plan.mixture.takes) if plan.mixture else sizes
    n = len(shards)
    row = {"sources": sources, "shards_per_source": args.shards, "shards": n, "examples": sum(sizes),
           "takes": takes, "takes_sum": sum(takes), "num_examples": plan.num_examples, "slices": len(ordered),
           "bounds_end": int(bounds[-1]), "steps_per_epoch": plan.steps_per_epoch, "segments": len(segments),
           "schedule_shards": len(sched.order), "build": build_m, "ordered_shards": ordered_m, "schedule": sched_m}
    for op in ("build", "ordered_shards", "schedule"):
        row[op]["us_per_shard"] = 1e6 * row[op]["seconds"] / n
        row[op]["us_per_shard_gc_off"] = 1e6 * row[op]["seconds_gc_off"] / n
        row[op]["bytes_per_shard"] = row[op]["peak_mb"] * 2 ** 20 / n
    return row


def order_report(rows: list[dict], args) -> tuple[list[str], dict]:
    ops = ("build", "ordered_shards", "schedule")
    lines = [f"Sample order: {rows[0]['shards_per_source']} shards per source; rank 0 of {args.world_size}, worker 0 "
             f"of 2; global batch {args.global_batch}, micro {args.micro_batch}, streams {args.streams}, shuffle "
             f"block {args.shuffle_block}; ms best of {args.repeats} (gc on) / tracemalloc peak MB; "
             "µs per shard with gc on / off",
             f"{'sources':>7} | {'shards':>7} | {'examples':>10} | {'slices':>7} | {'steps':>5} | "
             + " | ".join(f"{op + ' ms / MB':>22}" for op in ops)
             + f" | {'µs/shard order':>14} | {'µs/shard sched':>14}"]
    for r in rows:
        cells = [f"{1e3 * r[op]['seconds']:.2f} / {r[op]['peak_mb']:.2f}" for op in ops]
        per = [f"{r[op]['us_per_shard']:.2f} / {r[op]['us_per_shard_gc_off']:.2f}" for op in ops[1:]]
        lines.append(f"{r['sources']:>7} | {r['shards']:>7} | {r['examples']:>10} | {r['slices']:>7} | "
                     f"{r['steps_per_epoch']:>5} | " + " | ".join(f"{c:>22}" for c in cells)
                     + " | " + " | ".join(f"{c:>14}" for c in per))
    fields = tuple(f"{op}.{k}" for op in ops for k in ("seconds", "seconds_gc_off", "peak_mb"))
    g = growth(rows[0], rows[-1], "shards", fields)
    lines.append(f"growth {rows[0]['sources']} -> {rows[-1]['sources']} sources ({g['shards_ratio']:.0f}x the "
                 "shards); ratio largest/smallest, then per shard (1 = linear in sources x shards):")
    for f in fields:
        per = g[f + "_per_shards"]
        lines.append(f"  {f:<30} x{g[f]:9.1f}   per shard x{per:.2f} ({verdict(per)})")
    return lines, g


# ------------------------------------------------------------------------------ 2. start-up
@contextmanager
def counting_storage():
    """Count calls to ``common.storage``'s read_bytes, list_sizes and info; restore them after."""
    counts = dict.fromkeys(COUNTED, 0)
    originals = {name: getattr(storage, name) for name in COUNTED}

    def shim(name, fn):
        def counted(*a, **k):
            counts[name] += 1
            return fn(*a, **k)
        return counted
    for name, fn in originals.items():
        setattr(storage, name, shim(name, fn))
    try:
        yield counts
    finally:
        for name, fn in originals.items():
            setattr(storage, name, fn)


def startup_size(locations: list[str], args) -> dict[str, Any]:
    sources = len(locations)

    def start():
        cs = open_corpora(locations, weights=weights_for(sources) if sources > 1 else None)
        return cs.shards("train", skip_corrupt=False), cs.shards("validation", skip_corrupt=False)

    best = float("inf")
    for _ in range(max(1, args.repeats)):
        with counting_storage() as counts:
            t0 = time.perf_counter()
            (train, _, mixture), (validation, _, _) = start()
            best = min(best, time.perf_counter() - t0)
    return {"sources": sources, "train_shards": len(train), "validation_shards": len(validation),
            "takes_sum": sum(mixture.takes) if mixture else sum(s.num_examples for s in train),
            "examples": sum(s.num_examples for s in train), "seconds": best, "calls": dict(counts),
            "total_calls": sum(counts.values()), "calls_per_source": sum(counts.values()) / sources}


def startup_report(rows: list[dict]) -> tuple[list[str], dict]:
    lines = ["Start-up: open_corpora + shards('train') + shards('validation') over local corpora",
             f"{'sources':>7} | {'train shards':>12} | {'seconds':>8} | {'ms/source':>9} | "
             + " | ".join(f"{c:>10}" for c in COUNTED) + f" | {'calls/source':>12}"]
    for r in rows:
        lines.append(f"{r['sources']:>7} | {r['train_shards']:>12} | {r['seconds']:>8.4f} | "
                     f"{1e3 * r['seconds'] / r['sources']:>9.2f} | "
                     + " | ".join(f"{r['calls'][c]:>10}" for c in COUNTED) + f" | {r['calls_per_source']:>12.1f}")
    g = growth(rows[0], rows[-1], "sources", ("seconds", "total_calls"))
    lines.append(f"growth {rows[0]['sources']} -> {rows[-1]['sources']} sources (x{g['sources_ratio']:.0f}): "
                 f"seconds x{g['seconds']:.1f} (per source x{g['seconds_per_sources']:.2f}, "
                 f"{verdict(g['seconds_per_sources'])}), storage calls x{g['total_calls']:.1f} "
                 f"(per source x{g['total_calls_per_sources']:.2f}, {verdict(g['total_calls_per_sources'])})")
    return lines, g


# ------------------------------------------------------------------------------ 3. loader
def loader_plan(locations: list[str], weights: list[float] | None, args) -> StreamPlan:
    cs = open_corpora(locations, weights=weights)
    shards, _, mixture = cs.shards("train", skip_corrupt=False)
    return StreamPlan(shards, cs.manifest.seq_len, args.loader_global_batch, args.loader_micro_batch, seed=args.seed,
                      shuffle_block=args.shuffle_block, streams=args.streams, mixture=mixture)


def epoch_rate(plan: StreamPlan) -> dict[str, Any]:
    stream = TrainStream(plan, num_workers=0, prefetch=2)
    samples, per_source = 0, np.zeros(plan.mixture.num_sources if plan.mixture else 1, np.int64)
    start, cpu = time.perf_counter(), time.process_time()
    for batch in stream.loader(0):
        samples += batch.input_ids.shape[0]
        per_source += np.bincount(batch.sources.numpy(), minlength=len(per_source))
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {"samples": samples, "seconds": seconds, "samples_per_sec": samples / seconds, "cpu_seconds": cpu,
            "samples_per_cpu_sec": samples / cpu, "bytes_read": stream.bytes_read, "per_source": per_source.tolist()}


def loader_bench(one: StreamPlan, two: StreamPlan, args) -> dict[str, Any]:
    for _ in range(args.warmup):
        epoch_rate(one), epoch_rate(two)
    rounds = [{"round": r, "one": epoch_rate(one), "two": epoch_rate(two)} for r in range(args.rounds)]
    med, cpu = ({k: statistics.median(x[k][f] for x in rounds) for k in ("one", "two")}
                for f in ("samples_per_sec", "samples_per_cpu_sec"))
    last, ratio = rounds[-1]["two"]["per_source"], med["two"] / med["one"]
    return {"examples": {"one": one.num_examples, "two": two.num_examples},
            "shards": {"one": len(one.shards), "two": len(two.shards)}, "takes": list(two.mixture.takes),
            "steps_per_epoch": {"one": one.steps_per_epoch, "two": two.steps_per_epoch}, "rounds": rounds,
            "median_samples_per_sec": med, "ratio": ratio, "goal": GOAL, "met": ratio >= GOAL,
            "median_samples_per_cpu_sec": cpu, "cpu_ratio": cpu["two"] / cpu["one"], "share_of_b": last[1] / sum(last)}


def loader_report(res: dict) -> list[str]:
    lines = [f"Loader, one corpus ({res['shards']['one']} shards) vs two (weights 1, 3; {res['shards']['two']} "
             f"shards), {res['examples']['one']} examples, num_workers=0, one epoch per round; samples per second "
             "of wall time and of the process's CPU time (all its threads)",
             f"{'round':>6} | {'one samples/s':>13} | {'two samples/s':>13} | {'one per CPU s':>13} | "
             f"{'two per CPU s':>13} | {'MB read one / two':>17}"]
    for r in res["rounds"]:
        one, two = r["one"], r["two"]
        mb = f"{one['bytes_read'] / 1e6:.1f} / {two['bytes_read'] / 1e6:.1f}"
        lines.append(f"{r['round']:>6} | {one['samples_per_sec']:>13.0f} | {two['samples_per_sec']:>13.0f} | "
                     f"{one['samples_per_cpu_sec']:>13.0f} | {two['samples_per_cpu_sec']:>13.0f} | {mb:>17}")
    med, cpu = res["median_samples_per_sec"], res["median_samples_per_cpu_sec"]
    lines.append(f"{'median':>6} | {med['one']:>13.0f} | {med['two']:>13.0f} | {cpu['one']:>13.0f} | "
                 f"{cpu['two']:>13.0f} |")
    lines.append(f"ratio two/one {res['ratio']:.3f} ({'✓' if res['met'] else '✗'} goal >= {GOAL}); by CPU time "
                 f"{res['cpu_ratio']:.3f}; share of rows from B {res['share_of_b']:.3f} (weights say 0.75)")
    return lines


# ------------------------------------------------------------------------------ main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    a = p.add_argument
    a("--sources", default="1,10,30,100", help="sample order: numbers of sources, comma-separated")
    a("--shards", type=int, default=1000, help="sample order: synthetic shards per source")
    a("--examples", type=int, default=200, help="sample order: examples per synthetic shard (varied +-25%%)")
    a("--global-batch", type=int, default=2048, help="sample order: global batch")
    a("--micro-batch", type=int, default=32, help="sample order: micro batch")
    a("--world-size", type=int, default=8, help="sample order: ranks (rank 0 is measured)")
    a("--streams", type=int, default=64, help="data.streams, both the sample order and the loader")
    a("--shuffle-block", type=int, default=2000, help="data.shuffle_buffer, both the sample order and the loader")
    a("--startup-sources", default="1,10,30,100", help="start-up: numbers of real local corpora, comma-separated")
    a("--startup-shards", type=int, default=10, help="start-up: train shards per corpus")
    a("--startup-examples", type=int, default=8, help="start-up: examples per train shard")
    a("--loader-shards", type=int, default=40, help="loader: shards of corpus A (A' and B get half each)")
    a("--loader-examples", type=int, default=300, help="loader: examples per shard")
    a("--loader-seq-len", type=int, default=128, help="loader: sequence length of the loader's corpora")
    a("--loader-global-batch", type=int, default=128, help="loader: global batch (one rank)")
    a("--loader-micro-batch", type=int, default=32, help="loader: micro batch")
    a("--rounds", type=int, default=3, help="loader: timed epochs of each side, alternating one, two, ...")
    a("--warmup", type=int, default=1, help="loader: untimed epochs of each side before the rounds")
    a("--repeats", type=int, default=3, help="sample order and start-up: best of this many runs")
    a("--seed", type=int, default=0, help="seed of the synthetic shard sizes and of the sample order")
    a("--work", default=None, help="folder for the written corpora (default: a temporary one, removed)")
    a("--json", default=None, help="write every figure to this file")
    a("--smoke", action="store_true", help="tiny sizes, a few seconds (the test's run); overrides the size flags")
    args = p.parse_args(argv)
    smoke_sizes(args, SMOKE)
    args.sources = [int(s) for s in str(args.sources).split(",")]
    args.startup_sources = [int(s) for s in str(args.startup_sources).split(",")]
    return args


def write_corpora(work: Path, args) -> tuple[list[str], list[str], list[str]]:
    """The start-up's corpora, then A, and A' + B; all share the first corpus's tokenizer."""
    write = load_test_helper("electra._corpus").write_tiny_corpus
    first = None
    startup = []
    for i in range(max(args.startup_sources)):
        root = write(work / f"startup{i:03d}", train_shards=(args.startup_examples,) * args.startup_shards,
                     validation_shards=(args.startup_examples,), seed=i, tokenizer_from=first)
        first = first or root
        startup.append(str(root))
    half = args.loader_shards // 2
    kw = {"seq_len": args.loader_seq_len, "validation_shards": (8,), "tokenizer_from": first}
    one = [str(write(work / "A", train_shards=(args.loader_examples,) * args.loader_shards, seed=1001, **kw))]
    two = [str(write(work / name, train_shards=(args.loader_examples,) * n, seed=seed, **kw))
           for name, n, seed in (("A2", half, 1002), ("B", args.loader_shards - half, 1003))]
    return startup, one, two


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    before = machine()
    print(machine_line(before), flush=True)
    result: dict[str, Any] = {"machine": before, "args": {k: v for k, v in vars(args).items()}}

    rows = []
    for s in args.sources:
        rows.append(order_size(s, args))
        print(f"  sample order, {s} sources: done", file=sys.stderr, flush=True)
    lines, g = order_report(rows, args)
    print("\n".join(lines), flush=True)
    result["order"] = {"sizes": rows, "growth": g}

    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        t0 = time.perf_counter()
        startup, one, two = write_corpora(Path(tmp), args)
        print(f"  corpora written in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        rows = [startup_size(startup[:s], args) for s in args.startup_sources]
        lines, g = startup_report(rows)
        print("\n".join(lines), flush=True)
        result["startup"] = {"sizes": rows, "growth": g, "shards_per_corpus": args.startup_shards}

        res = loader_bench(loader_plan(one, None, args), loader_plan(two, [1.0, 3.0], args), args)
        print("\n".join(loader_report(res)), flush=True)
        result["loader"] = res

    finish(result, args.json, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
