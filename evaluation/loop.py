"""The fine-tuning loop shared by GLUE and SQuAD: model, optimiser, schedule, steps, inference.

One code path for the CPU and the GPU: the device is picked once (``recipe.device``), tensors
move to it per batch, bf16 autocast is optional on both. ``recipe.precision = "auto"``
(``resolve_precision``) picks bf16 only where the hardware has native bf16 matrix units: a CUDA
GPU with ``torch.cuda.is_bf16_supported()``, or a CPU with AMX or AVX512-BF16
(``electra.distributed.hardware``, the same answer pre-training gets); anywhere else
bf16 matmuls run through slow emulation, so it stays fp32. An explicit "fp32"/"bf16" is kept.
The resolved precision is returned in ``TrainStats.precision``. With ``recipe.deepspeed`` the same model,
optimiser and schedule are handed to a single-process DeepSpeed engine (``engine.backward`` /
``engine.step`` replace the plain calls); everything else is unchanged.

Optimiser (``make_optimizer``, ``recipe.optimizer``) over the parameter groups of
``recipe.param_groups`` (an LLRD rate per depth; biases and LayerNorm in no-decay groups; weight
decay 0 per the paper): "original" (default) is the original's Adam without bias correction,
``electra.run.optim.AdamWeightDecay`` (a few multi-tensor ``_foreach`` ops per group); "adamw" is
``torch.optim.AdamW``, fused on CPU and CUDA. The recipe's docstring compares the two. With
DeepSpeed either is handed over as a client optimiser, unfused. Schedule:
``min(1, step / warmup) × max(0, 1 - step / total)`` with warm-up = 10% of the steps, the
original's warm-up multiplied into a linear decay (with a warm-up the first update runs at lr 0,
as the original's). Gradient clipping at global norm 1.0. Batches are padded to their longest
row (dynamic padding: GLUE rows are mostly much shorter than 128 tokens, so this is the main CPU
saving).

Length-bucketed batches (``epoch_batches``, ``recipe.length_buckets`` = k): per epoch a seeded
permutation of the rows, cut into chunks of k × batch_size rows; each chunk is sorted by length
(stably) and cut into batches, and the order of all the epoch's batches is shuffled with the same
generator. A batch then holds rows of similar length (little padding), while which rows meet and
the batch order stay random; every row is used exactly once per epoch and the number of batches
(steps) is unchanged. It is the mega-batch scheme of ``transformers``' ``group_by_length``
(k = 50 there too). Trade-off: batches are less mixed in length than plain random batches, the
usual price of bucketing; k = 1 is exactly the plain order (the permutation cut into batches).
Where length predicts the label (a small task whose classes differ in length), sorted batches
become nearly one-class and training can stall (README: Evaluation). Use k = 1 for such data,
or for paper-exact random batches.
The generator is seeded by (seed, epoch), so a seed fully determines a run.

Progress: ``train`` logs to the ``evaluation.progress`` logger at INFO: a line at the
start (label, steps, epochs), at most one line per ``progress_seconds`` (step / total, epoch,
the current epoch's mean loss so far, steps/s, ETA) and one at the end (steps, time). The
per-step cost is one clock read; the loss is already read back per step for the epoch means.
A run the evaluation planned (``evaluation.eta``: the active clock knows its label) ends its
lines with the whole evaluation's ETA: "...; all 4 tasks × 10 seeds: ETA ~2.1 h" while it
trains, "...; 1 of 40 (4 tasks × 10 seeds) done, ETA ~2 h for the rest" at its end.

Evaluation (``predict``) runs rows sorted by length (longest first, so a batch that does not fit
fails at once) in ``eval_batch_size`` batches and returns the outputs in the original order.
"""
from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from electra.run.seeding import seed_everything  # noqa: F401  (re-exported for the fine-tuning modules)

from electra.distributed.hardware import cpu_features, native_bf16
from electra.run.optim import AdamWeightDecay
from pipelines import schema
from . import eta
from .heads import FinetuneModel
from .recipe import FinetuneRecipe, param_groups, total_steps


def resolve_device(recipe: FinetuneRecipe) -> torch.device:
    """The device to fine-tune on (and torch's CPU thread count, when the recipe sets one)."""
    if recipe.num_threads:
        torch.set_num_threads(recipe.num_threads)
    if recipe.device == "cuda" or (recipe.device == "auto" and torch.cuda.is_available()):
        return torch.device("cuda")
    return torch.device("cpu")


def load_tokenizer(model_dir: str | Path):
    """The ``tokenizers`` tokenizer saved beside an HF export (``tokenizer.json``)."""
    from tokenizers import Tokenizer

    path = Path(model_dir) / schema.TOKENIZER_JSON
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


