"""The fine-tuning loop shared by GLUE and SQuAD: model, optimiser, schedule, steps, inference.

One code path for the CPU and the GPU: the device is picked once (``recipe.device``), tensors
move to it per batch, bf16 autocast is optional on both. With ``recipe.deepspeed`` the same model,
optimiser and schedule are handed to a single-process DeepSpeed engine (``engine.backward`` /
``engine.step`` replace the plain calls); everything else is unchanged.

Optimiser: AdamW with the LLRD parameter groups of ``recipe.param_groups`` (weight decay 0 per
the paper). Schedule: ``min(1, step / warmup) × max(0, 1 - step / total)`` with warm-up = 10% of
the steps, the original's warm-up multiplied into a linear decay. Gradient clipping at global
norm 1.0. Batches are padded to their longest row (dynamic padding: GLUE rows are mostly much
shorter than 128 tokens, so this is the main CPU saving). The data order per epoch comes from a
``torch.Generator`` seeded by (seed, epoch), so a seed fully determines a run.
"""
from __future__ import annotations

import math
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from .heads import FinetuneModel
from .recipe import FinetuneRecipe, param_groups


def resolve_device(recipe: FinetuneRecipe) -> torch.device:
    """The device to fine-tune on (and torch's CPU thread count, when the recipe sets one)."""
    if recipe.num_threads:
        torch.set_num_threads(recipe.num_threads)
    if recipe.device == "cuda" or (recipe.device == "auto" and torch.cuda.is_available()):
        return torch.device("cuda")
    return torch.device("cpu")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def load_tokenizer(model_dir: str | Path):
    """The ``tokenizers`` tokenizer saved beside an HF export (``tokenizer.json``)."""
    from tokenizers import Tokenizer

    path = Path(model_dir) / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no tokenizer.json in the model folder {model_dir}")
    return Tokenizer.from_file(str(path))


def pad_batch(rows: Sequence[Sequence[int]], segs: Sequence[Sequence[int]], *,
              pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-pad to the longest row: (input_ids, segment_ids, attention_mask) as [B, T] longs."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    seg = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (r, s) in enumerate(zip(rows, segs)):
        ids[i, : len(r)] = torch.as_tensor(r)
        seg[i, : len(s)] = torch.as_tensor(s)
        mask[i, : len(r)] = 1
    return ids, seg, mask


def lr_multiplier(step: int, *, total_steps: int, warmup_steps: int) -> float:
    warm = min(1.0, step / warmup_steps) if warmup_steps > 0 else 1.0
    return warm * max(0.0, 1.0 - step / max(1, total_steps))


@dataclass
class TrainStats:
    steps: int
    losses: list[float]  # mean loss per epoch
    seconds: float


# loss_fn(model_output, batch_indices, device) -> scalar loss
LossFn = Callable[[object, torch.Tensor, torch.device], torch.Tensor]


def train(model: FinetuneModel, *, rows: Sequence[Sequence[int]], segs: Sequence[Sequence[int]],
          loss_fn: LossFn, recipe: FinetuneRecipe, epochs: float, seed: int,
          pad_id: int = 0) -> TrainStats:
    """Fine-tune ``model`` in place on ``rows`` for ``epochs`` (fractions allowed)."""
    import time

    device = next(model.parameters()).device
    n = len(rows)
    per_epoch = math.ceil(n / recipe.batch_size)
    total = max(1, math.ceil(epochs * per_epoch))
    warmup = int(recipe.warmup_fraction * total)
    optimizer = torch.optim.AdamW(param_groups(model, recipe), betas=(recipe.adam_beta1,
                                  recipe.adam_beta2), eps=recipe.adam_eps)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_multiplier(s, total_steps=total, warmup_steps=warmup))
    engine = _deepspeed_engine(model, optimizer, schedule, recipe) if recipe.deepspeed else None
    model.train()
    start, step, epoch_losses = time.perf_counter(), 0, []
    for epoch in range(math.ceil(epochs)):
        order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1000 + epoch))
        running = []
        for b in range(0, n, recipe.batch_size):
            if step >= total:
                break
            idx = order[b: b + recipe.batch_size]
            ids, seg, mask = (t.to(device) for t in pad_batch(
                [rows[i] for i in idx], [segs[i] for i in idx], pad_id=pad_id))
            with _autocast(device, recipe):
                loss = loss_fn((engine or model)(ids, seg, mask), idx, device)
            _step(loss, model=model, optimizer=optimizer, schedule=schedule, engine=engine,
                  clip=recipe.grad_clip)
            running.append(float(loss.detach()))
            step += 1
        epoch_losses.append(float(np.mean(running)) if running else float("nan"))
    model.eval()
    return TrainStats(steps=step, losses=epoch_losses, seconds=time.perf_counter() - start)


def _step(loss, *, model, optimizer, schedule, engine, clip: float) -> None:
    if engine is not None:
        engine.backward(loss)
        engine.step()  # clipping, optimiser and schedule are configured in the engine
        return
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    schedule.step()


def _autocast(device: torch.device, recipe: FinetuneRecipe):
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16,
                          enabled=recipe.precision == "bf16")


def _deepspeed_engine(model, optimizer, schedule, recipe: FinetuneRecipe):
    """A single-process DeepSpeed engine around the same model/optimiser/schedule."""
    import deepspeed

    for key, value in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29531"), ("RANK", "0"),
                       ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1")):
        os.environ.setdefault(key, value)
    config = {"train_micro_batch_size_per_gpu": recipe.batch_size,
              "gradient_accumulation_steps": 1, "gradient_clipping": recipe.grad_clip,
              "bf16": {"enabled": recipe.precision == "bf16"}}
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer,
                                           lr_scheduler=schedule, config=config)
    return engine


@torch.no_grad()
def predict(model: FinetuneModel, *, rows: Sequence[Sequence[int]], segs: Sequence[Sequence[int]],
            recipe: FinetuneRecipe, pad_id: int = 0) -> tuple[list[np.ndarray], list | None]:
    """Head outputs per row (logits trimmed to each row's length for span heads)."""
    device = next(model.parameters()).device
    model.eval()
    logits, na = [], []
    for b in range(0, len(rows), recipe.eval_batch_size):
        ids, seg, mask = (t.to(device) for t in pad_batch(
            rows[b: b + recipe.eval_batch_size], segs[b: b + recipe.eval_batch_size],
            pad_id=pad_id))
        with _autocast(device, recipe):
            out = model(ids, seg, mask)
        lg = out.logits.float().cpu().numpy()
        for i in range(lg.shape[0]):
            logits.append(lg[i, : int(mask[i].sum())] if lg.ndim == 3 else lg[i])
        if out.na_logits is not None:
            na.extend(out.na_logits.float().cpu().numpy().tolist())
    return logits, (na or None)
