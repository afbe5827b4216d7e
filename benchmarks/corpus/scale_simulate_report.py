"""The report of ``scale.py --simulate``: per size the store requests and bytes, the memory
figures and the previous design's computed counts, and the goals checked across sizes
(``simulate_report``), from what ``scale_simulate.run_simulate`` returns.

Memory figures (``memory_figures``): ``ru_maxrss`` of the map tasks, the reduce tasks and the
driver (the driver's is its ``VmHWM``, what ``ru_maxrss`` reads, just before ``ray.shutdown()``,
which itself raises the driver's peak to about 330 MB at every size), and the sampled peaks of
private memory (``scale_simulate_memory.py``). At these scales the rows' own bytes (a map file, a
task's buffer) are kilobytes, so what grows in the memory figures grows with the counts (M, P,
spill runs), not with the rows.

Goals (issue 37): each 10x of simulated size gives <= 11x requests and bytes read; bytes read <=
1.1x bytes written per shuffle; the largest task's peak memory and the driver's peak RSS flat
(<= 1.2x from the smallest size to the largest).
"""
from __future__ import annotations

from typing import Any

from benchmarks.corpus.scale_simulate_plan import ROW_BYTES


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f}"


def memory_figures(res: dict[str, Any]) -> dict[str, int]:
    """The memory figures of one size (bytes): ``ru_maxrss`` (map tasks: the shuffle's own
    ``map_task_peak_rss``; reduce tasks: the reduce function's; the driver's) and the sampled
    peaks of private memory (``RssAnon``) per kind of task and of the driver."""
    sampled = res.get("sampled", {})
    driver = res["driver_end"]["hwm"] if "driver_end" in res else res["driver_after_reduce"]["hwm"]
    return {"map_rss": res["map_task_peak_rss"], "reduce_rss": res["reduce_rss"],
            "driver_rss": driver, "reduce_arrow": res["reduce_arrow"],
            "map_anon": sampled.get("map", {}).get("anon", 0),
            "reduce_anon": max(sampled.get("reduce", {}).get("anon", 0), res.get("reduce_anon", 0)),
            "generate_anon": sampled.get("generate", {}).get("anon", 0),
            "reduce_file": sampled.get("reduce", {}).get("file", 0),
            "task_shmem": max(sampled.get(k, {}).get("shmem", 0) for k in ("map", "reduce", "generate", "idle")),
            "driver_anon": sampled.get("driver", {}).get("anon", 0)}


