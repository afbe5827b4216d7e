"""Test helper: write a tiny but valid format-2 corpus without running the corpus pipeline.

The layout is exactly the contract of ``pipelines.schema``: ``manifest.json``, the tokenizer in
``tokenizer/<key>/`` (a real ``tokenizers`` WordPiece ``tokenizer.json`` + ``vocab.txt`` +
``tokenizer_config.json``, named by ``manifest.tokenizer.path``) and compact WebDataset shards
``shards/<generation>/{split}-NNNNNN.tar`` written by ``schema.encode_shard`` with small chunks,
so every shard holds several chunk samples. Text is the project's synthetic English-like prose,
so a tiny model has something to learn and its loss falls. Shard sizes are given explicitly so
tests can build awkward splits (counts not divisible by ranks x workers, a one-example shard).

``upload_corpus`` copies a written corpus to another location (``s3://bucket/prefix``) file by
file through ``common.storage``, the manifest last, as build-corpus commits.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from common import storage
from common.hashing import sha256_bytes
from pipelines import schema
from synthetic.prose import sentence

SPECIALS = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}
GENERATION = "g0"
TOKENIZER_PATH = f"{schema.TOKENIZER_DIR}/wordpiece-test"
CHUNK_TOKENS = 96  # a few examples per chunk at seq_len 32: shards hold several chunks


def _train_tokenizer(texts: list[str], vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=list(SPECIALS))
    tok.train_from_iterator(texts, trainer=trainer)
    tok.post_processor = processors.BertProcessing(("[SEP]", 3), ("[CLS]", 2))
    return tok


def _write_tokenizer(tok: Tokenizer, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    (out / "vocab.txt").write_text("".join(f"{t}\n" for t, _ in vocab))
    (out / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))


def _example(tok: Tokenizer, rng: random.Random, seq_len: int) -> tuple[list[int], int]:
    """``[CLS] A [SEP] B [SEP]`` ids and the index of segment B's first token."""
    target = seq_len if rng.random() > 0.2 else rng.randint(8, seq_len)
    a = tok.encode(sentence(rng), add_special_tokens=False).ids
    b: list[int] = []
    while len(a) + len(b) + 3 < target:  # fill to the target length, as the packer does
        b += tok.encode(sentence(rng), add_special_tokens=False).ids
    a = a[: max(1, (target - 3) // 2)]
    b = b[: max(0, target - len(a) - 3)]
    return [2] + a + [3] + b + [3], len(a) + 2


def _shard(tok: Tokenizer, rng: random.Random, n: int, seq_len: int, first_uid: int) -> schema.Examples:
    """``n`` examples from documents of 1-3 examples each (keys: uid, ordinal in the document)."""
    ids, b_start, uids, ordinals = [], [], [], []
    uid, ordinal = first_uid, 0
    for _ in range(n):
        x, b = _example(tok, rng, seq_len)
        ids.append(x)
        b_start.append(b)
        uids.append(uid)
        ordinals.append(ordinal)
        ordinal += 1
        if rng.random() < 0.5:
            uid, ordinal = uid + 1, 0
    tokens = np.asarray([t for x in ids for t in x], np.int64)
    return schema.Examples(tokens, [len(x) for x in ids], b_start, uids, ordinals)


def write_tiny_corpus(root: str | Path, *, seq_len: int = 32, train_shards: tuple[int, ...] = (10, 7, 13),
                      validation_shards: tuple[int, ...] = (6,), vocab_size: int = 200,
                      seed: int = 0, tokenizer_from: str | Path | None = None) -> Path:
    """Write a corpus with the given number of examples per shard; return its directory.
    ``tokenizer_from``: another tiny corpus whose tokenizer this one shares (a mixture's corpora;
    training one is not bitwise reproducible), with examples drawn from ``seed`` as usual."""
    root = Path(root)
    rng = random.Random(seed)
    tok = _train_tokenizer([sentence(rng) for _ in range(400)], vocab_size)
    if tokenizer_from is not None:
        tok = Tokenizer.from_file(str(Path(tokenizer_from) / TOKENIZER_PATH / "tokenizer.json"))
    _write_tokenizer(tok, root / TOKENIZER_PATH)
    shards, splits, uid = [], {}, 1
    for split, sizes in (("train", train_shards), ("validation", validation_shards)):
        info = schema.SplitInfo()
        for index, n in enumerate(sizes):
            examples = _shard(tok, rng, n, seq_len, uid)
            uid = int(examples.uid.max()) + 1 if n else uid
            data = schema.encode_shard(examples, vocab_size=tok.get_vocab_size(), chunk_tokens=CHUNK_TOKENS)
            rel = schema.shard_name(GENERATION, split, index)
            storage.write_bytes(str(root / rel), data)
            shards.append(schema.ShardInfo(path=rel, split=split, num_examples=n, num_tokens=examples.num_tokens,
                                           bytes=len(data), sha256=sha256_bytes(data)))
            info.num_examples += n
            info.num_tokens += examples.num_tokens
            info.num_documents += len(np.unique(examples.uid))
        splits[split] = info
    manifest = schema.Manifest(
        seq_len=seq_len,
        tokenizer=schema.TokenizerInfo(kind="wordpiece", vocab_size=tok.get_vocab_size(),
                                       sha256=sha256_bytes((root / TOKENIZER_PATH / "tokenizer.json").read_bytes()),
                                       lowercase=True, special_tokens=dict(SPECIALS), path=TOKENIZER_PATH),
        splits=splits, shards=shards, stats={"generated_by": "tests/electra/_corpus.py"}, generation=GENERATION)
    manifest.save(str(root))
    return root


def shard_path(root: str | Path, split: str, index: int) -> Path:
    """The local file of shard ``index`` of ``split`` in a corpus ``write_tiny_corpus`` wrote."""
    return Path(root) / schema.shard_name(GENERATION, split, index)


def upload_corpus(source: str | Path, dest: str) -> str:
    """Copy every file of a corpus (any location) to location ``dest``, ``manifest.json`` last, as
    build-corpus commits; return ``dest``."""
    files = storage.find(str(source))
    for rel in sorted(files, key=lambda r: r == schema.MANIFEST_NAME):
        storage.write_bytes(storage.join(dest, rel), storage.read_bytes(storage.join(str(source), rel)))
    return dest
