"""``benchmarks/corpus/cluster_shape.py``: one shuffle's derived counts per cluster shape, checked against
the formulas written out here (default sizes: 128 MiB map files, 64 MiB partitions, 16 MiB
slices, one reduce task per CPU, at least 8, one per 4 partitions where fewer), and the CLI's
``--cluster`` flag."""
from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.corpus import cluster_shape as cs

REPO = Path(__file__).resolve().parents[3]
MIB, GB = 1 << 20, 1 << 30


def _by_hand(size_gb: float, cpus: int) -> tuple[int, int, int]:
    total = int(size_gb * GB)
    p = max(8, math.ceil(total / (64 * MIB)))
    r = min(p, max(8, min(cpus, math.ceil(p / 4))))
    m = math.ceil(total / max(128 * MIB, r * 16 * MIB))
    return r, m, 2 * m * r


@pytest.mark.parametrize("size_gb,nodes,cpus", [(1, 2, 1), (100, 8, 16), (1000, 64, 192), (10_000, 64, 192)])
def test_counts_follow_the_formulas(size_gb, nodes, cpus):
    got = cs.counts(size_gb, nodes, cpus)
    r, m, gets = _by_hand(size_gb, nodes * cpus)
    assert (got["reduce_tasks"], got["map_files"], got["GET"]) == (r, m, gets)
    prev = cs.counts(size_gb, nodes, cpus, previous=True)
    total = int(size_gb * GB)
    p = max(8, math.ceil(total / (64 * MIB)))
    r_prev = min(p, max(8, min(2 * nodes * cpus, math.ceil(p / 4))))
    assert prev["GET"] == 2 * math.ceil(total / (128 * MIB)) * r_prev


def test_the_three_shapes_meet_the_goals_the_previous_design_did_not():
    res = cs.table([1, 100, 1000, 10_000], cs.parse_cluster("2x1,8x16,64x192"))
    assert all(res["goals"].values()), res["goals"]
    big = next(r for r in res["rows"] if r["cluster"] == "64x192" and r["size_gb"] == 10_000)
    assert big["reduce_tasks"] == 12_288 and big["mean_get_bytes"] >= MIB
    assert big["previous"]["mean_get_bytes"] < 4 * 1024 and big["previous"]["GET"] > 3e9  # slices of a few KB
    growth = [r["previous"]["growth_4x"] for r in res["rows"] if r["cluster"] == "64x192"]
    assert max(growth) > 15  # the previous design: data x reduce tasks where R follows the data


def test_bad_cluster_shapes_are_refused_in_one_line():
    with pytest.raises(ValueError, match=r"--cluster '64-192': want NODESxCPUS"):
        cs.parse_cluster("2x1,64-192")
    done = subprocess.run([sys.executable, "benchmarks/corpus/scale.py", "--simulate", "1,100", "--cluster", "0x4"],
                          cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 2 and "--cluster '0x4': want NODESxCPUS" in done.stderr


def test_the_cli_prints_the_table_per_shape():
    done = subprocess.run([sys.executable, "benchmarks/corpus/scale.py", "--simulate", "1,10000", "--cluster",
                           "64x192"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "DERIVED" in done.stdout and "goal: mean GET >= 1 MiB at 10 TB on 64x192: met" in done.stdout
    assert done.stdout.count("  64x192 ") == 2
