"""Ray Data plumbing: partitions sized by data, the data context."""
from __future__ import annotations

from pipelines.engine.raydata import MAX_PARTITIONS, MIN_PARTITIONS, PARTITION_BYTES, configure_data_context, partitions_for


def test_partitions_follow_the_bytes_not_the_cpus(ray_local):
    assert partitions_for(0) == partitions_for(-5) == partitions_for(1) == MIN_PARTITIONS
    assert partitions_for(MIN_PARTITIONS * PARTITION_BYTES) == MIN_PARTITIONS
    assert partitions_for(MIN_PARTITIONS * PARTITION_BYTES + 1) == MIN_PARTITIONS + 1
    assert partitions_for(100 * PARTITION_BYTES) == 100
    assert partitions_for(10_000 * PARTITION_BYTES) == MAX_PARTITIONS
    assert partitions_for(100_000, partition_bytes=100) == 1000
    # Nothing about the cluster enters: the same answer with Ray running (2 CPUs here) or not.
    assert partitions_for(37 * PARTITION_BYTES) == 37


def test_data_context_settings(ray_local):
    configure_data_context()
    ctx = ray_local.data.DataContext.get_current()
    assert ctx.op_resource_reservation_enabled is False
