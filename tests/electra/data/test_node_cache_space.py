"""electra/data/node_cache_space.py (and where electra/data/node_cache.py uses it): the node cache never fills
its filesystem, ``auto`` leaves a small /dev/shm alone, and a run killed with SIGKILL leaves no
copies behind past the node's next start.

Each test mounts its own small tmpfs (this needs root; without it the tests skip, saying so) and
points the cache at it: as the folder ``data.node_cache`` names, or as ``auto``'s /dev/shm
(``node_cache_space.SHM``). Free space is taken from the test side by writing a filler file; the
one race ("another process took the room after the check") is injected at a chosen step: the
test fills the tmpfs when the cache starts reading a shard it is about to copy. Every wait is on a
queue or an event; a timeout only guards against a hang."""
from __future__ import annotations

import logging
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest

from electra.data import node_cache as nc
from electra.data import node_cache_space as space
from electra.distributed import node_folder as nf
from electra.data.corpus import check_shards, open_corpus, read_shard
from electra.data.sample_order import StreamPlan
from tests.electra._corpus import write_tiny_corpus
from tests.electra.data.test_node_cache import MANY, SEQ, TIMEOUT, digest, launcher_env, plan

PAGE = 4096  # a tmpfs counts its space in pages


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = write_tiny_corpus(tmp_path_factory.mktemp("ncs"), seq_len=SEQ, train_shards=MANY, validation_shards=(2,),
                             seed=1)
    return open_corpus(str(root), seq_len=SEQ)


@pytest.fixture(autouse=True)
def auto_roots(tmp_path, monkeypatch):
    """``auto``'s roots in the test's folder (a test that needs a small /dev/shm mounts one there)."""
    for name in ("shm", "disk"):
        (tmp_path / name).mkdir()
    monkeypatch.setattr(space, "SHM", str(tmp_path / "shm"))
    monkeypatch.setattr(space, "DISK", str(tmp_path / "disk"))


@pytest.fixture
def tmpfs(tmp_path):
    """``tmpfs(size)``: a tmpfs of ``size`` (mount's syntax) mounted for the test, unmounted after."""
    mounted = []

    def mount(size: str) -> Path:
        where = tmp_path / f"tmpfs-{size}"
        where.mkdir()
        if shutil.which("mount") is None:
            pytest.skip("no mount command: these tests need a small tmpfs of their own")
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)],
                              capture_output=True, text=True)
        if done.returncode:
            pytest.skip(f"mounting a tmpfs is not permitted here ({done.stderr.strip()}): these tests need root")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", "--lazy", str(where)], check=True)  # lazy: a failed test may hold a file open


def fill(fs: Path, leave: int) -> None:
    """Take the free space of ``fs`` down to ``leave`` bytes (a multiple of a page): another process's files."""
    with open(fs / "filler", "ab") as out:
        out.write(b"\0" * (shutil.disk_usage(fs).free - leave))
    assert shutil.disk_usage(fs).free == leave


