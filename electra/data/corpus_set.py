"""The corpora of one run: one ``--data``, or several mixed by ``data.weights``.

``open_corpora(locations, ...)`` opens each corpus (``electra.data.corpus.open_corpus``: manifest,
tokenizer, its sha256) and refuses, in one line naming the two corpora, a set whose members do
not share the sequence length or the tokenizer (compared by content: the parsed
``tokenizer.json``, so a re-serialised copy of the same tokenizer passes). The set's identity,
kept in checkpoints and compared on resume, is the corpus's own for one corpus (so existing runs
resume as before) and, for several, a hash over each corpus's identity and the weights: another
corpus, another order of ``--data`` or other weights would move the saved data position into
another stream, and is refused like a republished corpus (``data.allow_corpus_change`` lets it
through with a warning). A corpus that its weight repeats more than ``mixture.REPEAT_WARNING``
times per epoch is warned about once, when the train split's mixture is made (on rank 0 only
when there are several ranks).
"""
from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from common import storage
from common.hashing import sha256_bytes
from electra.data.corpus import CorpusInfo, CorpusMismatchError, ShardRef, check_shards, list_shard_folders, open_corpus
from electra.data.mixture import ORDER_VERSION, REPEAT_WARNING, Mixture, takes_for, weight_for_repeat
from pipelines import schema

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShardCheck:
    """The answer of one shard check (``CorpusSet.check``): what the run reads, what it skips."""
    train: tuple[ShardRef, ...]  # every corpus's, corpus after corpus
    validation: tuple[ShardRef, ...]
    skipped: tuple[str, ...]  # missing or of another size, left out under data.skip_corrupt
    mixture: Mixture | None  # several corpora: what each gives an epoch


@dataclass(frozen=True)
class CorpusSet:
    corpora: tuple[CorpusInfo, ...]
    weights: tuple[float, ...] | None  # data.weights as given; None: each corpus's share of examples
    # The generations validation reads, when fewer than the train ones (electra.data.corpus_growth)
    validation: tuple[CorpusInfo, ...] | None = None

    @property
    def primary(self) -> CorpusInfo:
        """The first corpus: its tokenizer (shared by all) is the run's."""
        return self.corpora[0]

    @property
    def locations(self) -> tuple[str, ...]:
        return tuple(c.root for c in self.corpora)

    @property
    def tokenizer_sha256(self) -> str:
        return self.primary.tokenizer_sha256

    @property
    def vocab_size(self) -> int:
        return self.primary.vocab_size

    @property
    def manifest(self):
        return self.primary.manifest

    @property
    def manifest_sha256(self) -> str:
        return self._combined("manifest_sha256")

    @property
    def data_sha256(self) -> str:
        """The data identity: the corpora's, their weights and, for several, the mixture's order."""
        return self._combined("data_sha256", order=ORDER_VERSION)

    def _combined(self, attr: str, order: int = 1) -> str:
        if len(self.corpora) == 1:
            return getattr(self.primary, attr)
        blob = [[getattr(c, attr) for c in self.corpora], self.weights] + ([order] if order > 1 else [])
        return sha256_bytes(json.dumps(blob).encode())

    def copy_tokenizer(self, dest: str) -> None:
        self.primary.copy_tokenizer(dest)

    def check(self, *, skip_corrupt: bool) -> ShardCheck:
        """Both splits from ONE listing per shard folder of each corpus (train and validation
        share their folder): the start-up's whole store traffic besides manifests and tokenizers.
        Validation reads ``validation`` when set (the run's first generations, which the train
        generations include: ``electra.data.corpus_growth``)."""
        listings = [list_shard_folders(c) for c in self.corpora]
        train, skipped, mixture = self.shards("train", skip_corrupt=skip_corrupt, listings=listings)
        held = CorpusSet(self.validation, self.weights) if self.validation is not None else self
        validation, skipped_val, _ = held.shards("validation", skip_corrupt=skip_corrupt, listings=listings)
        return ShardCheck(train, validation, skipped + skipped_val, mixture)

    def shards(self, split: str, *, skip_corrupt: bool, listings: Sequence[dict] | None = None,
               ) -> tuple[tuple[ShardRef, ...], tuple[str, ...], Mixture | None]:
        """The split's shards of every corpus (corpus after corpus), those skipped as corrupt, and
        the mixture (None for one corpus, and for a validation split: evaluated as concatenated).
        ``listings``: each corpus's ``list_shard_folders``, when the caller shares them."""
        own, skipped = [], []
        for i, corpus in enumerate(self.corpora):
            good, bad = check_shards(corpus, split, skip_corrupt=skip_corrupt,
                                     listings=None if listings is None else listings[i])
            own.append(good)
            skipped += bad
        return self.assemble(split, own, skipped)

    def assemble(self, split: str, own: Sequence[Sequence[ShardRef]], skipped: Sequence[str],
                 ) -> tuple[tuple[ShardRef, ...], tuple[str, ...], Mixture | None]:
        """``shards``' answer from each corpus's checked shards ``own`` (also what a corpus that
        grew gives an epoch: ``electra.data.corpus_growth``)."""
        shards = [s for good in own for s in good]
        counts = [len(good) for good in own]
        sizes = [sum(s.num_examples for s in good) for good in own]
        mixture = None
        if len(self.corpora) > 1 and split == "train":
            for loc, n, w in zip(self.locations, sizes, self.weights or sizes):
                if w and not n:
                    raise CorpusMismatchError(f"--data {loc} has no train examples to give its weight {w}; "
                                              "drop it or set its weight to 0")
            takes = takes_for(sizes, self.weights)
            mixture = Mixture(tuple(counts), takes)
            for loc, n, t in zip(self.locations, sizes, takes):
                log.info("corpus %s: %d train examples, %d per epoch (%.2fx)", loc, n, t, t / n if n else 0.0)
            for j, (loc, n, t) in enumerate(zip(self.locations, sizes, takes)):
                if n and t / n > REPEAT_WARNING:
                    log.warning("--data %s: data.weights repeat its %d train examples %.3gx per epoch (more than "
                                "%gx: the model memorises them); give it more text, or a weight of at most %.3g "
                                "(data.weights, the others kept)", loc, n, t / n, REPEAT_WARNING,
                                weight_for_repeat(j, sizes, self.weights, REPEAT_WARNING))
        return tuple(shards), tuple(skipped), mixture


