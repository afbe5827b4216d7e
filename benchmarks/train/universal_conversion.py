"""Wall time of the universal-checkpoint conversion split across the resuming ranks
(``electra.checkpoint.universal_conversion.convert_across_ranks``) against DeepSpeed's own one-process
converter (``electra.checkpoint.universal.convert``: ``ds_to_universal.main``), on the same real
ZeRO checkpoint in the same run, next to the timeout the ranks wait with
(``electra.checkpoint.universal.conversion_timeout``).

    .venv/bin/python benchmarks/train/universal_conversion.py [--saved-ranks 4] [--ranks 1,2,4]
        [--repeats 3] [--layers 12] [--hidden 256] [--stage 1] [--work DIR] [--json OUT]

The checkpoint: ELECTRA-Small (the ``small`` preset: embeddings 128, discriminator hidden
``--hidden`` with 4x feed-forward and hidden/64 heads, ``--layers`` layers; the defaults give
~14M parameters, ~160 MB of fp32 optimiser state) trained one optimiser step by ``--saved-ranks``
real DeepSpeed ZeRO-``--stage`` fp32 ranks on CPU (gloo, as tests/electra/_zero_worker.py does)
and saved with ``electra.checkpoint.save_load.save_checkpoint``: one partition file per saved rank.

Then ``--repeats`` rounds; each round converts the checkpoint once with each converter, in that
order, every conversion in FRESH processes (a removed universal folder before each; imports and
the process group's start are outside the clock, the checkpoint's files are warm in the page
cache): "deepspeed" (``convert`` in one process, as the offline command and the old rank-0
conversion ran it) and "split" with W = each of ``--ranks`` rank processes, joined in a process
group with a real ``electra.distributed.deepspeed_glue.Agreement(conversion_timeout(step_dir))`` between the
steps, as a resume runs it. Each rank's steps are timed through the agreement: a step's work
ends when the rank calls ``agree`` and the step ends for all when the call returns (the wait);
the conversion's wall time is from a barrier to the last rank's return. For DeepSpeed's converter
the same steps are timed by wrapping its extract and merge helpers. In the last round each split
output is compared file by file with DeepSpeed's (every file loaded, equal values:
``tests/electra/test_universal_checkpoint.assert_equal``).

Output: the CPU model and load average, the checkpoint's size, then a table per converter and
rank count: the median wall seconds (min-max over the rounds), the ratio to DeepSpeed's
converter (< 1: faster), the optimiser-state MB, ``conversion_timeout`` and the share of it the
whole conversion took and the longest single wait of any rank in one agreement took (the
timeout applies to each wait), and whether the output equals DeepSpeed's; then the steps
(clean, read, extract, merge, finish) as the slowest rank's work, medians. With fewer cores
than W ranks the ranks time-slice the cores (said in the output). ``--json OUT`` writes every
rank's timings per round.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

MB = 1 << 20
STEPS = ("clean", "read", "extract", "merge", "finish")
MICRO, SEQ = 2, 32
CHILD_TIMEOUT = 900


# ---------------------------------------------------------------- rank processes

def _config(args, world: int):
    from electra.config import load_config

    return load_config("small", [f"model.num_layers={args.layers}", f"model.hidden_size={args.hidden}",
                                 f"model.num_heads={max(1, args.hidden // 64)}",
                                 f"model.intermediate_size={4 * args.hidden}", "train.precision=fp32",
                                 f"train.global_batch_size={MICRO * world}", f"train.micro_batch_size={MICRO}",
                                 f"deepspeed.zero_optimization.stage={args.stage}"])


def save_rank(args) -> int:
    """One saved rank: the model, one optimiser step on a fixed batch, ``save_checkpoint``."""
    import torch
    import torch.nn.functional as F

    from electra.checkpoint import save_load as ckpt
    from electra.distributed import deepspeed_glue as D
    from electra.checkpoint import run_layout as layout
    from electra.model.networks import ElectraForPretraining
    from electra.run.optim import build_optimizer, build_scheduler

    class Pretraining(ElectraForPretraining):  # the parameters' names stay ElectraForPretraining's
        def forward(self, ids):
            gen = self.generator_logits(ids).float().logsumexp(-1).mean()
            return gen + F.softplus(self.discriminator_logits(ids).float()).mean()

    info = D.init_distributed()
    cfg = _config(args, info.world_size)
    torch.manual_seed(0)
    model = Pretraining(cfg.model)
    optimizer = build_optimizer(model, cfg.optimizer)
    engine = D.build_engine(model, optimizer, build_scheduler(optimizer, cfg.optimizer),
                            D.deepspeed_config(cfg, info.world_size))
    g = torch.Generator().manual_seed(1000 + info.rank)
    ids = torch.randint(5, cfg.model.vocab_size, (MICRO, SEQ), generator=g)
    engine.backward(engine(ids))
    engine.step()
    meta = layout.CheckpointMeta(step=1, tokens_seen=0, data_position={"epoch": 0, "batch": 1},
                                 manifest_sha256="m", tokenizer_sha256="t", config_hash="h", wall_time=0.0,
                                 world_size=info.world_size, global_batch_size=cfg.train.global_batch_size)
    ckpt.save_checkpoint(engine, args.run, meta, rank=info.rank, keep_last=2, barrier=D.barrier)
    if info.rank == 0:
        params = sum(p.numel() for p in model.parameters())
        Path(args.result).write_text(json.dumps({"params": params}))
    D.shutdown()
    return 0


class TimedAgree:
    """The agreement, with when this rank called it (its step's work done) and when it returned."""

    def __init__(self, inner):
        self.inner, self.marks = inner, []

    def __call__(self, failed: bool) -> bool:
        called = time.perf_counter()
        try:
            return self.inner(failed)
        finally:
            self.marks.append((called, time.perf_counter()))


def split_rank(args) -> int:
    """One rank of the split conversion, as ``prepare_universal`` runs it in a resume."""
    import deepspeed.checkpoint.ds_to_universal  # noqa: F401  (imported before the clock)

    from electra.distributed import deepspeed_glue as D
    from electra.checkpoint import universal as uc
    from electra.checkpoint.universal_conversion import convert_across_ranks

    info = D.init_distributed()
    step_dir = Path(args.step_dir)
    t = time.perf_counter()
    agreement = D.Agreement(uc.conversion_timeout(step_dir))
    group_s = time.perf_counter() - t
    agree = TimedAgree(agreement)
    D.barrier()
    start = time.perf_counter()  # CLOCK_MONOTONIC: one clock for every process of the machine
    convert_across_ranks(step_dir, uc.universal_dir(step_dir), rank=info.rank, world_size=info.world_size,
                         agree=agree, tag=os.environ["MASTER_PORT"])
    end = time.perf_counter()
    agreement.close()
    work, wait, previous = {}, {}, start
    for name, (called, returned) in zip(STEPS, agree.marks):
        work[name], wait[name], previous = called - previous, returned - called, returned
    Path(args.result).write_text(json.dumps({"rank": info.rank, "start": start, "end": end, "work": work,
                                             "wait": wait, "group_s": group_s}))
    D.shutdown()
    return 0


def baseline(args) -> int:
    """DeepSpeed's converter in one process (``convert``), its steps timed by wrapping its helpers."""
    from deepspeed.checkpoint import ds_to_universal as dtu

    from electra.checkpoint import universal as uc

    marks: dict[str, float] = {}

    def timed(name, fn):
        def wrapper(*a, **kw):
            marks[f"{name}_start"] = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                marks[f"{name}_end"] = time.perf_counter()
        return wrapper

    dtu.main = timed("main", dtu.main)
    dtu._extract_zero_shard_files = timed("extract", dtu._extract_zero_shard_files)
    dtu._merge_tp_slice_files = timed("merge", dtu._merge_tp_slice_files)
    start = time.perf_counter()
    uc.convert(Path(args.step_dir))
    end = time.perf_counter()
    work = {"clean": marks["main_start"] - start, "read": marks["extract_start"] - marks["main_start"],
            "extract": marks["extract_end"] - marks["extract_start"],
            "merge": marks["merge_end"] - marks["merge_start"], "finish": end - marks["merge_end"]}
    Path(args.result).write_text(json.dumps({"rank": 0, "start": start, "end": end, "work": work,
                                             "wait": dict.fromkeys(STEPS, 0.0)}))
    return 0


# ---------------------------------------------------------------- the parent

def launch(role: str, world: int, results: Path, extra: list[str]) -> list[dict]:
    """``world`` processes of ``role`` (a process group on a free local port, as a launcher sets
    it up); their result files."""
    from common.ports import free_port

    shutil.rmtree(results, ignore_errors=True)
    results.mkdir(parents=True)
    port = str(free_port())
    procs = []
    for rank in range(world):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "RANK": str(rank),
               "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_SIZE": str(world),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
        if role == "baseline":  # one process, no process group: as the offline command runs it
            env = {k: v for k, v in env.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_SIZE",
                                                            "MASTER_ADDR", "MASTER_PORT")}
        cmd = [sys.executable, __file__, "--role", role, "--result", str(results / f"rank{rank}.json"), *extra]
        procs.append(subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=CHILD_TIMEOUT)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
    for p, out in zip(procs, outs):
        if p.returncode != 0:
            raise RuntimeError(f"{role} x{world}: a process exited {p.returncode}:\n{out[-6000:]}")
    return [json.loads(f.read_text()) for f in sorted(results.glob("rank*.json"))]


