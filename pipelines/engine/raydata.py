"""Ray Data plumbing of the corpus pipeline, in one place: start-up, data context, partition counts.

* ``init_ray``: local Ray by default; with an address, a cluster. On a cluster the driver ships
  the project's own packages (``common``, ``pipelines``) as ``py_modules`` and the variables
  that locate the object store (``common.storage.worker_env``: the endpoint and credentials
  variables every storage scheme declares, ``common.storage_schemes``) as
  ``env_vars``, so every worker reads and writes the same URIs as the driver. Ray keeps a job's
  runtime_env in its GCS and shows it in the dashboard: on a shared cluster give the nodes their
  own credentials (an instance profile, workload identity) and leave the keys out of the driver's
  environment; the endpoint and region still travel. Third-party
  packages must already be on the workers (the image in ``infra/Dockerfile``), or be installed
  per job from ``infra/worker-requirements.txt`` (``worker_pip``; needs ``virtualenv`` on the
  nodes, which ``ray[default]`` brings). Ray Client addresses (``ray://``) cannot run Ray Data
  in Ray 2.60; run the driver on the head (``ray exec``/``ray job submit``) with ``auto``.
  Either way every worker gets ``WORKER_THREAD_ENV``: one ``tokenizers`` thread per task, as a
  task holds one CPU (the driver, which trains the tokenizer, keeps its own environment).
  Starting is ``pipelines.engine.ray_start``'s: quiet, and one line naming the cause when Ray
  does not start or answer.
* ``configure_data_context``: Ray Data settings measured to matter (see its docstring).
* ``quiet_ray_data_console`` and ``drop_stale_no_cpu_warning``: Ray Data's console shows warnings
  and errors, not three lines per execution, and not its false "no available CPUs ... will hang"
  warning on our own local Ray (``ELECTRA_PROGRESS`` brings the lines and the bars back).
* ``task_blocks``, ``task_table``, ``tasks_of``: read tasks (a table) as a Dataset of a bounded
  number of blocks: one per read task up to ``MAX_TASK_BLOCKS``, never from the cluster's CPUs.
  With ``pipelines.engine.in_flight`` (every operator keeps at most ``MAX_TASKS_IN_FLIGHT`` tasks
  in flight, installed by ``configure_data_context``) a pass costs the driver the same on 2 CPUs
  as on thousands, and a bounded amount at any data size.

What a pass costs the driver, and the trade-off. Ray Data keeps a record per block for the whole
execution (a few KB) and, per task in flight, its task state (tens of KB); without a bound it
submits every block's task at once. Blocks planned as a multiple of the cluster's CPUs (so that a
big cluster is busy and balanced) therefore made the driver grow with the cluster: at thousands of
nodes, gigabytes per pass. Now parallelism comes from the tasks in flight, bounded by a constant,
and balance from the blocks, one per read task (so the largest run first and small ones fill in
at the end) up to a constant beyond which a block's task reads several read tasks one after
another. The price: a cluster with more CPUs than ``MAX_TASKS_IN_FLIGHT`` runs a pass on that
many of them; a bigger bound buys parallelism there at a fixed cost on the driver per task.
* ``partitions_for``: shuffle partition counts from the data size (with a fixed floor), never
  from the CPUs present at start. An autoscaling cluster whose head has 0 CPUs would otherwise get the minimum, and a
  small corpus on a big cluster hundreds of empty partitions.

The shuffles themselves are the project's storage shuffle (``pipelines.engine.shuffle``), and
stage inputs are read by the project's own read tasks (``parts.Parts.read``): Ray Data runs
map tasks only, so none of its shuffle or reader settings matter any more.
"""
from __future__ import annotations

import logging
import math
import os
from typing import Any

from common import storage

# Bytes of shuffled rows per partition. Sorting and reducing 64 MB in one task takes seconds;
# much smaller partitions make the fixed per-task cost dominate, much larger ones hold a
# worker's heap for long.
PARTITION_BYTES = 64 << 20
# A fixed floor, not a CPU count: below it a shuffle's reduce side runs as fewer tasks than a
# small cluster has cores (one 19 MB shuffle of the books' LSH buckets took 2.4 s as one task),
# and each extra partition of a tiny shuffle costs milliseconds.
MIN_PARTITIONS = 8
# Every task holds one CPU, so a task's native libraries get one thread. Without this the
# ``tokenizers`` Rust pool of every packing task starts a thread per core of the machine
# (N tasks on N cores: N * N threads). TOKENIZERS_PARALLELISM=false makes ``encode_batch(_fast)``
# run in the calling thread; RAYON_NUM_THREADS=1 caps the pool at one thread should something
# turn parallelism back on (``tokenizers`` reads it when its pool starts, i.e. at first use, so
# it has to be in the worker's environment from the start: a job-level runtime_env).
WORKER_THREAD_ENV = {"TOKENIZERS_PARALLELISM": "false", "RAYON_NUM_THREADS": "1"}


