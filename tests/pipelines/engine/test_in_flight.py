"""The bound on tasks in flight per Ray Data operator, and the read plan that no longer follows
the cluster's CPUs: what a pass costs the driver does not grow with the cluster."""
from __future__ import annotations

import inspect

import pyarrow as pa


class _Op:
    def __init__(self, active: int):
        self.active = active

    def num_active_tasks(self) -> int:
        return self.active


def test_the_policy_admits_inputs_below_the_cap_only(ray_local, monkeypatch):
    from pipelines.engine import in_flight

    policy = in_flight.TasksInFlightCap(None, None, None)
    cap = in_flight.MAX_TASKS_IN_FLIGHT
    assert [policy.can_add_input(_Op(n)) for n in (0, cap - 1, cap, cap + 5)] == [True, True, False, False]
    monkeypatch.setattr(in_flight, "MAX_TASKS_IN_FLIGHT", 3)  # read when asked, not when built
    assert [policy.can_add_input(_Op(n)) for n in (2, 3)] == [True, False]


def test_the_data_context_runs_ray_datas_policies_and_the_cap(ray_local):
    from ray.data._internal.execution.backpressure_policy import ENABLED_BACKPRESSURE_POLICIES

    from pipelines.engine import in_flight
    from pipelines.engine.raydata import configure_data_context

    configure_data_context()
    configure_data_context()  # installed once, however often the context is configured
    policies = ray_local.data.DataContext.get_current().get_config(in_flight.CONFIG_KEY)
    assert policies == [*ENABLED_BACKPRESSURE_POLICIES, in_flight.TasksInFlightCap]


def test_a_capped_execution_reads_every_task_once(ray_local, monkeypatch):
    """With one task in flight at a time, a pass of many blocks still reads every task once."""
    from pipelines.engine import in_flight
    from pipelines.engine.raydata import configure_data_context, task_table, tasks_of

    configure_data_context()
    monkeypatch.setattr(in_flight, "MAX_TASKS_IN_FLIGHT", 1)
    ds = task_table(pa.table({"i": list(range(40))}), blocks=20)
    got = ds.map_batches(lambda b: pa.table({"i": [t["i"] for t in tasks_of(b)]}), batch_format="pyarrow",
                         batch_size=None).take_all()
    assert sorted(r["i"] for r in got) == list(range(40))


def test_the_read_plan_does_not_depend_on_the_cluster(ray_local):
    """The blocks of a read pass are a function of the read tasks alone: no CPU count enters."""
    from pipelines.engine import raydata

    assert "cpus" not in inspect.signature(raydata.task_blocks).parameters
    assert "cpus" not in inspect.signature(raydata.task_table).parameters
    for n in (1, 16, 3_200, 49_152, 300_000):
        assert raydata.task_blocks(n) == min(n, raydata.MAX_TASK_BLOCKS)
    # a pass's blocks stay within a few per task in flight, so a big pass still balances
    from pipelines.engine.in_flight import MAX_TASKS_IN_FLIGHT

    assert MAX_TASKS_IN_FLIGHT <= raydata.MAX_TASK_BLOCKS <= 8 * MAX_TASKS_IN_FLIGHT