def resolve_precision(recipe: FinetuneRecipe, device: torch.device) -> str:
    """``recipe.precision`` with "auto" resolved for ``device``: "bf16" or "fp32"."""
    if recipe.precision != "auto":
        return recipe.precision
    if device.type == "cuda":
        ok = native_bf16("cuda", cuda_bf16=torch.cuda.is_bf16_supported())
    else:
        ok = native_bf16(device.type, features=cpu_features())
    return "bf16" if ok else "fp32"


def epoch_batches(lengths: Sequence[int], *, batch_size: int, buckets: int,
                  generator: torch.Generator) -> list[torch.Tensor]:
    """One epoch's batches of row indices (see the module docstring); ``buckets`` >= 1."""
    if buckets < 1 or batch_size < 1:
        raise ValueError(f"length_buckets {buckets} and batch_size {batch_size} must be >= 1")
    n = len(lengths)
    order = torch.randperm(n, generator=generator)
    if buckets == 1:
        return [order[b: b + batch_size] for b in range(0, n, batch_size)]
    lens = torch.as_tensor(list(lengths), dtype=torch.long)
    chunk, batches = buckets * batch_size, []
    for c in range(0, n, chunk):
        part = order[c: c + chunk]
        part = part[torch.argsort(lens[part], stable=True)]
        batches += [part[b: b + batch_size] for b in range(0, len(part), batch_size)]
    return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]


@dataclass
class TrainStats:
    steps: int
    losses: list[float]  # mean loss per epoch
    seconds: float
    precision: str = "fp32"  # the precision really used (``resolve_precision``)


# loss_fn(model_output, batch_indices, device) -> scalar loss
LossFn = Callable[[object, torch.Tensor, torch.device], torch.Tensor]

progress_log = logging.getLogger("evaluation.progress")


def make_optimizer(model: FinetuneModel, recipe: FinetuneRecipe,
                   device: torch.device) -> torch.optim.Optimizer:
    """``recipe.optimizer`` over ``param_groups(model, recipe)`` (see the module docstring)."""
    groups = param_groups(model, recipe)
    betas = (recipe.adam_beta1, recipe.adam_beta2)
    if recipe.optimizer == "original":
        return AdamWeightDecay(groups, lr=recipe.lr, betas=betas, eps=recipe.adam_eps,
                               weight_decay=recipe.weight_decay, bias_correction=False)
    if recipe.optimizer != "adamw":
        raise ValueError(f"unknown fine-tuning optimizer {recipe.optimizer!r}")
    # fused AdamW: one kernel over all parameters instead of a chain of per-tensor ops (the
    # same update; transformers' Trainer defaults to it too); DeepSpeed keeps the plain one
    fused = device.type in ("cpu", "cuda") and not recipe.deepspeed
    return torch.optim.AdamW(groups, lr=recipe.lr, betas=betas, eps=recipe.adam_eps,
                             weight_decay=recipe.weight_decay, fused=fused or None)


