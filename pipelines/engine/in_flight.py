"""A bound on the tasks each Ray Data operator keeps in flight: what a pass costs the driver.

Ray Data admits a map operator's next input while its backpressure policies allow it. Its
resource-budget policy works through the per-operator reservation, which
``raydata.configure_data_context`` turns off (it ran our one fused operator per stage one task at
a time on a small cluster); with it off and outputs as small as our writers' summaries, nothing
holds admission back, so an execution submits every block's task at once. The driver then holds
a submitted task's state (Ray Data's task record and output generator, Ray's task spec) for each
of them until it finishes: measured at tens of KB a task against a few KB a finished block
(``benchmarks/corpus/driver_cluster.py``). Blocks that followed the cluster's CPUs made that grow with
the cluster; blocks that follow the data, with the data.

``TasksInFlightCap`` admits an input only while the operator has fewer than ``MAX_TASKS_IN_FLIGHT``
tasks running, so the driver's share is bounded by a constant, whatever the cluster or the data.

Trade-off: a pass runs at most ``MAX_TASKS_IN_FLIGHT`` tasks at once (each holds one CPU), so a
cluster with more CPUs than that leaves the rest to other jobs during a pass, and a task that
ends is replaced on the executor's next scheduling round (milliseconds) rather than from Ray's
queue. Raising the cap buys parallelism on such a cluster at the measured cost per task in flight.
It is an internal Ray Data interface (``BackpressurePolicy``), pinned with ``ray[data]``; a
policy list is read at each execution's start, so the cap applies to every execution of the
process, the shuffles' included.
"""
from __future__ import annotations

import os

from ray.data._internal.execution.backpressure_policy import ENABLED_BACKPRESSURE_POLICIES
from ray.data._internal.execution.backpressure_policy.backpressure_policy import BackpressurePolicy

# Tasks in flight per operator. At the driver's cost per task in flight this is a bounded share
# of its memory; a pass still spreads over this many CPUs of a bigger cluster. A cluster of more
# CPUs raises it with ELECTRA_MAX_TASKS_IN_FLIGHT (the driver then holds ~59 KB more per task).
MAX_TASKS_IN_FLIGHT = int(os.environ.get("ELECTRA_MAX_TASKS_IN_FLIGHT", "") or 1024)
CONFIG_KEY = "backpressure_policies.enabled"


class TasksInFlightCap(BackpressurePolicy):
    """Admits an operator's next input only while it runs fewer than ``MAX_TASKS_IN_FLIGHT`` tasks."""

    def can_add_input(self, op) -> bool:  # noqa: ANN001 (a Ray Data PhysicalOperator)
        return op.num_active_tasks() < MAX_TASKS_IN_FLIGHT


def install(ctx) -> None:  # noqa: ANN001 (a ray.data.DataContext)
    """Ray Data's own policies plus ``TasksInFlightCap`` on ``ctx`` (once)."""
    policies = list(ctx.get_config(CONFIG_KEY, ENABLED_BACKPRESSURE_POLICIES))
    if TasksInFlightCap not in policies:
        ctx.set_config(CONFIG_KEY, [*policies, TasksInFlightCap])
