"""Test helper: write a tiny but valid corpus directory without running the corpus pipeline.

The layout is exactly the contract of ``pipelines.schema``: ``manifest.json``, ``tokenizer/``
(a real ``tokenizers`` WordPiece ``tokenizer.json`` + ``vocab.txt``) and WebDataset tar shards
``shards/{split}-NNNNNN.tar`` whose samples come from ``encode_sample``. Text is the project's
synthetic English-like prose, so a tiny model has something to learn and its loss falls.
Shard sizes are given explicitly so tests can build awkward splits (counts not divisible by
ranks x workers, a one-sample shard, ...).
"""
from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import webdataset as wds
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from pipelines import schema
from pipelines.synthetic import sentence

SPECIALS = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}


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


def _example(tok: Tokenizer, rng: random.Random, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    target = seq_len if rng.random() > 0.2 else rng.randint(8, seq_len)
    a = tok.encode(sentence(rng), add_special_tokens=False).ids
    b: list[int] = []
    while len(a) + len(b) + 3 < target:  # fill to the target length, as the packer does
        b += tok.encode(sentence(rng), add_special_tokens=False).ids
    a = a[: max(1, (target - 3) // 2)]
    b = b[: max(0, target - len(a) - 3)]
    ids = [2] + a + [3] + b + [3]
    seg = [0] * (len(a) + 2) + [1] * (len(b) + 1)
    return np.asarray(ids, np.int32), np.asarray(seg, np.uint8)


def write_tiny_corpus(root: str | Path, *, seq_len: int = 32, train_shards: tuple[int, ...] = (10, 7, 13),
                      validation_shards: tuple[int, ...] = (6,), vocab_size: int = 200,
                      seed: int = 0) -> Path:
    """Write a corpus with the given number of examples per shard; return its directory."""
    root = Path(root)
    rng = random.Random(seed)
    tok = _train_tokenizer([sentence(rng) for _ in range(400)], vocab_size)
    _write_tokenizer(tok, root / schema.TOKENIZER_DIR)
    shards, splits, uid = [], {}, 0
    for split, sizes in (("train", train_shards), ("validation", validation_shards)):
        info = schema.SplitInfo()
        for index, n in enumerate(sizes):
            rel = schema.shard_name(split, index)
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            tokens = 0
            with wds.TarWriter(str(root / rel)) as sink:
                for _ in range(n):
                    uid += 1
                    ids, seg = _example(tok, rng, seq_len)
                    tokens += len(ids)
                    sink.write(schema.encode_sample(f"{uid:016x}-00000", ids, seg))
            shards.append(schema.ShardInfo(path=rel, split=split, num_examples=n, num_tokens=tokens,
                                           bytes=(root / rel).stat().st_size,
                                           sha256=schema.sha256_file(root / rel)))
            info.num_examples += n
            info.num_tokens += tokens
        splits[split] = info
    tok_json = root / schema.TOKENIZER_DIR / "tokenizer.json"
    manifest = schema.Manifest(
        seq_len=seq_len,
        tokenizer=schema.TokenizerInfo(kind="wordpiece", vocab_size=tok.get_vocab_size(),
                                       sha256=schema.sha256_file(tok_json), lowercase=True,
                                       special_tokens=dict(SPECIALS)),
        splits=splits, shards=shards, stats={"generated_by": "tests/electra/_corpus.py"})
    manifest.save(root)
    return root
