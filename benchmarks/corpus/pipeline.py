"""Whole corpus pipeline on N CPUs: ingest → filter → exact + near dedup → tokenizer → pack → shard.

``measure(sources, tokenizer_json, cpus, out)`` starts a child process confined to ``cpus``
cores (``sched_setaffinity``: the driver, Ray's raylet, GCS and every worker inherit the mask)
and gives Ray ``num_cpus=cpus``. Confining matters on a small machine: a Ray CPU is only a
scheduling token, so "1 Ray CPU" on a 2-core box still lets the driver, the raylet and helper
threads run on the second core for free, and the comparison would measure Ray's bookkeeping
rather than what a second core buys. The tokenizer is given (trained once beforehand), so both
runs pack with the same one. Each run builds into an empty output location (a path or URI).

Besides the time, a run reports what the build leaves behind: the output's bytes with and
without the shards against the input text (the footprint ratio), the shards' bytes per token,
the example fill per split (non-pad share of the positions, from the manifest's totals) and the
driver's peak resident memory (``ru_maxrss`` of the child; Ray workers are separate
processes and not included).

    python benchmarks/corpus/pipeline.py SOURCE TOKENIZER_JSON CPUS OUT PROFILE [CONFIG_JSON]  (prints JSON)
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

from common import storage
from pipelines import schema
from pipelines.engine import raydata
from pipelines.config import CorpusConfig
from pipelines.orchestration.runner import CorpusBuild
from pipelines.corpus_job import CorpusJob


def v1_bytes(corpus: str, manifest: schema.Manifest) -> int:
    """What format_version 1 cost for the same examples: per example two tar members
    (``.input_ids.npy`` int32, ``.segment_ids.npy`` uint8), each a 512-byte header plus a
    128-byte .npy header and payload padded to 512 bytes, plus the tar end-of-archive record."""
    def member(payload):
        return 512 + -(-payload // 512) * 512

    total = 0
    for s in manifest.shards:
        with storage.open_input(storage.join(corpus, s.path)) as f:
            lengths = schema.read_shard(f, s.path).lengths
        total += sum(member(128 + 4 * int(n)) + member(128 + int(n)) for n in lengths) + 10240
    return total


def run(source: str, tokenizer_json: str, cpus: int, out: str, profile: str = "web",
        config: dict | None = None) -> dict:
    """The pipeline in this process (on whatever cores it may use): seconds and figures;
    ``config``: more corpus config, merged over the benchmark's own."""
    import ray

    from pipelines.profiles import merge

    storage.remove(out, recursive=True)
    ray.shutdown()
    raydata.init_ray(num_cpus=cpus)
    cfg = CorpusConfig.from_dict(merge({"profile": profile, "tokenizer": {"pretrained": tokenizer_json},
                                        "shard": {"min_shards_per_split": 8}}, config or {}))
    start = time.perf_counter()
    manifest = CorpusBuild(CorpusJob([source], out, cfg)).run()
    seconds = time.perf_counter() - start
    ray.shutdown()
    stats = manifest.stats
    total = storage.du(out)
    shards = sum(s.bytes for s in manifest.shards)
    text = stats["ingest"]["bytes_in"]
    return {"seconds": seconds, "text_bytes": text, "stages": {k: stats[k]["seconds"] for k in stats if "seconds" in stats[k]},
            "documents_kept": stats["near_dedup"]["documents_out"], "tokens": stats["pack"]["tokens"],
            "filter_dropped": stats["filter"].get("dropped", {}),
            # non-pad share of the example positions, from the split totals (independent of the
            # fill the pack stage reports)
            "fill": {name: round(info.num_tokens / max(info.num_examples * manifest.seq_len, 1), 4)
                     for name, info in manifest.splits.items()},
            "output_bytes": total, "shard_bytes": shards,
            "footprint_ratio": round((total - shards) / max(text, 1), 4),
            "bytes_per_token": stats["shard"]["bytes_per_token"],
            "v1_bytes_per_token": round(v1_bytes(out, manifest) / max(stats["pack"]["tokens"], 1), 3),
            "driver_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "work_bytes": storage.du(storage.join(out, schema.WORK_DIR)),
            "rejected_bytes": storage.du(storage.join(out, schema.REJECTED_DIR))}


def measure(source: str, tokenizer_json: str, cpus: int, out: str, profile: str = "web",
            config: dict | None = None) -> dict:
    """``run`` in a child process confined to the first ``cpus`` cores this process may use."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < cpus:
        raise RuntimeError(f"asked for {cpus} cores, this process may use only {cores}")
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", RAY_ENABLE_UV_RUN_RUNTIME_ENV="0")
    proc = subprocess.run([sys.executable, __file__, source, tokenizer_json, str(cpus), out, profile,
                           json.dumps(config or {})],
                          env=env, capture_output=True, text=True,
                          preexec_fn=lambda: os.sched_setaffinity(0, cores[:cpus]))
    if proc.returncode != 0:
        raise RuntimeError(f"pipeline on {cpus} CPU(s) failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    """The child ``measure`` starts (it confines the cores first); prints the result as JSON."""
    p = argparse.ArgumentParser(description="One corpus build on CPUS Ray CPUs (the child process of measure()).")
    p.add_argument("source", help="raw text folder or file")
    p.add_argument("tokenizer_json", help="the tokenizer.json to pack with")
    p.add_argument("cpus", type=int, help="Ray CPUs")
    p.add_argument("out", help="empty output location (a path or URI)")
    p.add_argument("profile", nargs="?", default="web", help="input profile (default: web)")
    p.add_argument("config", nargs="?", default="{}", help="more corpus config, as JSON")
    a = p.parse_args(argv)
    print(json.dumps(run(a.source, a.tokenizer_json, a.cpus, a.out, a.profile, json.loads(a.config))))


if __name__ == "__main__":
    main()