def reserve(fs: Path) -> int:
    """The reserve of ``fs`` in bytes, rounded up to whole pages."""
    return -(-int(space.RESERVE * shutil.disk_usage(fs).total) // PAGE) * PAGE


# ------------------------------------------------------------------------------ the reserve
def test_a_copy_that_would_cut_into_the_reserve_is_not_made_and_the_ranks_read_the_store(corpus, tmpfs, monkeypatch,
                                                                                         caplog):
    """Two ranks of a node share stream 0 through a cache on an 8 MB tmpfs with a page more than the
    reserve free: every copy is refused before a byte is written, each rank reads its shards from
    the store with batches bit-identical to a direct read, and says so once (not once per shard)."""
    from electra.data.stream import TrainStream

    fs = tmpfs("8m")
    fill(fs, reserve(fs) + PAGE)  # the shards are 10 kB each
    caplog.set_level(logging.WARNING, logger="electra.data.node_cache")
    for rank in (0, 1):
        for key, value in launcher_env(rank, rank, 2).items():
            monkeypatch.setenv(key, value)
        stream = TrainStream(plan(corpus, rank=rank), num_workers=0, prefetch=0, node_cache=str(fs / "cache"))
        got = digest(list(stream.loader(0)))
        assert got == digest(list(TrainStream(plan(corpus, rank=rank), num_workers=0).loader(0)))
        assert stream.store_bytes == stream.bytes_read > 0  # every byte from the store: no copy to read
        assert not [n for n in os.listdir(stream.node.folder) if n.endswith((".tar", ".tmp"))]
    space.room(stream.node.folder, PAGE)  # what the reserve leaves room for ...
    with pytest.raises(space.NoRoom, match="would leave less than 10% of .* filesystem free"):
        space.room(stream.node.folder, 2 * PAGE)  # ... and what it does not
    nf.leave(stream.node.folder)
    said = [r.getMessage() for r in caplog.records if "no copy of" in r.getMessage()]
    assert len(said) == 2 and "rank 0 reads" in said[0] and "rank 1 reads" in said[1], said


class Watched:
    """The file the cache hands ``read_shard`` for a copy, watched: each write that got bytes in,
    and the tmpfs's free space after it."""

    def __init__(self, inner, fs: Path, log: list):
        self.inner, self.fs, self.log = inner, fs, log

    def write(self, data):
        written = self.inner.write(data)
        self.log.append((written, shutil.disk_usage(self.fs).free))
        return written

    def seek(self, *args):
        return self.inner.seek(*args)

    def truncate(self, *args):
        return self.inner.truncate(*args)


def test_a_copy_whose_room_went_after_the_check_writes_nothing_and_is_counted(corpus, tmpfs, monkeypatch, caplog):
    """The check before a copy passes; then another process takes all but a page of the tmpfs (the
    injected fault, when the cache starts reading the shard it copies). The copy writes nothing
    (it does not write until the tmpfs is full), the shard is read from the store, and the next
    shards' copies are refused up front: one warning for the rank, every refusal counted."""
    fs = tmpfs("8m")
    folder = str(fs / "cache" / "0123456789abcdef" / "run")
    nf.join(folder)
    shards = [s.shard for s in plan(corpus, world=1, streams=1).ordered_shards(0)[0]]
    writes, real = [], nc.read_shard

    def taken_meanwhile(shard, **kwargs):
        if kwargs.get("copy_to") is not None:
            if not writes and not (fs / "filler").exists():
                fill(fs, PAGE)
            kwargs["copy_to"] = Watched(kwargs["copy_to"], fs, writes)
        return real(shard, **kwargs)

    monkeypatch.setattr(nc, "read_shard", taken_meanwhile)
    caplog.set_level(logging.WARNING, logger="electra.data.node_cache")
    try:
        consumer = nc.Consumer(folder, shards, np.full(len(shards), 1), 0)
        for index in range(4):
            examples = consumer.read(index)
            assert examples.tokens.tolist() == read_shard(shards[index]).tokens.tolist()
            consumer.release(index)
        assert writes == [] and shutil.disk_usage(fs).free == PAGE  # not a byte of a copy went in
        assert (fs / "filler").exists() and (consumer.refused, consumer.downloads) == (4, 4)
        assert set(os.listdir(folder)) <= {nf.OWNER, ".refused-r0"}  # no copy, temp file or lock left
    finally:
        nf.leave(folder)
    said = [r.getMessage() for r in caplog.records if "no copy of" in r.getMessage()]
    assert len(said) == 1 and shards[0].uri in said[0], said


# ------------------------------------------------------------------------------ auto
def test_auto_on_a_small_shm_caches_on_the_disk_and_says_so_once(corpus, tmpfs, monkeypatch, caplog):
    """A 64 kB /dev/shm is less than what a node of two ranks with two loader workers each holds at
    once (computed from the plan) plus the reserve: both ranks cache in the temp folder's
    ``electra-shards-<uid>``, the node's first rank says so in one line, /dev/shm is left alone.
    With 8 MB it is used, silently."""
    small = tmpfs("64k")
    monkeypatch.setattr(space, "SHM", str(small))
    shm_root, disk_root = space.auto_roots()
    need = space.loaders_need(plan(corpus), range(2), 2)
    assert need.total > (1 - space.RESERVE) * 64 * 1024  # the premise: this node needs more than 64 kB
    caplog.set_level(logging.DEBUG, logger="electra.data.node_cache")
    caches = [nc.NodeCache.open("auto", plan(corpus, rank=rank), num_workers=2, env=launcher_env(rank, rank, 2))
              for rank in (0, 1, 0)]  # the node's two ranks, and a second stream of the first
    run = os.path.join(disk_root, nc.corpus_name(plan(corpus).shards), nf.run_name(launcher_env(0, 0, 2)))
    assert {c.folder for c in caches} == {run} and not os.path.exists(shm_root)
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(said) == 1, said
    assert said[0].startswith(f"node cache: {small} has 64.0 kB, less than what this node's loaders hold at once, "
                              f"{space.size(need.total)} ({space.size(need.copies)} of shard copies for 2 rank(s) x "
                              f"2 worker(s), ")
    assert said[0].endswith(f"kept free for NCCL and others; caching shards in {disk_root} instead")
    nf.leave(run)

    big = tmpfs("8m")
    monkeypatch.setattr(space, "SHM", str(big))
    caplog.clear()
    cache = nc.NodeCache.open("auto", plan(corpus), num_workers=2, env=launcher_env(0, 0, 2, port="29612"))
    assert cache.folder.startswith(space.auto_roots()[0] + os.sep)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    nf.leave(cache.folder)


def test_what_the_loaders_hold_is_the_peak_of_the_copies_alive_step_by_step(corpus):
    """``loaders_need``, recomputed row by row: each consumer's first and last step per entry from
    its rows, the step it reads an entry (``prefetch`` entries ahead along its order of first use),
    ``LEAD`` steps earlier for the node; the peak of the bytes alive, plus the queued batches."""
    for world, streams, workers, prefetch, node in ((4, 2, 2, 2, (0, 1)), (4, 2, 0, 0, (2, 3)), (2, 4, 2, 1, (0, 1)),
                                                    (4, 4, 3, 2, (0, 1, 2, 3))):
        p = plan(corpus, world=world, streams=streams)
        ordered, bounds = p.ordered_shards(0)
        steps = p.steps_per_epoch
        born, dies = {}, {}
        for rank in node:
            q = plan(corpus, rank=rank, world=world, streams=streams)
            for worker in range(max(1, workers)):
                segments = q.segments(worker, max(1, workers))
                first, last = {}, {}
                for step in range(steps):
                    for w in q.step_sources(0, step, segments, bounds)[0].tolist():
                        first.setdefault(w, step)
                        last[w] = step
                order = sorted(first, key=lambda w: (first[w], w))
                for i, w in enumerate(order):
                    read = next(s for s in range(steps) if sum(first[v] <= s for v in order) + prefetch > i)
                    born[w] = min(born.get(w, steps), read)
                    dies[w] = max(dies.get(w, -1), last[w])
        alive = [sum(ordered[w].shard.bytes for w in born if max(0, born[w] - space.LEAD) <= s <= dies[w])
                 for s in range(steps)]
        queued = len(node) * space.LOADER_QUEUE * p.per_rank * SEQ * 16 if workers else 0
        assert space.loaders_need(p, node, workers, prefetch) == (max(alive), queued)


# ------------------------------------------------------------------------------ a killed run's copies
def _held_run(shm, disk, root, p, env, index, ready, done):
    """A rank of a run: joins the cache at ``root``, makes the copy of entry ``index`` (counted for
    two consumers, so it stays), sends its folder on ``ready`` (its own pipe: a queue's shared
    write lock could die with it), and lives until ``done`` is set or it is killed."""
    space.SHM, space.DISK = shm, disk
    cache = nc.NodeCache.open(root, p, env=env)
    shards = [s.shard for s in p.ordered_shards(0)[0]]
    nc.Consumer(cache.folder, shards, np.full(len(shards), 2), 0).read(index)
    ready.send(cache.folder)
    done.wait(TIMEOUT)


def started(ctx, root, p, env, index, done) -> tuple[mp.Process, str]:
    """A ``_held_run`` child (``auto``'s roots as here), once it holds its folder and its copy is
    made; and that folder."""
    ready, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_held_run, args=(space.SHM, space.DISK, root, p, env, index, send, done))
    child.start()
    assert ready.poll(TIMEOUT), "the child did not report"  # a hang guard: it answers on an event
    return child, ready.recv()


