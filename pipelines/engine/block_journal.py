"""A stage attempt's finished writer blocks, journalled so that a retried attempt skips them.

The runner retries a stage attempt that failed for a reason that can pass (the store
unavailable past the storage layer's retries, a Ray node lost past Ray's own retries). Without
a journal the retry started from an empty folder, so one failure late in a big stage redid every
block. With it, a retry redoes only the blocks that had not finished.

The unit is one block of a read pass (``parts.Parts.read``): one row of ``raydata.task_table``,
one Arrow IPC stream of read tasks, which Ray Data runs as one task, fused with the operators
after it down to the writer (``parts.run_writers``). A block's identity is a hash of its IPC
bytes salted with the pass's identity: the stage's key (its code, config and inputs), the folder
read, a digest of the whole task table and its number of blocks, ``with_file``, the transform
and its arguments, and the pass's ordinal among identical passes of the attempt. Everything that
decides a block's rows, so an identity found again names the same work.

Recording. The task that reads a block also writes it: Ray Data fuses the read, the operators
after it and the writer into one task per block. The read notes, in a process-wide value tagged
with Ray's task id (a later task of the same worker never inherits it), which block it reads and
how many rows it hands on; each writer call adds the rows it wrote and its summary, returned
after its parts were written and checked. Once the read has handed on its last rows and the
writer has written as many, the block is complete and the task writes
``<journal>/<salt>/<block>.json`` with the block's summaries and output folders (one PUT per
block, from the worker: a failure of the pass, which stops the driver from taking the results
still queued, loses no entry). That count is why the journal relies on the operators between a
read and its writer keeping the rows (they mark, select or transform in the read task, as every
stage does): one that drops rows leaves its blocks unjournalled (redone, never wrong); one that
added rows could have an entry written before the block's last summary, which the next writer
call of the block rewrites, so only a task dying in between would leave it short. A task that
runs more than one block (Ray Data bundling inputs) or a writer that is not fused with its read
journals nothing: the journal never claims a block whose summaries it cannot tell apart.

Skipping. A retry lists each read pass's journal folder as it plans the pass (one listing), reads
each entry (one GET per finished block) and checks that every part the entry names is on the
store with its size (one listing per output folder). The blocks that pass are handed to the read
tasks as a set to skip (they read nothing for them) and their stored summaries to the next
``run_writers`` call, which yields them before the live ones. A first attempt lists nothing.
Part names are hashes of their rows' keys, so a block that is run again rewrites the same
objects: the parts of a block that failed half-way are overwritten, never listed twice, and an
orphan the record does not list is ignored by every reader and swept by the publish.

Trade-offs. Every writer pass pays one more PUT per block, failure or not: the price of knowing,
after a failure, what finished. The skip set travels with every read task (a few dozen bytes per
finished block). A shuffle inside a stage (dedup's map sides) keeps no journal: a retried
attempt redoes it.
"""
from __future__ import annotations

import hashlib
import json
import pickle
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from common import storage

# Summary fields that list written files, and the writer keyword naming each one's folder.
FILE_FIELDS = {"files": ("data", "folder"), "rejected": ("rejected",)}
_READERS = 16  # entries fetched concurrently when a retry plans a pass


@dataclass
class _Scope:
    folder: str
    key: str
    resume: bool
    seen: dict[str, int] = field(default_factory=dict)
    carried: list[dict[str, Any]] = field(default_factory=list)


# The driver's stage attempt in progress, per thread (an orchestrator may run stages side by side).
_scope_var: ContextVar[_Scope | None] = ContextVar("block_journal_scope", default=None)


@contextmanager
def stage(folder: str, key: str, *, resume: bool) -> Iterator[None]:
    """Journal the read passes of one stage attempt under ``folder`` (the driver's side);
    ``resume``: a retry, which looks for the blocks an earlier attempt finished (a first attempt
    starts from an empty folder and spends no request on it)."""
    token = _scope_var.set(_Scope(folder, key, resume))
    try:
        yield
    finally:
        _scope_var.reset(token)


@dataclass(frozen=True)
class PassRef:
    """What a read task needs: where the pass's journal is and the blocks to skip."""
    folder: str  # the pass's journal folder: <journal>/<salt>
    salt: str
    skip: frozenset[str] = frozenset()

    def start(self, batch: Any) -> str | None:
        """Note the block this task reads (worker side); its identity, or None for a batch of
        several blocks (then nothing this task writes is journalled)."""
        global _block
        blobs = batch.column("tasks").to_pylist()
        block = _block_id(self.salt, blobs[0]) if len(blobs) == 1 else None
        task = _task_id()
        if task is None or (_block is not None and _block.task == task):
            block = None  # not a Ray task, or its second block: its summaries can't be told apart
        _block = _Block(task, None if block is None else storage.join(self.folder, f"{block}.json"))
        return block

    @staticmethod
    def rows(table: Any) -> Any:
        """Count rows the read task hands on (worker side); returns ``table``."""
        if _block is not None and _block.task == _task_id():
            _block.yielded += table.num_rows
        return table

    @staticmethod
    def read_all() -> None:
        """The read task handed on its last rows (worker side)."""
        b = _block if _block is not None and _block.task == _task_id() else None
        if b is not None:
            b.exhausted = True
            if b.yielded and b.written == b.yielded:  # every row already reached the writer
                b.commit()


