"""The chain under faults together, for as long as asked: the soak the project runs itself.

    .venv/bin/python -m benchmarks.lifecycle.soak --minutes 30 [--seed 0] [--json soak.json]
    .venv/bin/python -m benchmarks.lifecycle.soak --smoke          # one small round (the test suite's)

A loopback S3-API server (moto) sits behind a counting proxy (``benchmarks.shared.counting_s3``) whose
seeded ``chaos`` rule (``tests._s3proxy``) fails a share of every request for the whole soak:
503 SlowDown, connections dropped unanswered, bodies cut short, reads stalled past the client's
timeout. First, without faults, a reference: build-corpus s3:// -> s3:// and a tiny
pre-training run from that corpus. Then rounds until the time is up (at least one), round ``r``
drawing everything from ``seed + r``:

1. **build** through the failing store on a fresh two-node Ray cluster whose worker node is
   SIGKILLed mid-stage (``benchmarks.shared.node_loss_build.build_once``, the kill points of
   ``tests/flows/test_build_corpus_node_loss``, in turn): its shards (the manifest's sha256s)
   and tokenizer must be byte-identical to the reference's.
2. **train** from that corpus through the failing store, SIGKILLed (the whole process group) at
   a seeded schedule: after a random step, during the resume's load, in the middle of a
   checkpoint save, inside a checkpoint commit; each time rerun with the same command until it
   finishes. After every kill ``latest`` must name a complete checkpoint; the per-step losses
   of the finished run must equal the reference's bitwise.
3. **damage**: copies of the corpus with a byte flipped in a shard, with a shard cut to half
   its size, and with a byte flipped in the manifest or the tokenizer (in turn); and a byte
   flipped in the finished run's newest checkpoint. The trainer must stop in one line naming
   the damaged file; with ``data.skip_corrupt=true`` the truncated shard (found by its size
   before step 1) is skipped with a line naming it. A flipped byte in a shard is always an
   error, never a skip: it is found mid-epoch by the rank reading it (``electra.data.corpus``).

Printed per fault kind: injected, survived (the output still identical), named (the error or
skip named the file); the store's requests and the refused ones (each a retry somewhere), and
the time lost (a faulted phase's time over the reference's). The kills and damages are made at
chosen points (hooks, byte offsets), never raced against a clock; which requests the proxy
fails depends on the order concurrent requests reach it, so two soaks of one seed fail the same
share of requests, not the same ones.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

CHAOS = {"slowdown": 0.15, "drop": 0.03, "cut": 0.01, "stall": 0.002, "stall_s": 16.0}
STORE_FAULTS = ("slowdown", "reset", "cut", "stall")
KILL_KINDS = ("after_step", "in_resume", "in_save", "in_commit")
STEPS, SAVE_EVERY = 8, 2


class Soak:
    """One soak: the store, the reference, the rounds' tallies (``tally``) and timings."""

    def __init__(self, s3: Any, work: Path, *, seed: int, docs: int, ranks: int):
        self.s3, self.work, self.seed, self.docs, self.ranks = s3, work, seed, docs, ranks
        self.bucket = ""
        self.tally: dict[str, dict[str, int]] = {}
        self.seconds: dict[str, list[float]] = {"build": [], "train": []}
        self.reference: dict[str, Any] = {}
        self.mismatches: list[str] = []

    def count(self, kind: str, *, injected: int = 0, survived: int = 0, named: int = 0) -> None:
        row = self.tally.setdefault(kind, {"injected": 0, "survived": 0, "named": 0})
        row["injected"] += injected
        row["survived"] += survived
        row["named"] += named

    # ------------------------------------------------------------------ the store
    def direct(self):
        """The store variables at moto itself (reads that check outputs, uploads)."""
        from benchmarks.shared.counting_s3 import CREDENTIALS, pointed_at

        host, port = self.s3.proxy.upstream
        return pointed_at({**CREDENTIALS, "AWS_ENDPOINT_URL": f"http://{host}:{port}"})

    def tokenizer_sha(self, corpus: str) -> str:
        from common import storage
        from pipelines import schema

        with self.direct():
            manifest = schema.Manifest.load(corpus)
            blob = storage.read_bytes(storage.join(corpus, manifest.tokenizer.path, schema.TOKENIZER_JSON))
        return hashlib.sha256(blob).hexdigest()

    # ------------------------------------------------------------------ phases
    def build(self, name: str, *, kill: str | None) -> tuple[dict, float]:
        from benchmarks.shared.node_loss_build import build_once

        start = time.monotonic()
        report = build_once(name, s3=self.s3, source=f"{self.bucket}/raw", out=f"{self.bucket}/{name}/corpus",
                            kill=kill, whole_stage=False, tmp=self.work)
        report["tokenizer_sha"] = self.tokenizer_sha(f"{self.bucket}/{name}/corpus")
        return report, time.monotonic() - start

    def train(self, corpus: str, out: Path, *hooks: str, extra: tuple[str, ...] = (), steps: int = STEPS):
        """One launch of the trainer (its own process group; ``hooks`` of
        ``tests/electra/_train_with_hooks.py``), through the proxy."""
        from tests._procs import run_in_group

        script = ["tests/electra/_train_with_hooks.py", "--kill-group", *hooks]
        flags = ["--config", "electra/configs/tiny.json", "--set", "data.seq_len=64", "--set", "train.log_every=1",
                 "--set", "data.shuffle_buffer=16", "--set", "optimizer.warmup_steps=2", "--set",
                 "optimizer.total_steps=40", "--set", "data.num_workers=2", "--max-steps", str(steps),
                 "--save-every", str(SAVE_EVERY), "--micro-batch", "4", "--seed", "7", "--set",
                 "train.global_batch_size=8", "--set", "train.eval_every=0", *extra]
        if self.ranks > 1:
            from common.ports import free_port

            prog = [str(Path(sys.executable).parent / "deepspeed"), "--num_gpus", str(self.ranks),
                    "--master_port", str(free_port()), *script]
        else:
            prog = [sys.executable, *script]
        env = {**os.environ, **self.s3.env, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
               "PYTHONPATH": str(REPO)}
        return run_in_group([*prog, *flags, "--data", corpus, "--out", str(out)], cwd=str(REPO), env=env,
                            timeout=900, separate_stderr=True)


