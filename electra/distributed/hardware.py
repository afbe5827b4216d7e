"""What this machine's processor can do: native bf16 or not, and the label measurements carry.

Pre-training (``electra.distributed.deepspeed_glue.effective_precision``) and fine-tuning
(``evaluation.loop.resolve_precision``) both pick bf16 on a CPU only where it has native
bf16 matrix units, AMX or AVX512-BF16; without them bf16 matmuls run through slow fallbacks
(README: Figures, the cost measured on AVX2-only machines), so fp32 is both faster and more
exact. One answer for both, from torch's own CPU probes (the kernels torch will dispatch to)
rather than ``/proc/cpuinfo``, so it holds on every OS torch runs on; a torch without a probe
reports the feature absent, the safe side (fp32).

``cpu_kind`` is the short label (AMX, AVX512-BF16, AVX512, AVX2, ...) that benchmark figures and
reference curves carry: fp32 rounding, hence exact loss values and speed, depends on which matmul
kernels ran.

``matmul_flops_per_second`` measures what the matrix units deliver here, now (the machine's load
included), in a run's precision: a square matmul, best of a few after a warm-up, a fraction of a
second. Training spends most of its FLOPs in matmuls of about that size and does other work too,
so FLOPs / this rate is a lower bound on a step's time: the estimate a CPU run of a GPU-sized
config is refused with (``electra.run.plan.check_fits_machine``).
"""
from __future__ import annotations

import platform
import time

import torch

# CPU features (see ``cpu_features``) with native bf16 matrix units
BF16_CPU_FEATURES = frozenset({"AMX_BF16", "AVX512_BF16"})
_PROBES = {"AMX_BF16": "_is_amx_tile_supported", "AVX512_BF16": "_is_avx512_bf16_supported"}


def cpu_features() -> set[str]:
    """``torch.backends.cpu.get_cpu_capability()`` (e.g. "AVX2", "AVX512"; it never names bf16
    units) plus "AMX_BF16" / "AVX512_BF16" when torch's CPU probes find them."""
    feats = {torch.backends.cpu.get_cpu_capability()}
    for name, probe in _PROBES.items():
        fn = getattr(torch.cpu, probe, None)
        if fn is not None and fn():
            feats.add(name)
    return feats


def native_bf16(device_type: str, *, cuda_bf16: bool = False,
                features: set[str] | frozenset[str] = frozenset()) -> bool:
    """Whether bf16 runs natively: CUDA with bf16 support, or a CPU with AMX / AVX512-BF16."""
    if device_type == "cuda":
        return cuda_bf16
    return device_type == "cpu" and bool(BF16_CPU_FEATURES & set(features))


def cpu_kind(features: set[str] | frozenset[str] | None = None) -> str:
    """AMX, AVX512-BF16, or torch's vector capability (AVX512, AVX2, ...); the machine name
    where torch has no vector kernels ("DEFAULT")."""
    feats = cpu_features() if features is None else set(features)
    if "AMX_BF16" in feats:
        return "AMX"
    if "AVX512_BF16" in feats:
        return "AVX512-BF16"
    capability = next(iter(sorted(feats - BF16_CPU_FEATURES)), "DEFAULT")
    return capability if capability != "DEFAULT" else platform.machine()


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def matmul_flops_per_second(precision: str = "fp32", *, size: int = 1024, repeats: int = 3) -> float:
    """FLOP/s of a ``size`` x ``size`` matmul on this CPU in ``precision`` (best of ``repeats``)."""
    a = torch.randn(size, size).to(DTYPES[precision])
    b = torch.randn(size, size).to(DTYPES[precision])
    torch.mm(a, b)  # warm-up: kernel selection, thread pool start
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2.0 * size ** 3 / max(best, 1e-9)