@dataclass
class _Block:
    """The block a worker's current task reads, and what its writer calls reported so far."""
    task: str | None
    entry: str | None  # the journal entry's URI; None: not journalled
    yielded: int = 0
    written: int = 0
    exhausted: bool = False
    summaries: list[dict[str, Any]] = field(default_factory=list)
    folders: dict[str, str] = field(default_factory=dict)

    def commit(self) -> None:
        if self.entry is not None:
            storage.write_json(self.entry, {"summaries": self.summaries, "folders": self.folders}, indent=None)


_block: _Block | None = None


def _task_id() -> str | None:
    import ray

    return ray.get_runtime_context().get_task_id() if ray.is_initialized() else None


def wrote(rows: int, summaries: Any, kwargs: dict[str, Any]) -> None:
    """A writer call of the current task wrote ``rows`` rows and returned ``summaries`` (JSON
    texts), its parts already on the store (worker side). Once the read is over and every row it handed on
    was written, the block's entry is written (again, should a later call add a summary)."""
    b = _block if _block is not None and _block.task == _task_id() else None
    if b is None or b.entry is None:
        return
    b.written += rows
    b.summaries += [json.loads(s) for s in summaries]
    for key, names in FILE_FIELDS.items():
        where = next((kwargs[n] for n in names if isinstance(kwargs.get(n), str)), None)
        if where is not None:
            b.folders[key] = where
    if b.exhausted and b.written == b.yielded:
        b.commit()


def _block_id(salt: str, blob: bytes) -> str:
    return hashlib.blake2b(salt.encode() + bytes(blob), digest_size=16).hexdigest()


def _content(value: Any) -> Any:
    """``value`` as what decides a pass's rows: a dataclass by its compared fields only (a
    ``Marks``' shuffle statistics hold timings and memory, which differ from attempt to attempt),
    arrays by dtype, shape and bytes, containers item by item."""
    import dataclasses

    import numpy as np

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__qualname__,
                tuple(_content(getattr(value, f.name)) for f in dataclasses.fields(value) if f.compare))
    if isinstance(value, np.ndarray):
        return (str(value.dtype), value.shape, value.tobytes())
    if isinstance(value, dict):
        return tuple((k, _content(v)) for k, v in sorted(value.items(), key=lambda kv: repr(kv[0])))
    if isinstance(value, (list, tuple)):
        return tuple(_content(v) for v in value)
    return value


def _digest(value: Any) -> str:
    try:
        blob = pickle.dumps(_content(value), protocol=4)
    except Exception:  # unpicklable here: a fresh identity every time, so nothing is ever skipped
        blob = repr(id(value)).encode() + repr(value).encode()
    return hashlib.blake2b(blob, digest_size=16).hexdigest()


def read_pass(folder: str, tasks: Any, blocks: int, *, with_file: bool, transform: Callable | None,
              transform_kwargs: dict[str, Any]) -> PassRef | None:
    """The journal of a read pass being planned (driver side; None outside ``stage``): finished
    blocks to skip, their summaries kept for the next ``run_writers``."""
    _scope = _scope_var.get()
    if _scope is None:
        return None
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, tasks.schema) as writer:
        writer.write_table(tasks)
    fn = None if transform is None else f"{transform.__module__}:{transform.__qualname__}"
    identity = json.dumps([_scope.key, folder, _digest(sink.getvalue().to_pybytes()), blocks, with_file, fn,
                           _digest(transform_kwargs)])
    n = _scope.seen[identity] = _scope.seen.get(identity, 0) + 1
    salt = hashlib.blake2b(f"{identity}#{n}".encode(), digest_size=12).hexdigest()
    folder = storage.join(_scope.folder, salt)
    done = _finished(folder) if _scope.resume else {}
    for entry in done.values():
        _scope.carried += entry["summaries"]
    return PassRef(folder, salt, frozenset(done))


def _finished(folder: str) -> dict[str, dict[str, Any]]:
    """The entries under ``folder`` whose every listed part is on the store with its size."""
    names = [n[:-5] for n in storage.list_sizes(folder) if n.endswith(".json") and "/" not in n]
    if not names:
        return {}
    with ThreadPoolExecutor(min(_READERS, len(names))) as pool:
        entries = dict(zip(names, pool.map(lambda n: storage.read_json(storage.join(folder, f"{n}.json")), names)))
    present: dict[str, dict[str, int]] = {}
    out = {}
    for name, entry in entries.items():
        ok = True
        for summary in entry["summaries"]:
            for key, listed in ((k, summary.get(k, [])) for k in FILE_FIELDS):
                if not listed:
                    continue
                where = entry["folders"].get(key)
                if where is None:
                    ok = False
                    break
                if where not in present:  # one listing per output folder
                    present[where] = storage.list_sizes(where)
                ok = all(present[where].get(f["name"]) == int(f["bytes"]) for f in listed)
                if not ok:
                    break
            if not ok:
                break
        if ok:
            out[name] = entry
    return out


def take_carried() -> list[dict[str, Any]]:
    """The summaries of the blocks the planned passes skip (driver side), handed over once."""
    _scope = _scope_var.get()
    if _scope is None:
        return []
    out, _scope.carried = _scope.carried, []
    return out
