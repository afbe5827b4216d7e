"""benchmarks/corpus/scale_simulate: the counts it simulates (``scale_simulate_plan``), the reduce
tasks it affords (``scale_simulate_rate``), and one tiny shuffle through the real path (Ray,
``shuffle``/``reduce``, moto's S3 server behind the counting proxy) whose requests and bytes must
be exactly what the map-file format says."""
from __future__ import annotations

import importlib.util

import pytest

from benchmarks.corpus import scale_simulate as sim
from benchmarks.corpus import scale_simulate_plan as sim_plan
from benchmarks.corpus import scale_simulate_rate as sim_rate
from benchmarks.shared.counting_s3 import classify
from pipelines.engine import map_file

# slow: a benchmark's smoke run: rerun when its benchmark changes, not on every change (make test-all)
pytestmark = pytest.mark.slow


def test_counts_follow_the_default_config_and_the_previous_formula():
    assert sim_plan.true_counts(10) == {"bytes": 10 << 30, "map_files": 80, "partitions": 160,
                                        "reduce_tasks": 8}
    assert sim_plan.true_counts(10000)["map_files"] == 80_000
    assert sim_plan.true_counts(10000)["partitions"] == 160_000
    # the previous design: R followed the data (one per 256 MiB), P capped at 4,096
    assert sim_plan.previous_counts(10) == {"map_files": 80, "partitions": 160, "reduce_tasks": 40, "PUT": 80,
                                            "GET": 6400}
    assert sim_plan.previous_counts(1000)["reduce_tasks"] == 4000
    assert sim_plan.previous_counts(10000)["partitions"] == 4096


def test_a_plan_scales_every_size_by_one_factor_and_keeps_m_and_p():
    plan = sim_plan.plan_for(100, rows_per_file=240, reduce_tasks=2, folder="s3://b/x")
    assert (plan["map_files"], plan["partitions"], plan["reduce_tasks"]) == (800, 1600, 2)
    assert plan["file_bytes"] == 240 * sim_plan.ROW_BYTES and plan["partition_bytes"] == plan["file_bytes"] // 2
    # R lowered from the cluster's 8 to 2: each task gets 4x the memory, so as many spill runs as one of 8
    assert plan["memory_bytes"] == 2 * plan["file_bytes"] * 4  # 256 MiB x s x 8 / 2
    assert plan["runs_per_task"] == 50  # 100 GB / 8 tasks / 256 MiB
    for size in (10, 1000, 10000):  # the same M and P as the default config at every size
        plan = sim_plan.plan_for(size, rows_per_file=240, reduce_tasks=2, folder="s3://b/x")
        want = sim_plan.true_counts(size)
        assert (plan["map_files"], plan["partitions"]) == (want["map_files"], want["partitions"])


def test_reduce_tasks_are_lowered_until_the_largest_size_fits_the_budget():
    rate = {"put_head_per_s": 200.0, "ranged_get_per_s": 200.0, "clients": 2}
    assert sim_rate.choose_reduce_tasks([10, 100], rate, 25) == 8
    assert sim_rate.choose_reduce_tasks([10, 1000], rate, 25) == 8  # 128,000 GETs: 10.7 min
    assert sim_rate.choose_reduce_tasks([10, 10000], rate, 25) == 2  # 1 task reads at half the rate: no faster
    assert sim_rate.choose_reduce_tasks([10, 10000], rate, 60) == 4


def test_the_proxy_tells_request_kinds_apart():
    assert classify("GET", "/b/k/map.arrows", "", {"Range": "bytes=0-9"}) == "GET_RANGE"
    assert classify("GET", "/b/k/map.arrows", "", {}) == "GET"
    assert classify("GET", "/b", "list-type=2&prefix=k%2F", {}) == "LIST"
    assert classify("HEAD", "/b/k", "", {}) == "HEAD"
    assert classify("PUT", "/b/k", "", {}) == "PUT"
    assert classify("PUT", "/b/k", "partNumber=1&uploadId=x", {}) == "PUT_PART"
    assert classify("POST", "/b/k", "uploads", {}) == "MPU_CREATE"
    assert classify("POST", "/b", "delete", {}) == "DELETE_MULTI"


@pytest.mark.skipif(importlib.util.find_spec("moto") is None, reason="moto is not installed: no S3 server to count")
def test_a_tiny_shuffle_makes_exactly_the_requests_the_format_implies(tmp_path):
    # 6 map files (0.75 GB's count), 12 partitions, 4 reduce tasks; a task memory of 20 KB so that
    # every reduce task spills runs of its ~50 KB range to local disk
    plan = sim_plan.plan_for(0.75, rows_per_file=240, reduce_tasks=4, folder="s3://simulate/tiny")
    plan["memory_bytes"] = 20_000
    m, p, r = plan["map_files"], plan["partitions"], plan["reduce_tasks"]
    assert (m, p, r) == (6, 12, 4)
    got = sim.run_size(plan, tmp_path, timeout=300)
    res, phases = got["result"], got["phases"]
    assert res["shuffle_stats"]["map_files"] == m and res["rows"] == m * 240
    assert res["partitions_out"] == p  # 1,440 rows over 12 partitions: none empty
    assert phases["start"]["requests"] == {}  # the input is generated inside Ray: no store traffic
    # map side: one PUT per map file and the HEAD that checks its stored size; nothing else
    assert phases["map"]["requests"] == {"PUT": m, "HEAD": m}
    assert phases["map"]["bytes_written"] == res["shuffle_stats"]["bytes"]
    # reduce side: per (map file, range) one index read and one slice read (240 rows per file
    # over 4 ranges: no slice is empty); no listing, no whole-object read, no write
    assert phases["reduce"]["requests"] == {"GET_RANGE": 2 * m * r}
    # bytes read: every slice once; per file the index reads of ranges 0..R-2 (a 12-byte record
    # and the next start, 20 bytes) and of the last range (its record, the end offset and the
    # trailer's tail: the rest of the file), i.e. each file's bytes once plus 8 per range boundary
    tail = map_file.trailer_bytes(r) - 12 * (r - 1)
    assert tail == 44
    written = phases["map"]["bytes_written"]
    assert phases["reduce"]["bytes_read"] == written + 8 * (r - 1) * m
    assert got["bytes_read"] == got["bytes_written"] + 8 * (r - 1) * m
    assert got["requests"] == {"PUT": m, "HEAD": m, "GET_RANGE": 2 * m * r}
    # clean-up lists the folder and deletes the files (outside the shuffle's counts)
    assert "GET_RANGE" not in phases["cleanup"]["requests"] and phases["cleanup"]["requests"].get("LIST", 0) >= 1
    # the memory was measured, in the tasks and in the driver
    assert res["reduce_rss"] > 0 and res["sampled"]["driver"]["anon"] > 0 and res["map_task_peak_rss"] > 0
