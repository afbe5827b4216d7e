"""One read per node of the checkpoint files every rank loads at resume: a node-local mirror.

What a rank loads at resume (DeepSpeed 0.19, ZeRO-1/2): the model-states file
(``mp_rank_00_model_states.pt``: the whole module, ~0.7 GB for Large in bf16), which EVERY rank
loads, and its own optimiser partition (``*zero_pp_rank_<R>_*``) on a direct load, or on a
universal load ``zero/optimizer_state.pt`` (the param groups; every rank) and the per-parameter
files (``zero/<param>/{fp32,exp_avg,exp_avg_sq,step}.pt``) of the parameters its new partition
overlaps only (DeepSpeed skips a parameter with no fragment on the rank). From a shared
filesystem the model states are thus ranks x 0.7 GB (~363 GB at 512 ranks), and a parameter's
files are read by one rank, or by the several a large tensor spans (Large's word embeddings, 31M parameters,
span ~48 partitions at 512 ranks: ~18 GB of reads for one 375 MB tensor).

Here the node's ranks share one read of each file two or more of them load: the model-states
files and ``zero/optimizer_state.pt`` (every rank), and a parameter's files where the caller
says (``param_loads``: per rank, the parameters it will load, ``electra.distributed.deepspeed_glue.
universal_loads``) that several of the node's ranks load them. As the node cache shares shard
reads (``electra.data.node_cache``, whose folder, locks and run lifetime this reuses), the first rank
of the node to load such a file copies it, under an exclusive ``flock`` on ``<entry>.lock``, into
``<root>/<digest of the load folder>/<run>/`` (a temporary name, renamed once complete, its size
checked against the source's); the node's other ranks find the copy and load it (from
``/dev/shm`` under ``"auto"``: RAM, not the shared filesystem). A file one rank of the node loads
(its own partition, most parameters) is read from the source, as before. The hook is the load itself:
``electra.checkpoint.deepspeed_states`` routes DeepSpeed's loads (its checkpoint engine, and the
``torch.load`` calls of the universal loader) through ``CheckpointMirror.local``, and checks the
copy each rank is given against the sum its source was written with (``electra.checkpoint.sums``):
a copy damaged on the node is caught like a damaged source.

**When copies go.** A parameter's file is loaded once by each rank that loads it: the last of
them deletes the copy (a count in the lock file, as in the node cache; a rank whose copy failed
counts too), so a few parameters' files are in the folder at a time; each load reads its own hard
link to the copy, made under the lock, so a deletion never pulls a copy from under a rank about to
open it. The model-states file is loaded twice on the universal path (DeepSpeed, then the frozen
parameters and buffers), so it and the param groups stay until the node's last rank has finished
loading: ``close`` leaves the folder and its last holder removes it (a rank still loading holds
it); a killed run's folder goes at the node's next start (the node cache's sweep).

**Bounds and fallbacks.** Used only where the node has several ranks (``LOCAL_WORLD_SIZE`` /
``LOCAL_SIZE``; one rank per node has nothing to share) and ``data.node_cache`` is not null. A
folder that cannot be made (permissions, a full or read-only disk) means no mirror on that node,
with a warning; a copy that would leave less than ``RESERVE`` of its filesystem free (the node
cache's reserve, ``electra.data.node_cache_space``: ``/dev/shm`` also carries NCCL's and torch's shared
memory) or cannot be written is skipped with one warning:
that file is read from the source, as without the mirror; nothing else changes.

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
import re
import shutil
from collections import Counter
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from electra.data.node_cache import AUTO, NodeRanks
from electra.data.node_cache_space import auto_root, room
from electra.distributed.node_folder import join, leave, locked, private_folder, release, run_name

log = logging.getLogger(__name__)

# The files every rank loads, relative to the load folder (module docstring).
SHARED = re.compile(r"mp_rank_\d+_model_states\.pt|zero/optimizer_state\.pt")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class CheckpointMirror:
    """The node's mirror of the shared files under ``source`` (module docstring)."""
    folder: str
    source: str  # the load folder: a step dir or its universal sibling, absolute
    node: NodeRanks
    param_counts: Mapping[str, int] = field(default_factory=dict)  # node ranks loading each parameter
    copied: int = 0  # files this rank copied from the source
    copied_bytes: int = 0
    _warned: bool = field(default=False, repr=False)
    _loads: Iterator[int] = field(default_factory=itertools.count, repr=False)

    @classmethod
    def open(cls, setting: str | None, load_dir: str | Path, *, rank: int, world_size: int,
             param_loads: Sequence[Collection[str]] | None = None,
             env: Mapping[str, str] = os.environ) -> CheckpointMirror | None:
        """Join the node's mirror of ``load_dir`` (``setting``: ``data.node_cache``), or None where
        it has nothing to share (no setting, one rank on the node) or cannot be made (a warning).
        ``param_loads``: per rank of the world, the parameters whose ``zero/<name>/`` files it
        will load (a universal load). Every rank of the node must open it before any of them
        loads (then a collective: the first to finish cannot remove a folder a late rank has yet
        to join)."""
        if setting is None:
            return None
        node = NodeRanks.from_env(rank, world_size, env)
        if node.count < 2:
            return None
        source = os.path.abspath(load_dir)
        root = auto_root() if setting == AUTO else setting
        folder = os.path.join(os.path.abspath(root), _digest(source), run_name(env))
        try:
            if setting == AUTO:
                private_folder(root)
            join(folder)
        except OSError as exc:  # an optimisation: never a reason to stop the resume
            log.warning("checkpoint mirror: none on this node (%s); each rank reads %s itself", exc, source)
            return None
        counts = Counter(name for r in node.ranks for name in (param_loads[r] if param_loads else ()))
        return cls(folder, source, node, {name: n for name, n in counts.items() if n > 1})

    def close(self) -> None:
        """This rank has loaded the checkpoint: the node's last rank to close removes the copies."""
        leave(self.folder)

    @contextmanager
    def local(self, path: str | os.PathLike) -> Iterator[str]:
        """The path to load for ``path``: the node's copy of a file several of the node's ranks
        load (made here when this rank is the node's first to need it), else ``path`` itself."""
        path = os.path.abspath(path)
        rel = os.path.relpath(path, self.source).replace(os.sep, "/")
        parts = rel.split("/")
        count = self.param_counts.get(parts[1]) if len(parts) == 3 and parts[0] == "zero" else None
        if count is None and not SHARED.fullmatch(rel):
            yield path
            return
        entry = os.path.join(self.folder, _digest(rel))
        mine = None
        with locked(entry + ".lock"):
            copy = self._copy(path, entry + ".pt")
            if copy is not None and count is not None:  # this load's own name for a copy its
                mine = f"{entry}.{os.getpid()}-{next(self._loads)}.pt"  # count may delete
                try:
                    os.link(copy, mine)
                except OSError:  # a filesystem without hard links: this load reads the source
                    mine = copy = None
        try:
            yield mine or copy or path
        finally:
            if mine is not None:
                os.unlink(mine)
            if count is not None:
                release(entry, ".pt", count)

    def _copy(self, path: str, copy: str) -> str | None:
        """``copy`` holding ``path``'s bytes (made now unless a complete one exists), or None where
        it cannot be made (module docstring: fallbacks). Called under the entry's lock."""
        size = os.stat(path).st_size
        with suppress(FileNotFoundError):
            if os.stat(copy).st_size == size:
                return copy
        tmp = copy + ".tmp"
        try:
            room(self.folder, size)  # the node cache's reserve (electra.data.node_cache_space)
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
