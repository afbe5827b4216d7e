"""electra/data/node_cache.py: one store read of each shard per node, through real processes (spawned
ranks, each with forked DataLoader workers) on a local-folder corpus. Store reads are counted in
the children by wrapping ``common.storage.open_input`` (an append-only file, one line per open),
independently of the cache's own counters. Faults are injected from the test side: a child
replaces the cache's rename-into-place with SIGKILL, so a writer dies after its temp file is
complete and before it is published, with no timing involved. ``electra.data.stream`` (torch) is imported
only where a test or child needs it, so the children that only read through the cache start fast.
Loaders here read without read-ahead threads (``prefetch=0``): on CPython 3.11.7 two threads
decoding shards at once (``np.load`` parses each header with ``ast``) can fail with "AST
constructor recursion depth mismatch", a race in the interpreter, not in the cache."""
from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import signal
from collections import Counter

import numpy as np
import pytest

from common import storage
from electra.data import node_cache as nc
from electra.data import node_cache_space as space
from electra.distributed import node_folder as nf
from electra.config import ConfigError, load_config
from electra.data.corpus import CorruptShardError, check_shards, open_corpus, read_shard
from electra.data.sample_order import Segment, StreamPlan
from pipelines import schema
from tests.electra._corpus import write_tiny_corpus

SEQ = 32
MANY = (8, 6, 9, 7, 8, 8, 5, 10, 8, 7, 8, 9, 6, 8, 8, 9)  # 16 shards, 126 examples
TIMEOUT = 180  # a hang guard only: every wait below ends on an event, never on a clock


@pytest.fixture(autouse=True)
def auto_roots(tmp_path, monkeypatch):
    """``auto``'s two roots (``electra.data.node_cache_space``) in the test's folder, for this process (the
    spawned ranks here name their cache folder; their start only sweeps the machine's auto roots of
    folders no live process holds)."""
    for name in ("shm", "disk"):
        (tmp_path / name).mkdir()
    monkeypatch.setattr(space, "SHM", str(tmp_path / "shm"))
    monkeypatch.setattr(space, "DISK", str(tmp_path / "disk"))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = write_tiny_corpus(tmp_path_factory.mktemp("nc"), seq_len=SEQ, train_shards=MANY, validation_shards=(2,),
                             seed=1)
    return open_corpus(str(root), seq_len=SEQ)


def plan(corpus, *, rank=0, world=4, batch=8, streams=2, block=4):
    """World 4, 2 streams: ranks 0 and 1 each take half of stream 0's rows, 2 and 3 of stream 1's,
    so the two ranks of a node (and the two workers of a rank) read the same shards."""
    shards, _ = check_shards(corpus, "train")
    return StreamPlan(tuple(shards), SEQ, batch, batch // world, rank=rank, world_size=world, seed=3,
                         shuffle_block=block, streams=streams)


def launcher_env(rank, local_rank, local_size, port="29611"):
    return {"RANK": str(rank), "LOCAL_RANK": str(local_rank), "LOCAL_WORLD_SIZE": str(local_size),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}


def count_store_reads(path: str) -> None:
    """From now on (and in forked children), every store open appends its location to ``path``."""
    real = storage.open_input

    def counted(uri, *args, **kwargs):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{uri}\n".encode())
        finally:
            os.close(fd)
        return real(uri, *args, **kwargs)

    storage.open_input = counted


def store_reads(path) -> Counter:
    return Counter(open(path).read().split()) if os.path.exists(path) else Counter()


def digest(batches) -> tuple[list, str]:
    keys = [k for b in batches for k in b.keys]
    sha = hashlib.sha256()
    for b in batches:
        sha.update(b.input_ids.numpy().tobytes())
        sha.update(b.segment_ids.numpy().tobytes())
    return keys, sha.hexdigest()


# ------------------------------------------------------------------------------ children (spawned)
def _rank_child(p, env, root, reads, workers, results, go):
    from electra.data.stream import TrainStream

    mp.set_start_method("fork", force=True)  # a launched rank's default (a spawned child inherits spawn)
    os.environ.update(env)
    count_store_reads(reads)
    stream = TrainStream(p, num_workers=workers, prefetch=0, node_cache=root)  # prefetch: see the docstring
    batches = list(stream.loader(0))
    results.put((p.rank, digest(batches), stream.bytes_read, stream.store_bytes, {w: sorted(s) for w, s in
                                                                                    stream.shards_read.items()}))
    go.wait(TIMEOUT)  # the parent looks at the folder while every rank is alive, then lets them exit