def init_ray(address: str | None = None, *, num_cpus: int | None = None, worker_pip: str | None = None) -> None:
    """Connect to (or start) Ray once per process and configure Ray Data; a failure is
    ``ray_start.RayUnavailable``, one line naming the cause and ``--ray-address``."""
    import ray

    from pipelines.engine import ray_start

    if ray.is_initialized():
        configure_data_context()
        return
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    if address:
        import common
        import pipelines

        env = storage.worker_env()
        env.update(WORKER_THREAD_ENV, RAY_ENABLE_UV_RUN_RUNTIME_ENV="0")
        if os.environ.get("ELECTRA_SPILL_DIR"):  # where reduce tasks spill (pipelines.engine.spill)
            env["ELECTRA_SPILL_DIR"] = os.environ["ELECTRA_SPILL_DIR"]
        # Folder paths, not module objects: inside a Ray Job the runtime_env is deep-copied, and
        # module objects cannot be pickled.
        modules = [os.path.dirname(m.__file__) for m in (common, pipelines)]
        runtime_env: dict = {"py_modules": modules, "env_vars": env}
        if worker_pip:
            runtime_env["pip"] = worker_pip
        ray_start.check_address(address)
        ray_start.start(address, runtime_env=runtime_env, log_to_driver=False)
    else:
        ray_start.start(None, num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
                        runtime_env={"env_vars": dict(WORKER_THREAD_ENV)})
        drop_stale_no_cpu_warning()
    configure_data_context()


def configure_data_context() -> None:
    """Ray Data settings sized to the work rather than Ray's defaults.

    Ray Data reserves half of the cluster's resources per operator by default. On a small
    cluster that left our fused read->map->write operators running ONE task at a time on two
    CPUs (16 tasks of 0.2 s: 3.4 s with the reservation, 1.8 s without, measured). Our plans
    are one fused operator per stage (the shuffles run their map and reduce sides as separate
    executions), so there is no downstream operator for a reservation to protect from
    starvation. Errors raised in our map functions surface as themselves. Progress bars only
    with ``ELECTRA_PROGRESS`` set.
    """
    import ray

    ctx = ray.data.DataContext.get_current()
    ctx.op_resource_reservation_enabled = False
    # An error in our code reaches the caller as itself (a StorageError naming the object), not
    # wrapped in Ray Data's UserCodeException: the runner decides from its type whether a stage
    # attempt may be retried, and the CLI prints its one line.
    ctx.raise_original_map_exception = True
    # Ray Data fails a Dataset whose operators move no block for 30 minutes. A shuffle's reduce
    # task reads its whole range before its first output, and with a fixed number of ranges that
    # read grows with the data: a 10 TB simulation was killed by this watchdog mid-read while
    # every task progressed. Stalls are bounded where they happen instead: every store request
    # is retried within a budget renewed by progress (common.storage), and fails the stage past it.
    ctx.execution_no_progress_timeout_s = -1
    # The driver holds every task in flight, and without the reservation nothing else bounds them.
    from pipelines.engine import in_flight

    in_flight.install(ctx)
    ctx.enable_progress_bars = bool(os.environ.get("ELECTRA_PROGRESS", ""))
    if not ctx.enable_progress_bars:
        # Ray Data's once-per-process hint "Progress bars disabled. To enable, set ..." answers a
        # choice made here on purpose: mark it as already said (ELECTRA_PROGRESS is our switch).
        from ray.util.debug import log_once

        log_once("ray_data_progress_manager_disabled")
    quiet_ray_data_console()


def quiet_ray_data_console() -> None:
    """Ray Data's console handler at WARNING unless ``ELECTRA_PROGRESS`` is set: every execution
    (a stage runs several) logs "Starting execution", its plan and "execution finished" at INFO,
    most of a build's console. Ray Data's own log file in the Ray session folder keeps them."""
    level = logging.INFO if os.environ.get("ELECTRA_PROGRESS", "") else logging.WARNING
    for handler in logging.getLogger("ray.data").handlers:
        if handler.get_name() == "console":
            handler.setLevel(level)


