"""GLUE fine-tuning throughput: ours (``evaluation.loop``) vs ``transformers``, one run.

Same examples, same weights, same recipe on every side:

* data: the training rows of a GLUE task (``--task``, default SST-2) from ``--glue-dir`` when its
  ``train.tsv`` is there, otherwise generated sentences with a GLUE-like length spread (a
  log-normal word count, mean ~ 10 words, up to 60); the run prints which. A WordPiece tokenizer is
  trained on those texts with the project's own trainer (``pipelines.tokenizer``, vocab 30522)
  and every side gets the same token ids, cut to ``--max-len`` (128).
* model: an ELECTRA-Small-shaped discriminator (``electra/configs/small.json``), randomly
  initialised with a fixed seed and exported with ``electra.checkpoint.hf_export.export_hf``; ours loads it
  with ``load_discriminator_encoder``, ``transformers`` with
  ``ElectraForSequenceClassification.from_pretrained`` on the same folder. (HF's classification
  head has one extra dense layer on [CLS]: negligible work.)
* recipe: batch 32, fused AdamW (lr 3e-4, eps 1e-6, weight decay 0; the Trainer's default), 10% warm-up into a linear decay,
  clipping 1.0, dropout 0.1, the same precision (``--precision``, "auto" resolved by
  ``loop.resolve_precision``) and threads. Ours keeps the paper's layer-wise LR decay (parameter
  groups only: the same arithmetic per step); HF has one group.

Columns: (a) ours, ``loop.train`` with length-bucketed batches; (b) the standard ``transformers``
recipe (``run_glue.py`` defaults: every row padded to max_length 128, random batches); (c)
``transformers`` with dynamic padding (random batches padded to their longest row,
``DataCollatorWithPadding``), the honest middle column. Also printed: ours with
``length_buckets=1`` (plain random batches), which separates the bucketing from the rest. Evaluation: ``loop.predict`` on the dev
rows (``--eval-rows`` of them; generated data: held-out rows) vs HF at batch 128, padded to 128
and dynamically padded (both in the file's row order, as ``Trainer.evaluate`` does).

Each side runs ``--warmup`` untimed steps, then ``--steps`` timed steps in ``--rounds`` alternating
rounds (ours, (b), (c), ours, ...), so a neighbour's load on a shared CPU hits all sides alike,
and each side's figure is its median round; compare ratios, not absolute numbers across runs.

    .venv/bin/python benchmarks/evaluate/finetune.py [--steps 20] [--precision auto] [--threads N] [--json out.json]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from electra.config import load_config
from evaluation import glue_tasks
from evaluation.finetune import encode_pairs, load_model
from evaluation.heads import SequenceHead, sequence_loss
from evaluation.loop import (load_tokenizer, lr_multiplier, pad_batch, predict,
                                   resolve_device, resolve_precision, train)
from evaluation.recipe import recipe_for_size
from electra.distributed.hardware import cpu_features, cpu_kind
from electra.checkpoint.hf_export import export_hf
from electra.model.networks import ElectraForPretraining

PRESET = Path(__file__).resolve().parents[2] / "electra" / "configs" / "small.json"
GLUE = Path("/work/shared/data/glue")


def examples(task: str, glue_dir: Path, n_generated: int = 8000) -> tuple[list, list, str]:
    """(train examples, eval examples, description of the source)."""
    spec = glue_tasks.get_task(task)
    if (glue_dir / spec.name / "train.tsv").is_file():
        train_ex = glue_tasks.read_split(spec, glue_dir, "train")
        try:
            dev = glue_tasks.read_split(spec, glue_dir, spec.eval_splits[0])
        except (FileNotFoundError, ValueError):
            dev = train_ex[:1024]
        return train_ex, dev, (f"real GLUE {spec.name} from {glue_dir / spec.name} "
                               f"({len(train_ex)} train rows)")
    rng = np.random.default_rng(0)
    words = ["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), size=rng.integers(2, 9)))
             for _ in range(5000)]
    rows = []
    for i in range(n_generated):
        k = int(min(60, max(1, rng.lognormal(2.1, 0.6))))
        rows.append(glue_tasks.GlueExample(f"gen-{i}", " ".join(rng.choice(words, size=k)), None,
                                           spec.labels[i % len(spec.labels)] if spec.labels else 0.0))
    return rows[:-1024], rows[-1024:], (f"GENERATED sentences ({n_generated} rows, log-normal word "
                                         f"counts): no {glue_dir / spec.name / 'train.tsv'}")


def build_export(texts: list[str], out: Path) -> Path:
    """Tokenizer trained on ``texts`` + a seeded ELECTRA-Small-shaped export; the discriminator dir."""
    from pipelines.config import TokenizerConfig
    from pipelines.tokenizer import train_tokenizer

    train_tokenizer(texts, TokenizerConfig(vocab_size=30522), str(out / "tok"))
    cfg = load_config(PRESET).model
    torch.manual_seed(0)
    export_hf(ElectraForPretraining(cfg), cfg, out / "hf", tokenizer_dir=out / "tok")
    return out / "hf" / "discriminator"


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


class HF:
    """The ``transformers`` side: a Trainer-equivalent inner loop (forward with labels, backward,
    clipping, AdamW, linear schedule), batches of the same seeded random permutation."""

    def __init__(self, model_dir: Path, *, num_labels: int, device, precision: str, total: int):
        from transformers import ElectraForSequenceClassification
        from transformers.utils import logging

        logging.set_verbosity_error()  # the fresh classifier's "newly initialized" report
        self.model = ElectraForSequenceClassification.from_pretrained(
            str(model_dir), num_labels=num_labels).to(device)
        # fused: the Trainer's default optimiser ("adamw_torch_fused") with torch >= 2.8
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=3e-4, eps=1e-6, weight_decay=0.0,
                                     fused=True)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: lr_multiplier(
            s, total_steps=total, warmup_steps=int(0.1 * total)))
        self.device, self.bf16 = device, precision == "bf16"

    def batch(self, rows, segs, idx, *, max_len: int | None):
        r, s = [rows[i] for i in idx], [segs[i] for i in idx]
        if max_len is not None:  # run_glue default: padding="max_length"
            r, s = r + [[0] * max_len], s + [[0] * max_len]
        ids, seg, mask = pad_batch(r, s)
        n = len(idx)
        return ids[:n].to(self.device), seg[:n].to(self.device), mask[:n].to(self.device)

    def step(self, rows, segs, labels, idx, *, max_len: int | None) -> None:
        ids, seg, mask = self.batch(rows, segs, idx, max_len=max_len)
        self.model.train()
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            loss = self.model(input_ids=ids, token_type_ids=seg, attention_mask=mask,
                              labels=labels[idx].to(self.device)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.sched.step()
        self.opt.zero_grad(set_to_none=True)

    @torch.no_grad()
    def evaluate(self, rows, segs, *, max_len: int | None, batch: int = 128) -> None:
        self.model.eval()
        for b in range(0, len(rows), batch):
            ids, seg, mask = self.batch(rows, segs, list(range(b, min(b + batch, len(rows)))),
                                        max_len=max_len)
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
                self.model(input_ids=ids, token_type_ids=seg, attention_mask=mask).logits.float().cpu()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="SST-2", help="GLUE task whose rows to use")
    ap.add_argument("--glue-dir", default=str(GLUE), help="GLUE folder (generated rows if absent)")
    ap.add_argument("--steps", type=int, default=20, help="timed training steps per side")
    ap.add_argument("--eval-rows", type=int, default=384, help="eval rows timed per side")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps per side first")
    ap.add_argument("--rounds", type=int, default=4, help="alternating timing rounds")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--length-buckets", type=int, default=50, help="ours: recipe.length_buckets")
    ap.add_argument("--precision", choices=["auto", "fp32", "bf16"], default="auto")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()

    recipe = recipe_for_size("small", batch_size=args.batch, max_seq_len=args.max_len,
                             precision=args.precision, device=args.device, num_threads=args.threads,
                             length_buckets=args.length_buckets, eval_batch_size=128,
                             optimizer="adamw")  # the HF side's fused AdamW: like for like
    device = resolve_device(recipe)
    precision = resolve_precision(recipe, device)
    features = cpu_features()
    feats, kind = sorted(features), cpu_kind(features)
    print(f"torch {torch.__version__}; CPU {platform.processor() or platform.machine()} "
          f"features {feats} -> {kind}; device {device}; threads {torch.get_num_threads()}; "
          f"precision {args.precision} -> {precision}", flush=True)
    if device.type == "cuda":
        print(f"GPU {torch.cuda.get_device_name()}", flush=True)

    train_ex, dev_ex, source = examples(args.task, Path(args.glue_dir))
    print(f"data: {source}", flush=True)
    spec = glue_tasks.get_task(args.task)
    tmp = Path(tempfile.mkdtemp(prefix="bench_finetune_"))
    model_dir = build_export([e.text_a + " " + (e.text_b or "") for e in train_ex], tmp)
    tok = load_tokenizer(model_dir)
    n = len(train_ex) // args.batch * args.batch  # whole batches only: examples = steps x batch
    rows, segs = encode_pairs(tok, train_ex[:n], max_len=args.max_len)
    dev_rows, dev_segs = encode_pairs(tok, dev_ex[: args.eval_rows], max_len=args.max_len)
    labels = torch.tensor([spec.label_index(e.label) if spec.kind != "regression" else 0
                           for e in train_ex[:n]])
    lens = np.array([len(r) for r in rows])
    print(f"{n} train rows, tokens per row: mean {lens.mean():.1f}, median {np.median(lens):.0f}, "
          f"max {lens.max()}; {len(dev_rows)} eval rows", flush=True)

    num_labels = 1 if spec.kind == "regression" else spec.num_labels
    total = args.warmup + args.steps
    ours = load_model(model_dir, lambda h: SequenceHead(h, num_labels, dropout=recipe.dropout), device)
    hf = HF(model_dir, num_labels=num_labels, device=device, precision=precision, total=total)

    def loss_fn(out, idx, dev):
        return sequence_loss(out.logits, labels[idx].to(dev), regression=spec.kind == "regression")

    per_epoch = n // args.batch

    plain = dataclasses.replace(recipe, length_buckets=1)

    def run_ours(steps: int, seed: int, rec=recipe) -> float:
        sync(device)
        t = time.perf_counter()
        # epochs just under steps / per_epoch: ceil() gives exactly ``steps`` steps
        train(ours, rows=rows, segs=segs, loss_fn=loss_fn, recipe=rec,
              epochs=(steps - 0.5) / per_epoch, seed=seed)
        sync(device)
        return time.perf_counter() - t

    gen = torch.Generator().manual_seed(0)
    order = torch.randperm(n, generator=gen)
    cursor = {args.max_len: 0, None: 0}  # (b) and (c) see the same batches

    def run_hf(steps: int, max_len: int | None) -> float:
        sync(device)
        t = time.perf_counter()
        for _ in range(steps):
            idx = order[cursor[max_len]: cursor[max_len] + args.batch]
            cursor[max_len] = (cursor[max_len] + args.batch) % n
            hf.step(rows, segs, labels, idx, max_len=max_len)
        sync(device)
        return time.perf_counter() - t

    sides = {"ours": lambda k, r: run_ours(k, seed=r + 1),
             "ours_no_buckets": lambda k, r: run_ours(k, seed=r + 1, rec=plain),
             "hf_padded": lambda k, r: run_hf(k, args.max_len),
             "hf_dynamic": lambda k, r: run_hf(k, None)}
    for name, fn in sides.items():
        print(f"warm-up {name}: {fn(args.warmup, -1):.2f} s", flush=True)
    rates: dict[str, list[float]] = {name: [] for name in sides}
    per_round = [args.steps // args.rounds + (r < args.steps % args.rounds) for r in range(args.rounds)]
    for r, k in enumerate(per_round):
        for name, fn in sides.items():
            rates[name].append(k * args.batch / fn(k, r))
    result = {"torch": torch.__version__, "cpu_kind": kind, "device": str(device),
              "threads": torch.get_num_threads(), "precision": precision, "data": source,
              "steps": args.steps, "batch": args.batch, "train": {}, "eval": {}}
    for name, rs in rates.items():  # median round: a load spike from a neighbour hits one round
        result["train"][name] = float(np.median(rs))

    def timed(fn) -> float:
        fn(dev_rows[:128], dev_segs[:128])  # warm-up (allocator, oneDNN primitives)
        sync(device)
        t = time.perf_counter()
        fn(dev_rows, dev_segs)
        sync(device)
        return len(dev_rows) / (time.perf_counter() - t)

    result["eval"]["ours"] = timed(lambda r, s: predict(ours, rows=r, segs=s, recipe=recipe))
    result["eval"]["hf_padded"] = timed(lambda r, s: hf.evaluate(r, s, max_len=args.max_len))
    result["eval"]["hf_dynamic"] = timed(lambda r, s: hf.evaluate(r, s, max_len=None))
    print(f"train examples/s of ours without length buckets (length_buckets=1): "
          f"{result['train']['ours_no_buckets']:.1f}")
    for part in ("train", "eval"):
        r = result[part]
        r["ours_vs_hf_padded"] = r["ours"] / r["hf_padded"]
        r["ours_vs_hf_dynamic"] = r["ours"] / r["hf_dynamic"]
        print(f"{part:>5} examples/s: ours {r['ours']:7.1f} | transformers padded-128 "
              f"{r['hf_padded']:7.1f} | transformers dynamic {r['hf_dynamic']:7.1f} | "
              f"ours/(b) {r['ours_vs_hf_padded']:.2f}x  ours/(c) {r['ours_vs_hf_dynamic']:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
