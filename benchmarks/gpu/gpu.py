"""The GPU benchmark in one command: our ELECTRA training step against `transformers`', per preset
and sequence length, with MFU against a matmul peak measured in the same run, and the loader.

    .venv/bin/python benchmarks/gpu/gpu.py [--presets small,base,large] [--lengths 128,512] [--batch N]
        [--fill 1.0] [--precision bf16] [--set train.compile=true ...] [--json out.json]
    .venv/bin/python benchmarks/gpu/gpu.py --smoke --json out.json   # CPU: tiny preset, fp32, seconds

For each (preset, length) configuration both sides run the same work on the same batch
(``benchmarks.shared.electra_batch.make_batch``: random ids over the preset's 30522-token vocabulary, ``--fill``
of the positions real; 1 by default, full rows as in the sequences/s figures quoted for other
implementations), at the preset's masking rate, under the same autocast precision, with the same
optimiser and gradient clipping:

- **ours**: what the trainer builds: ``ElectraObjective`` over ``ElectraForPretraining``, the
  trainer's ``configure_fast_path`` (TF32, and ``torch.compile`` / activation checkpointing when
  ``--set train.compile=true`` / ``train.activation_checkpointing=true``) and ``build_optimizer``
  (DeepSpeed's FusedAdam on CUDA with ``optimizer.fused=auto``, else ``AdamWeightDecay``); the
  step is masking, generator logits only at the chosen positions, Gumbel sampling, discriminator,
  1 x MLM + 50 x RTD, backward, clipping, update. Weights stay fp32 under ``torch.autocast``
  (the trainer's DeepSpeed bf16 keeps bf16 weights and fp32 masters: the same matmuls).
- **transformers**: ``ElectraForMaskedLM`` (generator) + ``ElectraForPreTraining``
  (discriminator) built from the same config (random init, embeddings shared as in the paper),
  its default attention (SDPA), our ``apply_masking`` and ``gumbel_sample``, the same loss
  weights, the same optimiser class from ``build_optimizer``, and the same compile/checkpointing
  switches through transformers' own means. Its generator computes logits at every position, as
  its forward does; they are gathered afterwards.

Timing: ``--warmup`` steps per side first (allocator, kernel selection, compilation), then
``--rounds`` rounds of ``--steps`` steps alternating ours, theirs, ours, ...; each round is
bracketed by ``torch.cuda.synchronize`` and the median seconds per step over rounds is
reported. A side that runs out of device memory, when built or stepping, is recorded as
``"oom"``; the run goes on with the other side and the next configuration. The JSON file is
rewritten after every configuration, so a run cut off by a time limit keeps what it measured.

Figures per side: sequences/s, real (non-pad) tokens/s, model FLOP/s = tokens/s x
``electra.model.flops.training_flops_per_token`` at the batch's mean attention length (generator +
discriminator, forward + backward, matmuls only; the same useful-work numerator for both sides,
so work on padding earns nothing), and MFU against (a) the peak measured here: the best of ten
n^3 matmuls in the run's precision after warm-up, timed with CUDA events, i.e. what this device,
its clocks and cuBLAS really deliver, and (b) the nominal datasheet figure of
``electra.run.metrics_log.peak_flops`` when the device is in its table (else null). The loader figure
is ``electra.data.stream.TrainStream`` (the preset's workers and read-ahead, the configuration's micro
batch) pulling one epoch of a generated corpus at the configuration's length from a cold start
(worker start-up, shard reads and hashes, collation), and its ratio to our step's consumption.
"""
from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

from benchmarks.shared import load_test_helper
from benchmarks.shared.electra_batch import hf_electra_loss, make_batch
from electra.data import stream as sd
from electra.run import metrics_log
from electra.config import ElectraConfig, load_config
from electra.distributed.deepspeed_glue import configure_fast_path
from electra.model.flops import training_flops_per_token
from electra.model.networks import ElectraForPretraining
from electra.model.objective import ElectraObjective, SpecialTokens
from electra.run.optim import build_optimizer