class _Progress:
    """The progress lines of ``train`` (module docstring), at most one per ``every`` seconds."""

    def __init__(self, label: str, total: int, epochs: float, every: float):
        self.label, self.total, self.every = label or "fine-tuning", total, every
        self.clock = eta.active()
        if self.clock is not None:
            self.clock.begin(self.label)
        self.start = self.last = time.perf_counter()
        progress_log.info("%s: %d steps, %g epochs", self.label, total, epochs)

    def _whole(self, text: str | None) -> str:
        return f"; {text}" if text else ""

    def step(self, step: int, epoch: int, epochs: int, running: list[float]) -> None:
        now = time.perf_counter()
        if now - self.last < self.every:
            return
        self.last = now
        rate = step / max(now - self.start, 1e-9)
        whole = self._whole(self.clock and self.clock.advance(self.label, step))
        progress_log.info("%s: step %d/%d (epoch %d/%d), loss %.4f, %.2f steps/s, ETA %s%s",
                          self.label, step, self.total, epoch + 1, epochs,
                          float(np.mean(running)), rate, _duration((self.total - step) / rate), whole)

    def done(self, steps: int) -> float:
        seconds = time.perf_counter() - self.start
        whole = self._whole(self.clock and self.clock.finish(self.label, steps))
        progress_log.info("%s: done, %d steps in %s%s", self.label, steps, _duration(seconds), whole)
        return seconds


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def train(model: FinetuneModel, *, rows: Sequence[Sequence[int]], segs: Sequence[Sequence[int]],
          loss_fn: LossFn, recipe: FinetuneRecipe, epochs: float, seed: int,
          pad_id: int = 0, label: str = "", progress_seconds: float = 10.0) -> TrainStats:
    """Fine-tune ``model`` in place on ``rows`` for ``epochs`` (fractions allowed).

    ``label`` names the run in the progress lines ("SST-2 seed 0"); ``progress_seconds`` is the
    least time between two of them (0: every step).
    """
    device = next(model.parameters()).device
    precision = resolve_precision(recipe, device)
    n = len(rows)
    lengths = [len(r) for r in rows]
    total = total_steps(n, recipe.batch_size, epochs)
    warmup = int(recipe.warmup_fraction * total)
    optimizer = make_optimizer(model, recipe, device)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_multiplier(s, total_steps=total, warmup_steps=warmup))
    engine = (_deepspeed_engine(model, optimizer, schedule, recipe, precision)
              if recipe.deepspeed else None)
    model.train()
    n_epochs = math.ceil(epochs)
    progress = _Progress(label, total, epochs, progress_seconds)
    step, epoch_losses = 0, []
    for epoch in range(n_epochs):
        batches = epoch_batches(lengths, batch_size=recipe.batch_size,
                                buckets=recipe.length_buckets,
                                generator=torch.Generator().manual_seed(seed * 1000 + epoch))
        running = []
        for idx in batches:
            if step >= total:
                break
            ids, seg, mask = (t.to(device, non_blocking=True) for t in pad_batch(
                [rows[i] for i in idx], [segs[i] for i in idx], pad_id=pad_id))
            with _autocast(device, precision):
                loss = loss_fn((engine or model)(ids, seg, mask), idx, device)
            _step(loss, model=model, optimizer=optimizer, schedule=schedule, engine=engine,
                  clip=recipe.grad_clip)
            running.append(float(loss.detach()))
            step += 1
            progress.step(step, epoch, n_epochs, running)
        epoch_losses.append(float(np.mean(running)) if running else float("nan"))
    model.eval()
    return TrainStats(steps=step, losses=epoch_losses, seconds=progress.done(step),
                      precision=precision)


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


def _autocast(device: torch.device, precision: FinetuneRecipe | str):
    """bf16 autocast when ``precision`` (a resolved string, or a recipe to resolve) is bf16."""
    if not isinstance(precision, str):
        precision = resolve_precision(precision, device)
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16,
                          enabled=precision == "bf16")


def _deepspeed_engine(model, optimizer, schedule, recipe: FinetuneRecipe, precision: str):
    """A single-process DeepSpeed engine around the same model/optimiser/schedule."""
    import deepspeed

    for key, value in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29531"), ("RANK", "0"),
                       ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1")):
        os.environ.setdefault(key, value)
    config = {"train_micro_batch_size_per_gpu": recipe.batch_size,
              "gradient_accumulation_steps": 1, "gradient_clipping": recipe.grad_clip,
              "bf16": {"enabled": precision == "bf16"}}
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer,
                                           lr_scheduler=schedule, config=config)
    return engine


@torch.no_grad()
def predict(model: FinetuneModel, *, rows: Sequence[Sequence[int]], segs: Sequence[Sequence[int]],
            recipe: FinetuneRecipe, pad_id: int = 0) -> tuple[list[np.ndarray], list | None]:
    """Head outputs per row in the rows' order (logits trimmed to each row's length for span
    heads); rows run longest first in ``eval_batch_size`` batches (see the module docstring)."""
    device = next(model.parameters()).device
    precision = resolve_precision(recipe, device)
    model.eval()
    # stable sort, longest first: rows of similar length share a batch
    order = sorted(range(len(rows)), key=lambda i: -len(rows[i]))
    logits: list = [None] * len(rows)
    na: list = [None] * len(rows)
    has_na = False
    for b in range(0, len(order), recipe.eval_batch_size):
        idx = order[b: b + recipe.eval_batch_size]
        ids, seg, mask = (t.to(device, non_blocking=True) for t in pad_batch(
            [rows[i] for i in idx], [segs[i] for i in idx], pad_id=pad_id))
        with _autocast(device, precision):
            out = model(ids, seg, mask)
        lg = out.logits.float().cpu().numpy()
        lengths = mask.sum(1).tolist()
        for j, i in enumerate(idx):
            logits[i] = lg[j, : lengths[j]] if lg.ndim == 3 else lg[j]
        if out.na_logits is not None:
            has_na = True
            for j, v in zip(idx, out.na_logits.float().cpu().numpy().tolist()):
                na[j] = v
    return logits, (na if has_na else None)
