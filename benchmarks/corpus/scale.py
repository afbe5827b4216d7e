"""How build-corpus grows with the data: per size and stage, time, MB/s, driver memory, shuffles.

    .venv/bin/python benchmarks/corpus/scale.py --sizes 0.25,0.5,1,2 [--json OUT] [--work DIR]
    .venv/bin/python benchmarks/corpus/scale.py --blocks 512,1024,2048 [--rows 200000] [--json OUT]
    .venv/bin/python benchmarks/corpus/scale.py --simulate 10,100,1000,10000 (store requests per shuffle)
    .venv/bin/python benchmarks/corpus/scale.py --simulate 1,100,1000,10000 --cluster 2x1,8x16,64x192
    .venv/bin/python benchmarks/corpus/scale.py --quick                  (smoke run of both modes)

Sizes (GB of document text). Each size's corpus is written by ``synthetic.web_corpus`` (real
sentences from the shared books, 5% exact and 3% near duplicates, 10% boilerplate pages) into
``--work`` and reused while its summary matches. The build runs with the default ``web``
profile on local Ray with ``num_cpus=2`` in a FRESH child process per size, pinned to two cores
(``sched_setaffinity``, as ``benchmarks/corpus/pipeline.py`` does), so each size's driver memory
is its own. The child wraps ``CorpusBuild.run_stage`` of its build (this script's wrapper, not
the library): before a stage it writes ``5`` to ``/proc/self/clear_refs`` (resets the peak
resident set, VmHWM), after it reads VmHWM: the driver's peak RSS per stage. A thread samples
the objects the driver owns (the raylet's per-worker stats, every second; a sampled peak is a
lower bound). The manifest gives each stage's seconds, MB/s, documents, drops, read tasks
(``stats[stage]["read_tasks"]``) and shuffles (``stats[stage]["shuffles"]``), printed when present.
Dedup precision/recall compare the quarantine (``rejected/`` parts: ``dedup:exact`` and
``dedup:near`` with "duplicate of uid N") with the generator's truth; a document's pipeline id is
``data/<file>:<offset>``, its uid ``stable_uid(id)``. Drops are counted per group (a source and
its planted copies), restricted to documents that reached dedup (the filter may drop some);
a drop whose "duplicate of" lies outside its group is a false positive. Goals: whole-build MB/s at
the largest size >= 0.85x the smallest; driver peak RSS at the largest <= 1.5x the smallest.

Blocks (``--blocks M1,M2,..``): the four shuffles side by side on a small input forced into
cluster-sized block counts; see ``benchmarks/corpus/scale_shuffles.py``.

Simulate (``--simulate GB1,GB2,..``): one storage shuffle, run for real on Ray against moto's S3
server behind a counting proxy, with its sizes scaled down so that a small input has the map-file
and partition counts of those sizes: requests by kind, bytes read and written, task and driver
memory; see ``benchmarks/corpus/scale_simulate.py`` (``--sim-*`` options). With ``--cluster
NODESxCPUS,..`` the same per cluster shape, derived from the shuffle's own functions
(``benchmarks/corpus/cluster_shape.py``), beside the previous design's.

Every report starts with the CPU (``lscpu`` model, amx_bf16 / avx512_bf16 / AVX2-only) and the
load average: on the shared 2-core box, compare only figures taken under similar load.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.shared.machine import cpu_kind, cpu_kind_line as machine_line
from benchmarks.shared.memory import ObjectSampler, peak_rss_mb, reset_peak_rss, run_script

REPO = Path(__file__).resolve().parents[2]

BOOKS = "/work/shared/data/corpus/gutenberg"


# ------------------------------------------------------------------------------ a child process
def run_child(args: list[str], cpus: int = 2) -> dict[str, Any]:
    """This script in a fresh process confined to ``cpus`` cores; its last stdout line (JSON)."""
    return run_script(__file__, args, cpus)


# ------------------------------------------------------------------------------ sizes: build
def corpus_for(size_gb: float, work: Path, seed: int = 0, books: str | None = BOOKS) -> tuple[Path, dict]:
    """The generated corpus of ``size_gb`` GB of text in ``work`` (made once, then reused)."""
    from synthetic import web_corpus

    folder = work / f"web-{size_gb:g}gb-s{seed}"
    target = int(size_gb * 1e9)
    try:
        summary = json.loads((folder / "summary.json").read_text())
        if summary["version"] == web_corpus.VERSION and summary["target_bytes"] == target:
            return folder, summary
    except (OSError, ValueError, KeyError):
        pass
    return folder, web_corpus.write_web_corpus(folder, target, seed=seed, books=books)


def build_child(src: str, out: str, cpus: int) -> dict[str, Any]:
    """One build in this process with per-stage driver memory (the child of ``measure_size``)."""
    import ray

    from pipelines.config import CorpusConfig
    from pipelines.engine import raydata
    from pipelines.orchestration.runner import CorpusBuild
    from pipelines.corpus_job import CorpusJob

    shutil.rmtree(out, ignore_errors=True)
    raydata.init_ray(num_cpus=cpus)
    baseline = peak_rss_mb()
    build = CorpusBuild(CorpusJob([src], out, CorpusConfig.from_dict({"profile": "web"})))
    stages: dict[str, dict[str, Any]] = {}
    run_stage = build.run_stage
    with ObjectSampler(1.0) as sampler:
        def measured(name: str):
            reset_peak_rss()
            sampler.reset()
            start = time.perf_counter()
            result = run_stage(name)
            sampler.update()
            stages[name] = {"wall": round(time.perf_counter() - start, 3), "peak_rss_mb": peak_rss_mb(),
                            "peak_driver_objects": sampler.driver, "peak_objects": sampler.total}
            return result

        build.run_stage = measured  # run() calls self.run_stage: only this build is wrapped
        start = time.perf_counter()
        manifest = build.run()
        seconds = time.perf_counter() - start
    ray.shutdown()
    return {"seconds": round(seconds, 3), "baseline_rss_mb": baseline, "stages": stages,
            "stats": manifest.stats}


def read_rejected(out: str) -> dict[str, tuple[str, str]]:
    """Every quarantined document of the build at ``out``: id -> (reason, detail)."""
    import zstandard

    from common import storage
    from pipelines import schema

    manifest = schema.Manifest.load(out)
    found = {}
    for r in manifest.rejected:
        data = zstandard.ZstdDecompressor().stream_reader(storage.read_bytes(storage.join(out, r.path))).read()
        for line in data.splitlines():
            if line:
                rec = json.loads(line)
                found[rec["id"]] = (rec["reason"], rec.get("detail", ""))
    return found


def dedup_scores(truth: list[dict], rejected: dict[str, tuple[str, str]], prefix: str = "data") -> dict:
    """Exact and near dedup precision/recall against the planted truth (module docstring)."""
    from common.hashing import stable_uid

    def pid(file: str, offset: int) -> str:
        return f"{prefix}/{file}:{offset}"

    groups: dict[str, dict[str, list[str]]] = {}  # source id -> {"exact": [pids], "near": [pids]}
    group_of: dict[int, str] = {}  # uid -> source id
    exact_class: dict[int, str] = {}  # uid -> source id (source and its exact copies)
    boilerplate = set()
    for t in truth:
        me = pid(t["file"], t["offset"])
        if t["kind"] == "boilerplate":
            boilerplate.add(stable_uid(me))
            continue
        src = pid(t["of_file"], t["of_offset"])
        g = groups.setdefault(t["of"], {"exact": [src], "near": []})
        g[t["kind"]].append(me)
        for p in (src, me):
            group_of[stable_uid(p)] = t["of"]
        exact_class[stable_uid(src)] = t["of"]
        if t["kind"] == "exact":
            exact_class[stable_uid(me)] = t["of"]

    def reached_dedup(p: str) -> bool:
        reason = rejected.get(p, ("", ""))[0]
        return not (reason.startswith("ingest:") or reason.startswith("filter:"))

    expect_exact = expect_near = 0
    for g in groups.values():
        alive = [p for p in g["exact"] if reached_dedup(p)]
        expect_exact += max(len(alive) - 1, 0)
        expect_near += max(min(len(alive), 1) + sum(map(reached_dedup, g["near"])) - 1, 0)
    out = {}
    for kind, classes, expected in (("exact", exact_class, expect_exact), ("near", group_of, expect_near)):
        dropped = tp = on_boilerplate = 0
        for p, (reason, detail) in rejected.items():
            if reason != f"dedup:{kind}":
                continue
            dropped += 1
            m = re.search(r"uid (\d+)", detail)
            me, target = stable_uid(p), int(m.group(1)) if m else -1
            if me in classes and classes.get(target) == classes[me]:
                tp += 1
            elif me in boilerplate or target in boilerplate:
                on_boilerplate += 1
        out[kind] = {"expected": expected, "dropped": dropped, "true": tp,
                     "precision": round(tp / dropped, 4) if dropped else 1.0,
                     "recall": round(tp / expected, 4) if expected else 1.0,
                     "false_on_boilerplate": on_boilerplate}
    return out


def measure_size(size_gb: float, work: Path, cpus: int, keep: bool = False) -> dict[str, Any]:
    from synthetic import web_corpus

    folder, summary = corpus_for(size_gb, work)
    out = work / f"build-{size_gb:g}gb"
    result = run_child(["--child-build", str(folder / "data"), str(out), str(cpus)], cpus)
    result["dedup"] = dedup_scores(web_corpus.read_truth(folder), read_rejected(str(out)))
    result.update(size_gb=size_gb, corpus={k: summary[k] for k in ("text_bytes", "compressed_bytes", "documents",
                                                                   "planted", "mb_per_sec")})
    bytes_in = result["stats"]["ingest"]["bytes_in"]
    result["mb_per_sec"] = round(bytes_in / 1e6 / max(result["seconds"], 1e-9), 3)
    result["peak_rss_mb"] = max(s["peak_rss_mb"] for s in result["stages"].values())
    if not keep:
        shutil.rmtree(out, ignore_errors=True)
    return result


def size_report(results: list[dict[str, Any]]) -> tuple[list[str], dict[str, bool]]:
    lines = []
    for r in results:
        c = r["corpus"]
        lines.append(f"\n== {r['size_gb']:g} GB: {c['text_bytes'] / 1e6:.1f} MB of text, {c['documents']:,} documents "
                     f"(planted {c['planted']}; generated at {c.get('mb_per_sec', 0):.0f} MB/s), "
                     f"build {r['seconds']:.1f} s, {r['mb_per_sec']:.2f} MB/s, driver peak "
                     f"RSS {r['peak_rss_mb']:.0f} MB (after start-up {r['baseline_rss_mb']:.0f} MB)")
        lines.append(f"{'stage':<12}{'s':>8}{'MB/s':>8}{'docs in':>10}{'docs out':>10}{'RSS MB':>8}"
                     f"{'drv obj':>9}{'blocks':>8}  dropped")
        for name, m in r["stages"].items():
            s = r["stats"].get(name, {})
            rate = f"{s['mb_per_sec']:.2f}" if "mb_per_sec" in s else "-"
            lines.append(f"{name:<12}{s.get('seconds', m['wall']):>8.1f}{rate:>8}"
                         f"{s.get('documents_in', '-'):>10}{s.get('documents_out', '-'):>10}{m['peak_rss_mb']:>8.0f}"
                         f"{m['peak_driver_objects']:>9}{s.get('read_tasks', '-'):>8}  {s.get('dropped', '')}")
            for sh in s.get("shuffles", []):
                lines.append("    shuffle " + ", ".join(f"{k}={v}" for k, v in sh.items()))
        for kind, d in r["dedup"].items():
            lines.append(f"dedup {kind}: precision {d['precision']:.4f}, recall {d['recall']:.4f} ({d['true']} right of "
                         f"{d['dropped']} dropped, {d['expected']} expected; {d['false_on_boilerplate']} false on "
                         f"boilerplate)")
    goals = {}
    if len(results) >= 2:
        lo, hi = results[0], results[-1]
        t_ratio = hi["mb_per_sec"] / max(lo["mb_per_sec"], 1e-9)
        m_ratio = hi["peak_rss_mb"] / max(lo["peak_rss_mb"], 1e-9)
        goals = {"throughput": t_ratio >= 0.85, "driver_rss": m_ratio <= 1.5}
        lines.append(f"\n{'✓' if goals['throughput'] else '✗'} throughput {hi['size_gb']:g} GB / {lo['size_gb']:g} GB: "
                     f"{hi['mb_per_sec']:.2f} / {lo['mb_per_sec']:.2f} MB/s = {t_ratio:.2f}x (goal >= 0.85x)")
        lines.append(f"{'✓' if goals['driver_rss'] else '✗'} driver peak RSS {hi['size_gb']:g} GB / {lo['size_gb']:g} GB: "
                     f"{hi['peak_rss_mb']:.0f} / {lo['peak_rss_mb']:.0f} MB = {m_ratio:.2f}x (goal <= 1.5x)")
    return lines, goals


# ------------------------------------------------------------------------------ command line
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", help="GB of text per build, comma-separated (e.g. 0.25,0.5,1,2)")
    p.add_argument("--blocks", help="block counts for the shuffle comparison (e.g. 512,1024,2048)")
    p.add_argument("--rows", type=int, default=200_000, help="rows shuffled in --blocks mode")
    p.add_argument("--partitions", type=int, default=8, help="shuffle partitions in --blocks mode")
    p.add_argument("--methods", default="sort,hash,v2,storage", help="shuffles compared in --blocks mode")
    p.add_argument("--simulate", help="GB shuffled, comma-separated: store requests per shuffle (e.g. 10,100,1000,10000)")
    p.add_argument("--cluster", help="--simulate at cluster shapes NODESxCPUS, comma-separated (e.g. 2x1,8x16,64x192): "
                                     "requests, bytes, task and driver memory per shape (derived; without it: "
                                     "measured through moto at this machine's 2 CPUs)")
    p.add_argument("--sim-reduce-tasks", default="auto",
                   help="--simulate: reduce tasks R of every size (auto: the cluster's, lowered to fit the budget)")
    p.add_argument("--sim-budget-minutes", type=float, default=25.0,
                   help="--simulate: minutes the largest size's ranged GETs may take (projected) with R auto")
    p.add_argument("--sim-rows-per-file", type=int, default=240, help="--simulate: rows per map file")
    p.add_argument("--cpus", type=int, default=2)
    p.add_argument("--work", default=str(REPO / "bench_out" / "corpus_scale"), help="corpora and builds")
    p.add_argument("--keep", action="store_true", help="keep the built corpora")
    p.add_argument("--quick", action="store_true", help="smoke run: --sizes 0.002,0.004 --blocks 32,64 --rows 20000")
    p.add_argument("--json", help="write every figure here")
    p.add_argument("--child-build", nargs=3, help=argparse.SUPPRESS)
    p.add_argument("--child-shuffle", nargs=5, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child_build:
        print(json.dumps(build_child(args.child_build[0], args.child_build[1], int(args.child_build[2]))))
        return 0
    if args.child_shuffle:
        from benchmarks.corpus.scale_shuffles import shuffle_child

        method, m, rows, parts, folder = args.child_shuffle
        print(json.dumps(shuffle_child(method, int(m), int(rows), int(parts), folder)))
        return 0
    if args.quick:
        args.sizes, args.blocks, args.rows = args.sizes or "0.002,0.004", args.blocks or "32,64", 20_000
    if not args.sizes and not args.blocks and not args.simulate:
        p.error("give --sizes, --blocks, --simulate or --quick")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    machine = cpu_kind()
    print(machine_line(machine), flush=True)
    report: dict[str, Any] = {"machine": machine}
    if args.sizes:
        results = []
        for size in (float(s) for s in args.sizes.split(",")):
            print(f"building {size:g} GB ...", file=sys.stderr, flush=True)
            results.append(measure_size(size, work, args.cpus, keep=args.keep))
        lines, goals = size_report(results)
        print("\n".join(lines))
        report.update(sizes=results, size_goals=goals)
    if args.blocks:
        from benchmarks.corpus.scale_shuffles import blocks_report, run_blocks

        runs = run_blocks([int(b) for b in args.blocks.split(",")], args.rows, args.partitions, work,
                          tuple(args.methods.split(",")))
        lines, goals = blocks_report(runs)
        print("\n" + "\n".join(lines))
        report.update(blocks=runs, block_goals=goals)
    if args.simulate and args.cluster:
        from benchmarks.corpus import cluster_shape

        try:
            shapes = cluster_shape.parse_cluster(args.cluster)
        except ValueError as exc:
            p.error(str(exc))
        res = cluster_shape.table([float(x) for x in args.simulate.split(",")], shapes)
        print("\n" + "\n".join(cluster_shape.report(res)))
        report.update(cluster_shape=res)
    elif args.simulate:
        from benchmarks.corpus.scale_simulate import run_simulate, simulate_report

        sims = run_simulate([float(x) for x in args.simulate.split(",")], work, rows_per_file=args.sim_rows_per_file,
                            reduce_tasks=args.sim_reduce_tasks, budget_minutes=args.sim_budget_minutes)
        lines, goals = simulate_report(sims)
        print("\n" + "\n".join(lines))
        report.update(simulate=sims, simulate_goals=goals)
    report["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    print(f"load average at the end: {report['loadavg_end']}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
