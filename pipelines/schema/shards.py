"""Examples and the compact shard format: encoding a split's examples into WebDataset tars and
reading them back (the format is described in ``pipelines.schema``)."""
from __future__ import annotations

import io
import tarfile
import threading
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np

from pipelines.schema.layout import CHUNK_TOKENS, KEYS, LAYOUT, MEMBERS, TOKENS, example_key, token_dtype


@dataclass
class Examples:
    """Examples as flat arrays (one shard, one chunk, or a batch of the pack stage)."""
    tokens: np.ndarray  # 1-D, all examples concatenated
    lengths: np.ndarray  # (n,) int64
    b_start: np.ndarray  # (n,) int64: index of the first segment-B token (== length: no B)
    uid: np.ndarray  # (n,) uint64
    ordinal: np.ndarray  # (n,) int64
    offsets: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.lengths = np.asarray(self.lengths, np.int64)
        self.b_start = np.asarray(self.b_start, np.int64)
        self.uid = np.asarray(self.uid).astype(np.uint64)
        self.ordinal = np.asarray(self.ordinal, np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int64)

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def num_tokens(self) -> int:
        return int(self.offsets[-1])

    def ids(self, i: int) -> np.ndarray:
        return self.tokens[self.offsets[i]:self.offsets[i + 1]]

    def segments(self, i: int) -> np.ndarray:
        seg = np.zeros(int(self.lengths[i]), np.int64)
        seg[int(self.b_start[i]):] = 1
        return seg

    def key(self, i: int) -> str:
        return example_key(self.uid[i], self.ordinal[i])

    def keys(self) -> list[str]:
        return [self.key(i) for i in range(len(self))]

    def take(self, order: np.ndarray) -> Examples:
        """The examples at ``order``, in that order."""
        order = np.asarray(order, np.int64)
        pieces = [self.tokens[self.offsets[i]:self.offsets[i + 1]] for i in order]
        tokens = np.concatenate(pieces) if pieces else self.tokens[:0]
        return Examples(tokens, self.lengths[order], self.b_start[order], self.uid[order], self.ordinal[order])

    @staticmethod
    def concat(parts: list[Examples]) -> Examples:
        if not parts:
            return Examples(np.zeros(0, np.int32), [], [], [], [])
        return Examples(np.concatenate([p.tokens for p in parts]), np.concatenate([p.lengths for p in parts]),
                        np.concatenate([p.b_start for p in parts]), np.concatenate([p.uid for p in parts]),
                        np.concatenate([p.ordinal for p in parts]))

    def check(self, where: str) -> None:
        """Raise ``ValueError`` naming ``where`` when the arrays are not a valid set of examples."""
        n = len(self.lengths)
        if not (len(self.b_start) == len(self.uid) == len(self.ordinal) == n):
            raise ValueError(f"{where}: layout and keys disagree on the number of examples")
        if self.tokens.ndim != 1 or self.num_tokens != len(self.tokens):
            raise ValueError(f"{where}: lengths sum to {self.num_tokens}, tokens hold {len(self.tokens)}")
        if n and ((self.lengths < 2).any() or (self.b_start < 2).any() or (self.b_start > self.lengths).any()):
            raise ValueError(f"{where}: an example is shorter than [CLS] [SEP] or its segment B "
                             "starts outside it")


# ------------------------------------------------------------------------------ encoding
def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def _tar_info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, 0, 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    return info


def chunk_bounds(lengths: np.ndarray, chunk_tokens: int) -> list[tuple[int, int]]:
    """Example ranges of the chunks: a chunk closes once it holds ``chunk_tokens`` tokens."""
    bounds, start, acc = [], 0, 0
    for i, n in enumerate(np.asarray(lengths, np.int64)):
        acc += int(n)
        if acc >= chunk_tokens:
            bounds.append((start, i + 1))
            start, acc = i + 1, 0
    if start < len(lengths):
        bounds.append((start, len(lengths)))
    return bounds