def test_a_run_killed_with_sigkill_is_removed_at_the_next_start_and_a_live_run_kept(corpus, tmpfs, tmp_path,
                                                                                   monkeypatch):
    """Runs of the node caching in /dev/shm: a live one, and one killed with SIGKILL after it made a
    copy (the kernel drops its lock; its folder stays). The node's next start removes the killed
    run's folder, whatever its corpus and run name: a start that needs no cache (one rank), and one
    whose ``auto`` falls back to the disk (a small /dev/shm); the live run's folder is never touched."""
    shm = tmpfs("64k")
    monkeypatch.setattr(space, "SHM", str(shm))
    shm_root, disk_root = space.auto_roots()
    ctx = mp.get_context("spawn")
    done = ctx.Event()
    shards, _ = check_shards(corpus, "train")
    other_corpus = StreamPlan(tuple(shards[:8]), SEQ, 8, 4, rank=0, world_size=2, seed=3, shuffle_block=4, streams=2)
    live, live_folder = started(ctx, shm_root, plan(corpus), launcher_env(0, 0, 2, "1"), 0, done)
    cache, killed = None, []
    try:
        kept = sorted(os.listdir(live_folder))
        assert any(name.endswith(".tar") for name in kept)
        for port, next_start in (("2", "one rank"), ("3", "two ranks on a small /dev/shm")):
            never = ctx.Event()  # its own: a child killed while it waits on an event would block its set()
            child, folder = started(ctx, shm_root, other_corpus, launcher_env(0, 0, 2, port), 1, never)
            killed.append(child)
            assert any(name.endswith(".tar") for name in os.listdir(folder))
            os.kill(child.pid, signal.SIGKILL)
            child.join(TIMEOUT)
            assert child.exitcode == -signal.SIGKILL and os.path.isdir(folder)  # its copies, left behind
            if next_start == "one rank":
                assert nc.NodeCache.open("auto", plan(corpus, world=1, streams=1), env={}) is None
            else:
                cache = nc.NodeCache.open("auto", plan(corpus), num_workers=2, env=launcher_env(0, 0, 2, "4"))
                assert cache.folder.startswith(disk_root + os.sep)
            assert not os.path.exists(folder), next_start
            assert sorted(os.listdir(live_folder)) == kept, next_start  # the live run's: as it was
    finally:
        done.set()
        live.join(TIMEOUT)
        for child in killed:  # after a failure: none left waiting
            child.kill()
            child.join(TIMEOUT)
        if cache is not None:
            nf.leave(cache.folder)
    assert live.exitcode == 0 and not os.path.exists(live_folder)  # removed by the live run itself, at its exit