def simulate_report(sim: dict[str, Any]) -> tuple[list[str], dict[str, bool]]:
    """The report's lines and the goals (name: met) of one ``run_simulate``."""
    runs = sim["runs"]
    first = runs[0]
    r, rc = sim["reduce_tasks"], sim["cluster_reduce_tasks"]
    lines = [f"moto + counting proxy: {sim['rate']['put_head_per_s']:.0f} PUT+HEAD/s, "
             f"{sim['rate']['ranged_get_per_s']:.0f} ranged GET/s ({sim['rate']['clients']} client processes, "
             f"{sim['rate']['object_bytes'] >> 10} KiB objects)",
             f"scaled: every ShuffleConfig size x s = {first['scale']:.4e} ({first['rows_per_file']} rows of "
             f"{ROW_BYTES} B = {first['file_bytes']:,} B per map file, {first['partition_bytes']:,} B per partition); "
             f"input blocks of {first['files_per_block']} map files' rows; M and P true"
             + ("" if r == rc else f"; R = {r} (shuffle.reduce_tasks) instead of the cluster's {rc}, task memory "
                f"x s x {rc / r:g} = {first['memory_bytes']:,} B (a task spills as many runs as one of {rc} at "
                "full size)"),
             "per shuffle (map side + reduce side), counted at the proxy:",
             f"{'size':>9}{'M':>8}{'P':>9}{'R':>3}{'runs':>6}{'PUT':>8}{'HEAD':>8}{'GET':>5}{'ranged GET':>12}"
             f"{'LIST':>5}{'written MB':>12}{'read MB':>10}{'read/written':>14}{'secs':>7}"]
    for x in runs:
        q = x["requests"]
        lines.append(f"{x['size_gb']:>7g}GB{x['map_files']:>8,}{x['partitions']:>9,}{x['reduce_tasks']:>3}"
                     f"{x['runs_per_task']:>6,}{q.get('PUT', 0):>8,}{q.get('HEAD', 0):>8,}{q.get('GET', 0):>5,}"
                     f"{q.get('GET_RANGE', 0):>12,}{q.get('LIST', 0):>5}{_mb(x['bytes_written']):>12}"
                     f"{_mb(x['bytes_read']):>10}{x['read_over_written']:>14.5f}{x['seconds']:>7.0f}")
    others = sorted({k for x in runs for k in x["requests"]} - {"PUT", "HEAD", "GET", "GET_RANGE", "LIST"})
    lines.append(f"  other requests: {', '.join(others) if others else 'none'}; runs: spill runs per reduce task")
    lines.append("memory, MB (task rss: ru_maxrss, which counts the object store's shared pages and mapped "
                 "spill files; anon: sampled peak of private memory; files, shm: the reduce tasks' mapped files and "
                 "the tasks' shared memory, sampled peaks; driver rss: VmHWM before Ray's shutdown):")
    lines.append(f"{'size':>9}{'map rss':>9}{'anon':>7}{'reduce rss':>11}{'anon':>7}{'files':>7}{'arrow':>7}"
                 f"{'shm':>6}{'driver rss':>11}{'anon':>7}{'store spilled':>15}")
    for x in runs:
        f = memory_figures(x["result"])
        spilled = x["result"].get("object_store", {}).get("spilled_bytes")
        lines.append(f"{x['size_gb']:>7g}GB{f['map_rss'] / 1e6:>9.0f}{f['map_anon'] / 1e6:>7.0f}"
                     f"{f['reduce_rss'] / 1e6:>11.0f}{f['reduce_anon'] / 1e6:>7.0f}{f['reduce_file'] / 1e6:>7.0f}"
                     f"{f['reduce_arrow'] / 1e6:>7.1f}{f['task_shmem'] / 1e6:>6.0f}{f['driver_rss'] / 1e6:>11.0f}"
                     f"{f['driver_anon'] / 1e6:>7.0f}{'?' if spilled is None else f'{spilled / 1e6:,.0f}':>15}")
    lines.append("  (store spilled: bytes Ray's object store spilled to local disk, MB: the input blocks Ray Data "
                 "produced ahead of the map tasks)")
    extra = [f"{x['size_gb']:g} GB: " + ", ".join(f"{k} {v}" for k, v in x["phases"]["cleanup"]["requests"].items())
             for x in runs]
    lines.append("clean-up (Shuffled.remove, not in the shuffle's counts): " + "; ".join(extra))
    lines.append(f"computed, not measured: GETs at the cluster's R = {rc} (2·M·R) and the previous design "
                 "(R_old = max(8, min(P_old, ceil(bytes / 256 MiB))), P_old <= 4,096; GET = 2·M·R_old, PUT = M):")
    lines.append(f"{'size':>9}{'GET at R=' + str(rc):>14}{'P_old':>8}{'R_old':>7}{'GET_old':>14}{'PUT_old':>9}")
    for x in runs:
        pv = x["previous"]
        lines.append(f"{x['size_gb']:>7g}GB{2 * x['map_files'] * rc:>14,}{pv['partitions']:>8,}"
                     f"{pv['reduce_tasks']:>7,}{pv['GET']:>14,}{pv['PUT']:>9,}")

    def ok(flag: bool) -> str:
        return "✓" if flag else "✗"

    goals: dict[str, bool] = {}
    steps = []
    pairs = list(zip(runs, runs[1:])) + ([(runs[0], runs[-1])] if len(runs) > 2 else [])
    for a, b in pairs:
        size = b["size_gb"] / a["size_gb"]
        req = b["requests_total"] / max(1, a["requests_total"])
        get = b["requests"].get("GET_RANGE", 0) / max(1, a["requests"].get("GET_RANGE", 0))
        rd = b["bytes_read"] / max(1, a["bytes_read"])
        prev = b["previous"]["GET"] / max(1, a["previous"]["GET"])
        within = req <= 1.1 * size and rd <= 1.1 * size
        steps.append(within)
        lines.append(f"{ok(within)} {a['size_gb']:g} -> {b['size_gb']:g} GB ({size:g}x): requests {req:.2f}x, ranged "
                     f"GETs {get:.2f}x, bytes read {rd:.2f}x (goal <= {1.1 * size:g}x); the previous design's GETs "
                     f"{prev:.1f}x (computed)")
    goals["requests_and_bytes_read_le_1.1x_per_10x"] = all(steps)
    worst = max(x["read_over_written"] for x in runs)
    goals["read_le_1.1x_written"] = worst <= 1.1
    lines.append(f"{ok(goals['read_le_1.1x_written'])} bytes read / written <= 1.1 per shuffle at every size "
                 f"(largest {worst:.5f})")
    lo, hi = memory_figures(runs[0]["result"]), memory_figures(runs[-1]["result"])
    a_gb, b_gb = runs[0]["size_gb"], runs[-1]["size_gb"]
    checks = (("task_rss_flat", "largest task's ru_maxrss", max(lo["map_rss"], lo["reduce_rss"]),
               max(hi["map_rss"], hi["reduce_rss"])),
              ("task_anon_flat", "largest task's private memory (sampled RssAnon)",
               max(lo["map_anon"], lo["reduce_anon"]), max(hi["map_anon"], hi["reduce_anon"])),
              ("driver_rss_flat", "driver's peak RSS (VmHWM)", lo["driver_rss"], hi["driver_rss"]),
              ("driver_anon_flat", "driver's private memory (sampled RssAnon)", lo["driver_anon"], hi["driver_anon"]))
    for key, name, a, b in checks:
        goals[key] = b <= 1.2 * a
        lines.append(f"{ok(goals[key])} {name}: {b / 1e6:.0f} MB at {b_gb:g} GB / {a / 1e6:.0f} MB at {a_gb:g} GB = "
                     f"{b / max(1, a):.2f}x (goal <= 1.2x)")
    return lines, goals
