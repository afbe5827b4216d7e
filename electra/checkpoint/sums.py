"""Checkpoint sums: the sha256 and size of every file of a checkpoint, written at save, checked at load.

A committed checkpoint (``meta.json``, ``electra.checkpoint.save_load``) says its files were all written;
these sums say they are still the bytes written. Without them a flipped byte or a truncated file
reaches ``torch.load`` (a crash in DeepSpeed's unpickling at best, a silently different tensor at
worst)::

    RUN_DIR/checkpoints/step_00001000/
        sums_rank{R}.json    {"rank": R, "files": {name: {"sha256": ..., "size": ...}}}: the
                             files rank R wrote into this folder, by rank R, BEFORE the barrier
                             that precedes meta.json (so a committed checkpoint has all its sums)
        meta.json            ``"sums": true`` (false/absent: written before sums existed)

**Who writes.** Each rank hashes only the files it wrote itself: the ones DeepSpeed saved through
its checkpoint engine on that rank (``recording`` wraps the engine's ``save``: its model states
on rank 0, its optimiser partition), its ``rng_rank{R}.json`` (hashed from the bytes in memory),
and on rank 0 the extras (DeepSpeed's recovery scripts, the evaluation pin). Each byte is hashed
once, by the rank that wrote it, from the page cache just after the write; no rank reads another
rank's files, no rank waits on another for hashing, and nothing is gathered: the cost at 512
ranks and a multi-GB Large checkpoint is each rank's own bytes at sha256 speed (~1-2 GB/s), in
parallel, plus one small JSON file per rank.

**Who checks.** Every file a rank reads from a checkpoint is hashed by that rank before use
(``verify``), once per process (a verified file is remembered by its inode, size and mtime, so
the model states read twice on the universal path cost one hash; ``plan_resume``, which maps only
their header, checks the size and hashes only when that read fails):
DeepSpeed's loads (``electra.checkpoint.deepspeed_states``' loader hook and its ``torch.load`` patch for the
universal conversion), the RNG file, and the mirror's node-local copies (checked against the
source's sum: a copy damaged on the node is caught too). A rank finds a file's sum in the sums
file of the rank whose number the file name carries (``zero_pp_rank_3_...``, ``rng_rank3``;
rank 0 for the rest), so a load reads two or three small sums files, not ``world_size`` of them.
Before DeepSpeed's load starts, ``electra.checkpoint.save_load.load_checkpoint`` checks the files this rank
will read and the ranks agree (``agree``: one gather of messages), so a damaged partition of one
rank stops every rank with the same one line, before any collective of DeepSpeed's load could
wait on the failed rank. The universal conversion does the same for the saved files it reads:
each rank its share of the partition files, rank 0 the model states; once they agree, the model
states count as checked on every rank (``trust``: the others map only their header).

Trade-off at load: the check reads a file once to hash it and the load reads it again, mostly
from the page cache (the same holds at save: the hash reads back what was just written). Hashing
inside the load itself would spare that read but needs the whole file in memory first, where
DeepSpeed's own loads and the mapped reads do not.

**A mismatch** is ``DamagedCheckpoint`` (a ``ValueError``: ``electra/train.py`` prints it as one
line, exit status 2), naming the file, the step and the fix: "…/step_00000006/
mp_rank_00_model_states.pt: sha256 differs from the sum written at save (damaged after the
save); delete step_00000006 to resume from step_00000004, or restore the file". A file read
from the checkpoint without a sum, and a missing or unreadable sums file of a checkpoint whose
``meta.json`` says it has sums, are the same error. A checkpoint written before sums (no
``"sums"`` in its ``meta.json``) loads with one warning that it cannot be checked.

**No automatic fallback.** When ``latest`` is damaged the resume stops; it does not go back to
the previous complete checkpoint by itself. A fallback would be bitwise-exact (the older
checkpoint holds everything a resume needs), but it would discard the steps since that
checkpoint without the user deciding, and the damage itself (a disk, a copy tool, a filesystem)
is what the user must hear about before training writes more checkpoints onto the same storage.
The error names the previous complete checkpoint and the one command-free fix: delete the
damaged step folder (the rerun then resumes from the older one, exactly), or restore the file.

Not covered: ``meta.json`` and ``latest`` themselves (the commit markers, written after the
sums; a damaged ``meta.json`` is already an error naming it), the Hugging Face export under
``hf/``, and the universal folder's converted files (derived, rewritten by a new conversion;
its copy of the model states IS checked against the step's sum).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from contextlib import contextmanager
from pathlib import Path

from electra.checkpoint import run_layout as layout

log = logging.getLogger(__name__)

__all__ = ["DamagedCheckpoint", "agree", "file_sum", "has_sums", "recording", "sums_name", "trust", "verify",
           "write_sums"]

CHUNK = 8 << 20
EXTRAS = ("zero_to_fp32.py", "zero_to_torch.py")  # DeepSpeed's recovery scripts, copied by rank 0
_RANK_IN_NAME = re.compile(r"rank_?(\d+)")
_UNIVERSAL = ".universal"

_verified: set[tuple] = set()  # (realpath, inode, size, mtime_ns) of files this process checked
_sums: dict[tuple[str, int], dict | None] = {}  # (step dir, rank) -> its sums file's entries


class DamagedCheckpoint(ValueError):
    """A checkpoint file that is not the bytes written at save; the message is one line."""


def sums_name(rank: int) -> str:
    return f"sums_rank{rank}.json"


def file_sum(path: str | os.PathLike) -> dict:
    """``{"sha256": ..., "size": ...}`` of a file, read once in chunks."""
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            size += len(chunk)
    return {"sha256": h.hexdigest(), "size": size}


# ---------------------------------------------------------------- save

class _Recording:
    """Wraps a DeepSpeed checkpoint engine: each file it saves is hashed after its write."""

    def __init__(self, inner, entries: dict):
        self._inner, self._entries = inner, entries

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def save(self, state_dict, path: str):
        out = self._inner.save(state_dict, path)
        self._entries[os.path.basename(path)] = file_sum(path)
        return out


@contextmanager
def recording(engine):
    """Inside, the files ``engine`` saves (through its checkpoint engine) are hashed; yields the
    entries, ``{name: sum}``. An engine without a checkpoint engine records nothing."""
    entries: dict = {}
    inner = getattr(engine, "checkpoint_engine", None)
    if inner is None:
        yield entries
        return
    engine.checkpoint_engine = _Recording(inner, entries)
    try:
        yield entries
    finally:
        engine.checkpoint_engine = inner


def write_sums(step_dir: str | Path, rank: int, entries: dict, *, extras: bool = False) -> Path:
    """This rank's sums file (``extras``: rank 0 adds DeepSpeed's recovery scripts and the pin,
    small files it wrote itself). Written atomically; never reads another rank's files."""
    step_dir = Path(step_dir)
    entries = dict(entries)
    if extras:
        for name in (*EXTRAS, layout.PIN):
            if (step_dir / name).is_file() and name not in entries:
                entries[name] = file_sum(step_dir / name)
    path = step_dir / sums_name(rank)
    _sums.pop((str(step_dir), rank), None)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps({"rank": rank, "files": entries}, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


# ---------------------------------------------------------------- load

def has_sums(step_dir: str | Path) -> bool:
    """The checkpoint's ``meta.json`` says its ranks wrote sums (False: written before sums)."""
    try:
        return bool(layout.read_meta(step_dir).get("sums"))
    except ValueError:
        return False


def _owner(path: Path) -> tuple[Path, str] | None:
    """The step dir whose sums cover ``path`` and the name they list it under, or None for a file
    outside a checkpoint with sums (a universal folder's own files, a test folder)."""
    parent = path.parent
    if parent.name.endswith(_UNIVERSAL):  # the universal folder's copy of the model states
        parent = parent.with_name(parent.name[: -len(_UNIVERSAL)])
        if not layout.is_complete(parent) or not path.name.endswith("model_states.pt"):
            return None
    if layout.step_of(parent) is None or not has_sums(parent):
        return None
    return parent, path.name


def _fix(step_dir: Path) -> str:
    run = layout.run_dir_of(step_dir)
    older = [d for d in layout.step_dirs(run) if layout.step_of(d) < layout.step_of(step_dir)] if run else []
    target = f"resume from {older[-1].name}" if older else "start from step 0"
    return f"delete {step_dir.name} to {target}, or restore the file"


def _damaged(step_dir: Path, where, problem: str) -> DamagedCheckpoint:
    return DamagedCheckpoint(f"{where}: {problem} (damaged after the save); {_fix(step_dir)}")


def _rank_sums(step_dir: Path, rank: int) -> dict | None:
    key = (str(step_dir), rank)
    if key not in _sums:
        path = step_dir / sums_name(rank)
        try:
            _sums[key] = json.loads(path.read_text())["files"]
        except FileNotFoundError:
            _sums[key] = None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise _damaged(step_dir, path, f"unreadable sums file ({type(exc).__name__})") from None
    return _sums[key]


def expected(step_dir: Path, name: str) -> dict:
    """The sum written at save for ``name`` in ``step_dir`` (a checkpoint with sums)."""
    found = _RANK_IN_NAME.search(name)
    guess = int(found.group(1)) if found else 0
    world = int(layout.read_meta(step_dir).get("world_size") or 1)
    for rank in [guess, *(r for r in range(world) if r != guess)]:
        entries = _rank_sums(step_dir, rank)
        if entries is None and rank < world:
            raise _damaged(step_dir, step_dir / sums_name(rank), "missing sums file")
        if entries and name in entries:
            return entries[name]
    raise _damaged(step_dir, step_dir / name, "no sum was written for this file at save")


def _key(path: Path) -> tuple:
    st = os.stat(path)
    return (os.path.realpath(path), st.st_ino, st.st_size, st.st_mtime_ns)


def verify(path: str | os.PathLike, *, as_path: str | os.PathLike | None = None) -> None:
    """Check ``path`` (the bytes about to be read) against the sum written at save for
    ``as_path`` (default ``path``: a mirror's copy is checked as its source); nothing for a file
    outside a checkpoint with sums. ``DamagedCheckpoint`` on a mismatch."""
    path = Path(path)
    where = Path(as_path if as_path is not None else path)
    owner = _owner(where)
    if owner is None:
        return
    step_dir, name = owner
    want = expected(step_dir, name)
    try:
        key = _key(path)
    except FileNotFoundError:
        raise _damaged(step_dir, where, "missing") from None
    if key in _verified:
        return
    if key[2] != want["size"]:
        raise _damaged(step_dir, where, f"{key[2]} bytes where {want['size']} were written at save")
    if file_sum(path)["sha256"] != want["sha256"]:
        raise _damaged(step_dir, where, "sha256 differs from the sum written at save")
    _verified.add(key)


def check_size(path: str | os.PathLike) -> None:
    """The cheap part of ``verify`` (a stat): a truncated file is named before anything parses it."""
    path = Path(path)
    owner = _owner(path)
    if owner is not None and path.is_file():
        want = expected(*owner)
        if path.stat().st_size != want["size"]:
            raise _damaged(owner[0], path, f"{path.stat().st_size} bytes where {want['size']} were written at save")


def check(paths, redirect=None) -> str | None:
    """Verify ``paths`` (through ``redirect``, a mirror's ``local``); the first failure's message."""
    try:
        for p in paths:
            if redirect is None:
                verify(p)
            else:
                with redirect(str(p)) as local:
                    verify(local, as_path=p)
    except DamagedCheckpoint as exc:
        return str(exc)
    return None


def agree(message: str | None) -> None:
    """Every rank stops with the first rank's message when any rank found damage (a collective
    where a process group with several ranks exists)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        got: list = [None] * dist.get_world_size()
        dist.all_gather_object(got, message)
        message = next((m for m in got if m), None)
    if message:
        raise DamagedCheckpoint(message)


def trust(paths) -> None:
    """Count ``paths`` as checked in this process: another rank checked them and the ranks agreed
    (``agree``), so this one does not hash them again (a stat each)."""
    for path in paths:
        if Path(path).is_file():
            _verified.add(_key(Path(path)))


def own_files(step_dir: str | Path, rank: int) -> list[str]:
    """The names rank ``rank``'s sums list (none where it wrote none: a rank beyond the saved world)."""
    return sorted(_rank_sums(Path(step_dir), rank) or {})


def read_checked(path: str | os.PathLike) -> bytes:
    """A checkpoint file's bytes, checked against its sum (the RNG file)."""
    verify(path)
    return Path(path).read_bytes()
