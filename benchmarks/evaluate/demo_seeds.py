"""How robust is the demo's gain? Pre-train the demo's recipe with several seeds and report, per
pre-training seed, the fine-tuned score of the pre-trained model beside the same model at random
initialisation (the baseline, measured in the same run), and the spread of the gain.

    .venv/bin/python benchmarks/evaluate/demo_seeds.py [--demo-out demo_out] [--pretrain-seeds 1,2,3] \
        [--steps 3000] [--seeds 3] [--out bench_out/demo_seeds]

Reuses the corpus and the SST-2-format task ``make demo`` built in ``--demo-out`` (run it first),
and the demo's own recipe (``cli.demo``: ``PRETRAIN``, ``FINETUNE``), so the only thing that
changes between rows is ``train.seed``: the initial weights, masks and the sample order. For each
seed: ``electra.train`` (3,000 steps), ``electra.random_init`` with the same seed (the run's
step 0) and ``cli.evaluate`` of both with the same fine-tuning seeds. A row's gain counts as
"outside the spread" when the worst pre-trained fine-tuning seed beats the best random one.
Prints a table and writes ``results.json``; a rerun skips the seeds already evaluated.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from cli import demo

REPO = Path(__file__).resolve().parents[2]


def _run(cmd: list[str]) -> None:
    start = time.monotonic()
    subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(f"  {cmd[2]} took {time.monotonic() - start:.0f} s", flush=True)


def one_seed(seed: int, *, corpus: Path, glue: Path, out: Path, steps: int, seeds: int) -> dict:
    py, recipe = sys.executable, [a for kv in demo.PRETRAIN for a in ("--set", kv)]
    run, init = out / f"run_{seed}", out / f"random_init_{seed}"
    _run([py, "-m", "electra.train", "--config", demo.TINY, "--data", str(corpus), *recipe, "--seed", str(seed),
          "--out", str(run), "--max-steps", str(steps), "--save-every", str(steps),
          "--set", f"optimizer.total_steps={steps}", "--set", f"optimizer.warmup_steps={max(1, steps // 10)}"])
    _run([py, "-m", "electra.random_init", "--config", demo.TINY, "--data", str(corpus), *recipe,
          "--seed", str(seed), "--out", str(init)])
    scores = {}
    for name, checkpoint in (("pre_trained", run), ("random_init", init)):
        ev = out / f"eval_{seed}" / name
        _run([py, "-m", "cli.evaluate", "--checkpoint", str(checkpoint), "--glue-dir", str(glue), "--tasks", "SST-2",
              "--seeds", str(seeds), "--size", "small", *demo.FINETUNE, "--out", str(ev)])
        scores[name] = demo.seed_scores(ev / "results.json")
    pre, base = scores["pre_trained"], scores["random_init"]
    return {"seed": seed, "pre_trained": pre, "random_init": base,
            "gain": statistics.median(pre) - statistics.median(base), "outside_spread": min(pre) > max(base)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--demo-out", default="demo_out", help="the folder make demo wrote (corpus/, glue/)")
    p.add_argument("--pretrain-seeds", default="1,2,3", help="comma-separated train.seed values")
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--seeds", type=int, default=3, help="fine-tuning seeds per model")
    p.add_argument("--out", default="bench_out/demo_seeds")
    args = p.parse_args(argv)
    demo_out, out = Path(args.demo_out).resolve(), Path(args.out).resolve()
    corpus, glue = demo_out / "corpus", demo_out / "glue"
    if not (corpus / "manifest.json").is_file() or not (glue / "SST-2").is_dir():
        print(f"demo_seeds: error: {demo_out}: no demo corpus and task; run `make demo` first", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    results_path = out / "results.json"
    rows = {r["seed"]: r for r in json.loads(results_path.read_text())} if results_path.exists() else {}
    for seed in (int(s) for s in args.pretrain_seeds.split(",")):
        if seed not in rows:
            print(f"pre-training seed {seed}", flush=True)
            rows[seed] = one_seed(seed, corpus=corpus, glue=glue, out=out, steps=args.steps, seeds=args.seeds)
            results_path.write_text(json.dumps(list(rows.values()), indent=2) + "\n")
    print(f"\n{'seed':>4} {'pre-trained':>12} {'random':>8} {'gain':>7}  outside the spread")
    for r in rows.values():
        print(f"{r['seed']:>4} {statistics.median(r['pre_trained']):12.1f} {statistics.median(r['random_init']):8.1f} "
              f"{r['gain']:+7.1f}  {'yes' if r['outside_spread'] else 'no'}")
    gains = [r["gain"] for r in rows.values()]
    print(f"gain: median {statistics.median(gains):+.1f}, range {min(gains):+.1f} to {max(gains):+.1f}; "
          f"outside the spread for {sum(r['outside_spread'] for r in rows.values())} of {len(rows)} seeds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
