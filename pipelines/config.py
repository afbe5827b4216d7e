"""Typed configuration of the corpus pipeline, one dataclass per stage.

Defaults follow the ELECTRA paper and the usual web-text heuristics (datatrove/Gopher style).
``CorpusConfig.from_dict`` rejects unknown keys so a typo never silently falls back to a default.
Each stage's cache key is derived from its own section (``stage_key``), so changing a filter
threshold reruns filtering and everything after it, but not ingestion.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class IngestConfig:
    # "file": a whole file is one document; "blank_line": blank-line-separated documents;
    # "line": every line is a document. JSONL/Parquet always give one document per record.
    text_mode: str = "blank_line"
    jsonl_field: str = "text"
    parquet_column: str = "text"
    # A single document larger than this is quarantined ("oversize") instead of read into memory.
    max_document_bytes: int = 16 << 20
    # Documents per Ray Data block produced by the reader.
    batch_size: int = 1000


@dataclass
class FilterConfig:
    unicode_form: str = "NFC"  # "NFC" | "NFKC" | "none"
    min_chars: int = 50
    max_chars: int = 1_000_000
    min_words: int = 5
    max_words: int = 200_000
    min_mean_word_length: float = 2.0
    max_mean_word_length: float = 12.0
    min_alpha_ratio: float = 0.6  # share of words with at least one alphabetic character
    max_symbol_ratio: float = 0.1  # '#' and '...' per word
    max_repeated_line_ratio: float = 0.3  # share of lines that duplicate another line
    max_repeated_line_char_ratio: float = 0.2
    max_bullet_line_ratio: float = 0.9
    max_ellipsis_line_ratio: float = 0.3
    min_stop_words: int = 2  # English stop words ("the", "and", ...); 0 disables
    max_top_2gram_ratio: float = 0.20  # char share of the most frequent word 2-gram


@dataclass
class DedupConfig:
    exact: bool = True
    near: bool = True
    ngram: int = 5  # word n-grams (shingles)
    num_bands: int = 14
    rows_per_band: int = 8  # num_perm = bands * rows = 112; threshold ~ (1/b)^(1/r) ~ 0.72
    seed: int = 1
    max_cc_iterations: int = 50


@dataclass
class TokenizerConfig:
    kind: str = "wordpiece"  # "wordpiece" | "unigram"
    vocab_size: int = 30522
    lowercase: bool = True
    strip_accents: bool = True
    min_frequency: int = 2
    sample_bytes: int = 256 << 20  # bound on the text the tokenizer is trained on
    # An existing tokenizer.json or vocab.txt to use instead of training one.
    pretrained: str | None = None


@dataclass
class PackConfig:
    seq_len: int = 128
    single_segment_prob: float = 0.10
    short_seq_prob: float = 0.05
    short_seq_min: int = 5
    # A line longer than a whole example is split into example-sized pieces instead of being
    # truncated to one example as in the original code (which loses the rest of the line).
    split_long_lines: bool = True
    validation_fraction: float = 0.01
    seed: int = 12345


@dataclass
class ShardConfig:
    target_bytes: int = 100 << 20
    min_shards_per_split: int = 16  # small corpora get smaller shards so every rank/worker has several


@dataclass
class CorpusConfig:
    ingest: IngestConfig = field(default_factory=IngestConfig)
    filter: FilterConfig = field(default_factory=FilterConfig)
    dedup: DedupConfig = field(default_factory=DedupConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    pack: PackConfig = field(default_factory=PackConfig)
    shard: ShardConfig = field(default_factory=ShardConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CorpusConfig:
        return _build(cls, d, "corpus")

    def stage_key(self, *sections: str, upstream: str = "") -> str:
        """Hash of the named sections plus an upstream key: the cache key of a stage's output."""
        payload = {s: dataclasses.asdict(getattr(self, s)) for s in sections}
        blob = json.dumps({"upstream": upstream, "config": payload}, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


def _build(cls: type, d: dict[str, Any], where: str) -> Any:
    if not isinstance(d, dict):
        raise TypeError(f"{where}: expected a mapping, got {type(d).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - set(fields))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; known: {sorted(fields)}")
    kwargs = {}
    for name, value in d.items():
        default = getattr(cls(), name)
        if dataclasses.is_dataclass(default):
            kwargs[name] = _build(type(default), value, f"{where}.{name}")
        else:
            kwargs[name] = value
    return cls(**kwargs)
