"""Ray Data: ``ingest_dataset`` runs one task per file, a generator UDF yielding batches of
``batch_size`` rows, so a large file streams out as many blocks rather than one huge list. An
uncompressed text/JSON Lines file larger than ``split_bytes`` is read as several byte ranges in
parallel (compressed streams cannot be entered in the middle; ``.json``, WARC and a file with a
UTF-16/32 BOM are read whole by one task). A range owns the documents whose
first byte lies in it: its reader enters at the first line starting at or after ``start`` (in
``blank_line`` mode skipping the tail of a document begun earlier, found by looking at the
previous line), and reads on past ``end`` until the document in progress ends, so a document on
a boundary is read exactly once and ids equal those of a whole-file read.
"""
from __future__ import annotations

from typing import Iterator, NamedTuple

import numpy as np

from common import storage
from pipelines.config import IngestConfig
from pipelines.ingest.documents import _check_config, read_documents, splittable
from pipelines.ingest.sources import SourceError, Sources

# Uncompressed text/JSONL files above this size are read as several byte ranges in parallel.
SPLIT_BYTES = 64 << 20


class ReadTask(NamedTuple):
    path: str
    name: str  # the id prefix: the path relative to the sources' root
    start: int = 0
    end: int = -1  # -1: to the end of the file


def plan_reads(sources: Sources, cfg: IngestConfig, *, split_bytes: int | None = SPLIT_BYTES) -> list[ReadTask]:
    """One task per file, or per ``split_bytes`` range of a large splittable file."""
    tasks = []
    for path in sources.files:
        size = 0
        if split_bytes and splittable(path, cfg):
            size = storage.size(path) or 0
        name = sources.name(path)
        if size <= (split_bytes or 0):
            tasks.append(ReadTask(path, name))
            continue
        tasks.extend(ReadTask(path, name, lo, lo + split_bytes if lo + split_bytes < size else -1)
                     for lo in range(0, size, split_bytes))
    return tasks


def _read_tasks(batch: dict[str, np.ndarray], cfg: IngestConfig) -> Iterator[dict[str, np.ndarray]]:
    for path, name, start, end in zip(batch["path"], batch["name"], batch["start"], batch["end"]):
        end = None if int(end) < 0 else int(end)
        yield from read_documents(str(path), cfg, start=int(start), end=end, name=str(name))


def ingest_dataset(sources: Sources, cfg: IngestConfig, *, split_bytes: int | None = SPLIT_BYTES):
    """A Ray Data dataset of the document rows of ``sources``.

    One read task per file; uncompressed text/JSONL files larger than ``split_bytes`` are read as
    several byte ranges in parallel (``None`` or 0 disables splitting). Workers open the files
    by their full URI; ids use the root-relative names.
    """
    import ray.data

    if not sources.files:
        raise SourceError("no input files to ingest")
    _check_config(cfg)
    tasks = plan_reads(sources, cfg, split_bytes=split_bytes)
    ds = ray.data.from_items([t._asdict() for t in tasks], override_num_blocks=len(tasks))
    return ds.map_batches(_read_tasks, fn_kwargs={"cfg": cfg}, batch_size=1, batch_format="numpy")
