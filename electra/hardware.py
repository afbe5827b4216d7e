"""What this machine's processor can do: native bf16 or not, and the label measurements carry.

Pre-training (``electra.distributed.effective_precision``) and fine-tuning
(``evaluation.loop.resolve_precision``) both pick bf16 on a CPU only where it has native
bf16 matrix units, AMX or AVX512-BF16; without them bf16 matmuls run through slow fallbacks
(README: Figures, the cost measured on AVX2-only machines), so fp32 is both faster and more
exact. One answer for both, from torch's own CPU probes (the kernels torch will dispatch to)
rather than ``/proc/cpuinfo``, so it holds on every OS torch runs on; a torch without a probe
reports the feature absent, the safe side (fp32).

``cpu_kind`` is the short label (AMX, AVX512-BF16, AVX512, AVX2, ...) that benchmark figures and
reference curves carry: fp32 rounding, hence exact loss values and speed, depends on which matmul
kernels ran.
"""
from __future__ import annotations

import platform

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
