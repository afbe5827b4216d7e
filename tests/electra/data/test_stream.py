"""electra/data/stream.py + electra/data/sample_order.py (+ corpus.ShardCache): the elastic global order
(checked against a straightforward re-implementation of its definition), rank and worker splits,
resume across epochs and world sizes, the eval set, bytes read per rank and worker, the memory
bound, read-ahead. Corpus checks and corrupt shards: tests/electra/data/test_corpus.py."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from common import storage
from electra.data import corpus as corpus_mod
from electra.data import stream as sd
from pipelines import schema
from tests.electra._corpus import upload_corpus, write_tiny_corpus

SEQ = 32
TRAIN = (10, 7, 13, 1, 9, 12, 9)  # 7 shards, 61 examples: divides by neither 2, 3 nor 4 ranks x workers
MANY = (8, 6, 9, 7, 8, 8, 5, 10, 8, 7, 8, 9, 6, 8, 8, 9)  # 16 shards, 126 examples: for bytes and memory


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = write_tiny_corpus(tmp_path_factory.mktemp("c"), seq_len=SEQ, train_shards=TRAIN, validation_shards=(5, 4))
    return sd.open_corpus(str(root), seq_len=SEQ)


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    root = write_tiny_corpus(tmp_path_factory.mktemp("m"), seq_len=SEQ, train_shards=MANY, validation_shards=(2,),
                             seed=1)
    return sd.open_corpus(str(root), seq_len=SEQ)


def plan(corpus, *, rank=0, world=1, batch=8, micro=2, streams=4, seed=3, block=8, split="train", shuffle=True,
         skip=False):
    shards, _ = sd.check_shards(corpus, split, skip_corrupt=skip)
    return sd.StreamPlan(tuple(shards), SEQ, batch, micro, rank=rank, world_size=world, seed=seed,
                         shuffle_block=block, streams=streams, shuffle=shuffle)


def epoch_batches(p, epoch=0, workers=0, prefetch=2):
    batches = list(sd.TrainStream(p, num_workers=workers, prefetch=prefetch).loader(epoch))
    assert [(b.position, b.micro) for b in batches] == [(sd.DataPosition(epoch, s), k)
                                                        for s in range(p.steps_per_epoch) for k in range(p.accum)]
    return batches


def epoch_keys(p, epoch=0, workers=0, prefetch=2):
    return [k for b in epoch_batches(p, epoch, workers, prefetch) for k in b.keys]


def shard_keys(shard):
    ex = sd.read_shard(shard)
    return [(int(u), int(o)) for u, o in zip(ex.uid, ex.ordinal)]


def all_keys(corpus, split="train"):
    return [k for s in sd.check_shards(corpus, split)[0] for k in shard_keys(s)]


def reference(corpus, *, epoch, batch=8, streams=4, seed=3, block=8, split="train", shuffle=True):
    """The definition, written out independently: a list of global batches (keys, canonical order)."""
    per_shard = [shard_keys(s) for s in sd.check_shards(corpus, split)[0]]
    order = np.random.default_rng([seed, epoch]).permutation(len(per_shard)) if shuffle else range(len(per_shard))
    seq = [k for i in order for k in per_shard[i]]
    if shuffle:
        seq = [seq[b + j] for b in range(0, len(seq), block)
               for j in np.random.default_rng([seed, epoch, b // block]).permutation(min(block, len(seq) - b))]
    C = math.gcd(batch, streams)
    n, g = len(seq) // C, batch // C
    return [[seq[c * n + s * g + j] for c in range(C) for j in range(g)] for s in range(n // g)]


def by_step(batches):
    """Micro batches -> {position: keys of the step, micro batches concatenated in order}."""
    out: dict = {}
    for b in batches:
        assert b.micro == len(out.get(b.position, [])) // len(b.keys)
        out.setdefault(b.position, []).extend(b.keys)
    return out


def uri(location, split, index):
    return storage.join(location, schema.shard_name("g0", split, index))


def test_plan_sizes_and_geometry_errors(corpus):
    p = plan(corpus)  # 61 examples, G 8 from gcd(8, 4) = 4 streams of 15: 2 rows each, 7 steps
    assert (p.num_examples, p.streams_effective, p.steps_per_epoch, p.accum, p.dropped_per_epoch) == (61, 4, 7, 4, 5)
    assert plan(corpus, batch=6, streams=64).streams_effective == 2
    with pytest.raises(ValueError, match="global batch 8 cannot be split over 3 ranks"):
        plan(corpus, world=3)
    with pytest.raises(ValueError, match="micro batch 3 does not divide the 4 examples per rank"):
        plan(corpus, world=2, micro=3)
    with pytest.raises(ValueError, match="rank 2 outside world of 2"):
        plan(corpus, rank=2, world=2)
    with pytest.raises(ValueError, match="^61 examples cannot fill one global batch of 64: 4 streams of 15"):
        sd.TrainStream(plan(corpus, batch=64, micro=16))


@pytest.mark.parametrize("epoch,shuffle", [(0, True), (1, True), (0, False)])
def test_global_batches_follow_the_definition(corpus, epoch, shuffle):
    want = reference(corpus, epoch=epoch, shuffle=shuffle)
    p = plan(corpus, shuffle=shuffle)
    got = by_step(epoch_batches(p, epoch))
    assert list(got.values()) == want and len(want) == 7
    by_source = [k for s in p.ordered_shards(epoch)[0] for k in shard_keys(s.shard)]
    assert [[by_source[i] for i in p.source_positions(epoch, p.global_positions(s))] for s in range(7)] == want
    flat = [k for keys in want for k in keys]
    assert len(set(flat)) == len(flat) == 61 - 5 and set(flat) <= set(all_keys(corpus))
    assert reference(corpus, epoch=epoch, seed=4) != want or not shuffle


@pytest.mark.parametrize("world,streams", [(1, 4), (2, 4), (4, 4), (4, 2), (2, 8)])
def test_ranks_split_every_global_batch_for_any_micro_batch_and_workers(corpus, world, streams):
    """Ranks' slices, concatenated by rank, are W=1's global batch in canonical order (streams=2
    on 4 ranks: slices cut streams; streams=8: C = gcd(8, 8) = 8 streams of one row)."""
    want = reference(corpus, epoch=0, streams=streams)
    per_rank = 8 // world
    micros = [d for d in (1, 2, 4, 8) if per_rank % d == 0]
    # every micro batch in process; worker processes with the smallest (the most micro batches)
    for micro, workers in [(m, 0) for m in micros] + [(1, 1), (1, 2)]:
        steps = [by_step(epoch_batches(plan(corpus, rank=r, world=world, micro=micro, streams=streams),
                                       workers=workers)) for r in range(world)]
        got = [[k for r in range(world) for k in steps[r][sd.DataPosition(0, s)]] for s in range(len(want))]
        assert got == want, (micro, workers)


def test_keys_are_json_ints_and_rows_are_the_examples(corpus):
    p = plan(corpus, batch=5, micro=5, streams=1, shuffle=False)  # one stream: step 0 = positions 0..4
    batch = next(iter(sd.TrainStream(p, num_workers=0)))
    first = sd.read_shard(p.shards[0])
    assert batch.input_ids.shape == (5, SEQ) and batch.input_ids.dtype.is_floating_point is False
    assert batch.keys == shard_keys(p.shards[0])[:5] and json.loads(json.dumps(batch.keys)) == [list(k) for k in
                                                                                                batch.keys]
    assert all(type(u) is int and type(o) is int for u, o in batch.keys)
    for i, (row, seg) in enumerate(zip(batch.input_ids, batch.segment_ids)):
        ids = first.ids(i)
        assert row[: len(ids)].tolist() == ids.tolist() and not row[len(ids):].any()
        assert seg[: len(ids)].tolist() == [0] * int(first.b_start[i]) + [1] * (len(ids) - int(first.b_start[i]))
        assert not seg[len(ids):].any()
    assert batch.num_tokens == sum(len(first.ids(i)) for i in range(5))


def test_collate_rejects_an_example_longer_than_seq_len():
    ex = schema.Examples(np.arange(2, 12), [4, 6], [2, 3], [7, 7], [0, 1])
    rows = [sd.Row("s3://b/shard.tar", ex, 0), sd.Row("s3://b/shard.tar", ex, 1)]
    with pytest.raises(sd.CorruptShardError, match="s3://b/shard.tar: example 0000000000000007-00001 has 6 tokens"):
        sd.collate(rows, seq_len=5)
    ids, seg = sd.collate(rows, seq_len=6)
    assert ids.tolist() == [[2, 3, 4, 5, 0, 0], [6, 7, 8, 9, 10, 11]]
    assert seg.tolist() == [[0, 0, 1, 1, 0, 0], [0, 0, 0, 1, 1, 1]]


def resumed_steps(corpus, world, start, steps, *, workers=0, micro=1):
    """Global batches of ``steps`` steps from ``start`` on ``world`` ranks (ranks concatenated),
    and every rank's position after each step."""
    streams = [sd.TrainStream(plan(corpus, rank=r, world=world, micro=micro), num_workers=workers, prefetch=1,
                              start=start) for r in range(world)]
    its = [iter(s) for s in streams]
    accum = plan(corpus, world=world, micro=micro).accum
    out = []
    for _ in range(steps):
        got = [[next(it) for _ in range(accum)] for it in its]
        assert len({b.position for rank in got for b in rank}) == 1
        ids = np.concatenate([b.input_ids.numpy() for rank in got for b in rank])
        out.append((got[0][0].position, [k for rank in got for b in rank for k in b.keys], ids,
                    [s.position for s in streams]))
    for it in its:
        it.close()
    return out


