"""Whole corpus pipeline on N CPUs: ingest → filter → exact + near dedup → pack → shard.

``measure(raw, tokenizer_json, cpus, work)`` starts a child process confined to ``cpus`` cores
(``sched_setaffinity``: the driver, Ray's raylet, GCS and every worker inherit the mask) and
gives Ray ``num_cpus=cpus``. Confining matters on a small machine: a Ray CPU is only a
scheduling token, so "1 Ray CPU" on a 2-core box still lets the driver, the raylet, the object
store and any helper threads run on the second core for free, and the comparison would measure
Ray's bookkeeping rather than what a second core buys. The tokenizer is given (trained once
beforehand), so both runs pack with the same one. Each run starts from an empty work folder.

    python benchmarks/corpus_pipeline.py RAW_DIR TOKENIZER_JSON CPUS WORK_DIR   (prints JSON)
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipelines import build  # noqa: E402
from pipelines.config import CorpusConfig  # noqa: E402


def run(raw: Path, tokenizer_json: str, cpus: int, work: Path) -> dict:
    """The pipeline in this process (on whatever cores it may use); seconds and stage figures."""
    import ray

    shutil.rmtree(work, ignore_errors=True)
    ray.shutdown()
    build.init_ray(num_cpus=cpus)
    cfg = CorpusConfig.from_dict({"tokenizer": {"pretrained": tokenizer_json}, "shard": {"min_shards_per_split": 8}})
    files = [str(p) for p in sorted(raw.iterdir())]
    start = time.perf_counter()
    ing = build.ingest_stage(files, cfg, work)
    flt = build.filter_stage(ing, cfg, work)
    exa = build.exact_dedup_stage(flt, cfg, work)
    near = build.near_dedup_stage(exa, cfg, work)
    tok = build.tokenizer_stage(near, cfg, work)
    packed = build.pack_stage(near, tok, cfg, work)
    sharded = build.shard_stage(packed, cfg, work)
    seconds = time.perf_counter() - start
    ray.shutdown()
    stages = {s.name: s.stats.get("seconds") for s in (ing, flt, exa, near, tok, packed, sharded)}
    return {"seconds": seconds, "text_bytes": ing.stats["bytes_in"], "stages": stages,
            "documents_kept": near.stats["documents_out"], "tokens": packed.stats["tokens"]}


def measure(raw: Path, tokenizer_json: str, cpus: int, work: Path) -> dict:
    """``run`` in a child process confined to the first ``cpus`` cores this process may use."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < cpus:
        raise RuntimeError(f"asked for {cpus} cores, this process may use only {cores}")
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", RAY_ENABLE_UV_RUN_RUNTIME_ENV="0")
    proc = subprocess.run([sys.executable, __file__, str(raw), tokenizer_json, str(cpus), str(work)],
                          env=env, capture_output=True, text=True,
                          preexec_fn=lambda: os.sched_setaffinity(0, cores[:cpus]))
    if proc.returncode != 0:
        raise RuntimeError(f"pipeline on {cpus} CPU(s) failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    raw_dir, tok_json, n, work_dir = sys.argv[1:5]
    print(json.dumps(run(Path(raw_dir), tok_json, int(n), Path(work_dir))))
