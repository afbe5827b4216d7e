"""The tokenizer's training sample: chosen in Ray tasks, trained on in one Ray task, never on the driver.

Sample. At most ``TokenizerConfig.sample_bytes`` of document text, chosen by a hash of (seed,
uid), so the choice depends on the documents only, never on Ray's block order. ``total_bytes``
(the UTF-8 size of every text, which the previous stage counted) fixes a keep rate with 10%
slack; read tasks keep the rows under it and write them (uid, hash, text) as Parquet parts into
the tokenizer stage's scratch folder, returning only their names and counts.

Training. One Ray task reads those parts, trims them in hash order to the exact byte bound,
sorts the kept texts by uid and trains (``tokenizer.train_tokenizer``), writing the tokenizer
files to the store. It takes every CPU of one node (up to ``MAX_THREADS``) and gives the
trainer's thread pool that many threads (the build's other tasks get one each): training is
the one step of the stage, and 2 threads train a 45 MB sample in 6.0 s against 11.6 s with one
(Intel Xeon, 2 cores). The result does not depend on the thread count (``tokenizer``'s
determinism fixes; a test compares the task's tokenizer with one trained in-process). The driver never holds a document: before, the sample came back
to it as Python objects (~280 MB at the default 256 MB bound), and on a cluster the driver is
often the head node, the smallest machine. The task holds the sample once (it is bounded), the
trainer's counts, and nothing else.

Coverage. The same task then encodes the first ``tokenizer_coverage.MEASURE_BYTES`` of the sample
(chosen as above, with that bound) with the tokenizer it wrote, read back from the store, and
returns the [UNK] share and bytes per token (``pipelines.tokenizer_coverage``): no second read.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from common import storage
from common.hashing import hash64, unit_float
from pipelines import schema
from pipelines.config import TokenizerConfig
from pipelines.engine.part_list import PartListBuilder
from pipelines.engine.parts import Parts, part_name, run_writers, summary_row, write_parquet

_SLACK = 1.1  # over-sample by 10%, then trim by hash order to the exact byte bound
MAX_THREADS = 8  # the trainer's parallel parts stop paying off beyond a few threads
READ_BATCH = 256  # sample parts fetched concurrently by the training task


def _select_block(table: pa.Table, *, seed: int, threshold: float, folder: str) -> dict[str, np.ndarray]:
    uid = table.column("uid").to_numpy(zero_copy_only=False).astype(np.int64)
    h = hash64(seed, uid)
    keep = np.flatnonzero(unit_float(h) < threshold)
    files = []
    if len(keep):
        rows = pa.table({"uid": uid[keep], "h": h[keep].view(np.int64),
                         "text": table.column("text").take(pa.array(keep))})
        files.append(write_parquet(folder, part_name([uid[keep]], "parquet"), rows))
    return summary_row(files=files)


def write_sample(parts: Parts, *, max_bytes: int, seed: int, total_bytes: int, folder: str) -> Parts:
    """The candidate rows of the sample, written into ``folder`` by the read tasks."""
    total = int(total_bytes)
    if max_bytes <= 0 or total <= 0 or not parts.files:
        return Parts(folder, ())
    rate = min(1.0, _SLACK * max_bytes / total)
    written = run_writers(parts.read().select_columns(["uid", "text"]), _select_block, seed=seed,
                          threshold=rate, folder=folder)
    files = PartListBuilder()  # sorted by name
    for w in written:
        files.add(w["files"])
    return Parts(folder, files.build())


def chosen_texts(sample: Parts, max_bytes: int) -> list[str]:
    """The sample's texts: in hash order up to ``max_bytes`` (a smaller document further on may
    still fit), then sorted by uid. Runs where it is called: in the training task."""
    return choose(read_sample(sample), max_bytes)


def read_sample(sample: Parts) -> pa.Table | None:
    """The sample's candidate rows (uid, h, text), or None when there are none."""
    import pyarrow.parquet as pq

    # Every part whole, READ_BATCH at a time as concurrent GETs (one part per read task of the
    # sample: tens of thousands at a terabyte, which one by one would take minutes of round trips).
    files = list(sample.files)
    tables = []
    for first in range(0, len(files), READ_BATCH):
        batch = files[first:first + READ_BATCH]
        blobs = storage.read_ranges([(storage.join(sample.folder, f["name"]), 0, int(f["bytes"])) for f in batch])
        for f, blob in zip(batch, blobs):
            if len(blob) != int(f["bytes"]):
                raise storage.StorageError(f"{storage.join(sample.folder, f['name'])}: {len(blob)} bytes on the "
                                           f"store, {f['bytes']} written")
            tables.append(pq.read_table(pa.BufferReader(blob)))
    return pa.concat_tables(tables) if tables else None