def _consume_child(folder, shards, uses, index, reads, die_before_publish, env, root, p, results):
    count_store_reads(reads)
    if env is not None:  # join a run of this name first, as a rank does
        nc.NodeCache.open(root, p, env=env)
    if die_before_publish:
        nc._publish = lambda tmp, final: os.kill(os.getpid(), signal.SIGKILL)
    consumer = nc.Consumer(folder, shards, uses, 0)
    examples = consumer.read(index)
    consumer.release(index)
    results.put((examples.uid.tolist(), examples.tokens.tolist(), consumer.downloads))


def spawn(target, *args):
    proc = mp.get_context("spawn").Process(target=target, args=args)
    proc.start()
    return proc


# ------------------------------------------------------------------------------ tests
def test_ranks_of_a_node_read_each_shard_once_and_see_the_same_batches(corpus, tmp_path):
    """The second node (ranks 2 and 3 of 4, sharing stream 1) with two loader workers per rank:
    every shard the node touches is read from the store exactly once, each rank's batches are
    bit-identical to a direct read, each copy is gone once its last consumer is done, and the
    run's folder once the last rank exits."""
    from electra.data.stream import TrainStream

    ctx = mp.get_context("spawn")
    results, go = ctx.Queue(), ctx.Event()
    ranks, root, reads = (2, 3), tmp_path / "node1", tmp_path / "reads"
    procs = [spawn(_rank_child, plan(corpus, rank=rank), launcher_env(rank, rank - 2, 2), str(root), str(reads), 2,
                   results, go) for rank in ranks]
    got = {}
    try:
        for _ in procs:
            rank, *rest = results.get(timeout=TIMEOUT)
            got[rank] = rest
        folder = root / nc.corpus_name(plan(corpus).shards) / nc.run_name(launcher_env(2, 0, 2))
        left = sorted(os.listdir(folder))
    finally:
        go.set()
        for proc in procs:
            proc.join(TIMEOUT)
    assert [proc.exitcode for proc in procs] == [0, 0]
    assert left == [nf.OWNER] and not folder.exists()  # copies deleted by their last consumer; the folder at exit
    per_consumer = []  # independently: every row's shard at every step, per (rank, worker) of the node
    for rank in ranks:
        p = plan(corpus, rank=rank)
        ordered, _ = p.ordered_shards(0)
        for worker in range(2):
            per_consumer.append({ordered[w].uri: ordered[w].bytes for step in range(p.steps_per_epoch)
                                 for w in p.step_sources(0, step, p.segments(worker, 2))[0].tolist()})
    touched = {uri: size for shards in per_consumer for uri, size in shards.items()}
    assert store_reads(reads) == Counter(dict.fromkeys(touched, 1))
    assert sum(got[r][2] for r in ranks) == sum(touched.values())  # the loaders' own count agrees
    # what the workers decoded, which each would have read from the store without the cache
    without = sum(sum(shards.values()) for shards in per_consumer)
    assert sum(got[r][1] for r in ranks) == without > 3 * sum(touched.values())
    for rank in ranks:
        direct = TrainStream(plan(corpus, rank=rank), num_workers=0)
        (keys, sha), _, _, per_worker = got[rank]
        assert (keys, sha) == digest(list(direct.loader(0))) and len(keys) == 2 * plan(corpus).steps_per_epoch
        assert sorted(per_worker) == [0, 1] and all(per_worker.values())  # neither worker idles


def test_a_writer_killed_before_publishing_leaves_the_next_reader_able_to_complete(corpus, tmp_path):
    p = plan(corpus, world=1, streams=1)
    shards = [s.shard for s in p.ordered_shards(0)[0]]
    folder = str(tmp_path / "cache" / "0123456789abcdef" / "run")
    nf.join(folder)  # a live rank of the run: the folder is not a dead run's leftovers
    try:
        index, uses = 3, np.full(len(shards), 1)
        entry = os.path.join(folder, f"e0-{index}-{shards[index].sha256}")
        tmp = os.path.join(folder, f".{os.path.basename(entry)}.tar.tmp")
        reads = str(tmp_path / "reads")
        killed = spawn(_consume_child, folder, shards, uses, index, reads, True, None, None, None, None)
        killed.join(TIMEOUT)
        assert killed.exitcode == -signal.SIGKILL
        assert os.path.getsize(tmp) == shards[index].bytes and not os.path.exists(entry + ".tar")
        results = mp.get_context("spawn").Queue()
        reader = spawn(_consume_child, folder, shards, uses, index, reads, False, None, None, None, results)
        uid, tokens, downloads = results.get(timeout=TIMEOUT)
        reader.join(TIMEOUT)
        want = read_shard(shards[index])
        assert (uid, tokens, downloads) == (want.uid.tolist(), want.tokens.tolist(), 1)
        assert store_reads(reads) == Counter({shards[index].uri: 2})  # the dead writer's and the reader's
        assert sorted(os.listdir(folder)) == [nf.OWNER]  # published, then released: temp, copy and lock gone
    finally:
        nf.leave(folder)
    assert not os.path.exists(folder)


