"""``read_shard``'s retries are bounded by progress: a read that failed further into the shard than
any before it starts the count again; reads that keep failing at the same place use it up.

Failures are injected at chosen byte offsets of a real shard (a stream that raises a connection
reset once it has handed out so many bytes); the pause between reads is zero.
"""
from __future__ import annotations

import contextlib

import pytest

from common import storage
from electra.data import corpus as corpus_mod
from electra.data import stream as sd
from tests.electra._corpus import write_tiny_corpus


@pytest.fixture(scope="module")
def shard(tmp_path_factory):
    corpus = write_tiny_corpus(tmp_path_factory.mktemp("corpus"), seq_len=32, train_shards=(9, 7),
                               validation_shards=(3,))
    return sd.check_shards(sd.open_corpus(str(corpus), seq_len=32), "train")[0][0]


@pytest.fixture
def fail_at(monkeypatch):
    """``fail_at(offsets)``: the k-th read of a shard raises ConnectionResetError once it has handed
    out ``offsets[k]`` bytes (None: that read succeeds); returns the list of offsets reached."""
    real_open = storage.open_input
    plan: list[int | None] = []
    opened: list[int] = []

    class Failing:
        def __init__(self, raw, limit):
            self.raw, self.limit, self.pos = raw, limit, 0

        def read(self, n=-1):
            if self.limit is not None and self.pos >= self.limit:
                raise ConnectionResetError("Connection reset by peer")
            want = n if self.limit is None else (self.limit - self.pos if n is None or n < 0
                                                 else min(n, self.limit - self.pos))
            data = self.raw.read(want)
            self.pos += len(data)
            return data

    @contextlib.contextmanager
    def failing_open(uri, block_size=None):
        limit = plan[len(opened)] if len(opened) < len(plan) else None
        opened.append(limit)
        with real_open(uri, block_size=block_size) as raw:
            yield Failing(raw, limit)

    monkeypatch.setattr(corpus_mod.storage, "open_input", failing_open)
    monkeypatch.setattr(corpus_mod, "RETRY_PAUSE_S", 0.0)

    def arm(offsets):
        plan[:], opened[:] = offsets, []
        return opened
    return arm


def test_reads_that_keep_getting_further_are_retried_past_the_count(shard, fail_at):
    assert shard.bytes > 600
    want = sd.read_shard(shard).keys()
    # Five failed reads, each further than the last, with a count of 2: all retried (the count
    # of 2 reads in a row without progress is never reached); the sixth read succeeds.
    opened = fail_at([100, 200, 300, 400, 500])
    assert sd.read_shard(shard, attempts=2).keys() == want
    assert opened == [100, 200, 300, 400, 500, None]


def test_reads_that_fail_at_the_same_place_use_the_count_up(shard, fail_at):
    # Progress, then two reads that get no further than byte 300: the second ends it.
    opened = fail_at([100, 300, 300, 300, 300])
    with pytest.raises(corpus_mod.ShardReadError,
                       match=rf"^{shard.uri}: read failed 4 times \(the last 3 got no further than byte 300\): "
                             r"ConnectionResetError"):
        sd.read_shard(shard, attempts=3)
    assert opened == [100, 300, 300, 300]


def test_a_read_that_falls_short_of_an_earlier_one_is_no_progress(shard, fail_at):
    opened = fail_at([400, 100, 200, 300])
    with pytest.raises(corpus_mod.ShardReadError,
                       match=r"read failed 3 times \(the last 3 got no further than byte 400\)"):
        sd.read_shard(shard, attempts=3)
    assert opened == [400, 100, 200]