def same_files(ours: Path, ref: Path) -> tuple[bool, str]:
    """``ours`` holds the files of ``ref``, each loading to equal values (the tests' comparison)."""
    import torch

    from tests.electra.checkpoint.test_universal import assert_equal

    files = sorted(p.relative_to(ours) for p in ours.rglob("*") if p.is_file())
    if files != sorted(p.relative_to(ref) for p in ref.rglob("*") if p.is_file()):
        return False, "different file lists"
    try:
        for rel in files:
            assert_equal(torch.load(ours / rel, weights_only=False), torch.load(ref / rel, weights_only=False),
                         str(rel))
    except AssertionError as exc:
        return False, f"differs: {exc}"
    return True, f"{len(files)} files equal"


def summarise(runs: list[list[dict]]) -> dict:
    """Per round: wall (first start to last end), each step's slowest work, the longest wait."""
    walls = [max(r["end"] for r in ranks) - min(r["start"] for r in ranks) for ranks in runs]
    steps = {s: statistics.median(max(r["work"][s] for r in ranks) for ranks in runs) for s in STEPS}
    longest_wait = max(max(r["wait"].values()) for ranks in runs for r in ranks)
    return {"wall_s": walls, "median_s": statistics.median(walls), "steps_s": steps,
            "longest_wait_s": longest_wait}


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--saved-ranks", type=int, default=4, help="ranks that save the checkpoint (default 4)")
    parser.add_argument("--ranks", default="1,2,4", help="rank counts of the split conversion (default 1,2,4)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds; medians are reported (default 3)")
    parser.add_argument("--layers", type=int, default=12, help="encoder layers (model size; default 12: Small)")
    parser.add_argument("--hidden", type=int, default=256, help="discriminator hidden size (default 256: Small)")
    parser.add_argument("--stage", type=int, default=1, choices=(1, 2), help="ZeRO stage saved (default 1)")
    parser.add_argument("--work", type=Path, help="working folder (kept); default: a temporary one, removed")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--role", choices=("save", "split", "baseline"), help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--run", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--step-dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role:
        return {"save": save_rank, "split": split_rank, "baseline": baseline}[args.role](args)

    from electra.checkpoint import run_layout as layout
    from electra.checkpoint import universal as uc

    began = time.perf_counter()
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((ln.split(":", 1)[1].strip() for ln in cpu.splitlines() if ln.startswith("Model name")), "?")
    cores = os.cpu_count() or 1
    print(f"CPU: {model}; {cores} cores; load average {os.getloadavg()}", flush=True)
    ranks = [int(x) for x in args.ranks.split(",")]
    work = Path(args.work or tempfile.mkdtemp(prefix="universal-conversion-"))
    work.mkdir(parents=True, exist_ok=True)
    run = work / "run"
    shutil.rmtree(run, ignore_errors=True)
    size = ["--layers", str(args.layers), "--hidden", str(args.hidden), "--stage", str(args.stage)]

    t = time.perf_counter()
    params = launch("save", args.saved_ranks, work / "results", ["--run", str(run), *size])[0]["params"]
    step_dir = layout.find_latest(run)
    states = sorted(step_dir.glob("*optim_states.pt"))
    state_bytes = sum(f.stat().st_size for f in states)
    timeout = uc.conversion_timeout(step_dir)
    print(f"checkpoint: ELECTRA {args.layers} layers, hidden {args.hidden}, {params / 1e6:.1f}M parameters, "
          f"ZeRO-{args.stage} fp32 saved by {args.saved_ranks} ranks in {time.perf_counter() - t:.0f} s: "
          f"{len(states)} partition files, {state_bytes / MB:.0f} MB optimiser state, "
          f"{folder_bytes(step_dir) / MB:.0f} MB in all; conversion_timeout {timeout:.0f} s", flush=True)
    for f in step_dir.iterdir():  # every converter starts from a warm page cache
        if f.is_file():
            with open(f, "rb") as fh:
                while fh.read(16 * MB):
                    pass

    out, ref = uc.universal_dir(step_dir), work / "deepspeed.universal"
    converters = [("deepspeed", 1), *(("split", w) for w in ranks)]
    runs: dict[tuple[str, int], list[list[dict]]] = {c: [] for c in converters}
    checks: dict[tuple[str, int], str] = {}
    out_bytes = 0
    for rep in range(args.repeats):
        last = rep == args.repeats - 1
        for kind, world in converters:
            shutil.rmtree(out, ignore_errors=True)
            results = launch("baseline" if kind == "deepspeed" else kind, world, work / "results",
                             ["--step-dir", str(step_dir)])
            runs[(kind, world)].append(results)
            wall = max(r["end"] for r in results) - min(r["start"] for r in results)
            print(f"  round {rep + 1}/{args.repeats}: {kind} x{world}: {wall:.2f} s", flush=True)
            if not uc.is_converted(step_dir):
                raise RuntimeError(f"{kind} x{world}: no complete {out}")
            if last and kind == "deepspeed":
                out_bytes = folder_bytes(out)
                shutil.rmtree(ref, ignore_errors=True)
                shutil.move(str(out), ref)
            elif last:
                ok, why = same_files(out, ref)
                checks[(kind, world)] = ("yes: " if ok else "NO: ") + why
        shutil.rmtree(out, ignore_errors=True)

    sums = {c: summarise(r) for c, r in runs.items()}
    base = sums[("deepspeed", 1)]["median_s"]
    print(f"\nuniversal conversion of {step_dir.name}: {state_bytes / MB:.0f} MB optimiser state in "
          f"{len(states)} partitions -> {out_bytes / MB:.0f} MB universal folder; median of {args.repeats} "
          f"round(s), fresh processes, warm page cache")
    if max(ranks) > cores:
        print(f"NOTE: {cores} CPU cores: {max(ranks)} ranks time-slice them (a rank per core or node is "
              "what a resume has)")
    head = (f"{'converter':<10} {'ranks':>5} {'wall s':>7} {'min-max':>13} {'ratio':>6} {'opt MB':>7} "
            f"{'timeout s':>9} {'used':>6} {'max wait s':>10} {'wait used':>9}  output = DeepSpeed's")
    print(head)
    print("-" * len(head))
    for (kind, world), s in sums.items():
        walls = s["wall_s"]
        wait = s["longest_wait_s"] if kind == "split" and world > 1 else None
        print(f"{kind:<10} {world:>5} {s['median_s']:>7.2f} {min(walls):>6.2f}-{max(walls):<6.2f} "
              f"{s['median_s'] / base:>6.2f} {state_bytes / MB:>7.0f} {timeout:>9.0f} "
              f"{s['median_s'] / timeout:>6.2%} "
              + (f"{wait:>10.2f} {wait / timeout:>9.2%}" if wait is not None else f"{'-':>10} {'-':>9}")
              + f"  {checks.get((kind, world), '(reference)' if kind == 'deepspeed' else '-')}")
    print("\nsteps: the slowest rank's work, seconds (median over rounds)")
    print(f"{'converter':<10} {'ranks':>5} " + " ".join(f"{s:>8}" for s in STEPS))
    for (kind, world), s in sums.items():
        print(f"{kind:<10} {world:>5} " + " ".join(f"{s['steps_s'][n]:>8.2f}" for n in STEPS))
    print(f"\nload average {os.getloadavg()}; {time.perf_counter() - began:.0f} s in all")

    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "cpu": model, "cores": cores, "params": params, "layers": args.layers, "hidden": args.hidden,
            "stage": args.stage, "saved_ranks": args.saved_ranks, "optimizer_state_bytes": state_bytes,
            "universal_bytes": out_bytes, "conversion_timeout_s": timeout, "repeats": args.repeats,
            "results": [{"converter": k, "ranks": w, **sums[(k, w)], "ratio": sums[(k, w)]["median_s"] / base,
                         "same_as_deepspeed": checks.get((k, w)), "rounds": runs[(k, w)]} for k, w in converters],
        }, indent=1))
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