def test_a_killed_run_is_cleared_by_the_next_run_on_the_node(corpus, tmp_path):
    """kill -9 leaves the copies in flight; the next run of the same name empties its folder, a
    run of another name removes it, and nobody removes a live run's folder."""
    p = plan(corpus, world=1, streams=1)
    shards = [s.shard for s in p.ordered_shards(0)[0]]
    root = str(tmp_path / "cache")
    folder = {port: os.path.join(root, nc.corpus_name(p.shards), nc.run_name(launcher_env(0, 0, 1, port)))
              for port in ("1", "2", "3")}
    for port in ("1", "2"):
        child = spawn(_consume_child, folder[port], shards, np.full(len(shards), 1), 0, str(tmp_path / "r"), True,
                      launcher_env(0, 0, 1, port), root, p, None)
        child.join(TIMEOUT)
        assert child.exitcode == -signal.SIGKILL and len(os.listdir(folder[port])) == 3  # owner, lock, temp
    live = nc.NodeCache.open(root, p, env=launcher_env(0, 0, 1, "3"))  # a live run: sweeps the others' folders
    assert live.folder == folder["3"] and not os.path.exists(folder["1"]) and not os.path.exists(folder["2"])
    with open(os.path.join(folder["3"], "e0-0-x.tar"), "wb"):
        pass
    other = spawn(_consume_child, folder["1"], shards, np.full(len(shards), 1), 0, str(tmp_path / "r"), True,
                  launcher_env(0, 0, 1, "1"), root, p, None)
    other.join(TIMEOUT)
    assert sorted(os.listdir(folder["3"])) == sorted([nf.OWNER, "e0-0-x.tar"])  # live: kept as it is
    assert len(os.listdir(folder["1"])) == 3
    nf.leave(folder["3"])
    again = nc.NodeCache.open(root, p, env=launcher_env(0, 0, 1, "1"))  # the same name: its leftovers emptied
    assert sorted(os.listdir(again.folder)) == [nf.OWNER] and not os.path.exists(folder["3"])
    nf.leave(again.folder)
    assert os.listdir(root) == []


def test_consumers_count_down_and_the_last_one_deletes(corpus, tmp_path, monkeypatch):
    p = plan(corpus, world=1, streams=1)
    shards = [s.shard for s in p.ordered_shards(0)[0]]
    folder = str(tmp_path / "c" / "0123456789abcdef" / "run")
    nf.join(folder)
    reads = str(tmp_path / "reads")
    want = read_shard(shards[2]).tokens.tolist()
    monkeypatch.setattr(storage, "open_input", storage.open_input)  # restored after the test
    count_store_reads(reads)
    try:
        uses = np.zeros(len(shards), np.int64)
        uses[[2, 5]] = 2, 1
        one, two = nc.Consumer(folder, shards, uses, 0), nc.Consumer(folder, shards, uses, 0)
        entry = os.path.join(folder, f"e0-2-{shards[2].sha256}")
        a, b = one.read(2), two.read(2)
        assert a.tokens.tolist() == b.tokens.tolist() == want
        assert (one.downloads, two.downloads, store_reads(reads)[shards[2].uri]) == (1, 0, 1)
        one.release(2)
        assert os.path.exists(entry + ".tar")  # the second consumer is not done
        two.release(2)
        assert not os.path.exists(entry + ".tar") and not os.path.exists(entry + ".lock")
        one.read(7)  # counted for nobody: read from the store, no copy left behind
        one.release(7)
        assert sorted(os.listdir(folder)) == [nf.OWNER] and store_reads(reads)[shards[7].uri] == 1
    finally:
        nf.leave(folder)


def test_a_corrupt_shard_is_named_on_every_rank_and_never_published(corpus, tmp_path, monkeypatch):
    from electra.data.stream import TrainStream

    root = tmp_path / "corpus"
    for rel in storage.find(corpus.root):
        storage.write_bytes(str(root / rel), storage.read_bytes(storage.join(corpus.root, rel)))
    firsts = []  # the first shard each of ranks 0 and 1 reads: the victim is one both read, in neither's first step
    for rank in range(2):
        p = plan(corpus, rank=rank)
        ordered, _ = p.ordered_shards(0)
        firsts.append([ordered[w].uri for step in range(p.steps_per_epoch)
                       for w in p.step_sources(0, step, p.segments())[0].tolist()])
    both = [u for u in firsts[0] if u in firsts[1] and u not in (firsts[0][0], firsts[1][0])]
    victim = root / os.path.relpath(both[0], corpus.root)
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, other bytes: found only by the sha256 while streaming
    victim.write_bytes(bytes(data))
    altered = open_corpus(str(root), seq_len=SEQ)
    cache = str(tmp_path / "cache")
    for rank in range(2):
        for key, value in launcher_env(rank, rank, 2).items():
            monkeypatch.setenv(key, value)
        stream = TrainStream(plan(altered, rank=rank), num_workers=0, prefetch=0, node_cache=cache)
        with pytest.raises(CorruptShardError, match=f"{victim}: sha256 differs from the manifest"):
            list(stream.loader(0))
        sha = next(s.sha256 for s in altered.manifest.shards if victim.name in s.path)
        names = os.listdir(stream.node.folder)
        assert not [n for n in names if sha in n and not n.endswith(".lock")]  # neither a copy nor a temp
        assert [n for n in names if n.endswith(".tar")]  # the shards read before it: kept (the pass stopped)
    nf.leave(stream.node.folder)


