"""Helper of tests/electra/checkpoint/test_universal.py: a tiny model trained by real DeepSpeed
ranks on CPU with the project's optimiser, schedule and checkpoint code.

    deepspeed --num_gpus 2 tests/electra/_zero_worker.py train  --run RUN --out OUT --stage 1
    python tests/electra/_zero_worker.py              resume --run RUN --out OUT --stage 1

``train``: ``--steps`` optimiser steps on fixed global batches, a checkpoint (electra.checkpoint.save_load)
at the last one, OUT/saved.pt = the full optimiser state then, one more step, OUT/next.pt = the
full fp32 masters after it. ``resume``: plan_resume -> ds_config_for_resume -> prepare_universal
-> engine -> load_checkpoint from RUN's latest checkpoint, OUT/loaded.pt = the full state after
the load, the same next step, OUT/next.pt; OUT/plan.json = the plan (or the refusal). With
``--node-cache DIR`` the load goes through the node's checkpoint mirror there, and
``--log-opens LOG`` logs every open of the checkpoints' files from the conversion on
(``tests._opens``).

Global batch k is the same examples whatever the world size: ``GLOBAL // MICRO`` micro batches,
rank r taking micro batches ``r*accum .. r*accum+accum-1``; DeepSpeed averages the loss over the
accumulation steps and the gradients over the ranks, so a step sees the mean over the global
batch on any world size. The model has a tied weight, a frozen parameter and a buffer (set to
"trained" values before the engine is built by ``train`` only: a universal load must restore
them), and a no-decay group whose size is odd (ZeRO pads it).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

V, H = 37, 12
GLOBAL, MICRO, SEQ = 8, 2, 5


class Toy(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, H)
        self.proj = nn.Linear(H, H)
        self.norm = nn.LayerNorm(H)
        self.frozen = nn.Linear(H, H, bias=False)
        self.frozen.requires_grad_(False)
        self.head = nn.Linear(H, V)
        self.head.weight = self.emb.weight  # tied, like ELECTRA's shared embeddings
        self.register_buffer("scale", torch.ones(H))

    def forward(self, ids, labels):
        h = self.emb(ids)
        h = self.norm(torch.tanh(self.proj(h)) + self.frozen(h) * self.scale.to(h.dtype))
        return F.cross_entropy(self.head(h).float().view(-1, V), labels.view(-1))


def global_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randint(0, V, (GLOBAL, SEQ), generator=g), torch.randint(0, V, (GLOBAL, SEQ), generator=g)


def ds_config(world: int, stage: int, precision: str) -> dict:
    """As electra.distributed.deepspeed_glue.deepspeed_config builds it."""
    ds = {"train_batch_size": GLOBAL, "train_micro_batch_size_per_gpu": MICRO,
          "gradient_accumulation_steps": GLOBAL // (MICRO * world), "gradient_clipping": 1.0,
          "zero_optimization": {"stage": stage}, "bf16": {"enabled": precision == "bf16"},
          "fp16": {"enabled": False}, "steps_per_print": 10**9, "zero_allow_untested_optimizer": True}
    if precision == "bf16":
        ds["data_types"] = {"grad_accum_dtype": "fp32"}
        ds["communication_data_type"] = "fp32"
    return ds


def build(seed: int, ds: dict, *, trained_extras: bool):
    from electra.distributed import deepspeed_glue as D
    from electra.config import OptimizerConfig
    from electra.run.optim import build_optimizer, build_scheduler

    torch.manual_seed(seed)
    model = Toy()
    if trained_extras:  # values a fresh model does not have
        with torch.no_grad():
            model.frozen.weight.mul_(-3.0)
            model.scale.copy_(torch.linspace(0.5, 1.5, H))
    cfg = OptimizerConfig(lr=1e-2, weight_decay=0.01, warmup_steps=2, total_steps=50, fused="off")
    optimizer = build_optimizer(model, cfg)
    return D.build_engine(model, optimizer, build_scheduler(optimizer, cfg), ds)


def train_step(engine, step: int, rank: int, world: int) -> None:
    ids, labels = global_batch(step)
    accum = GLOBAL // (MICRO * world)
    for a in range(accum):
        m = rank * accum + a
        sl = slice(m * MICRO, (m + 1) * MICRO)
        loss = engine(ids[sl].to(engine.device), labels[sl].to(engine.device))
        engine.backward(loss)
        engine.step()


def _gather(engine, p: torch.nn.Parameter, key: str) -> torch.Tensor:
    """Parameter ``p``'s full fp32 master (key "fp32") or optimiser state, from the flat partitions
    of the ranks (a collective). Not DeepSpeed's ``safe_get_full_optimizer_state``: ZeRO-1/2 link
    a parameter's state fragments once, right after the FIRST group's first step, when our lazily
    initialised optimiser has no state yet for the other group, which then stays unlinked."""
    import torch.distributed as dist

    full = torch.zeros(p.numel(), dtype=torch.float32, device=engine.device)
    mapping = p._hp_mapping
    if mapping is not None:
        base = engine.optimizer.optimizer
        flat = base.param_groups[mapping.param_group_index]["params"][0]
        source = flat if key == "fp32" else base.state[flat][key]
        hp, lp = mapping.hp_fragment_address, mapping.lp_fragment_address
        full.narrow(0, lp.start, lp.numel).copy_(source.narrow(0, hp.start, hp.numel))
    if dist.get_world_size() > 1:
        dist.all_reduce(full)
    return full.view(p.shape).cpu()


def full_state(engine) -> dict:
    """The optimiser state gathered to full tensors (a collective with ZeRO: every rank calls it)."""
    out = {"fp32": {}, "exp_avg": {}, "exp_avg_sq": {}}
    zero = engine.zero_optimization_stage() > 0
    for name, p in engine.module.named_parameters():
        if not p.requires_grad:
            continue
        for key in ("fp32", "exp_avg", "exp_avg_sq"):
            if zero:
                out[key][name] = _gather(engine, p, key)
            else:
                out[key][name] = (p if key == "fp32" else engine.optimizer.state[p][key]).detach().float().cpu().clone()
    base = engine.optimizer.optimizer if zero else engine.optimizer
    out["step"] = [base.state[g["params"][0]].get("step") for g in base.param_groups]
    out["groups"] = [{k: v for k, v in g.items() if k != "params"} for g in base.param_groups]
    out["last_epoch"] = engine.lr_scheduler.last_epoch
    out["global_steps"] = engine.global_steps
    m = engine.module
    out["frozen"] = m.frozen.weight.detach().float().cpu().clone()
    out["buffer"] = m.scale.detach().float().cpu().clone()
    out["module"] = {n: p.detach().cpu().clone() for n, p in m.named_parameters()}  # its own dtype
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["train", "resume"])
    parser.add_argument("--run", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--stage", type=int, default=1)
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--node-cache", help="resume: load through the node's checkpoint mirror in this folder")
    parser.add_argument("--log-opens", type=Path, help="resume: log each open of the loaded folder's files here")
    parser.add_argument("--local_rank", type=int, default=0)  # the deepspeed launcher passes it
    args = parser.parse_args(argv)

    from electra.checkpoint import save_load as ckpt
    from electra.distributed import deepspeed_glue as D
    from electra.checkpoint import run_layout as layout
    from electra.checkpoint import universal as uc
    from electra.checkpoint.mirror import CheckpointMirror
    from tests._opens import log_opens

    info = D.init_distributed()
    rank, world = info.rank, info.world_size
    args.out.mkdir(parents=True, exist_ok=True)

    def dump(name, obj):
        if rank == 0:
            torch.save(obj, args.out / name)

    ds = ds_config(world, args.stage, args.precision)
    if args.mode == "train":
        engine = build(0, ds, trained_extras=True)
        for step in range(1, args.steps + 1):
            train_step(engine, step, rank, world)
        meta = layout.CheckpointMeta(step=args.steps, tokens_seen=0, data_position={"epoch": 0, "batch": args.steps},
                                     manifest_sha256="m", tokenizer_sha256="t", config_hash="h", wall_time=0.0,
                                     world_size=world)
        ckpt.save_checkpoint(engine, args.run, meta, rank=rank, keep_last=2, barrier=D.barrier)
        dump("saved.pt", full_state(engine))
        next_step = args.steps + 1
    else:
        step_dir = layout.find_latest(args.run)
        try:
            plan = uc.plan_resume(step_dir, world_size=world, zero_stage=args.stage, precision=args.precision)
        except uc.ResumeRefused as exc:
            if rank == 0:
                (args.out / "plan.json").write_text(json.dumps({"refused": str(exc)}))
            D.shutdown()
            return 3
        if rank == 0:
            (args.out / "plan.json").write_text(json.dumps({"universal": plan.universal, "message": plan.message,
                                                            "saved_world_size": plan.saved_world_size}))
        if args.log_opens:
            log_opens(layout.checkpoints_dir(args.run), args.log_opens)
        # as the trainer does: the ranks convert together, their waits sized to the conversion
        agree = D.Agreement(uc.conversion_timeout(step_dir))
        try:
            uc.prepare_universal(plan, rank=rank, world_size=world, agree=agree)
        finally:
            agree.close()
        engine = build(12345, uc.ds_config_for_resume(ds, plan), trained_extras=False)  # other init: all must load
        # as the trainer does: every rank of the node joins the mirror before any loads
        loads = D.universal_loads(engine) if plan.universal else None  # per rank: the parameters it loads
        if rank == 0 and loads is not None:
            (args.out / "universal_loads.json").write_text(json.dumps(loads))
        mirror = CheckpointMirror.open(args.node_cache, plan.load_dir, rank=rank, world_size=world, param_loads=loads)
        D.barrier()
        meta = ckpt.load_checkpoint(engine, step_dir, rank=rank, universal=plan.universal, mirror=mirror)
        dump("loaded.pt", full_state(engine))
        next_step = meta.step + 1
    train_step(engine, next_step, rank, world)
    dump("next.pt", full_state(engine))
    D.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
