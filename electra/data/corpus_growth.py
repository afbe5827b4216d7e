"""Training that follows a growing corpus: which generations each epoch reads, decided at its start.

A corpus grows by generations (``pipelines.schema.generations``): ``build-corpus --append``
writes new shards into a folder of their own and rewrites the manifest (the commit point) to list
every generation, oldest first; earlier generations are never rewritten. A run reads them so:

* **Epoch ``e`` reads the generations ``G(e)``** of each corpus. ``G`` of the run's first epoch is
  the manifest's at start. With ``data.follow_appends`` (the default), at each later epoch start
  rank 0 reads each manifest again (the manifest only: the known generations' shards are not
  listed again), checks that the generations the run reads are still there, first and in order,
  with the same shards (path, split, examples, bytes, sha256), runs the shard check
  (``electra.data.corpus.check_shards``) on the new generations' shards only, and broadcasts the
  epoch's shard list (``distributed.on_rank0``): every rank plans the epoch from one answer. A
  new generation joins at the end of its corpus's shards, one log line each. A generation that
  vanished, moved or changed is one line (``CorpusGrowthError``) naming the corpus.
* **The record** (``GenerationRecord``): the generations of every epoch started, kept in each
  checkpoint (``meta.json`` ``generations``). A resume replays a recorded epoch with its recorded
  generations whatever the manifest lists now, and reads the manifest only for an epoch the
  checkpoint never started; so a resume after the corpus grew again trains on the batches of an
  uninterrupted run that saw the same growth at the same epoch boundaries. The checkpoint's data
  identity (``data_sha256``) is taken over the newest recorded generations (``generation_view``):
  the resume check accepts a manifest that grew and refuses one whose recorded shards changed.
* ``data.follow_appends=false`` pins the generations the run started with (a resume: the
  recorded ones).

Trade-offs. The epoch is the unit: a generation committed mid-epoch waits for the next epoch, so
an epoch's order (a function of its shard list, ``electra.data.sample_order``) never changes once begun
and stays exactly resumable; the price is a delay of up to one epoch. An epoch after a join is a
new permutation of a longer list (more steps per epoch); earlier epochs are untouched. A mixture
weights each corpus as a whole: its size is all its joined generations' examples, so with the
default weights a grown corpus's share rises, with explicit weights its repeat factor falls, and
its window over cycles (``electra.data.mixture``) is laid out anew from that epoch. Validation stays
on the generations of the run's first epoch, so evaluation losses stay comparable over the run.
A shard of an earlier generation skipped as corrupt (``data.skip_corrupt``) stays skipped.
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from common import storage
from common.hashing import sha256_bytes
from electra.data.corpus import CorpusInfo, ShardRef, check_shards, list_shard_folders
from electra.data.corpus_view import CorpusGrowthError, generation_view, names_of, restrict  # noqa: F401  (re-exported)
from pipelines import schema

log = logging.getLogger("electra.train")

Names = tuple[tuple[str, ...], ...]  # per corpus (in --data order), its generations, oldest first


def _shard_rows(manifest: schema.Manifest) -> list[tuple]:
    return [(s.path, s.split, s.num_examples, s.bytes, s.sha256) for s in manifest.shards]


@dataclass(frozen=True)
class GenerationRecord:
    """The generations each epoch started used (module docstring), as change points: ``changes``
    holds ``(first epoch, names)`` in epoch order; epochs up to ``started`` are decided."""
    locations: tuple[str, ...]
    changes: tuple[tuple[int, Names], ...]
    started: int
    follow: bool = True
    identity: str = ""  # the data_sha256 of the newest generations (not saved: meta.json has it)

    @classmethod
    def begin(cls, locations: Sequence[str], epoch: int, names: Names, *, follow: bool, identity: str = ""):
        return cls(tuple(locations), ((epoch, names),), epoch, follow, identity)

    def at(self, epoch: int) -> Names:
        """The generations of ``epoch`` (at most ``started``; before the first change: the first's)."""
        got = self.changes[0][1]
        for first, names in self.changes:
            if first <= epoch:
                got = names
        return got

    @property
    def first(self) -> Names:
        return self.changes[0][1]

    @property
    def last(self) -> Names:
        return self.changes[-1][1]

    def decided(self, epoch: int, names: Names, identity: str | None = None) -> GenerationRecord:
        """The record with ``epoch`` using ``names``; itself for an epoch it records already (a
        resume replays it: decided once, by the run that started it)."""
        if epoch <= self.started:
            return self
        changes = self.changes if names == self.last else (*self.changes, (epoch, names))
        return dataclasses.replace(self, changes=changes, started=max(epoch, self.started),
                                   identity=self.identity if identity is None else identity)

    def to_dict(self) -> dict:
        return {"follow": self.follow, "locations": list(self.locations), "started": self.started,
                "epochs": [{"epoch": e, "generations": [list(g) for g in names]} for e, names in self.changes]}

    @classmethod
    def from_dict(cls, d: dict, identity: str = "") -> GenerationRecord:
        changes = tuple((int(c["epoch"]), tuple(tuple(g) for g in c["generations"])) for c in d["epochs"])
        return cls(tuple(d["locations"]), changes, int(d["started"]), bool(d.get("follow", True)), identity)

    def lineage(self) -> list[dict]:
        """``lineage.json``'s ``corpora``: each corpus and the generations trained on."""
        return [{"location": loc, "generations": list(g)} for loc, g in zip(self.locations, self.last)]


def start_names(record: GenerationRecord | None, epoch: int, current: Names) -> Names:
    """The generations the run's first epoch here (``epoch``) reads: the recorded ones for a
    recorded epoch; past the record, its newest ones (a later epoch start reads the manifest
    again when following: ``CorpusFollower``); without a record, the manifest's (``current``)."""
    if record is None:
        return current
    return record.at(epoch) if epoch <= record.started else record.last


@dataclass(frozen=True)
class Grown:
    """Rank 0's answer at an epoch start: the corpora's new views and train shards (per corpus)."""
    corpus: object  # electra.data.corpus_set.CorpusSet of the generations read from now on
    own: tuple[tuple[ShardRef, ...], ...]  # each corpus's train shards
    train: tuple[ShardRef, ...]  # all of them, corpus after corpus
    mixture: object  # electra.data.mixture.Mixture (several corpora) or None
    joined: tuple[tuple[str, str, int], ...]  # (corpus, generation, its train examples)


class CorpusFollower:
    """The run's train shards epoch by epoch (module docstring). ``corpus``: the ``CorpusSet`` of
    the generations read now; ``train``/``mixture``: this epoch's shards and mixture.
    ``broadcast``: rank 0's answer on every rank (``distributed.on_rank0``)."""

    def __init__(self, corpus, train: Sequence[ShardRef], mixture, record: GenerationRecord, *,
                 skip_corrupt: bool = False, broadcast: Callable | None = None):
        self.corpus, self.train, self.mixture, self.record = corpus, tuple(train), mixture, record
        self.skip_corrupt = skip_corrupt
        counts = mixture.shard_counts if mixture is not None else (len(self.train),)
        bounds = [sum(counts[:j]) for j in range(len(counts) + 1)]
        self._own = tuple(self.train[a:b] for a, b in zip(bounds, bounds[1:]))  # each corpus's shards
        if broadcast is None:
            from electra.distributed.deepspeed_glue import on_rank0 as broadcast
        self._broadcast = broadcast

    @property
    def current(self) -> Names:
        return tuple(names_of(c) for c in self.corpus.corpora)

    def advance(self, epoch: int) -> bool:
        """Decide ``epoch``'s generations (called at its start, on every rank alike); True when
        the shards changed. A recorded epoch takes the recorded generations; a later one the
        manifest's when following, else the current ones."""
        if epoch <= self.record.started:
            target = self.record.at(epoch)
        elif self.record.follow:
            target = None  # whatever the manifests list now: rank 0 reads them
        else:
            target = self.current
        if target == self.current:
            self.record = self.record.decided(epoch, target)
            return False
        grown = self._broadcast(lambda: self._read(epoch, target))
        if grown is None:
            self.record = self.record.decided(epoch, self.current)
            return False
        self.corpus, self._own, self.train, self.mixture = grown.corpus, grown.own, grown.train, grown.mixture
        identity = self.corpus.data_sha256 if epoch > self.record.started else None
        self.record = self.record.decided(epoch, self.current, identity)
        return True

    def _read(self, epoch: int, target: Names | None) -> Grown | None:
        """Rank 0: each corpus's manifest again, checked, and the shards of what joins."""
        views, train, joined = [], [], []
        for j, info in enumerate(self.corpus.corpora):
            raw = schema.read_manifest_bytes(info.root)
            full = schema.Manifest.parse(raw, storage.join(info.root, schema.MANIFEST_NAME))
            now = names_of(info)
            names = tuple(target[j]) if target is not None else tuple(schema.generation_names(full))
            self._check_grew(info, full, now, names)
            if names == now:
                views.append(info)
                train.append(self._own[j])
                continue
            added = restrict(CorpusInfo(info.root, full, "", info.tokenizer_sha256, info.vocab_size), names[len(now):])
            good, _ = check_shards(added, "train", skip_corrupt=self.skip_corrupt,
                                   listings=list_shard_folders(added, ("train",)))
            for name in names[len(now):]:
                n = sum(s.num_examples for s in good if s.generation == name)
                joined.append((info.root, name, n))
                log.info("corpus %s: generation %s joins at epoch %d (%d train examples)", info.root, name, epoch, n)
            views.append(dataclasses.replace(info, manifest=generation_view(full, names),
                                             manifest_sha256=sha256_bytes(raw)))
            train.append((*self._own[j], *good))
        if not joined:
            return None
        from electra.data.corpus_set import CorpusSet

        corpus = CorpusSet(tuple(views), self.corpus.weights, self.corpus.validation)
        shards, _, mixture = corpus.assemble("train", train, [])  # (its log lines: rank 0 only)
        return Grown(corpus, tuple(train), shards, mixture, tuple(joined))

    @staticmethod
    def _check_grew(info: CorpusInfo, full: schema.Manifest, now: tuple[str, ...], names: tuple[str, ...]) -> None:
        where = f"--data {info.root}"
        listed = tuple(schema.generation_names(full))
        if listed[:len(now)] != now:
            gone = [n for n in now if n not in listed]
            what = (f"generation {gone[0]} vanished from its manifest" if gone else
                    f"its generations were reordered ({list(listed)}, this run reads {list(now)} first)")
            raise CorpusGrowthError(f"{where}: {what}; a corpus only grows: restore it, or start a new run directory")
        if names[:len(now)] != now or any(n not in listed for n in names):
            raise CorpusGrowthError(f"{where}: the checkpoint's generations {list(names)} are not in its manifest "
                                    f"({list(listed)}); restore the corpus, or start a new run directory")
        if _shard_rows(generation_view(full, now)) != _shard_rows(info.manifest):
            raise CorpusGrowthError(f"{where}: the shards of generation(s) {list(now)} changed in its manifest "
                                    "(an earlier generation is never rewritten); restore it, or start a new run "
                                    "directory")
        if full.tokenizer.sha256 != info.manifest.tokenizer.sha256 or full.seq_len != info.manifest.seq_len:
            raise CorpusGrowthError(f"{where}: its manifest now names another tokenizer or seq_len than the "
                                    "generations this run trains on; start a new run directory")


def recorded(prior, locations: Sequence[str]) -> GenerationRecord | None:
    """The record in a checkpoint's meta (``run_layout.CheckpointMeta``), when it has one for as
    many corpora as ``--data`` names (another list is the data identity check's to refuse)."""
    if prior is None or not prior.generations:
        return None
    record = GenerationRecord.from_dict(prior.generations, identity=prior.data_sha256)
    return record if len(record.locations) == len(locations) else None


def start_view(corpus, record: GenerationRecord | None, *, epoch: int, follow: bool):
    """The corpus set the run's first epoch here (``epoch``) reads, and the record to go on with.
    ``corpus``: opened on the record's newest generations (``open_corpora(generations=...)``), or
    on the manifest's when there is no record; validation reads the run's first generations."""
    from electra.data.corpus_set import CorpusSet

    current = tuple(names_of(c) for c in corpus.corpora)
    if record is None:
        return corpus, GenerationRecord.begin(corpus.locations, epoch, current, follow=follow,
                                              identity=corpus.data_sha256)
    record = dataclasses.replace(record, follow=follow, identity=corpus.data_sha256)
    names = start_names(record, epoch, current)
    train = tuple(restrict(c, n) for c, n in zip(corpus.corpora, names))
    validation = None
    if record.first != names:
        validation = tuple(restrict(c, n) for c, n in zip(corpus.corpora, record.first))
    return CorpusSet(train, corpus.weights, validation), record
