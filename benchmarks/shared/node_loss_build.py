"""One corpus build on a fresh two-node loopback Ray cluster (``ray start`` twice, one CPU each),
the worker node SIGKILLed at a chosen call (``tests/flows/test_build_corpus_node_loss.KILL_POINTS``,
by that test's ``sitecustomize`` hook), with the Ray tasks counted on both nodes and the store
requests per stage counted by the proxy (``benchmarks.shared.counting_s3``): ``build_once``, the
run of ``benchmarks/corpus/node_loss.py`` and of ``benchmarks/lifecycle/soak.py``.

The driver is this module in a subprocess (``python -m benchmarks.shared.node_loss_build --drive
SPEC``): Ray's driver must not share a process with the proxy, whose threads answer the workers.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.shared import REPO

# Ray tasks counted on both nodes: every Ray Data task, our shuffle's map writers (both names the
# code has had), the tokenizer's training and measuring tasks. A name the code lacks counts nothing.
COUNT_AT = ",".join((
    "ray.data._internal.execution.operators.map_operator:_map_task",
    "pipelines.engine.shuffle:_write_map_files",
    "pipelines.engine.map_task:write_map_files",
    "pipelines.engine.map_task:stream_map_file",
    "pipelines.tokenizer_sample:_train",
    "pipelines.tokenizer_sample:_measure",
))
CFG = {"tokenizer": {"vocab_size": 900, "min_frequency": 1}, "shard": {"min_shards_per_split": 3},
       "pack": {"seq_len": 64, "validation_fraction": 0.1, "seed": 7}}


# ----------------------------------------------------------------------------- the driver
def drive(spec: dict[str, Any]) -> None:
    """Run the build stage by stage on the cluster (the ``--drive`` subprocess); writes a report
    of each stage's task calls (from the hook's count file) and attempts to ``spec["report"]``."""
    from benchmarks.shared.counting_s3 import mark
    from common import storage
    from pipelines import schema
    from pipelines.config import CorpusConfig
    from pipelines.corpus_job import CorpusJob
    from pipelines.engine.raydata import init_ray
    from pipelines.orchestration.runner import CorpusBuild

    calls, marker = Path(spec["calls"]), Path(spec["marker"])

    def counted() -> list[str]:
        return calls.read_text().splitlines() if calls.exists() else []

    init_ray(spec["address"])
    # keep_cache: no pruning, so the emulated whole-stage retry can run a stage again
    build = CorpusBuild(CorpusJob([spec["source"]], spec["out"], CorpusConfig.from_dict(CFG), keep_cache=True))
    stages, killed_in = [], None
    mark(f"{spec['run']}:start")
    for name in build.plan():
        before, was_killed = len(counted()), marker.exists()
        result = build.run_stage(name)
        runs = 1
        if not was_killed and marker.exists():
            killed_in = name
            if spec["whole_stage"]:  # the old policy: the attempt that met the loss, then all again
                result = build.run_stage(name)
                runs = 2
        lines = counted()[before:]
        roles: dict[str, int] = {}
        for line in lines:
            role = line.split(" ", 1)[0]
            roles[role] = roles.get(role, 0) + 1
        stages.append({"stage": name, "tasks": len(lines), "by_role": roles, "runs": runs,
                       "attempts": int(result.stats.get("attempts", 1))})
        mark(f"{spec['run']}:{name}")
    manifest = build.publish()
    shards = [s.sha256 for s in manifest.shards]
    tokenizer = storage.read_bytes(storage.join(spec["out"], manifest.tokenizer.path, schema.TOKENIZER_JSON))
    Path(spec["report"]).write_text(json.dumps({"stages": stages, "killed_in": killed_in, "shards": shards,
                                                "tokenizer_bytes": len(tokenizer)}))


# ----------------------------------------------------------------------------- one build
def _start_cluster(temp: str, head_env: dict[str, str], worker_env: dict[str, str]) -> str:
    from common.ports import free_port
    from tests.flows.test_build_corpus_node_loss import HEALTH_CHECK, SYSTEM_CONFIG

    ray = str(Path(sys.executable).parent / "ray")
    port = free_port()
    env = {**os.environ, "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0", "RAY_USAGE_STATS_ENABLED": "0"}
    common = ["--node-ip-address=127.0.0.1", "--num-cpus=1", "--object-store-memory=400000000",
              "--disable-usage-stats", f"--temp-dir={temp}"]
    head = subprocess.run([ray, "start", "--head", f"--port={port}", "--include-dashboard=false",
                           f"--system-config={json.dumps(SYSTEM_CONFIG)}", *common],
                          env={**env, **HEALTH_CHECK, **head_env}, capture_output=True, text=True, timeout=180)
    if head.returncode:
        raise RuntimeError("head did not start: " + head.stdout[-2000:] + head.stderr[-2000:])
    worker = subprocess.run([ray, "start", f"--address=127.0.0.1:{port}", *common],
                            env={**env, **worker_env, "RAY_AUTH_MODE": "token"}, capture_output=True, text=True,
                            timeout=180)
    if worker.returncode:
        raise RuntimeError("worker did not start: " + worker.stdout[-2000:] + worker.stderr[-2000:])
    return f"127.0.0.1:{port}"


def build_once(run: str, *, s3: Any, source: str, out: str, kill: str | None, whole_stage: bool,
               tmp: Path) -> dict[str, Any]:
    """One build on a fresh two-node cluster (the worker killed at ``kill``, a key of
    ``KILL_POINTS``, if given); its driver's report plus the proxy's requests per stage."""
    from tests._procs import kill_mentioning, run_in_group
    from tests.flows.test_build_corpus_node_loss import HOOK_DIR, KILL_POINTS

    folder = tmp / run.replace("/", "_")
    folder.mkdir(parents=True)
    marker, calls = folder / "node_killed.json", folder / "calls.txt"
    os.mkfifo(f"{marker}.fifo")
    hook = {"PYTHONPATH": str(HOOK_DIR), "NODE_LOSS_MARKER": str(marker), "NODE_LOSS_COUNT": str(calls),
            "NODE_LOSS_COUNT_AT": COUNT_AT}
    roles = ("count", "count")
    if kill:
        at, nth = KILL_POINTS[kill]
        hook.update(NODE_LOSS_AT=at, NODE_LOSS_NTH=str(nth))
        roles = ("wait", "kill")
    temp = tempfile.mkdtemp(prefix="rnlb", dir="/tmp")  # short: Ray's sockets live in it
    try:
        address = _start_cluster(temp, {**hook, "NODE_LOSS_ROLE": roles[0]}, {**hook, "NODE_LOSS_ROLE": roles[1]})
        spec = {"run": run, "address": address, "source": source, "out": out, "calls": str(calls),
                "marker": str(marker), "whole_stage": whole_stage, "report": str(folder / "report.json")}
        env = {**os.environ, **s3.env, "PYTHONPATH": str(REPO), "RAY_AUTH_MODE": "token",
               "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
        done = run_in_group([sys.executable, "-m", "benchmarks.shared.node_loss_build", "--drive", json.dumps(spec)],
                            cwd=str(folder), env=env, timeout=900)
        (folder / "driver.out").write_text(done.output)
        if done.returncode:
            raise RuntimeError(f"{run}: the build failed ({done.returncode}):\n{done.output[-4000:]}")
    finally:
        kill_mentioning(temp)
        shutil.rmtree(temp, ignore_errors=True)
    report = json.loads((folder / "report.json").read_text())
    phases = s3.proxy.phases()
    for s in report["stages"]:
        s["requests"] = sum(phases.get(f"{run}:{s['stage']}", {}).get("requests", {}).values())
    report["killed"] = json.loads(marker.read_text()) if marker.exists() else None
    return report


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "--drive":
        sys.exit("usage: python -m benchmarks.shared.node_loss_build --drive SPEC_JSON")
    drive(json.loads(sys.argv[2]))
