"""What machine a benchmark ran on, in the forms the benchmarks print and record: ``machine``
and ``machine_line`` (the CPU model and its bf16 instructions; ``finish`` records the load
average after the run and writes the JSON), ``cpu_kind`` and ``cpu_kind_line`` (the model from
``lscpu`` and the widest instruction set), and ``cpu_line`` (model, cores, load average)."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any


def machine() -> dict[str, Any]:
    model, flags = "", set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name") and not model:
            model = line.split(":", 1)[1].strip()
        if line.startswith("flags") and not flags:
            flags = set(line.split(":", 1)[1].split())
    return {"model": model, "amx_bf16": "amx_bf16" in flags, "avx512_bf16": "avx512_bf16" in flags,
            "cores": len(os.sched_getaffinity(0)), "loadavg": [round(x, 2) for x in os.getloadavg()]}


def machine_line(m: dict[str, Any]) -> str:
    return (f"CPU: {m['model']}, amx_bf16 {'yes' if m['amx_bf16'] else 'no'}, avx512_bf16 "
            f"{'yes' if m['avx512_bf16'] else 'no'}, {m['cores']} cores; load average {m['loadavg']}")


def smoke_sizes(args: Any, smoke: dict[str, Any]) -> None:
    """With ``--smoke``, the tiny sizes of ``smoke`` replace the size flags' (the tests' runs)."""
    if args.smoke:
        for k, v in smoke.items():
            setattr(args, k, v)


def finish(result: dict[str, Any], json_path: str | None, *, indent: int = 1) -> None:
    """Adds the machine after the run to ``result`` (its load average printed: the figures are
    trusted only beside it) and writes ``result`` to ``json_path`` when one is given."""
    result["machine_after"] = machine()
    print(f"load average after: {result['machine_after']['loadavg']}")
    if json_path:
        Path(json_path).write_text(json.dumps(result, indent=indent))


def cpu_kind() -> dict[str, Any]:
    model = ""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        model = next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")), "")
    except OSError:
        pass
    flags = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    kind = ("amx_bf16" if "amx_bf16" in flags else "avx512_bf16" if "avx512_bf16" in flags
            else "AVX2-only" if "avx2" in flags else "no AVX2")
    return {"model": model, "kind": kind, "cores": len(os.sched_getaffinity(0)),
            "loadavg": [round(x, 2) for x in os.getloadavg()]}


def cpu_kind_line(m: dict[str, Any]) -> str:
    return f"CPU: {m['model']} ({m['kind']}), {m['cores']} cores; load average {m['loadavg']}"


def cpu_line() -> str:
    model = cpu_kind()["model"]
    return f"CPU: {model or 'unknown'}, {os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f}"
