"""Ray Data plumbing: partitions sized by data, the data context."""
from __future__ import annotations

from pipelines.engine.raydata import MIN_PARTITIONS, PARTITION_BYTES, configure_data_context, partitions_for


def test_partitions_follow_the_bytes_not_the_cpus(ray_local):
    assert partitions_for(0) == partitions_for(-5) == partitions_for(1) == MIN_PARTITIONS
    assert partitions_for(MIN_PARTITIONS * PARTITION_BYTES) == MIN_PARTITIONS
    assert partitions_for(MIN_PARTITIONS * PARTITION_BYTES + 1) == MIN_PARTITIONS + 1
    assert partitions_for(100 * PARTITION_BYTES) == 100
    assert partitions_for(100_000 * PARTITION_BYTES) == 100_000  # no cap: partitions stay bounded in size
    assert partitions_for(100_000, partition_bytes=100) == 1000
    # Nothing about the cluster enters: the same answer with Ray running (2 CPUs here) or not.
    assert partitions_for(37 * PARTITION_BYTES) == 37


def test_data_context_settings(ray_local):
    configure_data_context()
    ctx = ray_local.data.DataContext.get_current()
    assert ctx.op_resource_reservation_enabled is False
    assert ctx.raise_original_map_exception is True
    assert ctx.execution_no_progress_timeout_s == -1  # a reduce task's long read is not a hang


def test_read_tasks_go_into_a_bounded_number_of_blocks(ray_local):
    """One block per read task up to a fixed number, each block a share of large and small tasks."""
    import pyarrow as pa

    from pipelines.engine.raydata import MAX_TASK_BLOCKS, task_blocks, task_table, tasks_of

    for n, blocks, k in [(5, None, 5), (300, None, 300), (1000, 16, 16), (20, 64, 20), (0, None, 1)]:
        ds = task_table(pa.table({"i": list(range(n))}), blocks=blocks)
        assert ds.num_blocks() == k
        got = [[row["i"] for row in tasks_of(block)]
               for block in ds.iter_batches(batch_size=None, batch_format="pyarrow")]
        assert sorted(i for b in got for i in b) == list(range(n))  # every task once
        if n > k:  # block b holds tasks b, b + k, ...: large (first) and small ones mixed
            assert sorted(got, key=lambda b: b[0]) == [list(range(b, n, k)) for b in range(k)]
    assert [task_blocks(n) for n in (0, 1, 5000)] == [1, 1, min(5000, MAX_TASK_BLOCKS)]
    assert task_blocks(10**9) == MAX_TASK_BLOCKS