def losses(run_dir: Path) -> list[tuple]:
    keys = ("loss", "gen_loss", "disc_loss", "gen_acc", "disc_acc", "lr", "grad_norm", "tokens")
    rows = [json.loads(ln) for ln in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], *(r.get(k) for k in keys)) for r in rows if r.get("kind") == "train"]


def latest_is_complete(run_dir: Path) -> bool:
    """``latest`` (when there is one) names a checkpoint with ``meta.json`` whose sums verify."""
    from electra.checkpoint import sums as checkpoint_sums
    from electra.checkpoint import run_layout as layout

    pointer = layout.checkpoints_dir(run_dir) / layout.LATEST
    if not pointer.exists():
        return True
    step_dir = layout.checkpoints_dir(run_dir) / pointer.read_text().strip()
    if not (step_dir / layout.META).is_file():
        return False
    try:
        for f in sorted(step_dir.iterdir()):
            if f.is_file() and not f.name.startswith("sums_rank") and f.name != layout.META:
                checkpoint_sums.verify(f)
    except ValueError:
        return False
    return True


def kill_schedule(rng: random.Random) -> list[tuple[str, list[str]]]:
    """Four kills of the trainer, one of each kind, at points drawn from ``rng``: after a step,
    in the next start's resume, in a save, in a commit (each after the previous one's resume
    point, so each lands)."""
    after = rng.randrange(SAVE_EVERY + 1, STEPS - 2 * SAVE_EVERY)  # a checkpoint behind it to resume
    resumed = after - after % SAVE_EVERY
    save = rng.choice([s for s in range(resumed + SAVE_EVERY, STEPS, SAVE_EVERY)])
    commit = rng.choice([s for s in range(save, STEPS + 1, SAVE_EVERY)])
    return [("after_step", ["--kill-after-step", str(after)]), ("in_resume", ["--kill-in-resume"]),
            ("in_save", ["--kill-in-save", str(save)]), ("in_commit", ["--kill-in-checkpoint", str(commit)])]


def error_lines(stderr: str) -> list[str]:
    """The trainer's error lines (``electra-train: error: ...``; ``splitlines`` also splits at the
    progress bar's carriage returns)."""
    return [ln[ln.index("electra-train: error:"):] for ln in stderr.splitlines() if "electra-train: error:" in ln]


