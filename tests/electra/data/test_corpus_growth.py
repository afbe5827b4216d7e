"""A corpus that grows, read by generations (``electra.data.corpus_growth``), without the trainer: the
record of each epoch's generations, the follower joining a new generation at an epoch start (and
pinning with follow off), the one-line errors for a corpus that did not only grow, and the resume
identity check that accepts a grown corpus and refuses a changed one."""
from __future__ import annotations

import json

import pytest

from electra.data.corpus import CorpusMismatchError
from electra.data.corpus_growth import CorpusFollower, CorpusGrowthError, GenerationRecord, generation_view, start_view
from electra.data.corpus_set import open_corpora
from pipelines import schema
from tests.electra._growing_corpus import install, stage_manifest, write_growing_corpus

GENERATIONS = [dict(train_shards=(9, 7, 5), validation_shards=(6,)),
               dict(train_shards=(6, 8), validation_shards=(4,), seed=9),
               dict(train_shards=(5,), validation_shards=(3,), seed=11)]


@pytest.fixture
def corpus(tmp_path):
    return write_growing_corpus(tmp_path / "c", GENERATIONS)


def follower(root, *, follow=True, epoch=0):
    corpus = open_corpora([str(root)])
    corpus, record = start_view(corpus, None, epoch=epoch, follow=follow)
    check = corpus.check(skip_corrupt=False)
    return CorpusFollower(corpus, check.train, check.mixture, record, broadcast=lambda compute: compute())


def generations_of(shards):
    return [s.generation for s in shards]


def test_record_round_trips_and_names_each_epochs_generations():
    r = GenerationRecord.begin(["a"], 0, (("g0",),), follow=True)
    r = r.decided(1, (("g0",),)).decided(2, (("g0", "g1"),)).decided(3, (("g0", "g1"),))
    assert r.changes == ((0, (("g0",),)), (2, (("g0", "g1"),))) and r.started == 3
    assert [r.at(e) for e in range(4)] == [(("g0",),)] * 2 + [(("g0", "g1"),)] * 2
    again = GenerationRecord.from_dict(json.loads(json.dumps(r.to_dict())))
    assert again == r and r.lineage() == [{"location": "a", "generations": ["g0", "g1"]}]


def test_a_new_generation_joins_at_the_next_epoch_start(corpus):
    f = follower(corpus)
    assert set(generations_of(f.train)) == {"g0"} and not f.advance(1)  # nothing new: the same shards
    install(corpus, 1)
    assert f.advance(2)
    assert generations_of(f.train) == ["g0"] * 3 + ["g1"] * 2  # appended at the end, oldest first
    assert f.record.at(1) == (("g0",),) and f.record.at(2) == (("g0", "g1"),) and f.record.started == 2
    assert f.record.identity == f.corpus.data_sha256 != open_corpora([str(corpus)], generations=[["g0"]]).data_sha256
    install(corpus, 2)
    assert f.advance(3) and generations_of(f.train)[-1] == "g2"


def test_follow_appends_false_pins_the_first_generations(corpus):
    f = follower(corpus, follow=False)
    install(corpus, 2)
    assert not f.advance(1) and set(generations_of(f.train)) == {"g0"}
    assert f.record.to_dict()["epochs"] == [{"epoch": 0, "generations": [["g0"]]}] and not f.record.follow


def test_a_recorded_epoch_replays_its_generations_whatever_the_manifest_lists(corpus):
    install(corpus, 2)  # the checkpoint recorded epochs 0-2 (g0, then g1, then g2) and resumes in epoch 0
    record = GenerationRecord.begin([str(corpus)], 0, (("g0",),), follow=True).decided(1, (("g0", "g1"),))
    record = record.decided(2, (("g0", "g1", "g2"),))
    opened = open_corpora([str(corpus)], generations=record.last)
    view, record = start_view(opened, record, epoch=0, follow=True)
    assert generations_of(view.check(skip_corrupt=False).train) == ["g0"] * 3
    check = view.check(skip_corrupt=False)
    f = CorpusFollower(view, check.train, check.mixture, record, broadcast=lambda compute: compute())
    assert f.advance(1) and set(generations_of(f.train)) == {"g0", "g1"}
    assert f.advance(2) and set(generations_of(f.train)) == {"g0", "g1", "g2"}
    assert f.record.changes == record.changes and f.record.started == 2  # replayed, recorded once
    assert not f.advance(3) and f.record.started == 3


