"""benchmarks/corpus_scale_simulate: the counts it simulates and the requests it counts."""
from __future__ import annotations

from benchmarks import corpus_scale_simulate as sim
from pipelines.engine import shuffle as sh


def test_counts_follow_the_build_constants():
    got = sim.counts_for(10)
    assert got == {"bytes": 10 << 30, "map_files": 80, "partitions": 160, "reduce_tasks": 40}
    assert sim.counts_for(0.01)["reduce_tasks"] == 8  # partitions_for's minimum of 8, one task each


def test_a_simulated_shuffle_reads_each_byte_once_with_two_reads_per_file_and_task(tmp_path):
    r = sim.simulate(2, tmp_path, rows_per_file=64, max_requests=10**6, sample_tasks=4)
    m, p, tasks = r["map_files"], r["partitions"], r["reduce_tasks"]
    assert (m, p, tasks, r["sampled_tasks"]) == (16, 32, 8, None)
    assert r["map"] == {"get": 0, "put": m, "list": 0, "bytes_written": r["bytes_written"]}
    # 64 rows spread over 32 partitions: every task finds data in every file
    assert r["reduce"]["get"] == 2 * m * tasks and r["reduce"]["index_get"] == m * tasks
    # the index reads: every record once, the tail once, 8 bytes per task boundary
    assert r["reduce"]["index_bytes"] == m * (12 * p + 24 + 8 * (tasks - 1))
    assert r["reduce"]["bytes_read"] == r["bytes_written"] + m * 8 * (tasks - 1)
    assert r["full_size"]["get"] == 2 * m * tasks and r["full_size"]["before"]["get"] == 2 * m * p
    assert r["full_size"]["bytes_written"] == (2 << 30) + m * sh.trailer_bytes(p)
    assert not list(tmp_path.iterdir())  # the map files are deleted
