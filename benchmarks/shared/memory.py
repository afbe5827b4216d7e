"""Memory of this process (``/proc/self/status``: peak and current RSS, the peak reset), the
objects Ray processes own (sampled in a thread), and a benchmark script re-run in a fresh
process confined to a few cores. Used by ``benchmarks/corpus/scale.py`` and its
``scale_shuffles.py``."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any


def reset_peak_rss() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def peak_rss_mb() -> float:
    return _status_mb("VmHWM:")


def current_rss_mb() -> float:
    return _status_mb("VmRSS:")


class ObjectSampler:
    """Peak objects owned by the driver and by all Ray processes, sampled in a thread."""

    def __init__(self, interval: float):
        self.interval, self.driver, self.total = interval, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> tuple[int, int, int]:
        """(driver-owned objects, all owned objects, plasma objects created so far)."""
        import ray
        from ray._private.internal_api import node_stats

        driver = total = created = 0
        for node in ray.nodes():
            if not node.get("Alive"):
                continue
            s = node_stats(node["NodeManagerAddress"], node["NodeManagerPort"], include_memory_info=False)
            created += int(s.store_stats.cumulative_created_objects)
            for w in s.core_workers_stats:
                total += w.num_owned_objects
                driver += w.num_owned_objects if w.worker_type == 1 else 0  # 1: DRIVER
        return driver, total, created

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.update()
            self._stop.wait(self.interval)

    def update(self) -> None:
        try:
            driver, total, _ = self.sample()
        except Exception:  # noqa: BLE001 - a failed sample must not end the measurement
            return
        self.driver, self.total = max(self.driver, driver), max(self.total, total)

    def reset(self) -> None:
        self.driver = self.total = 0
        self.update()

    def __enter__(self) -> ObjectSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.update()


def run_script(script: str | Path, args: list[str], cpus: int = 2) -> dict[str, Any]:
    """``script`` in a fresh process confined to ``cpus`` cores; its last stdout line (JSON)."""
    cores = sorted(os.sched_getaffinity(0))[:cpus]
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", RAY_ENABLE_UV_RUN_RUNTIME_ENV="0")
    proc = subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True, text=True,
                          preexec_fn=lambda: os.sched_setaffinity(0, cores))
    if proc.returncode != 0:
        raise RuntimeError(f"child {args} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
