"""Ray Data: ``ingest_dataset`` plans read tasks and runs each as a generator UDF yielding batches
of ``batch_size`` rows, so a large file streams out as many blocks rather than one huge list.

The plan (``plan_reads``) is made from the sources' listing alone: every file's size comes from
the one listing per source that ``resolve_sources`` does, so the driver makes no metadata call
per file (a bucket of 100,000 objects used to cost 100,000 serial HEAD requests). A file larger
than ``split_bytes`` whose format allows it becomes several tasks, each a byte range
``[start, end)`` of the file that owns the documents starting in it, with the ids of a whole-file
read:

* uncompressed text/JSON Lines: the documents whose first byte lies in the range; the reader
  enters at the first line starting at or after ``start`` (in ``blank_line`` mode skipping the
  tail of a document begun earlier) and reads on past ``end`` until the document in progress
  ends (``streams``);
* uncompressed Parquet: the row groups whose first page lies in the range (``parquet``);
* zstd text/JSON Lines: the frames starting in the range, through the file's seek table
  (``seekable``); a ``.zst`` without one is read whole by the range at 0;
* a multistream MediaWiki dump (``*-pages-articles-multistream.xml.bz2``) whose index
  (``*-multistream-index.txt.bz2``) is among the sources: ranges of whole bz2 streams, cut at the
  stream starts the index gives (``multistream``). This is the one case where the planner reads
  from the store: the index, once per dump (a few hundred MB for English Wikipedia); the index
  itself is not ingested.

gzip and other bz2 files, ``.json`` arrays, ``.xml`` files, WARC and ``text_mode=file`` are read
by one task. A file
with a UTF-16/32 BOM is transcoded whole by the task at byte 0 (the listing cannot tell: its other
tasks read the first bytes and stop). Every task carries the listed size, and its reads are held to it
(``listed``): a file that delivers less is a storage error, not an empty or short file.
"""
from __future__ import annotations

from typing import Any, Iterator, NamedTuple

import numpy as np

from pipelines.config import IngestConfig
from pipelines.ingest import multistream
from pipelines.ingest.documents import _check_config, read_documents, splittable
from pipelines.ingest.sources import SourceError, Sources

# Files above this size whose format allows it are read as several tasks in parallel.
SPLIT_BYTES = 64 << 20


class ReadTask(NamedTuple):
    path: str
    name: str  # the id prefix: the path relative to the sources' root
    start: int = 0
    end: int = -1  # -1: to the end of the file
    size: int = -1  # the file's size from the listing; -1: unknown (reads are not checked)


def plan_reads(sources: Sources, cfg: IngestConfig, *, split_bytes: int | None = SPLIT_BYTES) -> list[ReadTask]:
    """One task per file, or per ``split_bytes`` range of a large ``splittable`` file; sizes come
    from the listing (a file whose listing gave no size is one task). A multistream MediaWiki dump
    listed with its index is cut at stream starts (the index is read here, once) and its index
    gets no task."""
    tasks = []
    dumps = multistream.companions(sources.files)
    indexes = set(dumps.values())
    for path in sources.files:
        if path in indexes:
            continue  # a dump's index: the planner's input, not a document file
        size, name = sources.size(path), sources.name(path)
        listed = -1 if size is None else size
        if path in dumps and split_bytes and size is not None and size > split_bytes:
            offsets = multistream.stream_offsets(dumps[path], sources.size(dumps[path]))
            tasks.extend(ReadTask(path, name, lo, hi, listed)
                         for lo, hi in multistream.plan_ranges(offsets, size, split_bytes))
            continue
        if not split_bytes or size is None or size <= split_bytes or not splittable(path, cfg):
            tasks.append(ReadTask(path, name, 0, -1, listed))
            continue
        tasks.extend(ReadTask(path, name, lo, lo + split_bytes if lo + split_bytes < size else -1, listed)
                     for lo in range(0, size, split_bytes))
    return tasks


def _read_tasks(batch: Any, cfg: IngestConfig) -> Iterator[dict[str, np.ndarray]]:
    from pipelines.engine.raydata import tasks_of

    for t in tasks_of(batch):
        yield from read_documents(str(t["path"]), cfg, start=int(t["start"]),
                                  end=None if int(t["end"]) < 0 else int(t["end"]), name=str(t["name"]),
                                  size=None if int(t["size"]) < 0 else int(t["size"]))


def ingest_dataset(sources: Sources, cfg: IngestConfig, *, split_bytes: int | None = SPLIT_BYTES,
                   tasks: list | None = None):
    """A Ray Data dataset of the document rows of ``sources``.

    One read task per file, or several for a large splittable file (``plan_reads``; ``None`` or
    0 disables splitting; ``tasks``: a plan the caller made already, e.g. to count it: planning a
    Wikipedia dump reads its index). Workers open the files by their full URI; ids use the
    root-relative names.
    """
    import ray.data

    if not sources.files:
        raise SourceError("no input files to ingest")
    _check_config(cfg)
    if tasks is None:
        tasks = plan_reads(sources, cfg, split_bytes=split_bytes)
    import pyarrow as pa

    from pipelines.engine.raydata import task_table

    ds = task_table(pa.Table.from_pylist([t._asdict() for t in tasks]))
    return ds.map_batches(_read_tasks, fn_kwargs={"cfg": cfg}, batch_size=1, batch_format="pyarrow")
