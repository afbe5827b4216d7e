"""Typed configuration of the corpus pipeline, one dataclass per stage.

Defaults follow the ELECTRA paper and the usual web-text heuristics (datatrove/Gopher style).
``CorpusConfig.from_dict`` goes through the project's one strict loader (``common.config``):
unknown keys, wrong types and values outside a field's allowed set (the ``Literal`` fields) are
errors at load time naming the key, before any stage runs. Each stage's cache key is derived
from the sections it declares in the stage table (``pipelines.stages``), so changing a filter
threshold reruns filtering and everything after it, but not ingestion.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from common import config as strict
from common.config import check


@dataclass
class IngestConfig:
    # "file": a whole file is one document; "blank_line": blank-line-separated documents;
    # "line": every line is a document. JSONL/Parquet always give one document per record.
    text_mode: Literal["file", "blank_line", "line"] = "blank_line"
    jsonl_field: str = "text"
    parquet_column: str = "text"
    # A single document larger than this is quarantined ("oversize") instead of read into memory.
    max_document_bytes: int = 16 << 20
    # Documents per Ray Data block produced by the reader.
    batch_size: int = 1000

    def validate(self) -> None:
        check(self.batch_size >= 1, "batch_size must be >= 1")
        check(self.max_document_bytes >= 1, "max_document_bytes must be >= 1")


@dataclass
class FilterConfig:
    unicode_form: Literal["NFC", "NFKC", "NFD", "NFKD", "none"] = "NFC"
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

    def validate(self) -> None:
        check(self.ngram >= 1 and self.num_bands >= 1 and self.rows_per_band >= 1,
              "ngram, num_bands and rows_per_band must be >= 1")


@dataclass
class TokenizerConfig:
    kind: Literal["wordpiece", "unigram"] = "wordpiece"
    vocab_size: int = 30522
    lowercase: bool = True
    strip_accents: bool = True
    min_frequency: int = 2
    sample_bytes: int = 256 << 20  # bound on the text the tokenizer is trained on
    sample_seed: int = 12345  # which documents make up that sample
    # An existing tokenizer.json or vocab.txt (any storage location) to use instead of training.
    pretrained: str | None = None

    def validate(self) -> None:
        check(self.vocab_size > len(("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")),
              "vocab_size must exceed the 5 special tokens")


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

    def validate(self) -> None:
        check(8 <= self.seq_len <= 65535, "seq_len must be in [8, 65535]")
        check(0 <= self.validation_fraction < 1, "validation_fraction must be in [0, 1)")
        check(2 <= self.short_seq_min <= self.seq_len, "short_seq_min must be in [2, seq_len]")


@dataclass
class ShardConfig:
    target_bytes: int = 100 << 20
    min_shards_per_split: int = 16  # small corpora get smaller shards so every rank/worker has several
    chunk_tokens: int = 1 << 16  # tokens per WebDataset sample (a chunk of examples)

    def validate(self) -> None:
        check(self.target_bytes > 0 and self.min_shards_per_split >= 1 and self.chunk_tokens >= 1,
              "target_bytes, min_shards_per_split and chunk_tokens must be positive")


@dataclass
class RejectedConfig:
    # Quarantined documents keep id, reason, detail and this many characters of text; the full
    # text only when asked for (it can be as large as the corpus itself).
    text_prefix_chars: int = 300
    full_text: bool = False


@dataclass
class CorpusConfig:
    ingest: IngestConfig = field(default_factory=IngestConfig)
    filter: FilterConfig = field(default_factory=FilterConfig)
    dedup: DedupConfig = field(default_factory=DedupConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    pack: PackConfig = field(default_factory=PackConfig)
    shard: ShardConfig = field(default_factory=ShardConfig)
    rejected: RejectedConfig = field(default_factory=RejectedConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, where: str = "corpus config") -> CorpusConfig:
        return strict.from_dict(cls, d, where=where)

    def sections(self, names: tuple[str, ...]) -> dict[str, Any]:
        """The named sections as plain dicts (what a stage's cache key covers)."""
        return {n: dataclasses.asdict(getattr(self, n)) for n in names}
