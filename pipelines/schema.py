"""The corpus contract: the corpus layout, the compact shard format and ``manifest.json``.

This is the one module the trainer (``electra/data.py``) imports from ``pipelines``; everything
another tool reads from a corpus is defined here once. A corpus is a location (local path or
URI) holding::

    manifest.json                          the commit point: what it does not list does not exist
    tokenizer/<key>/                       tokenizer.json, vocab.txt, tokenizer_config.json
    shards/<generation>/{train,validation}-NNNNNN.tar
    rejected/<stage>-<key>/part-*.jsonl.zst
    .work/                                 stage caches (build-corpus's, safe to delete)

Every folder named by a key is written once and never changed: a new build with other inputs
writes new folders, then replaces ``manifest.json`` (one atomic write), then deletes folders that
neither the new nor the previous manifest names. A reader that loaded the old manifest keeps
reading consistent files; a build killed before its manifest leaves the old corpus untouched.

**Shards** are plain WebDataset tars. A sample is a *chunk* of consecutive examples (not one
example), so the 512-byte tar header and padding are paid per chunk, not per example. Chunk
``c`` (key ``cNNNNNN``, no dots) has three ``.npy`` members:

* ``cNNNNNN.tokens.npy`` — every input id of the chunk's examples concatenated, ``[CLS] A [SEP]
  B [SEP]`` each, unpadded; ``uint16`` when the vocabulary has at most 65,536 entries, else
  ``int32`` (``token_dtype``);
* ``cNNNNNN.layout.npy`` — ``uint32`` of shape (n, 2): per example its length and the index of
  its first segment-B token (the length itself when there is no segment B). Segment ids are
  0 before that index and 1 from it on, which is all ELECTRA's layout can express;
* ``cNNNNNN.keys.npy`` — ``uint64`` of shape (n, 2): the document uid and the example's
  ordinal in its document (the example key ``{uid:016x}-{ordinal:05d}``).

A shard costs 2 bytes per token plus 24 per example and ~2 KB per chunk (``bytes_per_token`` in
the manifest's statistics). ``webdataset`` decodes the members with its default ``.npy``
decoder, ``tarfile`` + ``numpy.load`` read them too, and ``read_shard`` parses a shard from a
stream. Chunks and the examples in them are in key order, and tar headers are fixed (mtime 0,
uid/gid 0, mode 0644): the same examples always give byte-identical shards.
"""
from __future__ import annotations

import io
import tarfile
from dataclasses import asdict, dataclass, field
from typing import IO, Any

import numpy as np

from common import storage

FORMAT_VERSION = 2
MANIFEST_NAME = "manifest.json"
TOKENIZER_DIR = "tokenizer"
SHARDS_DIR = "shards"
REJECTED_DIR = "rejected"
WORK_DIR = ".work"
SPLITS = ("train", "validation")
# A tokenizer folder's files, by the names Hugging Face gives them (the corpus's
# ``tokenizer/<key>/``, a run's or an exported model's tokenizer): ``tokenizer.json`` always (its
# sha256 is the manifest's ``tokenizer.sha256``), ``vocab.txt`` for a BERT-compatible WordPiece,
# ``tokenizer_config.json`` naming the transformers class and its lower-casing.
TOKENIZER_JSON = "tokenizer.json"
VOCAB_TXT = "vocab.txt"
TOKENIZER_CONFIG = "tokenizer_config.json"
TOKENIZER_FILES = (TOKENIZER_JSON, VOCAB_TXT, TOKENIZER_CONFIG)

TOKENS, LAYOUT, KEYS = "tokens.npy", "layout.npy", "keys.npy"
MEMBERS = (TOKENS, LAYOUT, KEYS)
CHUNK_TOKENS = 1 << 16  # a chunk closes once it holds this many tokens

