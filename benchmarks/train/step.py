"""One ELECTRA-Small pre-training step on this machine: ours vs the `transformers` equivalent.

All sides run the same work on the same batch (32 x 128; ``--fill`` of the positions real, 0.59 by
default: the fill of a corpus of books built with today's defaults): dynamic masking (our
``apply_masking``), generator forward, Gumbel-max sampling at the masked positions, discriminator
forward, loss 1 x MLM + 50 x RTD, backward, clipping, optimizer step, all under bf16 autocast
(``--precision bf16``; ``auto`` picks bf16 only when a bf16 matmul beats fp32 here: a CPU without
AMX/AVX512-BF16 emulates bf16 matmuls ~70x slower than fp32, and then all sides run fp32). Sides:
``ours`` (no compute on padding), ``ours-padded`` (the encoders' ``unpad`` switched off: the same
model computing every position) and ``transformers``: ``ElectraForMaskedLM`` (hidden 64) plus
``ElectraForPreTraining`` (Small) sharing one embedding module, with ``torch.optim.AdamW``; it
computes generator logits at every position, as its forward does, and gathers afterwards.

Row lengths are drawn uniformly (every row keeps [CLS] ... [SEP] [SEP] and two segments) and then
nudged one token at a time until the batch holds exactly round(fill x B x T) real tokens. Only real
(non-pad) tokens count: tokens/s and GFLOP/s are useful work, the same numerator on every side, so
the padded sides are not credited for their work on padding. Steps are timed in alternating rounds
(ours, ours-padded, theirs, ours, ...) and the median per step is taken, so a neighbour's load on
the shared CPU hits all sides alike; compare ratios, not absolute numbers across runs. The ceiling
is a 2048^3 matmul in the chosen precision, measured in the same run; the share of it uses
``electra.model.flops.training_flops_per_token`` with the batch's mean attention length.

    .venv/bin/python benchmarks/train/step.py [--fill 0.59] [--rounds 5] [--threads N] [--profile] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from benchmarks.shared.electra_batch import SP, hf_electra_loss, make_batch
from electra.config import ElectraConfig, load_config
from electra.model.flops import training_flops_per_token
from electra.model.networks import ElectraForPretraining
from electra.model.objective import ElectraObjective
from electra.run.optim import build_optimizer, clip_grad_norm

PRESET = Path(__file__).resolve().parents[2] / "electra" / "configs" / "small.json"


class Ours:
    def __init__(self, cfg: ElectraConfig, bf16: bool, *, unpad: bool = True):
        self.bf16 = bf16
        model = ElectraForPretraining(cfg.model)
        model.generator.unpad = model.discriminator.unpad = unpad
        self.obj = ElectraObjective(model, cfg.objective, SP, cfg.data.seq_len)
        self.opt = build_optimizer(self.obj, cfg.optimizer)
        self.clip = cfg.optimizer.grad_clip

    def step(self, ids, seg) -> float:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):
            out = self.obj(ids, seg)
        out.loss.backward()
        clip_grad_norm(self.obj.parameters(), self.clip)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return out.loss.item()


class Theirs:
    def __init__(self, cfg: ElectraConfig, bf16: bool):
        self.bf16 = bf16
        import transformers as tf

        m = cfg.model
        g = m.generator_sizes()
        common = dict(vocab_size=m.vocab_size, embedding_size=m.embedding_size, num_hidden_layers=m.num_layers,
                      max_position_embeddings=m.max_position_embeddings, hidden_act="gelu")
        self.gen = tf.ElectraForMaskedLM(tf.ElectraConfig(hidden_size=g.hidden_size, num_attention_heads=g.num_heads,
                                                          intermediate_size=g.intermediate_size,
                                                          **{**common, "num_hidden_layers": m.generator_depth}))
        self.disc = tf.ElectraForPreTraining(tf.ElectraConfig(
            hidden_size=m.hidden_size, num_attention_heads=m.num_heads, intermediate_size=m.intermediate_size,
            **common))
        self.gen.electra.embeddings = self.disc.electra.embeddings  # share the whole block
        self.gen.generator_lm_head.weight = self.disc.electra.embeddings.word_embeddings.weight
        self.params = list({id(p): p for p in [*self.gen.parameters(), *self.disc.parameters()]}.values())
        self.opt = torch.optim.AdamW(self.params, lr=cfg.optimizer.lr, eps=cfg.optimizer.eps,
                                     weight_decay=cfg.optimizer.weight_decay)
        self.cfg = cfg

    def step(self, ids, seg) -> float:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):
            loss = hf_electra_loss(self.gen, self.disc, self.cfg, ids, seg)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, self.cfg.optimizer.grad_clip)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss.item()


def matmul_gflops(n: int = 2048, repeats: int = 5, dtype: torch.dtype = torch.bfloat16) -> float:
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t)
    return 2 * n ** 3 / min(times) / 1e9


def timed(fn, *args) -> float:
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


def profile(ours: Ours, ids, seg, rows: int = 25) -> None:
    from torch.profiler import ProfilerActivity
    with torch.profiler.profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(2):
            ours.step(ids, seg)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(PRESET), help="preset whose model/objective to use")
    ap.add_argument("--batch", type=int, default=32, help="sequences per step")
    ap.add_argument("--seq-len", type=int, default=128, help="sequence length when the preset leaves it to the corpus")
    ap.add_argument("--fill", type=float, default=0.59,
                    help="share of real (non-pad) positions in the batch (1: no padding)")
    ap.add_argument("--rounds", type=int, default=5, help="alternating timing rounds")
    ap.add_argument("--skip-baseline", action="store_true", help="time only our steps")
    ap.add_argument("--skip-padded", action="store_true", help="do not time ours-padded")
    ap.add_argument("--profile", action="store_true", help="print a torch.profiler table of our step")
    ap.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto",
                    help="autocast dtype for both sides (auto: bf16 if its matmul is faster here)")
    ap.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's choice); 1 is "
                    "steadier when other jobs share the cores")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    torch.manual_seed(0)
    fp32_rate, bf16_rate = matmul_gflops(1024, 2, torch.float32), matmul_gflops(256, 2)
    bf16 = args.precision == "bf16" or (args.precision == "auto" and bf16_rate > fp32_rate)
    print(f"matmul probe: fp32 {fp32_rate:.1f}, bf16 {bf16_rate:.1f} GFLOP/s -> {'bf16' if bf16 else 'fp32'}",
          flush=True)
    cfg = load_config(args.config)
    if cfg.data.seq_len is None:  # a preset leaves it to the corpus; the paper's lengths: 128 Small, 512 Base/Large
        cfg = load_config(args.config, [f"data.seq_len={args.seq_len}"])
    if not 0 < args.fill <= 1:
        ap.error(f"--fill must be in (0, 1], got {args.fill}")
    ids, seg = make_batch(cfg, args.batch, fill=args.fill)
    real = ids != SP.pad
    tokens = int(real.sum())
    lengths = real.sum(1).double()
    attention_len = float((lengths ** 2).sum() / lengths.sum())  # mean keys per real query
    sides = {"ours": Ours(cfg, bf16)}
    if not args.skip_padded:
        sides["ours-padded"] = Ours(cfg, bf16, unpad=False)
    if not args.skip_baseline:
        sides["transformers"] = Theirs(cfg, bf16)
    for name, side in sides.items():  # warm-up: allocator, oneDNN primitive caches
        print(f"warm-up {name}: {timed(side.step, ids, seg):.2f} s", flush=True)
    times = {name: [] for name in sides}
    for _ in range(args.rounds):
        for name, side in sides.items():
            times[name].append(timed(side.step, ids, seg))
    ceiling = matmul_gflops(dtype=torch.bfloat16 if bf16 else torch.float32)
    flops = training_flops_per_token(cfg, attention_len)
    result = {"threads": torch.get_num_threads(), "tokens_per_step": tokens, "fill": tokens / ids.numel(),
              "precision": "bf16" if bf16 else "fp32", "matmul_ceiling_gflops": ceiling,
              "train_flops_per_token": flops}
    for name, ts in times.items():
        sec = statistics.median(ts)
        result[name] = {"sec_per_step": sec, "tokens_per_s": tokens / sec,
                        "gflops": tokens * flops / sec / 1e9, "share_of_ceiling": tokens * flops / sec / 1e9 / ceiling}
    for other in ("transformers", "ours-padded"):
        if other in result:
            result[f"speedup_vs_{other}"] = result["ours"]["tokens_per_s"] / result[other]["tokens_per_s"]
    print(f"batch {args.batch} x {cfg.data.seq_len}, fill {result['fill']:.3f} ({tokens} real tokens); "
          "tokens/s and GFLOP/s count real tokens only")
    for name in times:
        r = result[name]
        print(f"{name:>13}: {r['sec_per_step']:.3f} s/step  {r['tokens_per_s']:8.0f} tokens/s  "
              f"{r['gflops']:6.1f} GFLOP/s  {100 * r['share_of_ceiling']:.1f}% of the {result['precision']} ceiling")
    print(f"{result['precision']} 2048^3 matmul: {ceiling:.0f} GFLOP/s; {flops / 1e6:.1f} MFLOP per token; "
          f"threads {result['threads']}")
    print("speedup of ours: " + ", ".join(f"{result[f'speedup_vs_{o}']:.2f}x vs {o}"
                                          for o in ("transformers", "ours-padded") if f"speedup_vs_{o}" in result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    if args.profile:
        profile(sides["ours"], ids, seg)


if __name__ == "__main__":
    main()