def choose(table: pa.Table | None, max_bytes: int) -> list[str]:
    """``chosen_texts`` of the candidate rows ``read_sample`` read: only the chosen texts become
    Python strings (the training task chooses twice: the training sample and, smaller, the
    coverage sample)."""
    import pyarrow.compute as pc

    if table is None:
        return []
    uid = table.column("uid").to_numpy().astype(np.int64)
    h = table.column("h").to_numpy().view(np.uint64)
    sizes = pc.binary_length(table.column("text")).to_numpy(zero_copy_only=False).tolist()  # UTF-8 bytes
    chosen, used = [], 0
    for i in np.lexsort((uid, h)).tolist():
        if used + sizes[i] <= max_bytes:
            chosen.append(i)
            used += sizes[i]
    chosen.sort(key=lambda i: uid[i])
    return table.column("text").take(pa.array(chosen, pa.int64())).to_pylist()


def _train(sample: Parts, cfg: TokenizerConfig, out_dir: str, measure_bytes: int) -> tuple[Any, ...]:
    from pipelines.tokenizer import train_tokenizer
    from pipelines.tokenizer_coverage import Coverage, measure_written

    table = read_sample(sample)
    texts = choose(table, cfg.sample_bytes)
    info = train_tokenizer(texts, cfg, out_dir)
    used = sum(len(t.encode("utf-8", "surrogatepass")) for t in texts)
    del texts
    coverage = measure_written(out_dir, choose(table, measure_bytes)) if measure_bytes > 0 else Coverage()
    return info, used, coverage


def train_on_sample(sample: Parts, cfg: TokenizerConfig, out_dir: str) -> tuple[schema.TokenizerInfo, int]:
    """Train in one Ray task on ``sample`` and write the tokenizer to ``out_dir``; returns its
    info and the bytes of text it was trained on."""
    info, used, _ = train_and_measure(sample, cfg, out_dir, measure_bytes=0)
    return info, used


def train_and_measure(sample: Parts, cfg: TokenizerConfig, out_dir: str, *,
                      measure_bytes: int) -> tuple[schema.TokenizerInfo, int, Any]:
    """``train_on_sample``, and in the same task the written tokenizer's coverage
    (``tokenizer_coverage.Coverage``) on the first ``measure_bytes`` of the sample in hash order
    (chosen as ``measure_sample`` chooses a pretrained tokenizer's)."""
    import ray

    # The CPUs of the largest node alive (a task cannot span nodes); at least one, which an
    # autoscaling cluster with no worker up yet provides by starting one.
    per_node = [int(n["Resources"].get("CPU", 0)) for n in ray.nodes() if n.get("Alive")]
    threads = max(1, min(MAX_THREADS, max(per_node, default=1)))
    env = {"RAYON_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "true" if threads > 1 else "false"}
    # A plain count: a StorageError here is a whole retry budget without progress (common.retry).
    task = ray.remote(_train).options(num_cpus=threads, max_retries=2, retry_exceptions=[storage.StorageError],
                                      runtime_env={"env_vars": env})
    return ray.get(task.remote(sample, cfg, out_dir, int(measure_bytes)))


def _measure(sample: Parts, out_dir: str, max_bytes: int) -> Any:
    from pipelines.tokenizer_coverage import measure_written

    return measure_written(out_dir, chosen_texts(sample, max_bytes))


def measure_sample(sample: Parts, out_dir: str, max_bytes: int) -> Any:
    """The coverage (``tokenizer_coverage.Coverage``) of the tokenizer written to ``out_dir`` on
    the first ``max_bytes`` of ``sample`` in hash order (``chosen_texts``), in one Ray task of one
    CPU: a pretrained tokenizer's measurement."""
    import ray

    task = ray.remote(_measure).options(num_cpus=1, max_retries=2, retry_exceptions=[storage.StorageError])
    return ray.get(task.remote(sample, out_dir, int(max_bytes)))
