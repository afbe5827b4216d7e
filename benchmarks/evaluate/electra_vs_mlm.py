"""ELECTRA vs MLM at equal training FLOPs: pre-train both, fine-tune every checkpoint, compare.

    .venv/bin/python benchmarks/evaluate/electra_vs_mlm.py --corpus CORPUS --glue-dir GLUE --out DIR \
        [--preset mini] [--electra-steps N | --budget-flops F] [--checkpoints 3] [--seeds 3] \
        [--tasks SST-2,MRPC,CoLA,STS-B] [--max-train-examples N] [--threads 2]
    .venv/bin/python benchmarks/evaluate/electra_vs_mlm.py --sweep --corpus CORPUS --out DIR [--sweep-flops F]

``CORPUS`` is a built corpus; the books one comes from ``python -m cli.build_corpus --source
../shared/data/corpus/gutenberg --out X --profile books --validation-fraction 0.05``.

Fairness by construction. Both runs use the same preset (discriminator size, tokenizer, batch,
seed, optimiser settings) and differ only in ``objective.kind``. The trainer's data order is a
function of (corpus, seed, batch), so both read the same stream from the same first batch; MLM is
cheaper per token (no generator, no replaced-token head), so at equal FLOPs it runs
proportionally MORE steps over the same stream and sees more tokens. Each run sets
``optimizer.total_steps`` to its own step count and the warm-up to the same fraction of it, so
both schedules decay to 0 exactly at the budget. (The alternative, equal steps, gives ELECTRA
more compute and is not what is compared here.)

Budget. FLOPs = non-pad tokens seen x ``electra.model.flops.training_flops_per_token`` (ELECTRA's
includes its generator). ``--electra-steps`` fixes ELECTRA's steps; ``--budget-flops`` derives
them from the corpus' mean non-pad tokens per example (manifest). ELECTRA runs first; MLM gets
the FLOPs ELECTRA spent (its final checkpoint's ``tokens_seen`` x its FLOPs per token) at
ELECTRA's measured tokens per step, i.e. ``steps x f_electra / f_mlm`` steps, so the two budgets
agree up to rounding to whole steps and the length spread of the extra batches (the test
recomputes both from the runs' files). A rerun into the same ``--out`` must use the same
settings (``intent.json``), since finished stages and evaluations are reused.

Checkpoints. ``--checkpoints K`` saves at 1/2^(K-1), ..., 1/4, 1/2, 1 of each run's steps: the
same FLOPs fractions for both objectives. The trainer is run in stages (``--max-steps`` = the
next checkpoint), resuming exactly from the previous one; a rerun of the same command skips the
finished stages, rows whose ``eval/ROW/results.json`` holds every task and seed, and the
random-initialisation export, so a run cut off by the end of a session continues where it was.

Fine-tuning. Every row (each checkpoint of both runs, plus ``electra.random_init``'s export of the
untrained model: "no pre-training") goes through ``python -m cli.evaluate`` with one recipe:
the flags built by ``finetune_flags`` (saved in results.json and under the table). Defaults: the
paper's Small recipe (LLRD 0.8, batch 32, length 128, 10% warm-up) at lr 1e-3, as a model this
narrow after a short pre-training needs more than the paper's 3e-4 (the demo's 64-wide tiny model
uses 6e-3); 3 epochs for every task (STS-B's paper 10 would dominate the time) and at most
``--max-train-examples`` (2000) training rows per task, so SST-2's 67k rows do not either; the dev
sets are whole. The pre-training wall times come from the checkpoints' ``meta.json``. Table and
plot: ``electra_vs_mlm_report``.

Sweep (``--sweep``): trains each ``--candidates`` size (HIDDENxLAYERS; heads = hidden/64, FFN
4 x hidden, the preset's embedding and generator fraction) with the ELECTRA objective for the
same ``--sweep-flops`` and prints throughput, what one hour reaches, and validation losses at
that equal budget: the evidence the preset size was chosen on.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.evaluate.electra_vs_mlm_report import collect_row, write_report
from electra.checkpoint import run_layout
from electra.config import load_config
from electra.model.flops import training_flops_per_token

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "electra" / "configs"
OBJECTIVES = ("electra", "mlm")
DEFAULT_ELECTRA_STEPS = 2000  # the mini preset's schedule: under an hour of ELECTRA on 2 idle cores


def preset_path(preset: str) -> Path:
    p = Path(preset)
    return p if p.suffix == ".json" else CONFIGS / f"{preset}.json"


def corpus_stats(corpus: Path) -> tuple[int, float]:
    """(tokenizer vocabulary size, mean non-pad tokens per training example) from the manifest."""
    m = json.loads((corpus / "manifest.json").read_text())
    train = m["splits"]["train"]
    return int(m["tokenizer"]["vocab_size"]), train["num_tokens"] / train["num_examples"]


def corpus_seq_len(corpus: Path) -> int:
    return int(json.loads((corpus / "manifest.json").read_text())["seq_len"])


def flops_per_token(preset: Path, kind: str, vocab: int, overrides: list[str] = (), *, seq_len: int) -> float:
    """The trainer's own accounting for this preset on this corpus (vocabulary and sequence length
    from the corpus, as the trainer resolves them)."""
    cfg = load_config(preset, [f"data.seq_len={seq_len}", *overrides, f"objective.kind={kind}",
                               f"model.vocab_size={vocab}"])
    return training_flops_per_token(cfg)


def checkpoint_steps(total: int, k: int) -> list[int]:
    """Steps at 1/2^(k-1), ..., 1/2, 1 of ``total`` (duplicates dropped for very short runs)."""
    return sorted({max(1, round(total / 2 ** (k - 1 - i))) for i in range(k)})


def run(cmd: list[str], log: Path, threads: int) -> None:
    """Run a child (stdout/stderr appended to ``log``); a failure stops the benchmark naming the log."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               TOKENIZERS_PARALLELISM="false", PREFECT_SERVER_ANALYTICS_ENABLED="false")
    # cli.evaluate's Prefect server starts slowly on a busy 2-core machine (default 20 s)
    env.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    log.parent.mkdir(parents=True, exist_ok=True)
    print("$ " + " ".join(cmd), flush=True)
    with open(log, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        rc = subprocess.run(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    if rc:
        raise SystemExit(f"command failed (exit {rc}), see {log}: {' '.join(cmd)}")


def read_meta(run_dir: Path, step: int) -> dict | None:
    d = run_layout.step_dir(run_dir, step)
    return run_layout.read_meta(d) if run_layout.is_complete(d) else None


def latest_step(run_dir: Path) -> int:
    return max((run_layout.step_of(d) for d in run_layout.step_dirs(run_dir)), default=0)


def pretrain(args, kind: str, total: int, stages: list[int], run_dir: Path, extra: list[str] = ()) -> None:
    """Train ``kind`` to ``total`` steps in stages ending at each checkpoint step (resumable)."""
    warmup = max(1, round(args.warmup_fraction * total))
    gcd = math.gcd(*stages)
    sets = [f"objective.kind={kind}", f"optimizer.total_steps={total}", f"optimizer.warmup_steps={warmup}",
            f"train.keep_last={len(stages) + 1}", f"train.seed={args.seed}",
            # validation losses at every checkpoint when they share a coarse grid, else only at the end
            f"train.eval_every={gcd if gcd * 8 >= total else total}", *args.set, *extra]
    for step in stages:
        if read_meta(run_dir, step) is not None:
            continue
        if latest_step(run_dir) > step:
            raise SystemExit(f"{run_dir}: checkpoint step {step} is missing but a later one exists; "
                             "delete the run directory to redo it")
        cmd = [sys.executable, "electra/train.py", "--config", str(preset_path(args.preset)),
               "--data", str(args.corpus), "--out", str(run_dir), "--max-steps", str(step),
               "--save-every", str(total)]
        for s in sets:
            cmd += ["--set", s]
        run(cmd, run_dir.parent / f"{run_dir.name}.log", args.threads)


def finetune_flags(args) -> list[str]:
    """The one fine-tuning recipe every row gets."""
    flags = ["--glue-dir", str(args.glue_dir), "--tasks", args.tasks, "--seeds", str(args.seeds),
             "--size", "small", "--lr", str(args.ft_lr), "--batch-size", str(args.ft_batch),
             "--max-seq-len", "128", "--precision", "fp32", "--threads", str(args.threads)]
    if args.ft_epochs:
        flags += ["--epochs", str(args.ft_epochs)]
    if args.max_train_examples:
        flags += ["--max-train-examples", str(args.max_train_examples)]
    if args.max_eval_examples:
        flags += ["--max-eval-examples", str(args.max_eval_examples)]
    return flags


def evaluated(out: Path, tasks: list[str], seeds: int) -> bool:
    p = out / "results.json"
    if not p.exists():
        return False
    res = json.loads(p.read_text())
    return all(len(res.get("tasks", {}).get(t, {}).get("seeds", [])) >= seeds for t in tasks)


def check_intent(args, n_electra: int) -> None:
    """Refuse to resume ``--out`` under other settings: finished stages and evaluations are reused
    on a rerun, so a changed budget, seed, override or fine-tuning recipe would silently mix runs
    made under different plans. The first run writes OUT/intent.json; later runs must match it."""
    intent = {"preset": str(preset_path(args.preset)), "corpus": str(Path(args.corpus).resolve()),
              "electra_steps": n_electra, "checkpoints": args.checkpoints, "seed": args.seed,
              "warmup_fraction": args.warmup_fraction, "set": list(args.set),
              "finetune_flags": finetune_flags(args)}
    path = args.out / "intent.json"
    if path.exists():
        before = json.loads(path.read_text())
        changed = sorted(k for k in intent if before.get(k) != intent[k])
        if changed:
            raise SystemExit(f"{path}: this output folder was started with other settings ({', '.join(changed)}"
                             f" differ); rerun with the same ones, or use another --out")
    else:
        args.out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(intent, indent=2) + "\n")


def evaluate(args, checkpoint: Path, out: Path) -> None:
    if evaluated(out, args.task_list, args.seeds):
        return
    run([sys.executable, "-m", "cli.evaluate", "--checkpoint", str(checkpoint), "--out", str(out),
         *finetune_flags(args)], args.out / "logs" / f"eval_{out.name}.log", args.threads)


def plan_mlm_steps(electra_meta: dict, f_electra: float, f_mlm: float) -> int:
    """MLM steps spending the FLOPs ELECTRA spent, at ELECTRA's measured tokens per step. Both runs
    read the same stream, so the tokens cancel: ``round(steps * f_electra / f_mlm)``; the budgets
    then differ only by the rounding and by the lengths of the extra batches MLM reads."""
    return max(1, round(electra_meta["step"] * f_electra / f_mlm))


def compare(args) -> None:
    preset = preset_path(args.preset)
    cfg = load_config(preset, args.set)
    vocab, tokens_per_example = corpus_stats(args.corpus)
    f = {k: flops_per_token(preset, k, vocab, args.set, seq_len=corpus_seq_len(args.corpus)) for k in OBJECTIVES}
    n_electra = args.electra_steps or max(1, round(
        args.budget_flops / (f["electra"] * cfg.train.global_batch_size * tokens_per_example)))
    check_intent(args, n_electra)
    runs = args.out / "runs"
    plan = {"preset": str(preset), "flops_per_token": f, "checkpoints": args.checkpoints,
            "steps": {"electra": n_electra}, "stages": {"electra": checkpoint_steps(n_electra, args.checkpoints)}}
    print(f"ELECTRA: {n_electra} steps, checkpoints {plan['stages']['electra']}", flush=True)
    pretrain(args, "electra", n_electra, plan["stages"]["electra"], runs / "electra")
    n_mlm = plan_mlm_steps(read_meta(runs / "electra", n_electra), f["electra"], f["mlm"])
    plan["steps"]["mlm"], plan["stages"]["mlm"] = n_mlm, checkpoint_steps(n_mlm, args.checkpoints)
    print(f"MLM: {n_mlm} steps (equal FLOPs), checkpoints {plan['stages']['mlm']}", flush=True)
    pretrain(args, "mlm", n_mlm, plan["stages"]["mlm"], runs / "mlm")
    (args.out / "plan.json").write_text(json.dumps(plan, indent=2) + "\n")
    if args.pretrain_only:
        return

    random_dir = runs / "random_init"
    if not (random_dir / "discriminator" / "config.json").exists():
        run([sys.executable, "-m", "electra.random_init", "--config", str(preset), "--data", str(args.corpus),
             "--out", str(random_dir), "--seed", str(args.seed), *[a for s in args.set for a in ("--set", s)]],
            args.out / "logs" / "random_init.log", args.threads)
    setup = {"plan": plan, "finetune_flags": finetune_flags(args), "corpus": str(args.corpus),
             "tasks": args.task_list, "seeds": args.seeds, "max_train_examples": args.max_train_examples}
    table_order = [(kind, step) for kind in OBJECTIVES for step in plan["stages"][kind]] + [("random", 0)]
    done: dict[tuple[str, int], dict] = {}
    for kind, step in eval_order(plan["stages"]):
        if kind == "random":
            out = args.out / "eval" / "random_init"
            evaluate(args, random_dir, out)
            done[kind, step] = collect_row("random", 0, None, 0.0, out / "results.json")
        else:
            ck = run_layout.step_dir(runs / kind, step)
            out = args.out / "eval" / f"{kind}_{ck.name}"
            evaluate(args, ck, out)
            done[kind, step] = collect_row(kind, step, read_meta(runs / kind, step), f[kind], out / "results.json")
        # the report after every fine-tuned checkpoint: an interrupted comparison keeps what it has
        pending = [f"{k} step {s}" if k != "random" else "random init" for k, s in table_order if (k, s) not in done]
        text = write_report(args.out, [done[u] for u in table_order if u in done], {**setup, "pending": pending})
    print(text)


def eval_order(stages: dict[str, list[int]]) -> list[tuple[str, int]]:
    """The order checkpoints are fine-tuned in: both objectives' full budgets and the random
    initialisation first (the headline comparison), then the earlier checkpoints, latest first.
    Fine-tuning all of them takes longer than pre-training on a 2-core machine; an interrupted
    run then already holds the rows that matter most."""
    first = [(kind, stages[kind][-1]) for kind in OBJECTIVES] + [("random", 0)]
    depth = max(len(s) for s in stages.values())
    rest = [(kind, stages[kind][-1 - i]) for i in range(1, depth) for kind in OBJECTIVES if i < len(stages[kind])]
    return first + rest


def sweep(args) -> None:
    """Equal-FLOPs ELECTRA runs of candidate sizes: throughput and validation losses."""
    preset = preset_path(args.preset)
    cfg = load_config(preset, args.set)
    vocab, tokens_per_example = corpus_stats(args.corpus)
    batch = cfg.train.global_batch_size
    lines = ["| size | train FLOPs/token | steps | tokens | tokens/s | 1 h: steps | 1 h: tokens "
             "| val disc loss | val gen loss | val disc AUC | wall s |", "|" + "---|" * 11]
    for cand in args.candidates.split(","):
        h, layers = (int(x) for x in cand.split("x"))
        extra = [f"model.hidden_size={h}", f"model.num_layers={layers}", f"model.num_heads={max(1, h // 64)}",
                 f"model.intermediate_size={4 * h}"]
        fpt = flops_per_token(preset, "electra", vocab, [*args.set, *extra], seq_len=corpus_seq_len(args.corpus))
        steps = max(1, round(args.sweep_flops / (fpt * batch * tokens_per_example)))
        run_dir = args.out / "sweep" / cand
        t0 = time.time()
        pretrain(args, "electra", steps, [steps], run_dir, extra)
        recs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
        train = [r for r in recs if r.get("kind") == "train"][1:] or [r for r in recs if r.get("kind") == "train"]
        tps = sorted(r["tokens_per_sec"] for r in train)[len(train) // 2]
        ev = [r for r in recs if r.get("kind") == "eval"][-1]
        meta = read_meta(run_dir, steps)
        lines.append(f"| {cand} | {fpt:.3g} | {steps} | {meta['tokens_seen']} | {tps:.0f} | "
                     f"{tps * 3600 / (batch * tokens_per_example):.0f} | {tps * 3600:.3g} | "
                     f"{ev['eval_disc_loss']:.4f} | {ev['eval_gen_loss']:.3f} | {ev['eval_disc_auc']:.3f} | "
                     f"{time.time() - t0:.0f} |")
        print(lines[-1], flush=True)
    table = "\n".join(lines)
    (args.out / "sweep.md").write_text(f"budget {args.sweep_flops:.3g} FLOPs, batch {batch}\n\n{table}\n")
    print(table)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", type=Path, required=True, help="built corpus directory (manifest.json)")
    p.add_argument("--out", type=Path, required=True, help="output directory (rerun to resume)")
    p.add_argument("--glue-dir", type=Path, help="GLUE folder (official layout)")
    p.add_argument("--tasks", default="SST-2,MRPC,CoLA,STS-B")
    p.add_argument("--preset", default="mini", help="preset name in electra/configs or a config JSON")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--electra-steps", type=int,
                   help=f"ELECTRA steps (MLM: equal FLOPs; default {DEFAULT_ELECTRA_STEPS})")
    g.add_argument("--budget-flops", type=float, help="training FLOPs budget per objective")
    p.add_argument("--checkpoints", type=int, default=3, help="K checkpoints at 1/2^(K-1) ... 1/2, 1 of the budget")
    p.add_argument("--seeds", type=int, default=3, help="fine-tuning seeds per task")
    p.add_argument("--seed", type=int, default=42, help="pre-training seed (both runs, random init)")
    p.add_argument("--warmup-fraction", type=float, default=0.1, help="LR warm-up share of each run's steps")
    p.add_argument("--max-train-examples", type=int, default=2000, help="fine-tuning training cap per task (0: all)")
    p.add_argument("--max-eval-examples", type=int, default=0, help="dev cap per task (0: all)")
    p.add_argument("--ft-lr", type=float, default=1e-3, help="fine-tuning peak LR (every row)")
    p.add_argument("--ft-epochs", type=float, default=3,
                   help="fine-tuning epochs, every task (0: the paper's per task)")
    p.add_argument("--ft-batch", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="config override for both runs and the random init (repeatable)")
    p.add_argument("--pretrain-only", action="store_true", help="stop after both pre-training runs")
    p.add_argument("--sweep", action="store_true", help="size sweep instead of the comparison")
    p.add_argument("--candidates", default="128x4,256x4,256x6", help="sweep sizes HIDDENxLAYERS")
    p.add_argument("--sweep-flops", type=float, default=1.5e13, help="sweep budget per candidate")
    args = p.parse_args(argv)
    args.task_list = [t for t in args.tasks.split(",") if t]
    if not args.sweep:
        if not (args.electra_steps or args.budget_flops):
            args.electra_steps = DEFAULT_ELECTRA_STEPS
        if not args.pretrain_only and not args.glue_dir:
            p.error("--glue-dir is required (or --pretrain-only)")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    sweep(args) if args.sweep else compare(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
