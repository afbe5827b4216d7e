"""Stage outputs as files on the store: written by the Ray tasks, summarised in the same pass.

A stage ends with ``write_documents`` or ``write_examples`` as its last operator. Each Ray task
writes its block straight to the stage's location (a local path or a bucket: no file goes
through the driver's disk) and returns one summary row, a JSON object with the statistics of
what it wrote and the names of the files it wrote. The driver adds the rows up. That costs no
second read and no shuffle, and the counts are exact because they count what was written.

* Kept document rows go to ``<data>/part-<hash>.parquet`` (all columns: the next stage's input).
* Dropped document rows go to ``<rejected>/part-<hash>.jsonl.zst``: id, reason, detail and the
  first ``text_prefix_chars`` characters of the text (the whole text with ``full_text``), one
  JSON object per line, zstd-compressed. Nothing the pipeline drops disappears unrecorded, and
  the quarantine no longer costs as much disk as the corpus.

A file's name is a hash of its rows' keys, so a retried task rewrites the same file instead of
adding a second copy. Every part is checked on the store right after it is written: its size
(``storage.write_bytes``) and, for Parquet, the row count in the footer read back from the store,
so a truncated or short object fails the task that wrote it, naming it. The files a stage
produced are listed with their rows, bytes and row groups (a ``PartList``, built as the
summaries arrive and stored beside the stage's completion marker: ``pipelines.engine.part_list``,
``pipelines.orchestration.runner``); readers open exactly those, never "whatever is in the
folder", so the leftovers of a killed attempt are never read.

Reading (``Parts.read``) is planned from that list alone, with no call to the store: one read
task per run of row groups of about ``READ_TASK_BYTES`` (at least ``MIN_READ_TASKS`` tasks when
the parts allow), planned as one Arrow table (no Python object per task) and cut into one Ray
block per task up to a fixed number, the same on any cluster (``raydata.task_table``), run with a
fixed bound on the tasks in flight (``pipelines.engine.in_flight``): Ray Data's state per block
and per task in flight is what a pass costs the driver. Every byte goes through
``common.storage`` (retried on a store outage; Ray's own Parquet reader would go around it).
Row groups are small (at most ``ROW_GROUP_ROWS`` rows and about ``ROW_GROUP_BYTES``) so that even
one big part, or one whose rows are whole books, gives several parallel tasks. A task knows
which part it reads (``with_file`` adds its index as ``_file``), which is how dedup joins its
marks to the documents without moving any text.

Damage. Parts can sit in a stage's cache a long time before a later stage reads them, and
Parquet reads most flipped bytes without complaint (of the single-bit flips of a 13 KB part,
measured: half changed nothing read back, 24 renamed a column, the rest raised errors naming no
file). So a read task checks the part's size against its list's ``bytes``; a whole part (one GET)
against the crc32 its writer listed (``part_list``); a run of row groups of a large part against
Parquet's page checksums (written with ``write_page_checksum``), which leave the footer
unchecked on that path: the price of not reading a large part once per task. A failure is
``DamagedPart``, one line naming the part, its stage's cache folder and the fix (remove that
stage's ``_SUCCESS``), a ``StorageError`` the runner does not retry. Parts listed before these
sums existed are checked for their size only.

Inside a runner's stage attempt every read block that a writer pass finishes is journalled by
the task that wrote it, and a retried attempt skips those blocks, taking their summaries from the
journal (``pipelines.engine.block_journal``): a failure late in a pass costs the blocks that had
not finished, not the pass.
"""
from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np
import pyarrow as pa

from common import storage
from pipelines.engine import block_journal, written
from pipelines.engine.part_list import NO_CRC, PartList, PartListBuilder

ROW_GROUP_ROWS = 2048
ROW_GROUP_BYTES = 4 << 20
# A read task covers about this many bytes of Parquet, and a stage is read by at least
# MIN_READ_TASKS tasks where its row groups allow: from the data, never from the CPUs present.
READ_TASK_BYTES = 32 << 20
MIN_READ_TASKS = 16
FILE_COLUMN = "_file"
_ZSTD_LEVEL = 6


def part_name(keys: list[np.ndarray], suffix: str) -> str:
    """``part-<hash>.<suffix>`` from the key columns of the rows in the file."""
    import hashlib

    h = hashlib.blake2b(digest_size=12)
    for k in keys:
        h.update(np.ascontiguousarray(np.asarray(k).astype(np.int64)).tobytes())
    return f"part-{h.hexdigest()}.{suffix}"