def test_resume_continues_exactly_across_epochs_and_world_sizes(corpus):
    p = plan(corpus)
    expected = [(sd.DataPosition(e, s), keys) for e in range(3) for s, keys in enumerate(reference(corpus, epoch=e))]
    full = resumed_steps(corpus, 1, sd.DataPosition(), len(expected), workers=2, micro=4)
    assert [(pos, keys) for pos, keys, _, _ in full] == expected
    # after the last micro batch of step s the stream is at s + 1; the end of an epoch is (e + 1, 0)
    assert [ps[0] for *_, ps in full] == [pos for pos, _ in expected[1:]] + [sd.DataPosition(3, 0)]
    assert full[p.steps_per_epoch - 1][3] == [sd.DataPosition(1, 0)]
    for stop, world, workers in ((3, 2, 2), (6, 4, 0), (7, 2, 1), (9, 1, 0), (12, 4, 2)):
        start = full[stop - 1][3][0]  # the position saved after `stop` steps (on one rank)
        got = resumed_steps(corpus, world, start, 4, workers=workers)
        for (pos, keys, ids, positions), (fpos, fkeys, fids, fpositions) in zip(got, full[stop:stop + 4]):
            assert (pos, keys, positions) == (fpos, fkeys, fpositions * world) and np.array_equal(ids, fids)
    # stop mid-run on 2 ranks, resume on 4: the same global batches from the next step on
    two = resumed_steps(corpus, 2, sd.DataPosition(0, 5), 3, workers=1)
    four = resumed_steps(corpus, 4, two[-1][3][0], 3, workers=0)
    assert [x[1] for x in two + four] == [keys for _, keys in expected[5:11]]