def test_node_counts_match_every_consumers_rows(corpus):
    """``uses``: for each shard position, the (rank, worker) pairs of the node whose rows at steps
    [start, stop) come from it, computed here row by row."""
    for world, streams, workers, start, most in ((4, 2, 2, 0, 4), (4, 2, 0, 3, 2), (2, 4, 2, 5, 1)):
        p = plan(corpus, world=world, streams=streams)
        cache = nc.NodeCache("/unused", nc.NodeRanks(0, world))
        ordered = p.ordered_shards(1)
        got = cache.uses(p, 1, workers, start, p.steps_per_epoch, ordered)
        want = np.zeros(len(ordered[0]), np.int64)
        for rank in range(world):
            q = plan(corpus, rank=rank, world=world, streams=streams)
            for worker in range(max(1, workers)):
                used = {w for step in range(start, q.steps_per_epoch)
                        for w in q.step_sources(1, step, q.segments(worker, max(1, workers)), ordered[1])[0].tolist()}
                want[sorted(used)] += 1
        assert got.tolist() == want.tolist() and got.max() == most  # shards of a stream that 4 read


def test_workers_share_a_rank_s_piece_of_one_stream_in_canonical_order(corpus):
    from electra.data.stream import TrainStream

    p = plan(corpus, rank=1)  # one segment: rows 2..3 of stream 0
    assert p.segments() == (Segment(0, 2, 4),)
    assert [p.segments(w, 2) for w in range(2)] == [(Segment(0, 2, 3),), (Segment(0, 3, 4),)]
    assert [p.segments(w, 3) for w in range(3)] == [(), (Segment(0, 2, 3),), (Segment(0, 3, 4),)]
    q = plan(corpus, rank=0, world=1, streams=4)  # four segments, two workers: whole segments as before
    assert [q.segments(w, 2) for w in range(2)] == [q.segments()[:2], q.segments()[2:]]
    two, one = TrainStream(p, num_workers=2, prefetch=0), TrainStream(p, num_workers=0)
    assert digest(two.loader(0)) == digest(one.loader(0))


def test_node_ranks_setting_and_config(corpus, monkeypatch, tmp_path):
    from electra.data.stream import TrainStream

    assert nc.NodeRanks.from_env(5, 8, {}) == nc.NodeRanks(5, 1)
    assert nc.NodeRanks.from_env(5, 8, {"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4"}).ranks == range(4, 8)
    assert nc.NodeRanks.from_env(5, 8, {"LOCAL_RANK": "1", "LOCAL_SIZE": "2"}).ranks == range(4, 6)  # deepspeed
    with pytest.raises(ValueError, match="LOCAL_RANK=3 of LOCAL_WORLD_SIZE=4 does not fit rank 1 of 8"):
        nc.NodeRanks.from_env(1, 8, {"LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "4"})
    p = plan(corpus, world=1, streams=1)
    for key in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "LOCAL_SIZE"):
        monkeypatch.delenv(key, raising=False)
    assert nc.NodeCache.open(None, p) is None and nc.NodeCache.open("auto", p) is None  # one rank: store reads
    assert TrainStream(p, num_workers=0, node_cache="auto").node is None
    assert TrainStream(plan(corpus, world=1), num_workers=2, node_cache="auto").node is None  # a stream each
    piece = nc.NodeCache.open("auto", plan(corpus, rank=1), num_workers=2, env={})  # workers split one stream's rows
    assert piece is not None and piece.folder.startswith(str(tmp_path / "shm")) and piece.node == nc.NodeRanks(1, 1)
    nf.leave(piece.folder)
    assert load_config("tiny").data.node_cache == "auto"
    for value, ok in (("null", True), ("/dev/shm/x", True), ("auto", True), ("relative/dir", False), ('""', False)):
        if ok:
            assert load_config("tiny", [f"data.node_cache={value}"]).data.node_cache == (
                None if value == "null" else value)
        else:
            with pytest.raises(ConfigError, match=r'data: node_cache .*"auto", an absolute path on the node, or null'):
                load_config("tiny", [f"data.node_cache={value}"])
