"""Ray Data plumbing of the corpus pipeline, in one place: start-up, data context, shuffles.

* ``init_ray``: local Ray by default; with an address, a cluster. On a cluster the driver ships
  the project's own packages (``common``, ``pipelines``) as ``py_modules`` and the variables
  that locate the object store (``common.storage.STORE_ENV``: endpoint, credentials) as
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
* ``configure_data_context``: Ray Data settings measured to matter (see its docstring).
* ``partitions_for``: shuffle partition counts from the data size (with a fixed floor), never
  from the CPUs present at start. An autoscaling cluster whose head has 0 CPUs would otherwise get the minimum, and a
  small corpus on a big cluster hundreds of empty partitions.
* ``group_apply``: apply a numpy function to whole hash partitions of a dataset (the one shuffle
  primitive used by dedup and connected components).
"""
from __future__ import annotations

import math
import os
from typing import Callable

import numpy as np

from common import storage
from common.hashing import fmix64

PART = "_part"
# Bytes of shuffled rows per partition. Sorting and reducing 64 MB in one task takes seconds;
# much smaller partitions make the fixed per-task cost dominate, much larger ones hold a
# worker's heap for long.
PARTITION_BYTES = 64 << 20
# A fixed floor, not a CPU count: below it a shuffle's reduce side runs as fewer tasks than a
# small cluster has cores (one 19 MB shuffle of the books' LSH buckets took 2.4 s as one task),
# and each extra partition of a tiny shuffle costs milliseconds.
MIN_PARTITIONS = 8
MAX_PARTITIONS = 4096
# Every task holds one CPU, so a task's native libraries get one thread. Without this the
# ``tokenizers`` Rust pool of every packing task starts a thread per core of the machine
# (N tasks on N cores: N * N threads). TOKENIZERS_PARALLELISM=false makes ``encode_batch(_fast)``
# run in the calling thread; RAYON_NUM_THREADS=1 caps the pool at one thread should something
# turn parallelism back on (``tokenizers`` reads it when its pool starts, i.e. at first use, so
# it has to be in the worker's environment from the start: a job-level runtime_env).
WORKER_THREAD_ENV = {"TOKENIZERS_PARALLELISM": "false", "RAYON_NUM_THREADS": "1"}


def init_ray(address: str | None = None, *, num_cpus: int | None = None, worker_pip: str | None = None) -> None:
    """Connect to (or start) Ray once per process and configure Ray Data."""
    import ray

    if ray.is_initialized():
        configure_data_context()
        return
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    if address:
        import common
        import pipelines

        env = {k: os.environ[k] for k in storage.STORE_ENV if os.environ.get(k)}
        env.update(WORKER_THREAD_ENV, RAY_ENABLE_UV_RUN_RUNTIME_ENV="0")
        # Folder paths, not module objects: inside a Ray Job the runtime_env is deep-copied, and
        # module objects cannot be pickled.
        modules = [os.path.dirname(m.__file__) for m in (common, pipelines)]
        runtime_env: dict = {"py_modules": modules, "env_vars": env}
        if worker_pip:
            runtime_env["pip"] = worker_pip
        ray.init(address=address, runtime_env=runtime_env, log_to_driver=False)
    else:
        # "local": start a private instance, never attach to a cluster that `ray start` left on
        # this machine (that is what --ray-address is for).
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": dict(WORKER_THREAD_ENV)})
    configure_data_context()


def configure_data_context() -> None:
    """Ray Data settings sized to the work rather than Ray's defaults.

    Shuffles (groupby) use Ray's task-based sort shuffle instead of the default actor-based hash
    shuffle: the latter starts a pool of aggregator actors for every shuffle, which cost 4-7 s
    per shuffle on a small cluster (measured on 100k rows, 4 partitions, against ~0.5 s for the
    sort shuffle). Our shuffles move only small (hash, uid) rows keyed by a partition number.

    Parquet is read through Ray's V1 datasource: the V2 reader (the 2.60 default) bin-packs small
    files into one read task and ignores ``override_num_blocks``, so a stage whose input is under
    ~100 MB ran as ONE task whatever the cluster. V1 reads one task per file or row-group range.
    Reads aim at 16 blocks at least: below that many row groups Ray splits each read task's
    output, and a split read can no longer fuse with the map after it (1.3 of 2 cores busy,
    measured); the floor keeps blocks small on small clusters too (packing 80 MB in 4 blocks on
    one CPU cost 26% more CPU time than in 16). This is a read-parallelism hint, not a data
    partitioning: the data written does not depend on it.
    """
    import ray
    from ray.data.context import ShuffleStrategy

    ctx = ray.data.DataContext.get_current()
    ctx.shuffle_strategy = ShuffleStrategy.SORT_SHUFFLE_PULL_BASED
    ctx.use_datasource_v2 = False
    cpus = max(1, int(ray.cluster_resources().get("CPU", 2)))
    ctx.read_op_min_num_blocks = max(16, 4 * cpus)
    # Ray Data reserves half of the cluster's resources per operator by default. On a small
    # cluster that left our fused read->map->write operators running ONE task at a time on two
    # CPUs (16 tasks of 0.2 s: 3.4 s with the reservation, 1.8 s without, measured). Our plans
    # are one fused operator per stage, or shuffles (barriers), so there is no downstream
    # operator for a reservation to protect from starvation.
    ctx.op_resource_reservation_enabled = False
    ctx.enable_progress_bars = bool(os.environ.get("ELECTRA_PROGRESS", ""))


def partitions_for(num_bytes: int, *, partition_bytes: int = PARTITION_BYTES) -> int:
    """Shuffle partitions for ``num_bytes`` of shuffled rows: one per ``partition_bytes``, at
    least ``MIN_PARTITIONS``; the same on any cluster, whatever CPUs it has at the start."""
    wanted = math.ceil(max(0, num_bytes) / partition_bytes)
    return int(min(MAX_PARTITIONS, max(MIN_PARTITIONS, wanted)))


def add_partition(batch: dict[str, np.ndarray], *, key: str, num_partitions: int) -> dict:
    """Column ``_part``: a hash of the int64 key column, so equal keys meet in one partition."""
    mixed = fmix64(np.asarray(batch[key]).astype(np.uint64))
    out = dict(batch)
    out[PART] = (mixed % np.uint64(num_partitions)).astype(np.int64)
    return out


def group_apply(ds, fn: Callable[[dict], dict], *, key: str, num_partitions: int):
    """Apply ``fn`` to whole hash partitions of ``ds`` by the int64 column ``key``.

    Every row with a given key value reaches the same ``fn`` call; ``fn`` gets a numpy batch
    (``_part`` column removed) and returns a numpy batch. ``num_partitions`` is the number of
    distinct ``_part`` values, i.e. of ``fn`` calls; under the sort shuffle that
    ``configure_data_context`` selects, Ray sizes the shuffle's reduce tasks itself and ignores
    ``groupby``'s own ``num_partitions`` (it is passed for the hash shuffle).
    """
    def run(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return fn({k: v for k, v in batch.items() if k != PART})

    keyed = ds.map_batches(add_partition, batch_format="numpy",
                           fn_kwargs={"key": key, "num_partitions": num_partitions})
    return keyed.groupby(PART, num_partitions=num_partitions).map_groups(run, batch_format="numpy")


def gather_columns(ds, columns: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Every row of the small int64 columns of ``ds``, concatenated on the driver."""
    import ray

    blocks = ray.get(ds.select_columns(list(columns)).to_numpy_refs())
    return {c: np.concatenate([np.zeros(0, np.int64)] + [np.asarray(b[c], np.int64) for b in blocks])
            for c in columns}
