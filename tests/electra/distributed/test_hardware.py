"""Native bf16 and the CPU label: the mapping on given features, and this machine against /proc/cpuinfo."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from electra.distributed.hardware import cpu_features, cpu_kind, native_bf16


def test_native_bf16_mapping():
    assert native_bf16("cpu", features={"AVX2"}) is False
    assert native_bf16("cpu", features={"AVX512"}) is False
    assert native_bf16("cpu", features={"AVX512", "AVX512_BF16"}) is True
    assert native_bf16("cpu", features={"AVX512", "AMX_BF16"}) is True
    assert native_bf16("cuda", cuda_bf16=True) is True
    assert native_bf16("cuda", cuda_bf16=False, features={"AMX_BF16"}) is False
    assert native_bf16("mps", features={"AMX_BF16"}) is False


def test_cpu_kind_labels():
    assert cpu_kind({"AVX512", "AVX512_BF16", "AMX_BF16"}) == "AMX"
    assert cpu_kind({"AVX512", "AVX512_BF16"}) == "AVX512-BF16"
    assert cpu_kind({"AVX512"}) == "AVX512"
    assert cpu_kind({"AVX2"}) == "AVX2"
    assert cpu_kind({"DEFAULT"}) not in ("DEFAULT", "")   # the machine name instead


def test_this_cpu_agrees_with_proc_cpuinfo():
    # An independent reading of the same facts: the kernel's CPU flags.
    try:
        line = next(l for l in Path("/proc/cpuinfo").read_text().splitlines() if l.startswith("flags"))
    except (OSError, StopIteration):
        pytest.skip("no /proc/cpuinfo flags on this platform")
    flags = set(line.split(":", 1)[1].split())
    feats = cpu_features()
    assert torch.backends.cpu.get_cpu_capability() in feats
    assert ("AMX_BF16" in feats) == ("amx_tile" in flags)   # torch probes the tile unit
    assert ("AVX512_BF16" in feats) == ("avx512_bf16" in flags)
    if "avx2" in flags and not flags & {"avx512f", "amx_tile"}:
        assert cpu_kind() == "AVX2"