# Ray Data checks ``ray.available_resources()`` before each execution and, once per process,
# warns "The Ray cluster currently does not have any available CPUs. The Dataset job will hang
# unless more CPUs are freed up" when that snapshot shows none. Our stages run executions back
# to back, and the CPUs the previous one's tasks held reach the cluster's resource view a moment
# after they return (measured on a 2-CPU local Ray: right after ``materialize()`` one CPU still
# showed busy, a second later both were free). The snapshot is stale, nothing hangs: the next
# execution's tasks start as those CPUs free up.
NO_CPU_WARNING = "Warning: The Ray cluster currently does not have any available CPUs"


class _StaleNoCpuWarning(logging.Filter):
    """Drops Ray Data's no-CPU warning while the cluster has CPUs at all (a cluster without any
    would hang: that warning stays)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith(NO_CPU_WARNING):
            return True
        import ray

        try:
            return not ray.cluster_resources().get("CPU")
        except Exception:  # no answer from the cluster: let the warning through
            return True


def drop_stale_no_cpu_warning() -> None:
    """Install ``_StaleNoCpuWarning`` on Ray Data's logger; only for a local Ray this process
    started, whose CPUs nothing but our own stages use (on a shared cluster another job's actors
    may hold them for good, and the warning is then true)."""
    logger = logging.getLogger("ray.data.dataset")
    if not any(isinstance(f, _StaleNoCpuWarning) for f in logger.filters):
        logger.addFilter(_StaleNoCpuWarning())


# Blocks of a list of read tasks: one per task, at most MAX_TASK_BLOCKS (beyond it a block's task
# reads several read tasks one after another), whatever the cluster. The bound is a few blocks per
# task in flight (``in_flight.MAX_TASKS_IN_FLIGHT``), so a big pass still balances: the largest
# tasks first, small ones filling in at the end. The corpus does not depend on the grouping
# (documents are keyed by their own ids, examples packed per document, shards sorted); the parts
# in between, and the rejected/ files, are cut per block, so their names and number do.
MAX_TASK_BLOCKS = 4096


def task_blocks(tasks: int) -> int:
    """Blocks for ``tasks`` read tasks: ``min(tasks, MAX_TASK_BLOCKS)``, at least 1; the same on
    any cluster."""
    return max(1, min(tasks, MAX_TASK_BLOCKS))


def task_table(tasks: Any, *, blocks: int | None = None) -> Any:
    """A table of read tasks (a ``pyarrow.Table``, one row per task, largest first) as a Ray
    Dataset of ``blocks`` (default ``task_blocks(rows)``; at most one per row) one-row blocks, block ``b`` holding rows ``b, b + k, ...``
    (each block a share of large and small tasks, run one after another by the task that reads
    the block) as one Arrow IPC stream in its column ``tasks`` (``tasks_of`` reads it back): no
    Python object per task on the driver. (``ray.data.from_arrow`` with a table per block cost the
    driver ~60 KB a block, measured: each is put in the object store apart; a block of
    ``from_items`` is one small object.)"""
    import numpy as np
    import pyarrow as pa
    import ray

    k = max(1, min(tasks.num_rows, blocks)) if blocks else task_blocks(tasks.num_rows)
    streams = []
    for b in range(k):
        sink = pa.BufferOutputStream()
        part = tasks.take(np.arange(b, tasks.num_rows, k))
        with pa.ipc.new_stream(sink, part.schema) as writer:
            writer.write_table(part)
        streams.append({"tasks": sink.getvalue().to_pybytes()})
    return ray.data.from_items(streams, override_num_blocks=k)


def tasks_of(batch: Any) -> list[dict[str, Any]]:
    """The read tasks in a batch of ``task_table``'s blocks, as dicts, in their order."""
    import pyarrow as pa

    out: list[dict[str, Any]] = []
    for blob in batch.column("tasks").to_pylist():
        out += pa.ipc.open_stream(blob).read_all().to_pylist()
    return out


def partitions_for(num_bytes: int, *, partition_bytes: int = PARTITION_BYTES) -> int:
    """Shuffle partitions for ``num_bytes`` of shuffled rows: one per ``partition_bytes``, at
    least ``MIN_PARTITIONS``, with no upper bound (a partition is what one reduce call holds, so
    its size stays bounded at any data size; a map file's layout does not depend on their number);
    the same on any cluster, whatever CPUs it has at the start."""
    wanted = math.ceil(max(0, num_bytes) / partition_bytes)
    return int(max(MIN_PARTITIONS, wanted))