def encode_shard(examples: Examples, *, vocab_size: int, chunk_tokens: int = CHUNK_TOKENS,
                 where: str = "encode_shard") -> bytes:
    """The shard's tar bytes: examples sorted by key, cut into chunks (module docstring).
    ``where`` (the shard's name) prefixes every error, with the offending example's key."""
    examples.check(where)
    order = np.lexsort((examples.ordinal, examples.uid))
    ex = examples.take(order)
    keys = np.stack([ex.uid, ex.ordinal.astype(np.uint64)], axis=1) if len(ex) else np.zeros((0, 2), np.uint64)
    same = np.flatnonzero((keys[1:] == keys[:-1]).all(axis=1)) if len(keys) > 1 else []
    if len(same):
        raise ValueError(f"{where}: duplicate example key {ex.key(int(same[0]))}")
    bad = np.flatnonzero((ex.tokens < 0) | (ex.tokens >= vocab_size))
    if len(bad):
        i = int(np.searchsorted(ex.offsets, bad[0], side="right") - 1)
        raise ValueError(f"{where}: example {ex.key(i)} has token id {int(ex.tokens[bad[0]])} outside the "
                         f"vocabulary of {vocab_size}")
    dtype = token_dtype(vocab_size)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for c, (lo, hi) in enumerate(chunk_bounds(ex.lengths, chunk_tokens)):
            members = {
                TOKENS: ex.tokens[ex.offsets[lo]:ex.offsets[hi]].astype(dtype),
                LAYOUT: np.stack([ex.lengths[lo:hi], ex.b_start[lo:hi]], axis=1).astype(np.uint32),
                KEYS: keys[lo:hi].astype(np.uint64),
            }
            for ext in MEMBERS:
                payload = _npy(members[ext])
                tar.addfile(_tar_info(f"c{c:06d}.{ext}", len(payload)), io.BytesIO(payload))
    return buf.getvalue()


# ------------------------------------------------------------------------------ decoding
# np.load parses the .npy header with ast.literal_eval, and CPython 3.11's AST builder keeps its
# recursion depth per interpreter, not per thread (gh-106905): loaders decoding shards in several
# threads at once failed now and then with "SystemError: AST constructor recursion depth
# mismatch". One load at a time; the arrays are small copies.
_NPY_LOCK = threading.Lock()


def _load(payload: bytes, where: str) -> np.ndarray:
    try:
        with _NPY_LOCK:
            return np.load(io.BytesIO(payload), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(f"{where}: not a .npy array ({exc})") from exc


def decode_sample(sample: dict[str, Any], where: str = "sample") -> Examples:
    """One WebDataset sample (a chunk: ``tokens.npy``/``layout.npy``/``keys.npy`` as bytes or
    already-decoded arrays) as ``Examples``."""
    arrays = {}
    for ext in MEMBERS:
        if ext not in sample:
            raise ValueError(f"{where}: member {ext} missing")
        value = sample[ext]
        arrays[ext] = value if isinstance(value, np.ndarray) else _load(value, f"{where}.{ext}")
    layout, keys = arrays[LAYOUT], arrays[KEYS]
    if layout.ndim != 2 or layout.shape[1:] != (2,) or keys.shape != layout.shape:
        raise ValueError(f"{where}: layout {layout.shape} / keys {keys.shape} are not (n, 2)")
    ex = Examples(arrays[TOKENS], layout[:, 0], layout[:, 1], keys[:, 0], keys[:, 1].astype(np.int64))
    ex.check(where)
    return ex


class _EndMarkedTarInfo(tarfile.TarInfo):
    """Headers that accept only the end-of-archive block as the end: ``tarfile`` otherwise ends
    the member list quietly at a header cut short, missing or garbled, so a truncated shard
    would read as a shorter valid one."""

    @classmethod
    def fromtarfile(cls, tar: tarfile.TarFile) -> tarfile.TarInfo:
        try:
            return super().fromtarfile(tar)
        except (tarfile.EmptyHeaderError, tarfile.TruncatedHeaderError, tarfile.InvalidHeaderError) as exc:
            raise tarfile.ReadError(f"truncated or damaged at byte {tar.offset}: {exc}") from None


def read_shard(stream: IO[bytes], where: str) -> Examples:
    """Parse a whole shard from a binary stream (read once, front to back)."""
    chunks: list[Examples] = []
    current: dict[str, bytes] = {}
    key = None
    try:
        with tarfile.open(fileobj=stream, mode="r|", tarinfo=_EndMarkedTarInfo) as tar:
            for member in tar:
                if not member.isfile():
                    raise ValueError(f"{where}: unexpected tar entry {member.name!r}")
                name, _, ext = member.name.partition(".")
                if name != key:
                    if current:
                        chunks.append(decode_sample(current, f"{where}:{key}"))
                    key, current = name, {}
                current[ext] = tar.extractfile(member).read()
    except tarfile.TarError as exc:
        raise ValueError(f"{where}: unreadable tar ({exc})") from exc
    if current:
        chunks.append(decode_sample(current, f"{where}:{key}"))
    return Examples.concat(chunks)