REPO = Path(__file__).resolve().parents[2]
SP = SpecialTokens()
PRESETS = REPO / "electra" / "configs"
# Default micro batch = this many tokens / length. Estimated, not measured: ~40 bytes of bf16
# activations per token per unit of width and layer (Korthikanti et al. 2022, no attention
# scores with fused SDPA) for discriminator + generator is ~0.15 / 0.5 / 1.2 MB per token for
# small / base / large, i.e. ~10 / 16 / 20 GB here, leaving room on an 80 GB device for
# `transformers`' full-vocabulary generator logits and both sides' weights and Adam state.
TOKENS_PER_BATCH = {"tiny": 8192, "small": 65536, "base": 32768, "large": 16384}
SMOKE = dict(presets="tiny", lengths="32,64", batch=4, fill=0.7, warmup=1, rounds=2, steps=1, matmul=256,
             loader_examples=64, precision="fp32")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Side:
    """One training step of one implementation: ``loss(ids, seg)`` under autocast, then the update."""

    def __init__(self, cfg: ElectraConfig, device: torch.device, *, bf16: bool):
        self.cfg, self.device, self.bf16 = cfg, device, bf16
        with torch.device(device):  # build on the device: no host init and copy of Large
            self.module = self.build()
        self.module.train()
        self.fast_path = self.configure()
        self.params = [p for p in self.module.parameters() if p.requires_grad]
        # the trainer's choice for both sides: FusedAdam on CUDA (optimizer.fused=auto), else ours
        self.opt = build_optimizer(self.module, cfg.optimizer, device=device.type)

    def build(self) -> nn.Module:
        raise NotImplementedError

    def configure(self) -> list[str]:
        """Compilation and activation checkpointing as ``cfg.train`` says; returns what is on."""
        raise NotImplementedError

    def loss(self, ids: torch.Tensor, seg: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def step(self, ids: torch.Tensor, seg: torch.Tensor) -> None:
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            loss = self.loss(ids, seg)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, self.cfg.optimizer.grad_clip, foreach=True)
        self.opt.step()
        self.opt.zero_grad()  # set to None by default; DeepSpeed's FusedAdam takes no set_to_none


class Ours(Side):
    def build(self) -> nn.Module:
        return ElectraObjective(ElectraForPretraining(self.cfg.model), self.cfg.objective, SP, self.cfg.data.seq_len)

    def configure(self) -> list[str]:
        return configure_fast_path(self.cfg, self.module.model)  # the trainer's own call

    def loss(self, ids, seg):
        return self.module(ids, seg).loss


class Theirs(Side):
    def build(self) -> nn.Module:
        import transformers as tf

        m = self.cfg.model
        g = m.generator_sizes()
        common = dict(vocab_size=m.vocab_size, embedding_size=m.embedding_size, num_hidden_layers=m.num_layers,
                      max_position_embeddings=m.max_position_embeddings, type_vocab_size=m.type_vocab_size,
                      hidden_dropout_prob=m.hidden_dropout, attention_probs_dropout_prob=m.attention_dropout,
                      layer_norm_eps=m.layer_norm_eps, initializer_range=m.initializer_range, hidden_act="gelu")
        gen = tf.ElectraForMaskedLM(tf.ElectraConfig(hidden_size=g.hidden_size, num_attention_heads=g.num_heads,
                                                     intermediate_size=g.intermediate_size,
                                                     **{**common, "num_hidden_layers": m.generator_depth}))
        disc = tf.ElectraForPreTraining(tf.ElectraConfig(hidden_size=m.hidden_size, num_attention_heads=m.num_heads,
                                                         intermediate_size=m.intermediate_size, **common))
        gen.electra.embeddings = disc.electra.embeddings  # the whole block shared, as ours
        gen.generator_lm_head.weight = disc.electra.embeddings.word_embeddings.weight
        self.gen, self.disc = gen, disc
        return nn.ModuleList([gen, disc])  # named_parameters() lists the shared tensors once

    def configure(self) -> list[str]:
        """The same switches as ``configure_fast_path`` on ours, through transformers' own means."""
        on, t = [], self.cfg.train
        if t.activation_checkpointing:
            for net in (self.gen, self.disc):
                net.activation_checkpointing_enable({"use_reentrant": False})  # as ours: non-reentrant
            on.append("activation_checkpointing")
        if t.compile and self.device.type == "cuda":
            for net in (self.gen, self.disc):
                net.electra.compile()
            on.append("compile")
        return on

    def loss(self, ids, seg):
        return hf_electra_loss(self.gen, self.disc, self.cfg, ids, seg)


