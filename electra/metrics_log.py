"""Training metrics: one place that turns step statistics into the numbers the run reports.

Per-micro-batch ``ObjectiveOutput`` fields are summed on the device in a :class:`MetricWindow`
(no host sync per step); at a log step the window is all-reduced across ranks once and turned
into one record: means over micro batches and ranks, tokens/s over the window's wall time, and
MFU = tokens/s x training FLOPs per token (``electra.flops``) / (peak FLOP/s x ranks).

Peak FLOP/s: ``train.peak_flops`` if set, else dense bf16 (or fp32) figures: H100 SXM 989 TF,
H200 989 TF, A100 312 TF (fp32 via TF32: 156/495 TF); on a CPU the figures measured on this
project's 2-core AMX machine (docs/environment.md: 2.18 TF bf16, 0.317 TF fp32), which are only
meaningful there.

Rank 0 writes ``metrics.jsonl`` (append, flushed per record) and TensorBoard events. On resume
from step ``s`` records past ``s`` (from the killed run) are dropped first, atomically, so the
file reads as one uninterrupted run.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

import torch

from common.storage import write_bytes
from electra.distributed import all_reduce_sum

FIELDS = ("loss", "gen_loss", "disc_loss", "gen_acc", "disc_acc", "disc_precision", "disc_recall",
          "replaced_frac")
_PEAK = {"H100": (989e12, 495e12), "H200": (989e12, 495e12), "A100": (312e12, 156e12),
         "cpu": (2.18e12, 0.317e12)}


def peak_flops(precision: str, override: float | None = None) -> float:
    if override:
        return override
    name = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    for key, (bf16, fp32) in _PEAK.items():
        if key in name:
            return bf16 if precision in ("bf16", "fp16") else fp32
    return _PEAK["cpu"][0] if precision == "bf16" else _PEAK["cpu"][1]


class MetricWindow:
    """Sums of objective outputs since the last flush, kept as one device tensor."""

    def __init__(self, device: torch.device):
        self.device = device
        self.reset()

    def reset(self) -> None:
        # FIELDS..., micro batches, tokens
        self.sums = torch.zeros(len(FIELDS) + 2, dtype=torch.float64, device=self.device)
        self.started = time.perf_counter()

    @property
    def pending(self) -> bool:
        return bool(self.sums[len(FIELDS)] > 0)

    def add(self, out) -> None:
        vals = [getattr(out, f).detach().double() for f in FIELDS]
        vals += [torch.ones((), dtype=torch.float64, device=self.device), out.num_tokens.detach().double()]
        self.sums += torch.stack(vals)

    def flush(self) -> tuple[dict[str, float], int, float]:
        """All-reduce; returns (means, global tokens in window, seconds); resets the window."""
        total = all_reduce_sum(self.sums.clone()).tolist()
        micro = max(total[len(FIELDS)], 1.0)
        means = {f: total[i] / micro for i, f in enumerate(FIELDS)}
        tokens, seconds = int(total[-1]), time.perf_counter() - self.started
        self.reset()
        return means, tokens, seconds


class MetricsLog:
    """``metrics.jsonl`` + TensorBoard, written by rank 0 only (other ranks: no-ops)."""

    def __init__(self, run_dir: str | Path, *, enabled: bool, resume_step: int = 0):
        self.enabled = enabled
        self.path = Path(run_dir) / "metrics.jsonl"
        self.writer = None
        if not enabled:
            return
        truncate_after(self.path, resume_step)
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(Path(run_dir) / "tensorboard"), purge_step=resume_step + 1)
        self.file = open(self.path, "a")

    def write(self, record: dict) -> None:
        if not self.enabled:
            return
        self.file.write(json.dumps(record, sort_keys=True) + "\n")
        self.file.flush()
        prefix = "eval/" if record.get("kind") == "eval" else "train/"
        for k, v in record.items():
            if k not in ("step", "kind") and isinstance(v, (int, float)) and math.isfinite(v):
                self.writer.add_scalar(prefix + k, v, record["step"])

    def close(self) -> None:
        if self.enabled:
            self.file.close()
            self.writer.close()


def truncate_after(path: Path, step: int) -> None:
    """Keep only records with ``step <= step`` (a resumed run rewrites what the killed one logged)."""
    if not path.is_file():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:  # a line cut by the kill
            continue
        if rec.get("step", 0) <= step:
            kept.append(line + "\n")
    write_bytes(str(path), "".join(kept).encode())


def train_record(step: int, means: dict[str, float], *, tokens: int, seconds: float, lr: float,
                 grad_norm: float | None, flops_per_token: float | None, peak: float,
                 world_size: int) -> dict:
    tps = tokens / seconds if seconds > 0 else 0.0
    mfu = tps * flops_per_token / (peak * world_size) if flops_per_token else None
    return {"kind": "train", "step": step, **means, "lr": lr, "grad_norm": grad_norm,
            "tokens": tokens, "tokens_per_sec": tps, "mfu": mfu}