def _rewrite(root, edit):
    d = json.loads((root / schema.MANIFEST_NAME).read_text())
    d.pop("sha256", None)  # a hand edit: unsealed (a republish would seal it anew)
    edit(d)
    (root / schema.MANIFEST_NAME).write_text(json.dumps(d))


@pytest.mark.parametrize("damage", ["changed", "vanished", "reordered"])
def test_a_corpus_that_did_not_only_grow_is_one_line(corpus, damage):
    f = follower(corpus)
    install(corpus, 2)

    def edit(d):
        if damage == "changed":  # an earlier generation rewritten: a g0 shard of other bytes
            d["shards"][0]["sha256"] = "0" * 64
        elif damage == "vanished":
            d["generations"] = d["generations"][1:]
            d["shards"] = [s for s in d["shards"] if "/g0/" not in s["path"]]
        else:
            d["generations"] = [d["generations"][1], d["generations"][0], d["generations"][2]]
    _rewrite(corpus, edit)
    with pytest.raises(CorpusGrowthError) as err:
        f.advance(1)
    message = str(err.value)
    assert "\n" not in message and str(corpus) in message
    assert {"changed": "changed", "vanished": "g0 vanished", "reordered": "reordered"}[damage] in message


def test_resume_identity_accepts_a_grown_corpus_and_refuses_a_changed_generation(corpus):
    identity = open_corpora([str(corpus)]).data_sha256  # a checkpoint written on g0 alone
    install(corpus, 1)
    grown = open_corpora([str(corpus)], data_sha256=identity, generations=[["g0"]])
    assert grown.data_sha256 == identity and [s.path.split("/")[1] for s in grown.manifest.shards] == ["g0"] * 4
    with pytest.raises(CorpusMismatchError, match="shards differ from the checkpoint's"):
        open_corpora([str(corpus)], data_sha256=identity)  # the whole grown corpus is another stream

    def edit(d):
        d["shards"][0]["sha256"] = "0" * 64
    _rewrite(corpus, edit)
    with pytest.raises(CorpusMismatchError, match="shards differ from the checkpoint's"):
        open_corpora([str(corpus)], data_sha256=identity, generations=[["g0"]])
    install(corpus, 1)
    _rewrite(corpus, lambda d: d.update(generations=d["generations"][1:],
                                        shards=[s for s in d["shards"] if "/g0/" not in s["path"]]))
    with pytest.raises(CorpusGrowthError, match="g0") as err:
        open_corpora([str(corpus)], data_sha256=identity, generations=[["g0"]])
    assert "\n" not in str(err.value)


def test_a_one_generation_manifest_is_its_own_view(corpus):
    first = schema.Manifest.parse(stage_manifest(corpus, 0).read_bytes(), "x")
    assert generation_view(first, ["g0"]) is first  # no growth: the same shards, the same order, as before


def test_a_mixture_weights_a_grown_corpus_as_a_whole(corpus, tmp_path):
    from tests.electra._corpus import write_tiny_corpus

    other = write_tiny_corpus(tmp_path / "b", train_shards=(6, 4), validation_shards=(2,), seed=5,
                              tokenizer_from=corpus)
    mixed = open_corpora([str(corpus), str(other)], weights=[1, 1])
    mixed, record = start_view(mixed, None, epoch=0, follow=True)
    check = mixed.check(skip_corrupt=False)
    f = CorpusFollower(mixed, check.train, check.mixture, record, broadcast=lambda compute: compute())
    assert (check.mixture.shard_counts, check.mixture.takes) == ((3, 2), (16, 15))  # 21 + 10 examples, 1:1
    install(corpus, 1)
    assert f.advance(1)
    assert (f.mixture.shard_counts, f.mixture.takes) == ((5, 2), (23, 22))  # 35 + 10: the grown corpus is one
    assert generations_of(f.train) == ["g0"] * 3 + ["g1"] * 2 + ["g0"] * 2  # the other corpus's shards after
    assert f.record.at(1) == (("g0", "g1"), ("g0",))