def matmul_peak(device: torch.device, dtype: torch.dtype, *, n: int, repeats: int = 10) -> float:
    """FLOP/s of an n^3 matmul in ``dtype``: best of ``repeats`` after a warm-up."""
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    sync(device)
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            a @ b
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - t)
    return 2.0 * n ** 3 / min(times)


def nominal_peak(device: torch.device, precision: str) -> float | None:
    """The datasheet figure of ``metrics_log.peak_flops`` if this device is in its table, else None."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    known = [k for k in getattr(metrics_log, "_PEAK", {}) if k in name]
    return metrics_log.peak_flops(precision) if known else None


def guarded(fn, *args, **kwargs):
    """``fn(*args, **kwargs)``, or the string ``"oom"`` when the device runs out of memory."""
    try:
        return fn(*args, **kwargs)
    except torch.cuda.OutOfMemoryError:
        return "oom"


def release(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def time_sides(sides: dict, ids, seg, *, warmup: int, rounds: int, steps: int) -> dict:
    """Median seconds per step of each side (alternating rounds), or ``"oom"``."""
    device = ids.device

    def run(side, n):
        for _ in range(n):
            side.step(ids, seg)
        sync(device)

    status = {}
    for name in list(sides):  # by name: no loop variable keeps a dropped side's memory alive
        status[name] = guarded(run, sides[name], warmup)
        if status[name] == "oom":
            sides[name] = None
            release(device)
    times = {name: [] for name, s in status.items() if s != "oom"}
    for _ in range(rounds):
        for name in list(times):
            t0 = time.perf_counter()
            if guarded(run, sides[name], steps) == "oom":
                del times[name]
                sides[name], status[name] = None, "oom"
                release(device)
                continue
            times[name].append((time.perf_counter() - t0) / steps)
    return {name: statistics.median(times[name]) if name in times else "oom" for name in status}


def figures(sec: float | str, *, batch: int, tokens: int, flops_per_token: float, peak: float,
            nominal: float | None) -> dict:
    if sec == "oom":
        return {"status": "oom"}
    model_flops = tokens / sec * flops_per_token
    return {"status": "ok", "sec_per_step": sec, "sequences_per_s": batch / sec, "tokens_per_s": tokens / sec,
            "model_tflops": model_flops / 1e12, "mfu_measured_peak": model_flops / peak,
            "mfu_nominal_peak": model_flops / nominal if nominal else None}


def loader_rate(corpus: Path, cfg: ElectraConfig, micro_batch: int) -> float:
    """Samples/s of one epoch of ``TrainStream`` over ``corpus`` from a cold start."""
    shards, _ = sd.check_shards(sd.open_corpus(str(corpus), seq_len=cfg.seq_len), "train")
    # one rank's whole global batch in micro batches of ``micro_batch``
    plan = sd.StreamPlan(tuple(shards), cfg.seq_len, micro_batch, micro_batch, shuffle_block=cfg.data.shuffle_buffer,
                         streams=cfg.data.streams)
    stream = sd.TrainStream(plan, num_workers=sd.loader_workers(cfg.data.num_workers), prefetch=cfg.data.prefetch_shards)
    t0 = time.perf_counter()
    n = sum(len(b.keys) for b in stream.loader(0, 0))
    return n / (time.perf_counter() - t0)


def write_corpus(root: Path, seq_len: int, examples: int) -> Path:
    write_tiny_corpus = load_test_helper("electra._corpus").write_tiny_corpus  # as benchmarks/train/train.py's

    per_shard = -(-examples // 8)
    return write_tiny_corpus(root, seq_len=seq_len, train_shards=(per_shard,) * 8, validation_shards=(8,),
                             vocab_size=1000)


def bench_config(preset: str, length: int, args, device: torch.device, corpus: Path, peaks: dict) -> dict:
    cfg = load_config(PRESETS / f"{preset}.json", [f"data.seq_len={length}", *args.set])
    batch = args.batch or max(1, TOKENS_PER_BATCH.get(preset, 8192) // length)
    ids, seg = make_batch(cfg, batch, fill=args.fill)
    lengths = (ids != SP.pad).sum(1).double()
    tokens = int(lengths.sum())
    attention_len = float((lengths ** 2).sum() / lengths.sum())  # keys per query, on average
    row = {"preset": preset, "seq_len": length, "batch": batch, "tokens_per_step": tokens,
           "attention_len": attention_len, "train_flops_per_token": training_flops_per_token(cfg, attention_len)}
    ids, seg = ids.to(device), seg.to(device)
    torch.manual_seed(0)
    secs, sides = {}, {}  # the one reference to each side: time_sides drops one that runs out of memory
    for name, cls in (("ours", Ours), ("transformers", Theirs)):
        sides[name] = guarded(cls, cfg, device, bf16=args.precision == "bf16")
        if sides[name] == "oom":
            secs[name] = sides.pop(name)
            release(device)
    row["setup"] = {k: {"optimizer": type(v.opt).__name__, "fast_path": v.fast_path} for k, v in sides.items()}
    secs.update(time_sides(sides, ids, seg, warmup=args.warmup, rounds=args.rounds, steps=args.steps))
    sides.clear()
    release(device)
    for name in ("ours", "transformers"):
        row[name] = figures(secs[name], batch=batch, tokens=tokens, flops_per_token=row["train_flops_per_token"],
                            peak=peaks["measured"], nominal=peaks["nominal"])
    ok = row["ours"]["status"] == "ok" and row["transformers"]["status"] == "ok"
    row["speedup_vs_transformers"] = (row["ours"]["tokens_per_s"] / row["transformers"]["tokens_per_s"]
                                      if ok else None)
    rate = loader_rate(corpus, cfg, batch)
    consumed = row["ours"].get("sequences_per_s")
    row["loader"] = {"samples_per_s": rate, "workers": sd.loader_workers(cfg.data.num_workers),
                     "over_consumption_x": rate / consumed if consumed else None}
    return row


def environment(device: torch.device) -> dict:
    import transformers

    env = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu ({platform.machine()})",
           "torch": torch.__version__, "cuda": torch.version.cuda, "transformers": transformers.__version__,
           "python": platform.python_version(), "threads": torch.get_num_threads()}
    if device.type == "cuda":
        env["memory_gib"] = torch.cuda.get_device_properties(device).total_memory / 2**30
        env["cudnn"] = torch.backends.cudnn.version()
    return env


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def print_row(r: dict) -> None:
    o, t, ld = r["ours"], r["transformers"], r["loader"]

    def side(s):
        if s["status"] != "ok":
            return f"{s['status']:>34}"
        return (f"{s['sequences_per_s']:9.1f} {s['tokens_per_s']:10.0f} {100 * s['mfu_measured_peak']:6.1f}% "
                f"{_fmt(s['mfu_nominal_peak'] and 100 * s['mfu_nominal_peak'], '5.1f')}%")
    print(f"{r['preset']:>6} {r['seq_len']:5d} {r['batch']:5d} | {side(o)} | {side(t)} | "
          f"{_fmt(r['speedup_vs_transformers'], '5.2f')}x | {ld['samples_per_s']:9.0f} "
          f"({_fmt(ld['over_consumption_x'], '.1f')}x)", flush=True)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    # what to measure
    ap.add_argument("--presets", default="small,base,large", help="comma-separated presets of electra/configs")
    ap.add_argument("--lengths", default="128,512", help="comma-separated sequence lengths")
    ap.add_argument("--batch", type=int, default=0, help="micro batch for every configuration (0: per preset)")
    ap.add_argument("--fill", type=float, default=1.0,
                    help="share of the batch's positions that are real tokens (1: no padding; 0.59: a book corpus)")
    ap.add_argument("--precision", choices=["bf16", "fp32"], default="bf16", help="autocast dtype, both sides")
    ap.add_argument("--set", action="append", default=[],
                    help="config override for every preset, repeatable (train.compile=true, optimizer.fused=off, "
                         "model.unpad=false, train.activation_checkpointing=true)")
    # how long
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps per side and configuration")
    ap.add_argument("--rounds", type=int, default=5, help="alternating timed rounds")
    ap.add_argument("--steps", type=int, default=10, help="steps per round")
    ap.add_argument("--matmul", type=int, default=8192, help="size n of the n^3 peak matmul")
    ap.add_argument("--loader-examples", type=int, default=4096, help="examples of the generated loader corpus")
    # output
    ap.add_argument("--smoke", action="store_true",
                    help="CPU check of every code path: tiny preset, short lengths, fp32, one-step rounds")
    ap.add_argument("--json", help="also write every figure to this file")
    if ap.parse_args(argv).smoke:  # smoke sizes as defaults: flags given explicitly still win
        ap.set_defaults(**SMOKE)
    return ap.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.precision == "fp32" and device.type == "cuda":  # as the trainer (train.tf32): the peak is TF32's too
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    presets, lengths = args.presets.split(","), [int(x) for x in args.lengths.split(",")]
    env = environment(device)
    dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    peaks = {"measured": matmul_peak(device, dtype, n=args.matmul), "nominal": nominal_peak(device, args.precision)}
    result = {"environment": env, "precision": args.precision, "overrides": args.set, "fill": args.fill,
              "warmup": args.warmup, "rounds": args.rounds, "steps": args.steps,
              "peak_tflops": {"measured": peaks["measured"] / 1e12, "matmul_n": args.matmul,
                              "nominal": peaks["nominal"] and peaks["nominal"] / 1e12},
              "results": []}
    print(f"{env['device']}; torch {env['torch']}, CUDA {env['cuda']}, transformers {env['transformers']}; "
          f"{args.precision} {args.matmul}^3 matmul: {peaks['measured'] / 1e12:.3g} TFLOP/s measured, "
          f"nominal {_fmt(peaks['nominal'] and peaks['nominal'] / 1e12, '.3g')}", flush=True)
    print(f"{'preset':>6} {'len':>5} {'batch':>5} | {'ours seq/s':>9} {'tokens/s':>10} {'MFU':>7} {'nom':>6} | "
          f"{'HF seq/s':>9} {'tokens/s':>10} {'MFU':>7} {'nom':>6} | {'ratio':>6} | loader samples/s", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench_gpu_") as tmp:
        for length in lengths:
            need = max([args.loader_examples] + [2 * (args.batch or TOKENS_PER_BATCH.get(p, 8192) // length)
                                                  for p in presets])
            corpus = write_corpus(Path(tmp) / f"corpus{length}", length, need)
            for preset in presets:
                row = bench_config(preset, length, args, device, corpus, peaks)
                result["results"].append(row)
                print_row(row)
                if args.json:  # after every configuration: a run cut off by a time limit keeps what it measured
                    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