def flip(blob: bytes, rng: random.Random) -> bytes:
    """``blob`` with one byte, drawn from its middle half, inverted."""
    at = rng.randrange(len(blob) // 4, max(len(blob) * 3 // 4, len(blob) // 4 + 1))
    return blob[:at] + bytes([blob[at] ^ 0xFF]) + blob[at + 1:]


def one_round(soak: Soak, r: int) -> None:
    from benchmarks.shared.counting_s3 import summarize
    from tests.flows.test_build_corpus_node_loss import KILL_POINTS

    rng = random.Random(soak.seed + r)
    proxy = soak.s3.proxy
    name = f"round{r}"
    before = dict(proxy.counts)
    proxy.chaos(seed=soak.seed + r, **CHAOS)
    try:
        kill = sorted(KILL_POINTS)[r % len(KILL_POINTS)]
        report, seconds = soak.build(name, kill=kill)
        soak.seconds["build"].append(seconds)
        same = report["shards"] == soak.reference["build"]["shards"] and \
            report["tokenizer_sha"] == soak.reference["build"]["tokenizer_sha"]
        soak.count("node_loss", injected=int(report["killed"] is not None),
                   survived=int(report["killed"] is not None and same))
        if not same:
            soak.mismatches.append(f"{name}: the build's shards or tokenizer differ from the reference's")
        corpus = f"{soak.bucket}/{name}/corpus"
        out = soak.work / name / "run"
        start, survived = time.monotonic(), True
        for kind, hooks in kill_schedule(rng):
            done = soak.train(corpus, out, *hooks)
            landed = done.returncode < 0 or done.returncode == 137 or done.returncode == -9
            complete = latest_is_complete(out)
            survived &= complete
            soak.count(f"trainer_{kind}", injected=int(landed), survived=int(landed and complete))
        done = soak.train(corpus, out)
        soak.seconds["train"].append(time.monotonic() - start)
        if done.returncode != 0:
            soak.mismatches.append(f"{name}: the last training launch failed ({done.returncode}): "
                                   f"{done.stderr.strip().splitlines()[-1:]}")
        elif losses(out) != soak.reference["losses"]:
            soak.mismatches.append(f"{name}: the per-step losses differ from the reference's")
            for kind in KILL_KINDS:
                soak.tally.get(f"trainer_{kind}", {}).update(survived=0)
    finally:
        proxy.clear()
    faults = {k: v - before.get(k, 0) for k, v in proxy.counts.items()}
    for kind in STORE_FAULTS:
        soak.count(f"store_{kind}", injected=faults.get(kind, 0),
                   survived=faults.get(kind, 0) if not soak.mismatches else 0)
    damage(soak, name, corpus, out, rng)


def damage(soak: Soak, name: str, corpus: str, run_dir: Path, rng: random.Random) -> None:
    """A byte flipped in a copy of the corpus (a shard; the manifest or the tokenizer in turn)
    and in the run's newest checkpoint: each must be named by the trainer in its one error line."""
    from common import storage
    from electra.checkpoint import run_layout as layout
    from pipelines import schema

    with soak.direct():
        manifest = schema.Manifest.load(corpus)
        shard = rng.choice([s.path for s in manifest.shards if s.split == "train"])
        other = ["manifest", "tokenizer"][rng.randrange(2)]
        targets = {"shard": (shard, flip), "truncated_shard": (shard, lambda b, _: b[:len(b) // 2]),
                   other: (schema.MANIFEST_NAME if other == "manifest" else
                           f"{manifest.tokenizer.path}/{schema.TOKENIZER_JSON}", flip)}
        copies = {}
        for kind, (rel, spoil) in targets.items():
            copy = f"{soak.bucket}/{name}/damaged-{kind}"
            for f in sorted(storage.find(corpus), key=lambda p: p == schema.MANIFEST_NAME):
                blob = storage.read_bytes(storage.join(corpus, f))
                storage.write_bytes(storage.join(copy, f), spoil(blob, rng) if f == rel else blob)
            copies[kind] = (copy, storage.join(copy, rel))
    for kind, (copy, uri) in copies.items():
        done = soak.train(copy, soak.work / name / f"damaged-{kind}", steps=2)
        said = error_lines(done.stderr)
        soak.count(f"damaged_{kind}", injected=1, survived=int(done.returncode == 2),
                   named=int(done.returncode == 2 and len(said) == 1 and uri in said[0]))
        if kind == "truncated_shard":  # where the data allows it: a counted skip, named
            done = soak.train(copy, soak.work / name / "skipped-shard", steps=2,
                              extra=("--set", "data.skip_corrupt=true"))
            soak.count("skipped_shard", injected=1, survived=int(done.returncode == 0),
                       named=int(done.returncode == 0 and uri in done.stderr))
    # the newest checkpoint of the finished run: a copy of the run with one file damaged
    copy = soak.work / name / "damaged-checkpoint"
    shutil.copytree(run_dir, copy)
    step_dir = layout.checkpoints_dir(copy) / (layout.checkpoints_dir(copy) / layout.LATEST).read_text().strip()
    target = step_dir / "mp_rank_00_model_states.pt"
    target.write_bytes(flip(target.read_bytes(), rng))
    done = soak.train(corpus, copy, steps=STEPS + 2)
    said = error_lines(done.stderr)
    soak.count("damaged_checkpoint", injected=1, survived=int(done.returncode == 2),
               named=int(done.returncode == 2 and len(said) == 1 and str(target) in said[0]))


def reference(soak: Soak) -> None:
    """The clean build and training run every round is compared with (the proxy counting only)."""
    from common import storage
    from synthetic import prose

    raw = prose.write_corpus(soak.work / "raw", num_docs=soak.docs, seed=11)
    with soak.direct():
        for rel in sorted(storage.find(str(raw))):
            storage.write_bytes(f"{soak.bucket}/raw/{rel}", (raw / rel).read_bytes())
    report, seconds = soak.build("reference", kill=None)
    soak.seconds["build_reference"] = [seconds]
    start = time.monotonic()
    done = soak.train(f"{soak.bucket}/reference/corpus", soak.work / "reference-run")
    if done.returncode != 0:
        raise RuntimeError(f"the reference run failed ({done.returncode}):\n{done.stderr[-3000:]}")
    soak.seconds["train_reference"] = [time.monotonic() - start]
    soak.reference = {"build": report, "losses": losses(soak.work / "reference-run")}


def table(result: dict[str, Any]) -> str:
    lines = [f"{'fault':<24} {'injected':>9} {'survived':>9} {'named':>6}"]
    for kind, row in result["faults"].items():
        named = row["named"] if kind.startswith(("damaged", "skipped")) else "-"
        lines.append(f"{kind:<24} {row['injected']:>9} {row['survived']:>9} {named:>6}")
    t = result["store"]
    lines.append(f"store requests {t['requests']:,}, refused {t['refused']:,} ({t['refused_share']:.1%}): each a retry")
    lost = result["time_lost_s"]
    lines.append(f"time lost per round over the reference: build {lost['build']:+.0f} s, train (4 kills, 5 "
                 f"launches) {lost['train']:+.0f} s; rounds {result['rounds']}, {result['minutes']:.1f} min")
    lines.append("final comparison with the clean run: " + ("identical shards, tokenizer and losses in every round"
                                                           if not result["mismatches"] else
                                                           "; ".join(result["mismatches"])))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from benchmarks.shared.counting_s3 import CountingS3
    from benchmarks.shared.machine import cpu_line

    p = argparse.ArgumentParser(prog="benchmarks/lifecycle/soak.py", description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=30.0, help="rounds start until this much time has passed")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--docs", type=int, default=200, help="documents of the generated corpus")
    p.add_argument("--ranks", type=int, default=1, help="trainer ranks (the deepspeed launcher when > 1)")
    p.add_argument("--smoke", action="store_true", help="one round on a small corpus")
    p.add_argument("--work", type=Path, help="keep the soak's files here (default: a temporary folder)")
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if args.smoke:
        args.minutes, args.docs = 0.0, min(args.docs, 120)
    work = args.work or Path(tempfile.mkdtemp(prefix="soak_"))
    work.mkdir(parents=True, exist_ok=True)
    print(cpu_line(), flush=True)
    began = time.monotonic()
    try:
        with CountingS3(work / "moto.log") as s3:
            soak = Soak(s3, work, seed=args.seed, docs=args.docs, ranks=args.ranks)
            soak.bucket = s3.bucket("soak")
            reference(soak)
            r = 0
            while r == 0 or time.monotonic() - began < args.minutes * 60:
                one_round(soak, r)
                print(f"round {r} done at {(time.monotonic() - began) / 60:.1f} min: "
                      f"{len(soak.mismatches)} mismatch(es)", flush=True)
                r += 1
            counts = dict(s3.proxy.counts)
        refused = sum(counts.get(k, 0) for k in STORE_FAULTS)
        requests = refused + counts.get("forward", 0)
        mean = lambda xs: sum(xs) / max(len(xs), 1)  # noqa: E731
        result = {"cpu": cpu_line(), "rounds": r, "minutes": (time.monotonic() - began) / 60, "seed": args.seed,
                  "chaos": CHAOS, "faults": soak.tally, "mismatches": soak.mismatches,
                  "store": {"requests": requests, "refused": refused, "refused_share": refused / max(requests, 1),
                            "by_outcome": counts},
                  "time_lost_s": {"build": mean(soak.seconds["build"]) - soak.seconds["build_reference"][0],
                                  "train": mean(soak.seconds["train"]) - soak.seconds["train_reference"][0]}}
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print(table(result), flush=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0 if not soak.mismatches and all(
        row["survived"] == row["injected"] and (row["named"] == row["injected"] or not k.startswith(("damaged", "skipped")))
        for k, row in soak.tally.items()) else 1


if __name__ == "__main__":
    sys.exit(main())
