"""electra/data/mixture.py + the mixed sample order: per-epoch takes by largest remainder (against exact
fractions), repeats and per-epoch choices, the share a 1:3 mixture trains on (keys checked against
each corpus's own shards), elastic and exact resume of a mixed order, and the corpus set's checks
(electra/data/corpus_set.py). End-to-end trainer runs on a mixture: tests/electra/test_mixture_resume.py."""
from __future__ import annotations

import json
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest

from common.hashing import sha256_bytes
from electra.data import stream as sd
from electra.data.corpus import CorpusMismatchError, ShardRef
from electra.data.corpus_set import open_corpora
from electra.data.mixture import Mixture, epoch_slices, takes_for
from tests.electra._corpus import write_tiny_corpus

SEQ = 32
A_SHARDS = (40, 35, 45, 30, 50, 38, 42, 40, 44, 36, 40, 40, 39, 41)  # 560 examples
B_SHARDS = (25, 20, 30, 22, 28, 24, 26, 25, 20, 30, 22, 28)  # 300 examples


def refs(sizes, tag="s") -> tuple[ShardRef, ...]:
    return tuple(ShardRef(f"mem://{tag}{i}", n, 100 * n, f"{tag}{i}") for i, n in enumerate(sizes))


def test_takes_are_the_largest_remainders_of_the_exact_shares():
    sizes, weights = [560, 300, 7], [1.0, 3.0, 0.5]
    total = sum(sizes)
    exact = [Fraction(total) * Fraction(w).limit_denominator() / sum(Fraction(x).limit_denominator() for x in weights)
             for w in weights]
    got = takes_for(sizes, weights)
    assert sum(got) == total and all(abs(g - e) < 1 for g, e in zip(got, exact))
    floors = [int(e) for e in exact]  # the units left go to the largest fractional parts
    rest = sorted(range(3), key=lambda j: -(exact[j] - floors[j]))[:total - sum(floors)]
    assert list(got) == [f + (j in rest) for j, f in enumerate(floors)]
    assert takes_for(sizes, None) == tuple(sizes)  # no weights: each corpus's own size
    assert takes_for([10, 10], [0, 1]) == (0, 20)
    with pytest.raises(ValueError, match="source 1 has weight 1 but no examples"):
        takes_for([10, 0], [1, 1])


def test_one_source_without_weights_is_the_plain_shard_list():
    shards = refs((5, 0, 7))
    assert epoch_slices(shards, None, seed=1, epoch=0) == [(s, 0, s.num_examples, 0) for s in shards]


@pytest.mark.parametrize("epoch", [0, 1, 2])
def test_each_epoch_takes_exactly_its_share_repeating_or_choosing(epoch):
    a, b = refs(A_SHARDS, "a"), refs(B_SHARDS, "b")
    mix = Mixture((len(a), len(b)), takes_for([560, 300], [1, 3]))  # 215 of A, 645 of B (2.15x)
    slices = epoch_slices(a + b, mix, seed=7, epoch=epoch)
    per_source = Counter()
    for s in slices:
        assert 0 <= s.start and s.start + s.num_examples <= s.shard.num_examples
        assert s.shard.uri.startswith("mem://" + "ab"[s.source])
        per_source[s.source] += s.num_examples
    assert per_source == {0: mix.takes[0], 1: mix.takes[1]}
    b_uses = Counter(s.shard.uri for s in slices if s.source == 1)
    assert all(b_uses[s.uri] >= 2 for s in b)  # two whole copies of B ...
    assert sum(s.num_examples for s in slices if s.source == 1) - 2 * 300 == 45  # ... and 45 more
    a_used = [s for s in slices if s.source == 0]
    assert sum(s.num_examples < s.shard.num_examples for s in a_used) <= 4  # partial only at a window's ends
    assert len(a_used) <= 215 // min(A_SHARDS) + 4  # a down-weighted source opens about its share of shards


