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
    """The driver's share follows the blocks: their number follows the CPUs, and the data only up
    to a cap."""
    import pyarrow as pa

    from pipelines.engine.raydata import (MAX_DATA_BLOCKS, MIN_TASK_BLOCKS, TASK_BLOCKS_PER_CPU, TASKS_PER_BLOCK,
                                          task_blocks, task_table, tasks_of)

    # the cases below assume them
    assert (MIN_TASK_BLOCKS, TASK_BLOCKS_PER_CPU, TASKS_PER_BLOCK, MAX_DATA_BLOCKS) == (16, 4, 32, 1024)
    for n, cpus, blocks in [(5, 2, 5), (16, 2, 16), (300, 2, 16), (1000, 2, 32),  # ceil(1000 / 32)
                            (1000, 64, 64 * 4), (100, 64, 100), (20_000, 2, 625)]:
        assert task_blocks(n, cpus=cpus) == blocks
        ds = task_table(pa.table({"i": list(range(n))}), cpus=cpus)
        assert ds.num_blocks() == blocks
        got = [[row["i"] for row in tasks_of(block)]
               for block in ds.iter_batches(batch_size=None, batch_format="pyarrow")]
        assert sorted(i for b in got for i in b) == list(range(n))  # every task once
        if n > blocks:  # block b holds tasks b, b + k, ...: large (first) and small ones mixed
            assert sorted(got, key=lambda b: b[0]) == [list(range(b, n, blocks)) for b in range(blocks)]
    # the data's floor stops at the cap (10 TB is ~300,000 read tasks); a big cluster's CPUs do not
    assert task_blocks(32 * 1024, cpus=2) == task_blocks(300_000, cpus=2) == task_blocks(10**9, cpus=0) == 1024
    assert task_blocks(300_000, cpus=1024) == 4096 and task_blocks(0, cpus=2) == 1
    assert task_table(pa.table({"i": [0]})).num_blocks() == 1  # the CPUs of the running cluster by default
