"""One ELECTRA-Small pre-training step on this machine: ours vs the `transformers` equivalent.

Both sides run the same work at batch 32 x 128 (two rows padded, as packed data has a few short
examples): dynamic masking (our ``apply_masking``), generator forward, Gumbel-max sampling at the
masked positions, discriminator forward, loss 1 x MLM + 50 x RTD, backward, clipping, optimizer
step, all under bf16 autocast (``--precision bf16``; ``auto`` picks bf16 only when a bf16 matmul
beats fp32 here: a CPU without AMX/AVX512-BF16 emulates bf16 matmuls ~70x slower than fp32, and
then both sides run fp32). The baseline is ``transformers.ElectraForMaskedLM`` (hidden 64)
plus ``ElectraForPreTraining`` (Small) sharing one embedding module, with ``torch.optim.AdamW``;
it computes generator logits at every position, as its forward does, and gathers afterwards.

Steps are timed in alternating rounds (ours, theirs, ours, ...) and the median per step is taken,
so a neighbour's load on the shared CPU hits both sides alike; compare ratios, not absolute
numbers across runs. The ceiling is a 2048^3 matmul in the chosen precision, measured in the same
run; the share of it uses ``electra.flops.training_flops_per_token``.

    .venv/bin/python benchmarks/step.py [--rounds 5] [--profile] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from electra.config import ElectraConfig, load_config
from electra.flops import training_flops_per_token
from electra.model import ElectraForPretraining
from electra.objective import ElectraObjective, SpecialTokens, apply_masking, gumbel_sample
from electra.optim import build_optimizer, clip_grad_norm

SP = SpecialTokens()
PRESET = Path(__file__).resolve().parents[1] / "electra" / "configs" / "small.json"


def make_batch(cfg: ElectraConfig, batch: int, *, padded_rows: int = 2, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    t = cfg.data.seq_len
    ids = torch.randint(5, cfg.model.vocab_size, (batch, t), generator=g)
    seg = torch.zeros(batch, t, dtype=torch.long)
    seg[:, t // 2:] = 1
    ids[:, 0], ids[:, t // 2 - 1], ids[:, -1] = SP.cls, SP.sep, SP.sep
    for row in range(padded_rows):  # a short example: [CLS] ... [SEP] + padding
        n = t // 3 + row
        ids[row, n:], seg[row, n:] = SP.pad, 0
        ids[row, n - 1] = SP.sep
    return ids, seg


class Ours:
    def __init__(self, cfg: ElectraConfig, bf16: bool):
        self.bf16 = bf16
        self.obj = ElectraObjective(ElectraForPretraining(cfg.model), cfg.objective, SP, cfg.data.seq_len)
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
                                                          intermediate_size=g.intermediate_size, **common))
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
        o = self.cfg.objective
        mask = (ids != SP.pad).long()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):
            m = apply_masking(ids, SP, o, o.max_predictions_for(ids.shape[1]))
            logits = self.gen(input_ids=m.masked_ids, attention_mask=mask, token_type_ids=seg).logits
            logits = logits.reshape(-1, logits.shape[-1])[m.positions].float()
            gen_loss = F.cross_entropy(logits, m.targets)
            sampled = gumbel_sample(logits, temperature=o.temperature)
            disc_ids = ids.reshape(-1).index_copy(0, m.positions, sampled).view_as(ids)
            labels = (disc_ids != ids).long()
            disc_loss = self.disc(input_ids=disc_ids, attention_mask=mask, token_type_ids=seg, labels=labels).loss
            loss = o.generator_weight * gen_loss + o.discriminator_weight * disc_loss
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
    ap.add_argument("--padded-rows", type=int, default=2, help="rows given padding (0: none)")
    ap.add_argument("--rounds", type=int, default=5, help="alternating timing rounds")
    ap.add_argument("--skip-baseline", action="store_true", help="time only our step")
    ap.add_argument("--profile", action="store_true", help="print a torch.profiler table of our step")
    ap.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto",
                    help="autocast dtype for both sides (auto: bf16 if its matmul is faster here)")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()

    torch.manual_seed(0)
    fp32_rate, bf16_rate = matmul_gflops(1024, 2, torch.float32), matmul_gflops(256, 2)
    bf16 = args.precision == "bf16" or (args.precision == "auto" and bf16_rate > fp32_rate)
    print(f"matmul probe: fp32 {fp32_rate:.1f}, bf16 {bf16_rate:.1f} GFLOP/s -> {'bf16' if bf16 else 'fp32'}",
          flush=True)
    cfg = load_config(args.config)
    ids, seg = make_batch(cfg, args.batch, padded_rows=args.padded_rows)
    tokens = int((ids != SP.pad).sum())
    sides = {"ours": Ours(cfg, bf16)}
    if not args.skip_baseline:
        sides["transformers"] = Theirs(cfg, bf16)
    for name, side in sides.items():  # warm-up: allocator, oneDNN primitive caches
        print(f"warm-up {name}: {timed(side.step, ids, seg):.2f} s", flush=True)
    times = {name: [] for name in sides}
    for _ in range(args.rounds):
        for name, side in sides.items():
            times[name].append(timed(side.step, ids, seg))
    ceiling = matmul_gflops(dtype=torch.bfloat16 if bf16 else torch.float32)
    flops = training_flops_per_token(cfg)
    result = {"threads": torch.get_num_threads(), "tokens_per_step": tokens, "precision": "bf16" if bf16 else "fp32",
              "matmul_ceiling_gflops": ceiling,
              "train_flops_per_token": flops}
    for name, ts in times.items():
        sec = statistics.median(ts)
        result[name] = {"sec_per_step": sec, "tokens_per_s": tokens / sec,
                        "gflops": tokens * flops / sec / 1e9, "share_of_ceiling": tokens * flops / sec / 1e9 / ceiling}
    if "transformers" in result:
        result["speedup"] = result["ours"]["tokens_per_s"] / result["transformers"]["tokens_per_s"]
    for name in times:
        r = result[name]
        print(f"{name:>13}: {r['sec_per_step']:.3f} s/step  {r['tokens_per_s']:8.0f} tokens/s  "
              f"{r['gflops']:6.1f} GFLOP/s  {100 * r['share_of_ceiling']:.1f}% of the {result['precision']} ceiling")
    print(f"{result['precision']} 2048^3 matmul: {ceiling:.0f} GFLOP/s; {flops / 1e6:.1f} MFLOP per token; "
          f"threads {result['threads']}" + (f"; speedup {result['speedup']:.2f}x" if "speedup" in result else ""))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    if args.profile:
        profile(sides["ours"], ids, seg)


if __name__ == "__main__":
    main()
