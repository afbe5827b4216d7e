"""One read per node of the checkpoint files every rank loads at resume: a node-local mirror.

At resume every rank loads the files that are not its own: the model-states file
(``mp_rank_00_model_states.pt``: the whole module, ~0.7 GB for Large in bf16) and, on a universal
load, every parameter's fp32 master and Adam moments (``zero/<param>/*.pt``: the whole optimiser
state, ~4 GB for Large). From a shared filesystem that is ranks x those bytes: ~363 GB of model
states alone at 512 ranks. Only the ZeRO partitions (``*zero_pp_rank_<R>_*``) are a rank's own.

Here the node's ranks share one read of each shared file, as the node cache shares shard reads
(``electra.node_cache``, whose folder, locks and run lifetime this reuses): the first rank of the
node to load a file copies it, under an exclusive ``flock`` on ``<entry>.lock``, into
``<root>/<digest of the load folder>/<run>/`` (a temporary name, renamed once complete, its size
checked against the source's); the node's other ranks find the copy and load it (from
``/dev/shm`` under ``"auto"``: RAM, not the shared filesystem). The hook is the load itself:
``electra.deepspeed_states`` routes DeepSpeed's loads (its checkpoint engine, and the ``torch.load``
calls of the universal loader and converter) through ``CheckpointMirror.local``. A run opens one
mirror of the step dir while its ranks convert it (``electra.universal_conversion``: every rank's
checkpoint reader loads the model states) and one of the folder it then loads.

**When copies go.** A universal folder's per-parameter files are each loaded once per rank: the
last of the node's ranks to load one deletes its copy (a count in the lock file, as in the node
cache), so at most a few parameters' files are in the folder at once. Each load reads a hard link
to the copy made under the lock, so a deletion never pulls a copy from under a rank about to
open it (a rank loading a file twice makes the count come early: a copy again, never an error). The model-states file is
loaded twice on the universal path (DeepSpeed, then the frozen parameters and buffers), so its copy
stays until the node's last rank has finished loading: ``close`` leaves the folder and its last
holder removes it; a killed run's folder goes at the node's next start (the node cache's sweep).

**Bounds and fallbacks.** Used only where the node has several ranks (``LOCAL_WORLD_SIZE`` /
``LOCAL_SIZE``; one rank per node has nothing to share) and ``data.node_cache`` is not null. A
copy that does not fit (free space below the file's size) or cannot be written is skipped with one
warning per load: that file is read from the source, as without the mirror; nothing else changes.

Trade-offs: one copy per node of each shared file (a local write and read instead of ranks - 1
shared-filesystem reads); the node's ranks wait on the lock while the first one copies, which is
what they would spend reading it themselves. Broadcasting from one rank would save the local copy
but needs the process group and a rank that holds the whole file in memory; the mirror needs
neither and also serves loads DeepSpeed makes outside our code.
"""
from __future__ import annotations

import hashlib
import itertools
import logging
import os
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from electra.node_cache import AUTO, NodeRanks, auto_root, join, leave, locked, private_folder, run_name

log = logging.getLogger(__name__)

OWN = "zero_pp_rank_"  # a file of one rank's partition: never shared, never mirrored
ONCE = "zero"  # a universal folder's per-parameter files: loaded once per rank, released by count


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class CheckpointMirror:
    """The node's mirror of the shared files under ``source`` (module docstring)."""
    folder: str
    source: str  # the load folder: a step dir or its universal sibling, absolute
    node: NodeRanks
    copied: int = 0  # files this rank copied from the source
    copied_bytes: int = 0
    _warned: bool = field(default=False, repr=False)
    _loads: Iterator[int] = field(default_factory=itertools.count, repr=False)

    @classmethod
    def open(cls, setting: str | None, load_dir: str | Path, *, rank: int, world_size: int,
             env: Mapping[str, str] = os.environ) -> CheckpointMirror | None:
        """Join the node's mirror of ``load_dir`` (``setting``: ``data.node_cache``), or None where
        it has nothing to share: no setting, or one rank on the node. Every rank of the node must
        open it before any of them loads (then a collective: the first to finish cannot remove a
        folder a late rank has yet to join)."""
        if setting is None:
            return None
        node = NodeRanks.from_env(rank, world_size, env)
        if node.count < 2:
            return None
        source = os.path.abspath(load_dir)
        root = auto_root() if setting == AUTO else setting
        if setting == AUTO:
            private_folder(root)
        folder = os.path.join(os.path.abspath(root), _digest(source), run_name(env))
        join(folder)
        return cls(folder, source, node)

    def close(self) -> None:
        """This rank has loaded the checkpoint: the node's last rank to close removes the copies."""
        leave(self.folder)

    def _shared(self, path: str) -> str | None:
        """``path``'s name relative to the load folder when every rank loads it, else None."""
        rel = os.path.relpath(path, self.source)
        if rel.startswith(os.pardir) or OWN in os.path.basename(path):
            return None
        return rel

    @contextmanager
    def local(self, path: str | os.PathLike) -> Iterator[str]:
        """The path to load for ``path``: the node's copy of a shared file (made here when this
        rank is the node's first to need it), else ``path`` itself."""
        path = os.path.abspath(path)
        rel = self._shared(path)
        if rel is None:
            yield path
            return
        entry = os.path.join(self.folder, _digest(rel))
        with locked(entry + ".lock"):
            copy = self._copy(path, entry + ".pt")
            if copy is not None:  # this load's own name for the copy, made under the lock: the
                # copy may be deleted (its count reached) before this rank opens it
                mine = f"{entry}.{os.getpid()}-{next(self._loads)}.pt"
                os.link(copy, mine)
        if copy is None:
            yield path
            return
        try:
            yield mine
        finally:
            os.unlink(mine)
            if rel.split(os.sep, 1)[0] == ONCE:
                self._release(entry)

    def _copy(self, path: str, copy: str) -> str | None:
        """``copy`` holding ``path``'s bytes (made now unless a complete one exists), or None where
        it cannot be made (module docstring: fallbacks). Called under the entry's lock."""
        size = os.stat(path).st_size
        try:
            if os.stat(copy).st_size == size:
                return copy
        except FileNotFoundError:
            pass
        tmp = copy + ".tmp"
        try:
            if shutil.disk_usage(self.folder).free < size:
                raise OSError(f"{size} bytes do not fit in {self.folder}")
            shutil.copyfile(path, tmp)
            if os.stat(tmp).st_size != size:
                raise OSError(f"{path} changed while it was copied")
            os.replace(tmp, copy)
        except OSError as exc:
            with suppress(OSError):
                os.unlink(tmp)
            if not self._warned:
                log.warning("checkpoint mirror: %s is read from %s by each rank of the node (%s)",
                            os.path.basename(path), os.path.dirname(path), exc)
                self._warned = True
            return None
        self.copied += 1
        self.copied_bytes += size
        return copy

    def _release(self, entry: str) -> None:
        """One more of the node's ranks has loaded ``entry``; the last one deletes the copy."""
        with locked(entry + ".lock") as fd:
            done = int(os.pread(fd, 32, 0).strip() or b"0") + 1
            if done >= self.node.count:
                Path(entry + ".pt").unlink(missing_ok=True)
                Path(entry + ".lock").unlink(missing_ok=True)
            else:
                os.pwrite(fd, b"%020d" % done, 0)