def parquet_bytes(table: pa.Table) -> bytes:
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    rows = ROW_GROUP_ROWS
    if table.num_rows and table.nbytes > ROW_GROUP_BYTES:
        rows = max(1, min(rows, ROW_GROUP_BYTES * table.num_rows // table.nbytes))
    pq.write_table(table, sink, row_group_size=rows, write_page_checksum=True)  # read_task checks them
    return sink.getvalue().to_pybytes()


def write_parquet(folder: str, name: str, table: pa.Table) -> dict[str, Any]:
    """Write ``table`` as part ``name``, check it on the store, return its record."""
    import pyarrow.parquet as pq

    data = parquet_bytes(table)
    uri = storage.join(folder, name)
    storage.write_bytes(uri, data)
    with storage.open_input(uri) as f:  # the footer as the store holds it (two ranged reads)
        meta = pq.read_metadata(f)
    if meta.num_rows != table.num_rows:
        raise storage.StorageError(f"{uri}: wrote {table.num_rows} rows but the stored footer says "
                                   f"{meta.num_rows}")
    return {"name": name, "rows": table.num_rows, "bytes": len(data), "row_groups": meta.num_row_groups,
            "crc32": zlib.crc32(data)}


def summary_row(**fields: Any) -> dict[str, np.ndarray]:
    """What a writing task returns: one row, the JSON of what it wrote."""
    return {"summary": np.array([json.dumps(fields)], dtype=object)}


# Summaries handed to the caller per batch: the driver parses them as they arrive instead of
# holding every block's JSON and its parsed copy at once (as ``take_all`` and a parse did).
SUMMARY_BATCH = 1024


def run_writers(ds: Any, fn: Callable, **kwargs: Any) -> Iterator[dict[str, Any]]:
    """Run ``fn`` (a pyarrow block -> ``summary_row``) over every block of ``ds``; yields the
    summaries as they arrive (consume them all: the pass runs as they are taken).

    Inside a runner's stage attempt (``block_journal.stage``) the summaries of the blocks an
    earlier attempt finished come first, from the journal (their read tasks read nothing), and
    each read block this pass finishes is journalled by the task that wrote it."""
    # A failed attempt's finished blocks: their parts are on the store, nothing is written now.
    yield from block_journal.take_carried()
    out = ds.map_batches(_journalled_writer, batch_format="pyarrow", batch_size=None,
                         fn_kwargs={"fn": fn, "kwargs": kwargs})
    for batch in out.iter_batches(batch_size=SUMMARY_BATCH, batch_format="pyarrow"):
        for summary in batch.column("summary").to_pylist():
            summary = json.loads(summary)
            files = summary.get("files", [])
            written.add(files=len(files), nbytes=sum(int(f.get("bytes", 0)) for f in files),
                        quarantined=len(summary.get("rejected", [])))
            yield summary


def _journalled_writer(table: pa.Table, *, fn: Callable, kwargs: dict[str, Any]) -> dict[str, np.ndarray]:
    """``fn`` on ``table``, then its summary noted for the journal of the read block (if any)."""
    row = fn(table, **kwargs)
    block_journal.wrote(table.num_rows, row["summary"], kwargs)
    return row


# ------------------------------------------------------------------------------ documents
def _rejected_lines(table: pa.Table, prefix_chars: int, full_text: bool) -> bytes:
    cols = {c: table.column(c).to_pylist() for c in ("id", "reason", "detail", "text")}
    urls = table.column("url").to_pylist() if "url" in table.column_names else None
    lines = []
    for rid, reason, detail, text in zip(cols["id"], cols["reason"], cols["detail"], cols["text"]):
        text = text or ""
        record = {"id": rid, "reason": reason, "detail": detail,
                  "text": text if full_text else text[:prefix_chars], "chars": len(text)}
        if urls is not None and urls[len(lines)]:
            record["url"] = urls[len(lines)]  # a WARC record's page: which one was dropped
        lines.append(json.dumps(record, ensure_ascii=False))
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")


def _write_document_block(table: pa.Table, *, data: str, rejected: str, prefix_chars: int,
                          full_text: bool) -> dict[str, np.ndarray]:
    import pyarrow.compute as pc
    import zstandard

    reason = table.column("reason")
    kept_mask = pc.equal(reason, "")
    languages = None
    if LANGUAGE_COLUMN in table.column_names:
        # The filter stage's detected language: counted here, not written (no schema change).
        languages = language_counts(table.column(LANGUAGE_COLUMN).to_pylist(), reason.to_pylist())
        table = table.drop_columns([LANGUAGE_COLUMN])
    encodings = None
    if ENCODING_COLUMN in table.column_names:
        # Ingest's decoding of each document ("utf-8", "cp1252", ...): counted, not written.
        encodings = language_counts(table.column(ENCODING_COLUMN).to_pylist(), reason.to_pylist())
        table = table.drop_columns([ENCODING_COLUMN])
    if FILE_COLUMN in table.column_names:  # which input part a row came from: not written
        table = table.drop_columns([FILE_COLUMN])
    kept, dropped = table.filter(kept_mask), table.filter(pc.invert(kept_mask))
    files, stats = [], {}
    if kept.num_rows:
        files.append(write_parquet(data, part_name([kept.column("uid").to_numpy()], "parquet"), kept))
    rejected_files = []
    if dropped.num_rows:
        name = part_name([dropped.column("uid").to_numpy()], "jsonl.zst")
        blob = zstandard.ZstdCompressor(level=_ZSTD_LEVEL).compress(
            _rejected_lines(dropped, prefix_chars, full_text))
        storage.write_bytes(storage.join(rejected, name), blob)
        rejected_files.append({"name": name, "rows": dropped.num_rows, "bytes": len(blob)})
    counts = pa.table({"reason": reason, "bytes": pc.binary_length(table.column("text"))}).group_by(
        "reason").aggregate([("bytes", "count"), ("bytes", "sum")])
    for r, n, b in zip(counts.column("reason").to_pylist(), counts.column("bytes_count").to_pylist(),
                       counts.column("bytes_sum").to_pylist()):
        stats[r] = [int(n), int(b or 0)]
    extra = {k: v for k, v in (("languages", languages), ("encodings", encodings)) if v is not None}
    return summary_row(files=files, rejected=rejected_files, reasons=stats, **extra)


LANGUAGE_COLUMN = "language"
ENCODING_COLUMN = "encoding"


def language_counts(languages: list[str], reasons: list[str]) -> dict[str, dict[str, int]]:
    """``{language: {"kept": n, "dropped": m}}`` over the rows with a language ("" = not looked at)."""
    out: dict[str, dict[str, int]] = {}
    for lang, reason in zip(languages, reasons):
        if lang:
            acc = out.setdefault(lang, {"kept": 0, "dropped": 0})
            acc["dropped" if reason else "kept"] += 1
    return out


def write_documents(ds: Any, *, data: str, rejected: str, prefix_chars: int,
                    full_text: bool) -> dict[str, Any]:
    """Run ``ds`` (document rows) to the end; kept rows to ``data``, dropped ones to ``rejected``.

    Returns ``{"files": PartList, "rejected": PartList, "reasons": {reason: [documents, bytes]}}``
    over all blocks (reason ``""`` = kept), and ``"languages": {language: {"kept": n, "dropped": m}}``
    when the rows carry the filter stage's ``language`` column (which is not written); the same
    for ``"encodings"`` and ingest's ``encoding`` column.
    """
    rows = run_writers(ds, _write_document_block, data=data, rejected=rejected, prefix_chars=prefix_chars,
                       full_text=full_text)
    files, quarantined = PartListBuilder(), PartListBuilder()  # columns, sorted by name
    out: dict[str, Any] = {"reasons": {}}
    for r in rows:
        files.add(r["files"])
        quarantined.add(r["rejected"])
        for lang, counts in r.get("languages", {}).items():
            acc = out.setdefault("languages", {}).setdefault(lang, {"kept": 0, "dropped": 0})
            acc["kept"] += counts["kept"]
            acc["dropped"] += counts["dropped"]
        for enc, counts in r.get("encodings", {}).items():
            acc = out.setdefault("encodings", {}).setdefault(enc, {"kept": 0, "dropped": 0})
            acc["kept"] += counts["kept"]
            acc["dropped"] += counts["dropped"]
        for reason, (n, b) in r["reasons"].items():
            acc = out["reasons"].setdefault(reason, [0, 0])
            acc[0] += n
            acc[1] += b
    out["files"], out["rejected"] = files.build(), quarantined.build()
    return out


def document_stats(reasons: dict[str, list[int]]) -> dict[str, Any]:
    """The manifest's per-stage statistics from ``write_documents``' reason counts.

    A stage reads only the rows its predecessor kept, so everything in its output came in:
    ``documents_in`` is the total and ``dropped`` holds this stage's own reasons.
    """
    kept = reasons.get("", [0, 0])
    dropped = {k: v for k, v in reasons.items() if k}
    return {"documents_in": kept[0] + sum(v[0] for v in dropped.values()), "documents_out": kept[0],
            "dropped": {k: v[0] for k, v in sorted(dropped.items())},
            "bytes_in": kept[1] + sum(v[1] for v in dropped.values()), "bytes_out": kept[1]}


# ------------------------------------------------------------------------------ examples
def _write_example_block(table: pa.Table, *, data: str,
                         summarise: Callable[[pa.Table], dict[str, Any]]) -> dict[str, np.ndarray]:
    files = []
    if table.num_rows:
        name = part_name([table.column("uid").to_numpy(), table.column("ordinal").to_numpy()], "parquet")
        files.append(write_parquet(data, name, table))
    return summary_row(files=files, splits=summarise(table))


def write_examples(ds: Any, *, data: str, summarise: Callable[[pa.Table], dict[str, Any]]) -> dict[str, Any]:
    """Run ``ds`` (example rows) to the end, writing parts to ``data``; per-split sums of
    ``summarise(block)`` (``{split: {name: number}}``) come back with the file list."""
    rows = run_writers(ds, _write_example_block, data=data, summarise=summarise)
    files, splits = PartListBuilder(), {}
    for r in rows:
        files.add(r["files"])
        for split, values in r["splits"].items():
            acc = splits.setdefault(split, {})
            for k, v in values.items():
                acc[k] = acc.get(k, 0) + int(v)
    return {"files": files.build(), "splits": dict(sorted(splits.items()))}


# ------------------------------------------------------------------------------ reading
@dataclass(frozen=True)
class Parts:
    """The listed Parquet parts of a stage: a ``PartList`` as ``write_documents`` and
    ``write_examples`` return it (or records: name, rows, bytes, row_groups), in its order (a
    part's index in it is its ``_file``)."""
    folder: str
    files: PartList

    def __post_init__(self) -> None:
        object.__setattr__(self, "files", PartList.of(self.files))

    @property
    def rows(self) -> int:
        return self.files.rows

    def tasks(self) -> pa.Table:
        """Read tasks, one row each: ``index`` (the part's), ``name``, row groups ``[first, end)``
        of ``groups``, and ``bytes`` (the part's bytes pro rata), largest first. A part of ``b``
        bytes and ``g`` row groups is cut into ``min(g, ceil(b / target))`` runs of row groups of
        equal count (``target`` = ``READ_TASK_BYTES``, smaller when that would give fewer than
        ``MIN_READ_TASKS`` tasks). Planned as arrays: tens of bytes a task on the driver."""
        n = len(self.files)
        size = self.files.column("bytes") if n else np.zeros(0, np.int64)
        groups = np.maximum(1, self.files.column("row_groups")) if n else np.zeros(0, np.int64)
        target = max(1, min(READ_TASK_BYTES, -(-int(size.sum()) // MIN_READ_TASKS)))
        runs = np.maximum(1, np.minimum(groups, -(-size // target)))
        index = np.repeat(np.arange(n, dtype=np.int64), runs)
        starts = np.cumsum(runs) - runs  # each part's first task
        j = np.arange(len(index), dtype=np.int64) - np.repeat(starts, runs)
        k, g, b = runs[index], groups[index], size[index]
        first, end = g * j // k, g * (j + 1) // k
        nbytes = b * (end - first) // g
        # Largest first, so the big tasks run early and small ones fill in at the end.
        order = np.lexsort((first, index, -nbytes))
        names = self.files.names
        return pa.table({"index": index[order], "name": names.take(index[order]), "first": first[order],
                         "end": end[order], "groups": g[order], "bytes": nbytes[order]})

    def read(self, *, with_file: bool = False, transform: Callable | None = None,
             transform_kwargs: dict[str, Any] | None = None) -> Any:
        """The rows of every listed part as a Dataset (nothing else in the folder is read).

        ``with_file`` adds the int64 column ``_file`` (the part's index); ``transform(table,
        index, **transform_kwargs)`` is applied to each task's rows in the task that read them.
        """
        import ray

        tasks = self.tasks()
        if not tasks.num_rows:
            return ray.data.from_items([])
        # Each task carries its part's listed size and crc32, which read_task checks.
        index = tasks.column("index").to_numpy()
        tasks = tasks.append_column("size", pa.array(self.files.column("bytes")[index], pa.int64()))
        tasks = tasks.append_column("crc32", pa.array(self.files.column("crc32")[index], pa.int64()))
        from pipelines.engine.raydata import task_blocks, task_table

        # Inside a runner's stage attempt: the blocks an earlier attempt finished are skipped.
        journal = block_journal.read_pass(self.folder, tasks, task_blocks(tasks.num_rows), with_file=with_file,
                                          transform=transform, transform_kwargs=transform_kwargs or {})
        return task_table(tasks).map_batches(
            _read_tasks, batch_size=1, batch_format="pyarrow",
            fn_kwargs={"folder": self.folder, "with_file": with_file, "transform": transform,
                       "transform_kwargs": transform_kwargs or {}, "journal": journal})


class DamagedPart(storage.StorageError):
    """A cached part of another size or crc32 than listed, failing a page checksum or unparseable."""


def _damaged(folder: str, uri: str, what: str) -> DamagedPart:
    stage = folder[:-len("/data")] if folder.endswith("/data") else folder  # .work/<stage>-<key>
    return DamagedPart(f"{uri}: damaged part of the stage cached in {stage}: {what}; remove "
                       f"{storage.join(stage, '_SUCCESS')} to build that stage again")


def read_task(folder: str, task: dict[str, Any]) -> pa.Table:
    """The rows of one read task (row groups ``[first, end)`` of one part), read through storage
    and checked against the task's ``size`` and ``crc32`` (module docstring: ``DamagedPart``)."""
    import pyarrow.parquet as pq

    uri = storage.join(folder, task["name"])
    size, crc = task.get("size"), task.get("crc32", NO_CRC)

    def sized(got: int) -> None:
        if size is not None and got != size:
            raise _damaged(folder, uri, f"{got} bytes, the stage's part list says {size} (truncated?)")
    try:
        if task["first"] == 0 and task["end"] == task["groups"]:  # the whole part: one GET
            data = storage.read_bytes(uri)
            sized(len(data))
            if crc != NO_CRC and zlib.crc32(data) != crc:
                raise _damaged(folder, uri, f"crc32 {zlib.crc32(data):#010x}, the stage's part list says {crc:#010x}")
            return pq.read_table(pa.BufferReader(data), page_checksum_verification=True)
        with storage.open_input(uri) as f:
            sized(f.size() if callable(f.size) else f.size)  # fsspec: an attribute; pyarrow: a method
            return pq.ParquetFile(f, page_checksum_verification=True).read_row_groups(
                list(range(task["first"], task["end"])))
    except DamagedPart:
        raise
    except (OSError, pa.ArrowException) as exc:
        # Store errors (StorageError, retried or not by their own rules) and other I/O errors
        # pass as they are; pyarrow reports bad bytes as a plain OSError or an ArrowException.
        if isinstance(exc, storage.StorageError) or not (isinstance(exc, pa.ArrowException) or type(exc) is OSError):
            raise
        first = (str(exc).splitlines() or [""])[0]
        raise _damaged(folder, uri, f"unreadable Parquet ({first})") from None


def _read_tasks(batch: pa.Table, *, folder: str, with_file: bool, transform: Callable | None,
                transform_kwargs: dict[str, Any],
                journal: block_journal.PassRef | None = None) -> Iterator[pa.Table]:
    from pipelines.engine.raydata import tasks_of

    if journal is not None and journal.start(batch) in journal.skip:
        return  # an earlier attempt wrote this block's parts: its summaries come from the journal
    for task in tasks_of(batch):
        table = read_task(folder, task)
        if with_file:
            table = table.append_column(FILE_COLUMN, pa.array(np.full(table.num_rows, task["index"], np.int64)))
        if transform is not None:
            table = transform(table, task["index"], **transform_kwargs)
        # The journal knows the block is written once the writer has seen as many rows as this
        # hands on (the operators after a read mark or select rows, never drop them).
        yield table if journal is None else journal.rows(table)
    if journal is not None:
        journal.read_all()


def read_parts(folder: str, files: PartList | list[dict[str, Any]]) -> Any:
    """The listed Parquet parts of a stage as one Dataset (``Parts(folder, files).read()``)."""
    return Parts(folder, PartList.of(files)).read()
