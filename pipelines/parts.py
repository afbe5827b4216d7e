"""Stage outputs as Parquet parts, written and summarised in one pass.

Every stage of ``build`` ends the same way: its rows go to Parquet under the stage's private
folder, and the manifest wants counts of them (documents by drop reason and their bytes, or
examples and tokens by split). Ray's ``write_parquet`` followed by a ``groupby().aggregate()``
reads everything twice and adds a shuffle per stage; on a small cluster those fixed costs (a Ray
Data execution is ~1 s, a shuffle more) outweighed the work itself and kept the pipeline from
scaling with CPUs. Here the last operator of a stage is ``write_parts``: each Ray task writes its
block as one Parquet file and returns a one-row-per-group summary of that block, which the driver
sums. No second read, no shuffle, and the summary is exact because it counts what was written.

A part's file name is a hash of its key column (``uid`` for documents, ``key`` for examples), so
a retried task rewrites the same file instead of adding a second copy; each file is written to a
dot-temp name and renamed. Row groups are kept small (``ROW_GROUP_ROWS``) because Ray's Parquet
reader splits files by row group: the next stage gets parallel read tasks even from one big part.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa

ROW_GROUP_ROWS = 2048


def _part_name(table: pa.Table, key: str) -> str:
    col = table.column(key)
    h = hashlib.blake2b(digest_size=12)
    if pa.types.is_integer(col.type):
        h.update(np.ascontiguousarray(col.to_numpy()).tobytes())
    else:
        h.update("\0".join(map(str, col.to_pylist())).encode("utf-8", "surrogatepass"))
    return f"part-{h.hexdigest()}.parquet"


def _write_and_summarise(table: pa.Table, *, out_dir: str, key: str,
                         summarise: Callable[[pa.Table], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    import pyarrow.parquet as pq

    if table.num_rows:
        path = Path(out_dir) / _part_name(table, key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        pq.write_table(table, tmp, row_group_size=ROW_GROUP_ROWS)
        os.replace(tmp, path)
    return summarise(table)


def write_parts(ds: Any, out_dir: Path, *, key: str,
                summarise: Callable[[pa.Table], dict[str, np.ndarray]]) -> list[dict[str, Any]]:
    """Run ``ds`` to the end, writing one Parquet part per block under ``out_dir``.

    ``summarise(table)`` (a module-level function: it runs in Ray workers) maps a block to a few
    summary rows; all of them come back to the driver (add them up with ``sum_by``).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    return ds.map_batches(_write_and_summarise, batch_format="pyarrow", batch_size=None,
                          fn_kwargs={"out_dir": str(out_dir), "key": key, "summarise": summarise}).take_all()


def sum_by(rows: list[dict[str, Any]], group: str) -> dict[str, dict[str, int]]:
    """Sum every numeric field of the summary rows per value of ``group``."""
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        acc = out.setdefault(str(r[group]), {})
        for k, v in r.items():
            if k != group:
                acc[k] = acc.get(k, 0) + int(v)
    return out


def document_summary(table: pa.Table) -> dict[str, np.ndarray]:
    """Documents and UTF-8 bytes of ``text`` per ``reason`` ("" = kept)."""
    import pyarrow.compute as pc

    if table.num_rows == 0:
        return {"reason": np.array([], dtype=object), "documents": np.array([], np.int64),
                "bytes": np.array([], np.int64)}
    t = pa.table({"reason": table.column("reason"), "bytes": pc.binary_length(table.column("text"))})
    g = t.group_by("reason").aggregate([("bytes", "count"), ("bytes", "sum")])
    return {"reason": np.asarray(g.column("reason").to_pylist(), dtype=object),
            "documents": g.column("bytes_count").to_numpy().astype(np.int64),
            "bytes": g.column("bytes_sum").fill_null(0).to_numpy().astype(np.int64)}


def read_parts(path: Path, kept: bool | None = True) -> Any:
    """A stage's Parquet output as a Dataset: kept rows, dropped rows (``kept=False``) or all."""
    import pyarrow.dataset as pds
    import ray

    files = sorted(str(p) for p in path.rglob("*.parquet"))
    if not files:
        return ray.data.from_items([])
    if kept is None:
        return ray.data.read_parquet(files)
    # The predicate goes into the read task itself (pyarrow's dataset filter), not a separate
    # Dataset.filter: that keeps read -> map -> write one fused operator, which Ray Data runs
    # with all CPUs, where two operators split them between reads and maps.
    keep = (pds.field("reason") == "") if kept else (pds.field("reason") != "")
    return ray.data.read_parquet(files, filter=keep)


def document_stats(rows: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    """The manifest's per-stage statistics from ``document_summary`` rows of the stage's output.

    A stage reads only the rows its predecessor kept, so everything in its output came in:
    ``documents_in`` is the total and ``dropped`` holds this stage's own reasons.
    """
    by_reason = sum_by(rows, "reason")
    kept = by_reason.pop("", {"documents": 0, "bytes": 0})
    total_docs = kept["documents"] + sum(v["documents"] for v in by_reason.values())
    total_bytes = kept["bytes"] + sum(v["bytes"] for v in by_reason.values())
    return {"documents_in": total_docs, "documents_out": kept["documents"],
            "dropped": {k: v["documents"] for k, v in sorted(by_reason.items())},
            "bytes_out": kept["bytes"], "bytes_in": total_bytes, "seconds": round(seconds, 3),
            "docs_per_sec": round(total_docs / max(seconds, 1e-9), 1),
            "mb_per_sec": round(total_bytes / 1e6 / max(seconds, 1e-9), 3)}
