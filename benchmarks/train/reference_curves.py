"""Reference training curves: extract them from a run directory, produce the ``tiny`` preset's
reference on a fixed subset of the real books, and compare a run against a reference.

    # a reference curve from any finished (or partial) run directory
    .venv/bin/python benchmarks/train/reference_curves.py --from-run RUN_DIR --name NAME \
        --out tests/assets/curves/NAME.json
    # the tiny preset's reference on the fixed books corpus, end to end (build, train 3 seeds)
    .venv/bin/python benchmarks/train/reference_curves.py --tiny-books --work /work/cmp/C/tiny_books \
        [--steps 300] [--seeds 42 1 2] --out tests/assets/curves/tiny_books.json
    # is a run within the band of a reference?
    .venv/bin/python benchmarks/train/reference_curves.py --check RUN_DIR --against tests/assets/curves/tiny_books.json

**Curve.** Per logged train step (``kind: "train"`` records of ``RUN/metrics.jsonl``): ``gen_loss``,
``disc_loss``, ``disc_acc``, ``disc_auc`` and ``tokens_seen``; every ``kind: "eval"`` record with its
``eval_*`` fields. **Provenance**: the command, the git commit (``+dirty`` when the tree has
changes), the run's ``config.json`` and its sha256, the corpus identity from the newest checkpoint's
``meta.json`` (``manifest_sha256``, ``tokenizer_sha256``, ``data_sha256``), the CPU kind (``AMX`` /
``AVX512`` / ``AVX2``, ``electra.distributed.hardware.cpu_kind``: the matmul kernels, hence the fp32 rounding,
differ between them), the torch version and the date.

**Fixed corpus.** Five named Gutenberg books (``BOOKS``, smallest of the 58, 1.4 MB) through the
project's real builder (``cli.build_corpus --profile books``) with a 4000-token WordPiece
vocabulary: cheap enough to build inside a test, and built by the same code as every real corpus, so
a change of the builder that alters the data shows up as a changed ``corpus_fingerprint`` (sha256
over the tokenizer's and every shard's sha256, not over ``manifest.json``, whose stats hold
timings) rather than as a mysterious drift of the curve. ``--validation-fraction 0.2`` of five
documents draws none (the split hashes documents), so the corpus has no validation split and the
short runs spend no time on evaluation.

**Band.** The reference is the preset's seed (42); the same run with other seeds measures how far
an unbroken run may wander. Per metric, ``spread`` = the median over logged steps of the range
(max - min) across seeds, and the band is ``max(K * spread, FLOOR[metric])``. A run is within the
band when every logged value of every metric differs from the reference at the same step by at
most the band. The same code with the same seed reproduces the reference up to fp32 rounding
(AMX vs AVX2 kernels, thread count), far inside the band; a broken objective or optimiser moves
the curves by several seed spreads. The median (not the maximum) keeps one noisy early step from
widening the band for the whole run; ``K`` covers the rest.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from electra.checkpoint import run_layout
from electra.distributed.hardware import cpu_kind

REPO = Path(__file__).resolve().parents[2]
GUTENBERG = REPO.parent / "shared" / "data" / "corpus" / "gutenberg"
BOOKS = ("pg14474.txt", "pg23.txt", "pg5827.txt", "pg1232.txt", "pg575.txt")  # order is part of the recipe
VOCAB_SIZE = 4000
VALIDATION_FRACTION = 0.2
PRESET = "electra/configs/tiny.json"
METRICS = ("gen_loss", "disc_loss", "disc_acc", "disc_auc")
K = 1.0
# Smallest bands: above fp32 rounding drift between CPU kinds over a short run, below any real change.
FLOOR = {"gen_loss": 0.05, "disc_loss": 0.02, "disc_acc": 0.01, "disc_auc": 0.01}


def build_command(out: Path) -> list[str]:
    """The real builder's command line for the fixed corpus (see the module docstring)."""
    cmd = [sys.executable, "-m", "cli.build_corpus", "--out", str(out), "--profile", "books",
           "--vocab-size", str(VOCAB_SIZE), "--validation-fraction", str(VALIDATION_FRACTION)]
    for name in BOOKS:  # relative to the repository (the builder runs there): the asset names no host path
        cmd += ["--source", os.path.relpath(GUTENBERG / name, REPO)]
    return cmd