def test_the_choice_changes_with_the_epoch_and_not_otherwise():
    a, b = refs(A_SHARDS, "a"), refs(B_SHARDS, "b")
    mix = Mixture((len(a), len(b)), takes_for([560, 300], [1, 3]))

    def chosen(epoch):
        return [(s.shard.uri, s.num_examples) for s in epoch_slices(a + b, mix, seed=7, epoch=epoch) if s.source == 0]

    assert chosen(0) == chosen(0) and chosen(0) != chosen(1)
    seen = {uri for e in range(6) for uri, _ in chosen(e)}
    assert seen == {s.uri for s in a}  # over epochs a down-weighted source is seen whole


def chosen_counts(shards, mix, epochs, *, seed=3, source=0, per_seed=False):
    """How often each example of ``source`` is taken over ``epochs`` epochs (or, with
    ``per_seed``, in epoch ``epochs`` under seeds 0 .. 1999), counted from the slices."""
    first = sum(mix.shard_counts[:source])
    own = shards[first:first + mix.shard_counts[source]]
    counts = {s.uri: np.zeros(s.num_examples, np.int64) for s in own}
    runs = [(k, epochs) for k in range(2000)] if per_seed else [(seed, e) for e in range(epochs)]
    for sd_, epoch in runs:
        taken = 0
        for sl in epoch_slices(shards, mix, seed=sd_, epoch=epoch):
            if sl.source == source:
                counts[sl.uri][sl.start:sl.start + sl.num_examples] += 1
                taken += sl.num_examples
        assert taken == mix.takes[source]  # the exact take, copies included
    return counts