def open_corpora(locations: Sequence[str], *, weights: Sequence[float] | None = None,
                 tokenizer_sha256: str | None = None, manifest_sha256: str | None = None,
                 data_sha256: str | None = None, allow_change: bool = False,
                 generations: Sequence[Sequence[str]] | None = None) -> CorpusSet:
    """Open and check the corpora of a run (module docstring). The ``*_sha256`` are a checkpoint's,
    when resuming: the set must be the one the checkpoint was trained on. ``generations``: the
    checkpoint's newest generations of each corpus; each corpus is seen as those only, and the
    identity is compared on them (``electra.data.corpus_growth``: a corpus that grew since resumes)."""
    locations = list(locations)
    if not locations:
        raise ValueError("no corpus given: --data names at least one corpus location")
    if weights is not None and len(weights) != len(locations):
        raise ValueError(f"data.weights has {len(weights)} values for {len(locations)} --data corpora; "
                         "give one weight per --data, in the same order")
    if weights is not None and len(locations) == 1:
        raise ValueError(f"data.weights {list(weights)} with one --data {locations[0]}: weights mix several "
                         "corpora; drop data.weights or add --data")
    if len(locations) == 1:  # the corpus's own checks and identity, as before mixtures
        info = open_corpus(locations[0], tokenizer_sha256=tokenizer_sha256, manifest_sha256=manifest_sha256,
                           data_sha256=data_sha256, allow_change=allow_change,
                           generations=None if generations is None else generations[0])
        return CorpusSet((info,), tuple(weights) if weights is not None else None)
    if len(set(locations)) != len(locations):
        dup = next(loc for loc in locations if locations.count(loc) > 1)
        raise ValueError(f"--data {dup} is given twice; weight a corpus with data.weights instead")
    # the checkpoint's tokenizer is checked on the first; the others are compared with the first
    corpora = tuple(open_corpus(loc, tokenizer_sha256=tokenizer_sha256 if i == 0 else None,
                                generations=None if generations is None else generations[i])
                    for i, loc in enumerate(locations))
    first = corpora[0]
    for other in corpora[1:]:
        if other.manifest.seq_len != first.manifest.seq_len:
            raise CorpusMismatchError(f"--data {first.root} is packed at seq_len {first.manifest.seq_len} but "
                                      f"--data {other.root} at {other.manifest.seq_len}; mixed corpora must share "
                                      "the sequence length: rebuild one with --seq-len")
        if other.tokenizer_sha256 != first.tokenizer_sha256 and not _same_tokenizer(first, other):
            raise CorpusMismatchError(f"--data {first.root} and --data {other.root} have different tokenizers "
                                      f"(sha256 {first.tokenizer_sha256[:12]} vs {other.tokenizer_sha256[:12]}); "
                                      f"mixed corpora must share one: rebuild {other.root} with --tokenizer "
                                      f"{first.tokenizer_uri}/{schema.TOKENIZER_JSON}")
    out = CorpusSet(corpora, tuple(weights) if weights is not None else None)
    where = ", ".join(locations)
    if data_sha256 is not None and out.data_sha256 != data_sha256:
        message = (f"--data {where}: the corpora or their weights differ from the checkpoint's (data sha256 "
                   f"{data_sha256[:12]} -> {out.data_sha256[:12]}); the saved data position points into "
                   "another stream")
        if out._combined("data_sha256") == data_sha256:  # the same corpora and weights, the first order
            message = (f"--data {where}: the checkpoint's mixture took whole shards and their first examples "
                       "(before the window over cycles, electra/data/mixture.py), so its saved data position points "
                       "into another order of the same examples")
        if not allow_change:
            raise CorpusMismatchError(message + "; resume with the same --data list and data.weights, start a "
                                                "new run directory, or set data.allow_corpus_change=true")
        log.warning("%s (data.allow_corpus_change: going on)", message)
    elif manifest_sha256 is not None and out.manifest_sha256 != manifest_sha256 and data_sha256 is None:
        log.warning("--data %s changed since the checkpoint; the data position may not match", where)
    return out


def _same_tokenizer(a: CorpusInfo, b: CorpusInfo) -> bool:
    """Whether two corpora's tokenizer.json files hold the same tokenizer (parsed, not bytes)."""
    def parsed(c: CorpusInfo):
        return json.loads(storage.read_bytes(storage.join(c.tokenizer_uri, schema.TOKENIZER_JSON)))
    return parsed(a) == parsed(b)
