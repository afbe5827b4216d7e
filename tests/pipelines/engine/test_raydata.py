"""Ray Data plumbing: partitions sized by data, whole hash partitions per call, gathering columns."""
from __future__ import annotations

import numpy as np

from pipelines.engine.raydata import (MAX_PARTITIONS, MIN_PARTITIONS, PART, PARTITION_BYTES, add_partition, configure_data_context,
                               gather_columns, group_apply, partitions_for)


def test_partitions_follow_the_bytes_not_the_cpus(ray_local):
    assert partitions_for(0) == partitions_for(-5) == partitions_for(1) == MIN_PARTITIONS
    assert partitions_for(MIN_PARTITIONS * PARTITION_BYTES) == MIN_PARTITIONS
    assert partitions_for(MIN_PARTITIONS * PARTITION_BYTES + 1) == MIN_PARTITIONS + 1
    assert partitions_for(100 * PARTITION_BYTES) == 100
    assert partitions_for(10_000 * PARTITION_BYTES) == MAX_PARTITIONS
    assert partitions_for(100_000, partition_bytes=100) == 1000
    # Nothing about the cluster enters: the same answer with Ray running (2 CPUs here) or not.
    assert partitions_for(37 * PARTITION_BYTES) == 37


def test_add_partition_is_a_function_of_the_key():
    keys = np.array([5, -3, 2**62, 5, 0, -3], dtype=np.int64)
    out = add_partition({"k": keys, "v": np.arange(6)}, key="k", num_partitions=4)
    part = out[PART]
    assert part.dtype == np.int64 and ((0 <= part) & (part < 4)).all()
    assert part[0] == part[3] and part[1] == part[5]
    assert out["v"].tolist() == list(range(6)) and out["k"] is keys
    many = add_partition({"k": np.arange(10_000)}, key="k", num_partitions=7)[PART]
    assert np.bincount(many, minlength=7).min() > 1200  # spread evenly (10000 / 7 = 1428)


def _keys_per_call(batch: dict) -> dict:
    """One row per call: the distinct keys it saw and how many rows."""
    keys = np.unique(batch["k"])
    return {"keys": np.array([",".join(map(str, keys.tolist()))], dtype=object),
            "rows": np.array([len(batch["k"])]), "cols": np.array([",".join(sorted(batch))], dtype=object)}


def test_group_apply_hands_every_key_to_exactly_one_call(ray_local):
    rng = np.random.default_rng(0)
    keys = rng.integers(0, 50, size=2000)
    ds = ray_local.data.from_items([{"k": int(k), "v": i} for i, k in enumerate(keys)], override_num_blocks=6)
    calls = group_apply(ds, _keys_per_call, key="k", num_partitions=3).take_all()
    assert 1 <= len(calls) <= 3 and sum(c["rows"] for c in calls) == len(keys)
    seen = [int(k) for c in calls for k in c["keys"].split(",")]
    assert sorted(seen) == sorted(set(keys.tolist()))  # no key split across two calls
    assert {c["cols"] for c in calls} == {"k,v"}  # the partition column is removed


def test_gather_columns_collects_every_row(ray_local):
    ds = ray_local.data.from_items([{"u": i, "v": 2 * i, "w": "x"} for i in range(500)], override_num_blocks=5)
    got = gather_columns(ds, ("u", "v"))
    assert set(got) == {"u", "v"} and got["u"].dtype == np.int64
    order = np.argsort(got["u"])
    assert got["u"][order].tolist() == list(range(500)) and got["v"][order].tolist() == [2 * i for i in range(500)]
    from ray.data.expressions import col

    empty = gather_columns(ds.filter(expr=col("u") < 0), ("u",))
    assert empty["u"].dtype == np.int64 and len(empty["u"]) == 0


def test_data_context_settings(ray_local):
    from ray.data.context import ShuffleStrategy

    configure_data_context()
    ctx = ray_local.data.DataContext.get_current()
    assert ctx.shuffle_strategy == ShuffleStrategy.SORT_SHUFFLE_PULL_BASED
    assert ctx.use_datasource_v2 is False and ctx.read_op_min_num_blocks >= 16