def test_a_down_weighted_source_takes_every_example_with_the_same_chance():
    """Shards of 100, 100, 100 and 10 examples at a take of a tenth: the choice made whole shards
    and a prefix of one more, so the first examples of a long shard were taken in a third of the
    epochs, the last ones never, the short shard in a quarter."""
    a = refs((100, 100, 100, 10), "a")
    b = refs((310,) * 9, "b")
    mix = Mixture((4, 9), (31, 3069))  # a: 31 of 310 an epoch (0.1); b: the rest (repeated)
    counts = chosen_counts(a + b, mix, 1000)  # 1000 epochs = 100 windows of 310: whole cycles
    for uri, c in counts.items():
        half = len(c) // 2
        assert c.min() == c.max() == 100, (uri, c.min(), c.max(), half)  # every example once per cycle
    # a single epoch under 2,000 seeds: the same expected share at every position and shard size
    per_epoch = chosen_counts(a + b, mix, 7, per_seed=True)
    rate = np.concatenate(list(per_epoch.values())) / 2000
    for uri, c in per_epoch.items():
        for part in (c[:len(c) // 2], c[len(c) // 2:]):
            assert abs(part.mean() / 2000 - 0.1) <= 0.01, (uri, part.mean() / 2000)  # within 10%
    assert abs(rate.mean() - 0.1) < 1e-9  # the take is exact: 31 of 310 in every run


@pytest.mark.parametrize("rate", [0.3, 0.7, 0.9, 0.99])
def test_a_down_weighted_source_never_repeats_an_example_within_an_epoch(rate):
    """Windows that run from one cycle into the next (every few epochs at these rates) still hold
    each example at most once."""
    a, b = refs([100] * 20, "a"), refs([500] * 4, "b")
    take = round(rate * 2000)
    mix = Mixture((20, 4), (take, 4000 - take))
    for epoch in range(60):
        seen = Counter()
        for sl in epoch_slices(a + b, mix, seed=5, epoch=epoch):
            if sl.source == 0:
                seen.update((sl.uri, i) for i in range(sl.start, sl.start + sl.num_examples))
        assert sum(seen.values()) == take and max(seen.values()) == 1, (rate, epoch)


def test_a_repeated_source_spreads_its_remainder_evenly():
    """A source taken 2.3 times: two whole copies, and the remainder from the cycles, so that over
    ten epochs every example is taken 23 times."""
    a = refs((7, 13, 5, 25), "a")  # 50 examples
    b = refs((40, 60), "b")
    mix = Mixture((4, 2), (115, 35))
    counts = chosen_counts(a + b, mix, 10)
    assert all(c.min() == c.max() == 23 for c in counts.values())


# ------------------------------------------------------------------------------ real corpora
@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("mix")
    a = write_tiny_corpus(root / "a", seq_len=SEQ, train_shards=A_SHARDS, validation_shards=(6,), seed=1)
    b = write_tiny_corpus(root / "b", seq_len=SEQ, train_shards=B_SHARDS, validation_shards=(6,), seed=2,
                          tokenizer_from=a)
    return a, b


def mixed_plan(pair, weights, *, rank=0, world=1, batch=16, micro=4):
    corpora = open_corpora([str(p) for p in pair], weights=weights)
    shards, _, mixture = corpora.shards("train", skip_corrupt=False)
    return sd.StreamPlan(shards, SEQ, batch, micro, rank=rank, world_size=world, seed=3, shuffle_block=64,
                         streams=8, mixture=mixture)


def own_keys(corpus) -> set:
    info = sd.open_corpus(str(corpus))
    shards, _ = sd.check_shards(info, "train")
    return {(int(u), int(o)) for s in shards for u, o in zip(*(lambda ex: (ex.uid, ex.ordinal))(sd.read_shard(s)))}


def test_a_1_to_3_mixture_trains_on_three_quarters_of_the_second(pair):
    p = mixed_plan(pair, [1, 3])
    stream = iter(sd.TrainStream(p, num_workers=0))
    first = []  # the first 1,000 examples trained: an epoch (860) and part of the next
    while len(first) < 1000:
        first += next(stream).keys
    share = sum(k[0] == 1 for k in first[:1000]) / 1000
    assert abs(share - 0.75) <= 0.05, share
    keys = [k for b in sd.TrainStream(p, num_workers=0).loader(0) for k in b.keys]
    mine = [own_keys(c) for c in pair]
    assert all(k[1:] in mine[k[0]] for k in first)  # each key is an example of the corpus it names
    b_rows = Counter(k for k in keys if k[0] == 1)
    assert len(b_rows) == 300 and max(b_rows.values()) == 3  # all of B, none more than 3 times in the epoch


def test_the_trained_examples_of_a_down_weighted_corpus_spread_over_its_shards(pair):
    """What the loader yields (keys of trained examples, not slices): corpus A weighted 1:60 gives
    14 of its 560 examples an epoch, fewer than a shard holds; over 80 epochs the second halves of
    its shards are trained as often as the first (the first choice trained only their heads)."""
    p = mixed_plan(pair, [1, 60])
    info = sd.open_corpus(str(pair[0]))
    shards, _ = sd.check_shards(info, "train")
    position = {}  # key -> (shard, index in it, shard size)
    for i, shard in enumerate(shards):
        ex = sd.read_shard(shard)
        for j, key in enumerate(zip(ex.uid.tolist(), ex.ordinal.tolist())):
            position[key] = (i, j, len(ex.uid))
    halves, sizes = Counter(), Counter()
    for i, j, n in position.values():
        sizes[j >= n // 2] += 1
    stream = sd.TrainStream(p, num_workers=0)
    for epoch in range(80):
        for batch in stream.loader(epoch):
            for corpus, uid, ordinal in batch.keys:
                if corpus == 0:
                    _, j, n = position[(int(uid), int(ordinal))]
                    halves[j >= n // 2] += 1
    rates = {half: halves[half] / sizes[half] for half in (False, True)}  # trainings per example
    assert abs(rates[True] / rates[False] - 1) < 0.1, rates


def test_a_mixed_order_is_elastic_and_resumes_exactly(pair):
    one = mixed_plan(pair, [1, 3])
    full = {b.position.step: b.keys for b in sd.TrainStream(one, num_workers=0).loader(1) if b.micro == 0}
    halves = [mixed_plan(pair, [1, 3], rank=r, world=2, micro=8) for r in (0, 1)]
    per_rank = [{b.position.step: b.keys for b in sd.TrainStream(h, num_workers=0).loader(1)} for h in halves]
    whole = {b.position.step: [] for b in sd.TrainStream(one, num_workers=0).loader(1)}
    for b in sd.TrainStream(one, num_workers=0).loader(1):
        whole[b.position.step] += b.keys
    assert {s: per_rank[0][s] + per_rank[1][s] for s in whole} == whole  # 2 ranks = 1 rank, step by step
    resumed = sd.TrainStream(one, num_workers=0, start=sd.DataPosition(1, 5))
    again = {}
    for b in resumed:
        if b.position.epoch != 1:
            break
        again.setdefault(b.position.step, []).extend(b.keys)
    assert again == {s: k for s, k in whole.items() if s >= 5} and full[5] == whole[5][:4]


def test_mixed_corpora_must_share_tokenizer_and_length(pair, tmp_path):
    other_tok = write_tiny_corpus(tmp_path / "t", seq_len=SEQ, train_shards=(9,), seed=5)
    other_len = write_tiny_corpus(tmp_path / "l", seq_len=64, train_shards=(9,), seed=6, tokenizer_from=pair[0])
    with pytest.raises(CorpusMismatchError, match=f"--data {pair[0]} and --data {other_tok} have different "
                                                  "tokenizers .*rebuild .* with --tokenizer"):
        open_corpora([str(pair[0]), str(other_tok)])
    with pytest.raises(CorpusMismatchError, match=f"--data {pair[0]} is packed at seq_len 32 but --data "
                                                  f"{other_len} at 64"):
        open_corpora([str(pair[0]), str(other_len)])
    with pytest.raises(ValueError, match="data.weights has 3 values for 2 --data corpora"):
        open_corpora([str(p) for p in pair], weights=[1, 2, 3])
    with pytest.raises(ValueError, match="is given twice"):
        open_corpora([str(pair[0]), str(pair[0])])
    with pytest.raises(ValueError, match=r"data.weights \[2\] with one --data .*drop data.weights or add --data"):
        open_corpora([str(pair[0])], weights=[2])


def test_the_set_identity_covers_corpora_order_and_weights(pair):
    single = open_corpora([str(pair[0])])
    assert single.data_sha256 == sd.open_corpus(str(pair[0])).data_sha256  # one corpus: as before mixtures
    ids = {open_corpora(locs, weights=w).data_sha256 for locs, w in (
        ([str(pair[0]), str(pair[1])], None), ([str(pair[0]), str(pair[1])], [1, 3]),
        ([str(pair[1]), str(pair[0])], [3, 1]))}
    assert len(ids) == 3
    saved = open_corpora([str(p) for p in pair], weights=[1, 3]).data_sha256
    with pytest.raises(CorpusMismatchError, match="differ from the checkpoint's .* same --data list and data.weights"):
        open_corpora([str(p) for p in pair], weights=[1, 2], data_sha256=saved)
    assert open_corpora([str(p) for p in pair], weights=[1, 3], data_sha256=saved).data_sha256 == saved
    # A checkpoint of the first mixture order (whole shards and prefixes): its identity had no
    # order in it. Same corpora and weights, another stream: refused, saying so.
    corpora = [sd.open_corpus(str(p)) for p in pair]
    first_order = sha256_bytes(json.dumps([[c.data_sha256 for c in corpora], [1, 3]]).encode())
    with pytest.raises(CorpusMismatchError, match="the checkpoint's mixture took whole shards and their first "
                                                  "examples .*another order of the same examples"):
        open_corpora([str(p) for p in pair], weights=[1, 3], data_sha256=first_order)


@pytest.mark.parametrize("sizes,weights,j", [((35, 2), (1, 3), 1), ((2434, 9), (1, 3), 1), ((100, 5, 3), (2, 1, 4), 2)])
def test_the_weight_that_repeats_a_corpus_exactly_the_warning_threshold(sizes, weights, j):
    """The weight the repeat warning suggests (corpus_set: ``REPEAT_WARNING``) gives the corpus that
    many copies per epoch, the others' weights kept."""
    from electra.data.mixture import REPEAT_WARNING, weight_for_repeat

    w = weight_for_repeat(j, sizes, weights, REPEAT_WARNING)
    share = sum(sizes) * w / (sum(weights) - weights[j] + w)
    assert share == pytest.approx(REPEAT_WARNING * sizes[j])
    assert takes_for(sizes, weights)[j] > REPEAT_WARNING * sizes[j]  # the given weight is past it