def test_position_format_and_old_checkpoints():
    pos = sd.DataPosition(2, 17)
    assert pos.to_dict() == {"epoch": 2, "step": 17} and sd.DataPosition.from_dict(pos.to_dict()) == pos
    with pytest.raises(ValueError, match="old per-rank format.*cannot be mapped onto the elastic global order"):
        sd.DataPosition.from_dict({"epoch": 1, "batch": 40})
    with pytest.raises(ValueError, match="expected"):
        sd.DataPosition.from_dict({"epoch": 1, "step": -1})


def test_each_worker_reads_only_its_streams_shards(many):
    """W=2 ranks x 2 workers, 8 streams: a rank reads about its share, each shard once per rank
    (a shard on the border of the two workers' regions: by both), never the whole split per worker."""
    total = sum(s.bytes for s in sd.check_shards(many, "train")[0])
    shares = []
    for rank in range(2):
        p = plan(many, rank=rank, world=2, batch=16, micro=4, streams=8, block=4)
        shards, share = p.rank_share(0)
        shares.append({s.uri for s in shards})
        stream = sd.TrainStream(p, num_workers=2)
        assert sum(len(b.keys) for b in stream.loader(0)) == p.steps_per_epoch * 8
        reads = stream.shards_read
        workers = [{s.uri for s in p.rank_share(0, w, 2)[0]} for w in range(2)]
        assert [set(reads[w]) for w in range(2)] == workers  # nothing outside its streams' needs
        assert all(len(reads[w]) == len(set(reads[w])) for w in range(2))  # each shard once per worker
        border = workers[0] & workers[1]
        assert len(border) <= 2 and workers[0] | workers[1] == shares[-1]
        assert stream.bytes_read == sum(s.bytes for s in shards) + sum(s.bytes for s in p.shards if s.uri in border)
        assert share <= stream.bytes_read < 1.5 * share  # the old split read `share` once per worker: 2x
        assert share < 0.75 * total
        one = sd.TrainStream(p, num_workers=0)
        assert sum(len(b.keys) for b in one.loader(0)) and one.bytes_read == share  # one worker: exactly once
    assert len(shares[0] & shares[1]) <= 2 and len(shares[0] | shares[1]) == len(MANY)


def test_worker_memory_stays_within_the_documented_bound(many, monkeypatch):
    """Peak decoded + loading shards per worker <= (2*S_w - 1) * B + prefetch (electra.data.stream)."""
    peaks = []

    class Recording(corpus_mod.ShardCache):
        def get(self, index):
            out = super().get(index)
            peaks.append(len(self.loaded) + len(self.pending))
            return out

    monkeypatch.setattr(sd, "ShardCache", Recording)
    p = plan(many, batch=16, micro=16, streams=2, block=4)  # one worker, S_w = 2 streams
    for epoch in range(2):
        _, bounds = p.ordered_shards(epoch)
        spans = [len(set(np.searchsorted(bounds, np.arange(b, min(b + 8, 126)), side="right")))
                 for b in range(0, 126, 4)]  # shards two consecutive blocks span
        peaks.clear()
        assert len(epoch_keys(p, epoch, prefetch=2)) == 112
        assert max(peaks) <= (2 * 2 - 1) * max(spans) + 2 < len(MANY)