# Special tokens every tokenizer the pipeline trains or accepts must define. [PAD] must be id 0:
# the trainer derives the attention mask as ``ids != 0``.
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def shard_name(generation: str, split: str, index: int) -> str:
    """Relative path of a shard inside the corpus."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
    return f"{SHARDS_DIR}/{generation}/{split}-{index:06d}.tar"


def tokenizer_json(corpus: str, folder: str = TOKENIZER_DIR) -> str:
    """Where a corpus's tokenizer.json is: ``folder`` is the manifest's ``tokenizer.path``
    (relative to the corpus; ``tokenizer/<key>`` in a built corpus)."""
    return storage.join(corpus, folder, TOKENIZER_JSON)


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.int32)


def example_key(uid: int, ordinal: int) -> str:
    return f"{int(uid) & (2 ** 64 - 1):016x}-{int(ordinal):05d}"


# ------------------------------------------------------------------------------ examples
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
def _load(payload: bytes, where: str) -> np.ndarray:
    try:
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


# ------------------------------------------------------------------------------ manifest
@dataclass
class TokenizerInfo:
    kind: str  # "wordpiece" | "unigram" | "pretrained"
    vocab_size: int
    sha256: str  # of tokenizer.json
    lowercase: bool
    special_tokens: dict[str, int]  # "[PAD]" -> 0, ...
    path: str = TOKENIZER_DIR  # folder of the tokenizer files, relative to the corpus


@dataclass
class ShardInfo:
    path: str  # relative to the corpus
    split: str
    num_examples: int
    num_tokens: int
    bytes: int
    sha256: str


@dataclass
class SplitInfo:
    num_examples: int = 0
    num_tokens: int = 0
    num_documents: int = 0  # documents that produced at least one example of this split
    fill: float = 0.0  # non-pad share of positions: num_tokens / (num_examples * seq_len)


@dataclass
class RejectedInfo:
    stage: str
    path: str  # relative to the corpus
    records: int
    bytes: int


@dataclass
class Manifest:
    seq_len: int
    tokenizer: TokenizerInfo
    splits: dict[str, SplitInfo]
    shards: list[ShardInfo]
    stats: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    rejected: list[RejectedInfo] = field(default_factory=list)
    generation: str = ""
    build_key: str = ""  # identity of everything that decided this corpus (a rerun compares it)
    # Filter stage, per detected language: {"en": {"kept": n, "dropped": m}, ...} (the documents
    # the language block looked at; empty when it is not in filter.blocks).
    languages: dict[str, dict[str, int]] = field(default_factory=dict)
    # What the build found worth a look, e.g. a split whose examples are mostly padding.
    warnings: list[str] = field(default_factory=list)
    # Filter stage, when decontamination ran: the n-gram length, the protected files (uri, task,
    # sha256, bytes, texts, ngrams) and the documents each task's n-grams removed.
    decontamination: dict[str, Any] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION

    def shards_for(self, split: str) -> list[ShardInfo]:
        return [s for s in self.shards if s.split == split]

    def referenced_folders(self) -> set[str]:
        """The key-named folders this manifest reads from (relative to the corpus)."""
        out = {self.tokenizer.path.rstrip("/")}
        out.update(s.path.rsplit("/", 1)[0] for s in self.shards)
        out.update(r.path.rsplit("/", 1)[0] for r in self.rejected)
        return out

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Manifest:
        version = d.get("format_version")
        if version != FORMAT_VERSION:
            raise ValueError(f"manifest format_version {version!r}; this code reads {FORMAT_VERSION} "
                             "(rebuild the corpus with build-corpus)")
        return cls(
            seq_len=int(d["seq_len"]),
            tokenizer=TokenizerInfo(**d["tokenizer"]),
            splits={k: SplitInfo(**v) for k, v in d["splits"].items()},
            shards=[ShardInfo(**s) for s in d["shards"]],
            stats=d.get("stats", {}),
            config=d.get("config", {}),
            rejected=[RejectedInfo(**r) for r in d.get("rejected", [])],
            generation=d.get("generation", ""),
            build_key=d.get("build_key", ""),
            languages=d.get("languages", {}),
            warnings=list(d.get("warnings", [])),
            decontamination=d.get("decontamination", {}),
            format_version=version,
        )

    def encode(self) -> bytes:
        import json

        return (json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n").encode()

    def save(self, corpus: str) -> str:
        """Commit: one atomic write of ``manifest.json``."""
        uri = storage.join(str(corpus), MANIFEST_NAME)
        storage.write_bytes(uri, self.encode())
        return uri

    @classmethod
    def load(cls, corpus: str) -> Manifest:
        return cls.parse(read_manifest_bytes(corpus), storage.join(str(corpus), MANIFEST_NAME))

    @classmethod
    def parse(cls, data: bytes, where: str) -> Manifest:
        import json

        try:
            return cls.from_dict(json.loads(data))
        except (KeyError, TypeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{where}: malformed manifest ({exc!r})") from exc
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from exc


def read_manifest_bytes(corpus: str) -> bytes:
    uri = storage.join(str(corpus), MANIFEST_NAME)
    try:
        return storage.read_bytes(uri)
    except storage.StorageError as exc:
        raise FileNotFoundError(f"{uri}: no manifest; is {corpus} a corpus built by build-corpus? "
                                f"({exc})") from exc
