"""The corpus layout's names: folders, files, format versions, shard member names, special tokens."""
from __future__ import annotations


import numpy as np

from common import storage


FORMAT_VERSION = 4
# 2: the rejected parts inline in the manifest; 3: in one JSON file beside it (``schema.rejected``)
READABLE_VERSIONS = (2, 3, 4)
MANIFEST_NAME = "manifest.json"
TOKENIZER_DIR = "tokenizer"
SHARDS_DIR = "shards"
INDEX_DIR = "index"  # index/<generation>/: the dedup index of that generation's kept documents
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
