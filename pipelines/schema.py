"""The corpus contract: shard sample layout and ``manifest.json``.

This is the one module the trainer (``electra/data.py``) imports from ``pipelines``. Everything
that another tool reads from a corpus directory is defined here once:

* A corpus directory holds ``manifest.json``, ``tokenizer/`` (``tokenizer.json``, ``vocab.txt``),
  ``shards/{train,validation}-NNNNNN.tar`` and ``rejected/``.
* A shard is a plain WebDataset tar: one sample per packed ELECTRA example, members
  ``<key>.input_ids.npy`` and ``<key>.segment_ids.npy`` (unpadded 1-D integer arrays, ``.npy``
  format so ``webdataset``'s default decoder and ``numpy.load`` both read them).
* The manifest records format version, sequence length, tokenizer identity (kind, vocab size,
  sha256 of ``tokenizer.json``, lower-case flag, special token ids), per-split example and token
  counts, per-shard ``{path, split, num_examples, bytes, sha256}``, pipeline statistics and the
  config used. A reader checks the sha256s before trusting a shard.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
TOKENIZER_DIR = "tokenizer"
SHARDS_DIR = "shards"
REJECTED_DIR = "rejected"
SPLITS = ("train", "validation")

INPUT_IDS = "input_ids.npy"
SEGMENT_IDS = "segment_ids.npy"
SAMPLE_KEYS = (INPUT_IDS, SEGMENT_IDS)
# Token ids are stored as int32 (vocabularies beyond 2**31 do not exist); segment ids as uint8.
ID_DTYPE = np.int32
SEGMENT_DTYPE = np.uint8

# Special tokens every tokenizer the pipeline trains or accepts must define. [PAD] must be id 0:
# the trainer derives the attention mask as ``ids != 0``.
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def shard_name(split: str, index: int) -> str:
    """Relative path of a shard inside the corpus directory."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
    return f"{SHARDS_DIR}/{split}-{index:06d}.tar"


def _npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def encode_sample(key: str, input_ids: Any, segment_ids: Any) -> dict[str, bytes | str]:
    """One example as WebDataset members (``__key__`` plus ``.npy`` payloads)."""
    ids = np.asarray(input_ids, dtype=ID_DTYPE)
    seg = np.asarray(segment_ids, dtype=SEGMENT_DTYPE)
    if ids.ndim != 1 or ids.shape != seg.shape:
        raise ValueError(f"sample {key}: input_ids {ids.shape} and segment_ids {seg.shape} differ")
    if "/" in key or key.startswith(".") or "." in key:
        # A key becomes a tar member name: no path separators, no dots (WebDataset splits the
        # member name at the first dot), so members can never land outside the output folder.
        raise ValueError(f"invalid sample key {key!r}")
    return {"__key__": key, INPUT_IDS: _npy_bytes(ids), SEGMENT_IDS: _npy_bytes(seg)}


def decode_array(payload: bytes) -> np.ndarray:
    """Read one ``.npy`` member without ever unpickling."""
    return np.load(io.BytesIO(payload), allow_pickle=False)


@dataclass
class TokenizerInfo:
    kind: str  # "wordpiece" | "unigram" | "pretrained"
    vocab_size: int
    sha256: str  # of tokenizer/tokenizer.json
    lowercase: bool
    special_tokens: dict[str, int]  # "[PAD]" -> 0, ...


@dataclass
class ShardInfo:
    path: str  # relative to the corpus directory
    split: str
    num_examples: int
    num_tokens: int
    bytes: int
    sha256: str


@dataclass
class SplitInfo:
    num_examples: int = 0
    num_tokens: int = 0
    num_documents: int = 0


@dataclass
class Manifest:
    seq_len: int
    tokenizer: TokenizerInfo
    splits: dict[str, SplitInfo]
    shards: list[ShardInfo]
    stats: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION

    def shards_for(self, split: str) -> list[ShardInfo]:
        return [s for s in self.shards if s.split == split]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Manifest:
        version = d.get("format_version")
        if version != FORMAT_VERSION:
            raise ValueError(f"manifest format_version {version!r}; this code reads {FORMAT_VERSION}")
        return cls(
            seq_len=int(d["seq_len"]),
            tokenizer=TokenizerInfo(**d["tokenizer"]),
            splits={k: SplitInfo(**v) for k, v in d["splits"].items()},
            shards=[ShardInfo(**s) for s in d["shards"]],
            stats=d.get("stats", {}),
            config=d.get("config", {}),
            format_version=version,
        )

    def save(self, corpus_dir: str | Path) -> Path:
        path = Path(corpus_dir) / MANIFEST_NAME
        atomic_write_bytes(path, (json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n").encode())
        return path

    @classmethod
    def load(cls, corpus_dir: str | Path) -> Manifest:
        path = Path(corpus_dir) / MANIFEST_NAME
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no manifest; is {corpus_dir} a corpus built by build-corpus?")
        try:
            return cls.from_dict(json.loads(path.read_text()))
        except (KeyError, TypeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: malformed manifest ({exc})") from exc


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so readers see either the old file or the whole new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
