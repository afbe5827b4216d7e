"""Streaming the corpus shards to the trainer: rank/worker split, deterministic shuffle, resume.

The algorithm, for one split and one epoch:

1. **The epoch stream** is a function of ``(seed, epoch)`` only. Shards (manifest order) are
   permuted with ``rng(seed, epoch)`` and concatenated; the resulting sequence of ``N`` examples
   is cut into blocks of ``data.shuffle_buffer`` positions and each block is permuted with
   ``rng(seed, epoch, block)``. This is a block shuffle rather than WebDataset's reservoir
   buffer because a reservoir's output depends on who reads which shard; a block shuffle gives
   the same global order whatever the number of ranks or workers, and any position in it can be
   computed directly, which is what exact resume needs. Trade-off: mixing is limited to the
   shard permutation plus one block; a block should span several shards' worth of examples for
   a small corpus, and holds a block's shards in memory per worker (shards are ~100 MB).
2. **Ranks** take equal contiguous spans of the stream: rank ``r`` reads positions
   ``[r*n, r*n + b*m)`` with ``n = N // world``, ``m`` the micro batch and ``b = n // m`` the
   micro batches per rank per epoch. Every rank therefore runs the same number of steps however
   the shards divide, no example is read twice in an epoch, and the ``N - world*b*m`` examples
   left over (fewer than ``world*(m+1)``) are counted and logged, not silently lost. Contiguous
   spans mean a rank opens only about ``1/world`` of the shards.
3. **Workers** of a rank's DataLoader produce whole micro batches round robin: worker ``w`` of
   ``W`` builds batches ``k0+w, k0+w+W, ...`` and the DataLoader interleaves them back in order,
   so the batch sequence is identical for any ``W`` (each worker reads the rank's shards and
   decodes only its own samples; reading is cheap next to a training step).
4. **Position** = ``(epoch, micro batches consumed in the epoch)``. It is saved in checkpoints;
   a restarted run rebuilds the loader at that position and sees exactly the batches the
   uninterrupted run would have seen.

Integrity: every shard's size and sha256 are checked against the manifest up front
(``data.verify_shards``; one read of the split per rank at start, after which the training
loop never meets a bad shard mid-epoch, where skipping it on one rank would desynchronise the
ranks). A bad shard raises :class:`CorruptShardError` naming it, or with ``data.skip_corrupt``
it is left out of the plan on every rank alike, counted and logged. With verification off,
a parse error or a count that disagrees with the manifest still raises, naming the shard.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from webdataset.tariterators import group_by_keys, tar_file_iterator

from pipelines import schema

log = logging.getLogger(__name__)


class CorpusMismatchError(ValueError):
    """The corpus does not fit the config or the checkpoint (seq_len, tokenizer)."""


class CorruptShardError(RuntimeError):
    """A shard that is missing, truncated, altered or unreadable."""


@dataclass(frozen=True)
class CorpusInfo:
    root: Path
    manifest: schema.Manifest
    manifest_sha256: str
    tokenizer_sha256: str
    vocab_size: int


@dataclass(frozen=True)
class ShardRef:
    path: str  # absolute
    num_examples: int


@dataclass(frozen=True)
class DataPosition:
    epoch: int = 0
    batch: int = 0  # micro batches this rank has consumed in the epoch

    def to_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "batch": self.batch}


@dataclass
class Batch:
    input_ids: torch.Tensor  # [B, T] int64, padded with 0
    segment_ids: torch.Tensor  # [B, T] int64
    keys: list[str]
    position: DataPosition  # of this batch (its index in the epoch)

    @property
    def num_tokens(self) -> int:
        return int((self.input_ids != 0).sum())


def open_corpus(corpus_dir: str | Path, *, seq_len: int, tokenizer_sha256: str | None = None,
                manifest_sha256: str | None = None) -> CorpusInfo:
    """Load and check a corpus: its seq_len must equal ``seq_len``; its tokenizer (and, when
    resuming, its manifest) must equal the checkpoint's."""
    root = Path(corpus_dir)
    manifest = schema.Manifest.load(root)
    where = root / schema.MANIFEST_NAME
    if manifest.seq_len != seq_len:
        raise CorpusMismatchError(f"{where}: corpus seq_len {manifest.seq_len} != config data.seq_len "
                                  f"{seq_len}; rebuild the corpus or set data.seq_len={manifest.seq_len}")
    tok_path = root / schema.TOKENIZER_DIR / "tokenizer.json"
    if not tok_path.is_file():
        raise CorpusMismatchError(f"{tok_path}: missing tokenizer")
    tok_sha = schema.sha256_file(tok_path)
    if tok_sha != manifest.tokenizer.sha256:
        raise CorpusMismatchError(f"{tok_path}: sha256 {tok_sha[:12]} != manifest's "
                                  f"{manifest.tokenizer.sha256[:12]}: tokenizer replaced after the build")
    if tokenizer_sha256 is not None and tok_sha != tokenizer_sha256:
        raise CorpusMismatchError(f"{tok_path}: tokenizer sha256 {tok_sha[:12]} differs from the "
                                  f"checkpoint's {tokenizer_sha256[:12]}: wrong corpus for this run")
    from tokenizers import Tokenizer  # local: only needed here

    vocab = Tokenizer.from_file(str(tok_path)).get_vocab_size()
    if vocab != manifest.tokenizer.vocab_size:
        raise CorpusMismatchError(f"{where}: tokenizer vocab_size {manifest.tokenizer.vocab_size} but "
                                  f"{tok_path} has {vocab} tokens")
    if manifest.tokenizer.special_tokens.get("[PAD]") != 0:
        raise CorpusMismatchError(f"{where}: [PAD] must be id 0 (attention mask is ids != 0)")
    man_sha = schema.sha256_file(where)
    if manifest_sha256 is not None and man_sha != manifest_sha256:
        log.warning("%s changed since the checkpoint (sha256 %s -> %s); the data position may not "
                    "match", where, manifest_sha256[:12], man_sha[:12])
    return CorpusInfo(root, manifest, man_sha, tok_sha, vocab)


