"""Training metrics: one place that turns step statistics into the numbers the run reports.

Per-micro-batch ``ObjectiveOutput`` fields are summed on the device in a :class:`MetricWindow`
(no host sync per step); at a log step the window is all-reduced across ranks once and turned
into one record: means over micro batches and ranks, tokens/s over the window's wall time, and
MFU = tokens/s x training FLOPs per token (``electra.model.flops``) / (peak FLOP/s x ranks).

Discriminator AUC: each micro batch adds a histogram of its non-pad discriminator logits to
the window (``electra.model.auc``); histograms add across micro batches and ranks, so the
window's AUC is that of all its tokens.

Peak FLOP/s: ``train.peak_flops`` if set, else dense bf16 (or fp32) figures: H100 SXM 989 TF,
H200 989 TF, A100 312 TF; fp32 runs on these GPUs use TF32 tensor cores (``train.tf32``, on by
default, electra/distributed/deepspeed_glue.py), so their peak is the dense TF32 figure (495/495/156 TF); with
``train.tf32=false`` the plain fp32 figure (67/67/19.5 TF). On a CPU the figures measured on
this project's 2-core AMX machine (docs/environment.md: 2.18 TF bf16, 0.317 TF fp32), which are
only meaningful there.

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
from electra.checkpoint import run_layout
from electra.distributed.deepspeed_glue import all_reduce_sum
from electra.model.auc import AUC_BINS, auc_from_histogram

FIELDS = ("loss", "gen_loss", "disc_loss", "gen_acc", "disc_acc", "disc_precision", "disc_recall",
          "replaced_frac")
# dense bf16, fp32 via TF32 tensor cores, plain fp32 (per device; the CPU row is measured, no TF32)
_PEAK = {"H100": (989e12, 495e12, 67e12), "H200": (989e12, 495e12, 67e12), "A100": (312e12, 156e12, 19.5e12),
         "cpu": (2.18e12, 0.317e12, 0.317e12)}


def peak_flops(precision: str, override: float | None = None, *, tf32: bool = True) -> float:
    """The MFU denominator for one device: ``override``, else the table's figure for ``precision``
    (fp32: the TF32 figure when ``tf32``, as ``train.tf32`` switches TF32 on for fp32 runs)."""
    if override:
        return override
    name = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    row = next((v for k, v in _PEAK.items() if k in name), _PEAK["cpu"])
    if precision in ("bf16", "fp16") and (name != "cpu" or precision == "bf16"):
        return row[0]
    return row[1] if tf32 else row[2]


class MetricWindow:
    """Sums of objective outputs since the last flush, kept as one device tensor. With several
    corpora (``sources`` > 1), also per corpus: examples, summed discriminator token losses, tokens."""

    def __init__(self, device: torch.device, sources: int = 1):
        self.device, self.sources = device, sources
        self._per_source = len(FIELDS) + 2 + 2 * AUC_BINS  # where the per-corpus sums start
        self.reset()

    def reset(self) -> None:
        # FIELDS..., micro batches, tokens, the AUC histogram, per-corpus sums (one all-reduce for all)
        extra = 3 * self.sources if self.sources > 1 else 0
        self.sums = torch.zeros(self._per_source + extra, dtype=torch.float64, device=self.device)
        self.started = time.perf_counter()

    def exclude(self, seconds: float) -> None:
        """Leave ``seconds`` (an evaluation, a checkpoint) out of this window's throughput."""
        self.started += seconds

    @property
    def pending(self) -> bool:
        return bool(self.sums[len(FIELDS)] > 0)

    def add(self, out, sources: torch.Tensor | None = None) -> None:
        """Add one micro batch's outputs; ``sources``: each row's corpus (``Batch.sources``)."""
        vals = [getattr(out, f).detach().double() for f in FIELDS]
        vals += [torch.ones((), dtype=torch.float64, device=self.device), out.num_tokens.detach().double()]
        n = len(vals)
        self.sums[:n] += torch.stack(vals)
        hist = getattr(out, "disc_hist", None)
        if hist is not None:
            self.sums[n:self._per_source] += hist.detach().double()
        if self.sources > 1 and sources is not None:
            rows = torch.stack([torch.ones_like(out.row_tokens, dtype=torch.float64),
                                out.row_disc_loss.detach().double(), out.row_tokens.double()], 1)
            self.sums[self._per_source:].view(self.sources, 3).index_add_(0, sources.to(self.device), rows)

    def flush(self) -> tuple[dict[str, float], int, float]:
        """All-reduce; returns (means, global tokens in window, seconds); resets the window."""
        reduced = all_reduce_sum(self.sums.clone()).cpu()
        total = reduced[:len(FIELDS) + 2].tolist()
        micro = max(total[len(FIELDS)], 1.0)
        means = {f: total[i] / micro for i, f in enumerate(FIELDS)}
        means["disc_auc"] = auc_from_histogram(reduced[len(FIELDS) + 2:self._per_source])
        if self.sources > 1:
            for j, (examples, loss, toks) in enumerate(reduced[self._per_source:].view(self.sources, 3).tolist()):
                means[f"source{j}_examples"] = int(examples)
                means[f"source{j}_disc_loss"] = loss / toks if toks else None
        tokens, seconds = int(total[-1]), time.perf_counter() - self.started
        self.reset()
        return means, tokens, seconds


class MetricsLog:
    """``metrics.jsonl`` + TensorBoard, written by rank 0 only (other ranks: no-ops)."""

    def __init__(self, run_dir: str | Path, *, enabled: bool, resume_step: int = 0):
        self.enabled = enabled
        self.path = Path(run_dir) / run_layout.METRICS
        self.writer = None
        if not enabled:
            return
        truncate_after(self.path, resume_step)
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(Path(run_dir) / run_layout.TENSORBOARD), purge_step=resume_step + 1)
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