def build_fixed_corpus(out: Path) -> Path:
    """Build the fixed books corpus into ``out``; raise with the builder's log tail on failure."""
    missing = [n for n in BOOKS if not (GUTENBERG / n).is_file()]
    if missing:
        raise FileNotFoundError(f"{GUTENBERG}: missing {', '.join(missing)}")
    # Output to a file, own session, group killed after: the builder's Prefect server and Ray
    # children could otherwise outlive it holding a pipe open (tests/_procs.py has the story).
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(build_command(out), cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            code = proc.wait()
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        log.seek(0)
        if code != 0:
            raise RuntimeError(f"build-corpus failed ({code}):\n{log.read()[-4000:]}")
    return out


def corpus_fingerprint(corpus: Path) -> str:
    """sha256 over the tokenizer's and the shards' sha256 (split, name order): the data itself."""
    m = json.loads((corpus / "manifest.json").read_text())
    parts = [m["tokenizer"]["sha256"]]
    for s in sorted(m["shards"], key=lambda s: (s["split"], Path(s["path"]).name)):
        parts.append(f'{s["split"]}:{Path(s["path"]).name}:{s["sha256"]}')
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def train_command(corpus: Path, out: Path, *, steps: int, seed: int | None = None,
                  sets: tuple[str, ...] = ()) -> list[str]:
    """The trainer's command line: the preset, ``steps`` of its schedule, no intermediate checkpoint."""
    cmd = [sys.executable, "electra/train.py", "--config", PRESET, "--data", str(corpus), "--out", str(out),
           "--max-steps", str(steps), "--save-every", str(steps)]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    for kv in sets:
        cmd += ["--set", kv]
    return cmd


def run_trainer(cmd: list[str], log: Path) -> None:
    with open(log, "w") as f:
        proc = subprocess.run(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise RuntimeError(f"trainer failed ({proc.returncode}), log {log}:\n{log.read_text()[-3000:]}")


def git_commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()
    commit = git("rev-parse", "HEAD") or "unknown"
    return commit + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def read_metrics(run_dir: Path) -> tuple[list[dict], list[dict]]:
    """(train points, eval records) of ``RUN/metrics.jsonl``; a malformed line is an error naming it."""
    path = run_dir / run_layout.METRICS
    train, evals = [], []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{n}: not JSON: {e}") from None
        if rec.get("kind") == "train":
            missing = [k for k in ("step", *METRICS) if k not in rec]
            if missing:
                raise ValueError(f"{path}:{n}: train record lacks {', '.join(missing)}")
            train.append({k: rec.get(k) for k in ("step", *METRICS, "tokens_seen")})
        elif rec.get("kind") == "eval":
            evals.append({k: v for k, v in rec.items() if k == "step" or k.startswith("eval_")})
    if not train:
        raise ValueError(f"{path}: no train records")
    return train, evals


def extract(run_dir: Path, name: str) -> dict:
    """A reference curve + provenance from a run directory (see the module docstring)."""
    train, evals = read_metrics(run_dir)
    config_bytes = (run_dir / run_layout.CONFIG).read_bytes()
    steps = run_layout.step_dirs(run_dir)
    meta = run_layout.read_meta(steps[-1]) if steps else {}
    import torch
    return {
        "name": name,
        "run_dir": str(run_dir),
        "provenance": {
            "command": shlex.join([Path(sys.executable).name] + sys.argv),
            "git_commit": git_commit(),
            "config_sha256": hashlib.sha256(config_bytes).hexdigest(),
            "config_hash": meta.get("config_hash"),
            "manifest_sha256": meta.get("manifest_sha256"),
            "tokenizer_sha256": meta.get("tokenizer_sha256"),
            "data_sha256": meta.get("data_sha256"),
            "cpu_kind": cpu_kind(),
            "torch": torch.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
        "config": json.loads(config_bytes),
        "train": train,
        "eval": evals,
    }


def measure_band(reference: list[dict], others: list[list[dict]]) -> dict:
    """Per metric: the seed spread (median over common steps of max - min across runs) and the band."""
    by_step = [{p["step"]: p for p in run} for run in [reference, *others]]
    steps = sorted(set.intersection(*(set(r) for r in by_step)))
    out = {}
    for m in METRICS:
        ranges = []
        for s in steps:
            vals = [r[s][m] for r in by_step if r[s][m] is not None]
            if len(vals) >= 2:
                ranges.append(max(vals) - min(vals))
        spread = statistics.median(ranges) if ranges else 0.0
        out[m] = {"spread": spread, "max_range": max(ranges, default=0.0),
                  "band": max(K * spread, FLOOR[m])}
    return {"k": K, "floor": FLOOR, "steps": steps, "seeds_compared": len(by_step), "metrics": out}


def check(points: list[dict], asset: dict) -> list[str]:
    """Violations (empty = within band) of train ``points`` against an asset with a ``band``; every
    step of ``points`` must be in the reference, and a run without logged steps is a violation
    (nothing compared is not "within band")."""
    if not points:
        return ["no logged train steps to compare (is the run's metrics.jsonl empty?)"]
    ref = {p["step"]: p for p in asset["train"]}
    bands = {m: asset["band"]["metrics"][m]["band"] for m in METRICS}
    bad = []
    for p in points:
        if p["step"] not in ref:
            bad.append(f"step {p['step']}: not in the reference (it has {sorted(ref)})")
            continue
        for m in METRICS:
            got, want = p[m], ref[p["step"]][m]
            if got is None or want is None:
                if got != want:
                    bad.append(f"step {p['step']} {m}: {got} vs reference {want}")
            elif abs(got - want) > bands[m]:
                bad.append(f"step {p['step']} {m}: {got:.4f} vs reference {want:.4f} (band {bands[m]:.4f})")
    return bad


def tiny_books(work: Path, steps: int, seeds: list[int], reuse: bool) -> dict:
    """Build the fixed corpus, train the preset ``steps`` steps per seed, return the asset (seed 0 of
    ``seeds`` is the reference; the others measure the band)."""
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / "corpus"
    if not (reuse and (corpus / "manifest.json").exists()):
        build_fixed_corpus(corpus)
    runs = []
    for seed in seeds:
        run = work / f"seed_{seed}"
        if not (reuse and (run / run_layout.METRICS).exists()):
            run_trainer(train_command(corpus, run, steps=steps, seed=seed), work / f"seed_{seed}.log")
        runs.append(run)
    asset = extract(runs[0], "tiny_books")
    asset["corpus"] = {"books": list(BOOKS), "vocab_size": VOCAB_SIZE,
                       "validation_fraction": VALIDATION_FRACTION,
                       "build_command": shlex.join(["python"] + build_command(Path("CORPUS"))[1:]),
                       "fingerprint": corpus_fingerprint(corpus)}
    asset["seeds"] = seeds
    asset["train_command"] = shlex.join(["python"] + train_command(Path("CORPUS"), Path("RUN"), steps=steps,
                                                                   seed=seeds[0])[1:])
    asset["seed_runs"] = {str(s): read_metrics(r)[0] for s, r in zip(seeds[1:], runs[1:])}
    asset["band"] = measure_band(asset["train"], list(asset["seed_runs"].values()))
    return asset


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--from-run", type=Path, help="extract the curve of this run directory")
    mode.add_argument("--tiny-books", action="store_true", help="produce the tiny preset's books reference")
    mode.add_argument("--check", type=Path, help="compare this run directory with --against")
    p.add_argument("--name", help="curve name (--from-run)")
    p.add_argument("--out", type=Path, help="asset JSON to write")
    p.add_argument("--work", type=Path, help="--tiny-books: scratch directory (corpus, runs)")
    p.add_argument("--steps", type=int, default=300, help="--tiny-books: steps per seed (of the 300 scheduled)")
    p.add_argument("--seeds", type=int, nargs="+", default=[42, 1, 2], help="--tiny-books: reference seed first")
    p.add_argument("--reuse", action="store_true", help="--tiny-books: keep a corpus/run already in --work")
    p.add_argument("--against", type=Path, help="--check: the reference asset")
    a = p.parse_args()
    if a.check:
        points = read_metrics(a.check)[0]
        bad = check(points, json.loads(a.against.read_text()))
        print("\n".join(bad) if bad else
              f"within band at all {len(points)} logged steps ({points[0]['step']}..{points[-1]['step']})")
        sys.exit(1 if bad else 0)
    if a.from_run:
        if not (a.name and a.out):
            p.error("--from-run needs --name and --out")
        asset = extract(a.from_run, a.name)
    else:
        if not (a.work and a.out):
            p.error("--tiny-books needs --work and --out")
        asset = tiny_books(a.work, a.steps, a.seeds, a.reuse)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(asset, indent=1, sort_keys=True) + "\n")
    print(f"wrote {a.out}\ncommand: {asset['provenance']['command']}")


if __name__ == "__main__":
    main()