def test_eval_set_is_the_same_for_any_number_of_ranks(corpus):
    ranks = [plan(corpus, rank=r, world=2, batch=4, micro=1, streams=2, split="validation", shuffle=False)
             for r in range(2)]
    one = plan(corpus, batch=4, micro=2, streams=2, split="validation", shuffle=False)
    single = [k for b in sd.eval_batches(one, 2) for k in b.keys]
    per_rank = [by_step(sd.eval_batches(p, 2, prefetch=0)) for p in ranks]
    assert single == [k for s in range(2) for r in range(2) for k in per_rank[r][sd.DataPosition(0, s)]]
    assert single == [k for keys in reference(corpus, epoch=0, batch=4, streams=2, split="validation",
                                              shuffle=False)[:2] for k in keys]
    assert single == [k for b in sd.eval_batches(one, 5) for k in b.keys]  # at most an epoch: 2 steps
    with pytest.raises(ValueError, match="unshuffled"):
        next(sd.eval_batches(plan(corpus, split="validation"), 1))


def test_read_ahead_follows_the_schedule_only(corpus, tmp_path):
    ordered, _ = sd.check_shards(corpus, "train")
    with corpus_mod.ShardCache(ordered, prefetch=2, schedule=[3, 1, 5, 0]) as cache:
        cache.read_ahead(1 + 2)  # one due, two ahead
        assert set(cache.pending) == {3, 1, 5} and not cache.loaded
        assert len(cache.get(3)) == TRAIN[3]
        cache.read_ahead(100)  # never past the schedule
        assert set(cache.pending) | set(cache.loaded) == {3, 1, 5, 0}
        cache.evict([3])
        assert [len(cache.get(i)) for i in (1, 5, 0)] == [TRAIN[1], TRAIN[5], TRAIN[0]] and not cache.pending
        assert sorted(cache.reads) == [0, 1, 3, 5] and cache.bytes_read == sum(ordered[i].bytes for i in (0, 1, 3, 5))
    with corpus_mod.ShardCache(ordered, prefetch=0, schedule=[2]) as cache:
        cache.read_ahead(5)
        assert not cache.pending and len(cache.get(2)) == TRAIN[2] and cache.reads == [2]
    # a shard read ahead that fails raises only when (and if) the stream reaches it
    root = upload_corpus(corpus.root, str(tmp_path / "c"))
    storage.remove(uri(root, "train", 2))
    ordered, _ = sd.check_shards(sd.open_corpus(root, seq_len=SEQ), "train", skip_corrupt=True)
    broken = [*ordered[:2], sd.ShardRef(uri(root, "train", 2), TRAIN[2], 1, "0")]
    with corpus_mod.ShardCache(broken, prefetch=2) as cache:
        cache.read_ahead(3)
        assert len(cache.get(0)) == TRAIN[0] and len(cache.get(1)) == TRAIN[1]
        with pytest.raises(sd.CorruptShardError, match="train-000002.tar: missing"):
            cache.get(2)


def test_block_shuffle_and_schedule(corpus):
    p = plan(corpus, block=8)
    src = p.source_positions(0, np.arange(61))
    assert sorted(src.tolist()) == list(range(61))
    assert all(set(src[i:i + 8] // 8) == {i // 8} for i in range(0, 61, 8))
    assert np.array_equal(p.source_positions(0, np.arange(61)[::-1]), src[::-1])  # any order of positions
    # a schedule lists exactly the shards the rows use, from their first to their last step
    q = plan(corpus, rank=1, world=2)
    for epoch in range(2):
        sched = q.schedule(epoch, q.segments(), start=2)
        uses: dict = {}
        for step in range(2, q.steps_per_epoch):
            for w in q.step_sources(epoch, step, q.segments())[0].tolist():
                uses.setdefault(w, []).append(step)
        assert {w: (min(s), max(s)) for w, s in uses.items()} == {
            w: (f, l) for w, f, l in zip(sched.order.tolist(), sched.first.tolist(), sched.last.tolist())}
        assert list(sched.first) == sorted(sched.first)


def test_auto_loader_workers_are_processes_on_cuda_only():
    # on a CPU the step's threads use every core: worker processes would only take cycles from it
    assert sd.loader_workers("auto", cuda=False) == 0
    assert sd.loader_workers("auto", cuda=True) == 2
    assert sd.loader_workers(3, cuda=False) == 3 and sd.loader_workers(0, cuda=True) == 0