def check_shards(corpus: CorpusInfo, split: str, *, verify: bool = True,
                 skip_corrupt: bool = False) -> tuple[list[ShardRef], list[str]]:
    """The split's usable shards and the paths of those skipped as corrupt."""
    good, skipped = [], []
    for info in corpus.manifest.shards_for(split):
        path = corpus.root / info.path
        problem = _shard_problem(path, info, verify)
        if problem is None:
            good.append(ShardRef(str(path), info.num_examples))
        elif skip_corrupt:
            log.warning("skipping corrupt shard %s: %s", path, problem)
            skipped.append(str(path))
        else:
            raise CorruptShardError(f"{path}: {problem} (set data.skip_corrupt=true to skip it)")
    if skipped:
        log.warning("%d of %d %s shards skipped as corrupt", len(skipped), len(skipped) + len(good), split)
    return good, skipped


def _shard_problem(path: Path, info: schema.ShardInfo, verify: bool) -> str | None:
    if not path.is_file():
        return "missing"
    size = path.stat().st_size
    if size != info.bytes:
        return f"{size} bytes, manifest says {info.bytes} (truncated or altered)"
    if verify and schema.sha256_file(path) != info.sha256:
        return "sha256 differs from the manifest"
    return None


@dataclass(frozen=True)
class StreamPlan:
    """Which examples this rank reads in which order: see the module docstring."""
    shards: tuple[ShardRef, ...]
    seq_len: int
    micro_batch: int
    rank: int = 0
    world_size: int = 1
    seed: int = 0
    shuffle_block: int = 2000
    shuffle: bool = True
    num_examples: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "num_examples", sum(s.num_examples for s in self.shards))
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} outside world of {self.world_size}")

    @property
    def batches_per_epoch(self) -> int:
        return (self.num_examples // self.world_size) // self.micro_batch

    @property
    def dropped_per_epoch(self) -> int:
        return self.num_examples - self.world_size * self.batches_per_epoch * self.micro_batch

    def shard_order(self, epoch: int) -> np.ndarray:
        n = len(self.shards)
        if not self.shuffle:
            return np.arange(n)
        return np.random.default_rng([self.seed, epoch]).permutation(n)

    def source_positions(self, epoch: int, positions: np.ndarray) -> np.ndarray:
        """Map shuffled stream positions to positions in the concatenated shard stream."""
        if not self.shuffle:
            return positions
        k = self.shuffle_block
        out = np.empty_like(positions)
        for block in np.unique(positions // k):
            start = block * k
            size = min(k, self.num_examples - start)
            perm = np.random.default_rng([self.seed, epoch, int(block)]).permutation(size)
            sel = positions // k == block
            out[sel] = start + perm[positions[sel] - start]
        return out

    def batch_positions(self, epoch: int, batch: int) -> np.ndarray:
        """Source positions (concatenated-stream order) of one of this rank's micro batches."""
        span = self.num_examples // self.world_size
        first = self.rank * span + batch * self.micro_batch
        return self.source_positions(epoch, np.arange(first, first + self.micro_batch))


class _ShardCache:
    """Raw samples of the shards the current shuffle block touches (by position in the epoch's
    shard order); shards wholly before the block are dropped, so memory is about one block plus
    the shards it straddles."""

    def __init__(self, ordered: list[ShardRef]):
        self.ordered = ordered
        self.loaded: dict[int, list[dict]] = {}

    def get(self, index: int) -> list[dict]:
        if index not in self.loaded:
            self.loaded[index] = read_shard(self.ordered[index])
        return self.loaded[index]

    def evict_before(self, index: int) -> None:
        for i in [i for i in self.loaded if i < index]:
            del self.loaded[i]


def read_shard(shard: ShardRef) -> list[dict]:
    """All samples of a shard, via WebDataset's tar iterator (members grouped by key)."""
    try:
        with open(shard.path, "rb") as f:
            files = ({**m, "__url__": shard.path} for m in tar_file_iterator(f))
            samples = list(group_by_keys(files))
    except Exception as exc:  # tarfile/webdataset raise several types for a damaged tar
        raise CorruptShardError(f"{shard.path}: unreadable WebDataset tar ({exc!r})") from exc
    if len(samples) != shard.num_examples:
        raise CorruptShardError(f"{shard.path}: {len(samples)} samples, manifest says {shard.num_examples}")
    return samples


def collate(samples: list[dict], *, seq_len: int, shard_of: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad to ``seq_len`` with 0 (fixed shapes: no recompiles, bitwise-stable steps)."""
    ids = np.zeros((len(samples), seq_len), np.int64)
    seg = np.zeros((len(samples), seq_len), np.int64)
    for i, (s, path) in enumerate(zip(samples, shard_of)):
        try:
            a = schema.decode_array(s[schema.INPUT_IDS])
            b = schema.decode_array(s[schema.SEGMENT_IDS])
        except (KeyError, ValueError) as exc:
            raise CorruptShardError(f"{path}: sample {s.get('__key__')}: bad members ({exc!r})") from exc
        if a.ndim != 1 or a.shape != b.shape or len(a) > seq_len:
            raise CorruptShardError(f"{path}: sample {s['__key__']}: shape {a.shape}/{b.shape} does not "
                                    f"fit seq_len {seq_len}")
        ids[i, : len(a)] = a
        seg[i, : len(b)] = b
    return torch.from_numpy(ids), torch.from_numpy(seg)


class EpochStream(torch.utils.data.IterableDataset):
    """One rank's micro batches of one epoch from ``start`` on; worker-split as in the docstring."""

    def __init__(self, plan: StreamPlan, epoch: int, start: int = 0, stop: int | None = None):
        self.plan, self.epoch, self.start = plan, epoch, start
        self.stop = plan.batches_per_epoch if stop is None else min(stop, plan.batches_per_epoch)

    def __iter__(self) -> Iterator[Batch]:
        info = torch.utils.data.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info else (0, 1)
        order = self.plan.shard_order(self.epoch)
        ordered = [self.plan.shards[i] for i in order]
        bounds = np.cumsum([0] + [s.num_examples for s in ordered])
        cache = _ShardCache(ordered)
        block = self.plan.shuffle_block if self.plan.shuffle else self.plan.micro_batch
        for batch in range(self.start + wid, self.stop, nw):
            src = self.plan.batch_positions(self.epoch, batch)
            where = np.searchsorted(bounds, src, side="right") - 1
            block_start = (src.min() // block) * block
            cache.evict_before(int(np.searchsorted(bounds, block_start, side="right") - 1))
            samples, paths = [], []
            for pos, si in zip(src, where):
                samples.append(cache.get(int(si))[pos - bounds[si]])
                paths.append(ordered[si].path)
            ids, seg = collate(samples, seq_len=self.plan.seq_len, shard_of=paths)
            yield Batch(ids, seg, [s["__key__"] for s in samples], DataPosition(self.epoch, batch))


def _identity(x):
    return x


class TrainStream:
    """Endless iterator of a rank's micro batches across epochs, resumable at ``position``."""

    def __init__(self, plan: StreamPlan, *, num_workers: int = 2, start: DataPosition = DataPosition()):
        if plan.batches_per_epoch < 1:
            raise ValueError(f"{plan.num_examples} examples cannot fill one micro batch of {plan.micro_batch} "
                             f"on each of {plan.world_size} ranks")
        self.plan, self.num_workers, self.position = plan, num_workers, start
        if plan.dropped_per_epoch:
            log.info("rank %d: %d examples per epoch left over (equal steps on %d ranks)",
                     plan.rank, plan.dropped_per_epoch, plan.world_size)

    def loader(self, epoch: int, start: int) -> torch.utils.data.DataLoader:
        # An explicit generator: otherwise creating the iterator draws from the global torch RNG,
        # and a resumed run (which creates it at another step) would diverge from the original.
        return torch.utils.data.DataLoader(
            EpochStream(self.plan, epoch, start), batch_size=None, num_workers=self.num_workers,
            collate_fn=_identity, generator=torch.Generator().manual_seed(self.plan.seed),
            prefetch_factor=4 if self.num_workers else None, persistent_workers=False)

    def __iter__(self) -> Iterator[Batch]:
        while True:
            epoch = self.position.epoch
            for batch in self.loader(epoch, self.position.batch):
                nxt = batch.position.batch + 1
                # canonical: the end of an epoch is the start of the next one
                self.position = (DataPosition(epoch, nxt) if nxt < self.plan.batches_per_epoch
                                 else DataPosition(epoch + 1, 0))
                yield batch
            self.position = DataPosition(max(self.position.epoch, epoch + 1), 0)


def eval_batches(plan: StreamPlan, num_batches: int) -> Iterator[Batch]:
    """The first ``num_batches`` of this rank's validation span: the same examples at every eval."""
    yield from EpochStream(plan, epoch=0, start=0, stop=num_batches)
