"""Typed configuration of the corpus pipeline, one dataclass per stage.

Defaults follow the ELECTRA paper and the usual web-text heuristics (datatrove/Gopher style).
``CorpusConfig.from_dict`` goes through the project's one strict loader (``common.config``):
unknown keys, wrong types and values outside a field's allowed set (the ``Literal`` fields) are
errors at load time naming the key, before any stage runs. Each stage's cache key is derived
from the sections it declares in the stage table (``pipelines.orchestration.stages``), so changing a filter
threshold reruns filtering and everything after it, but not ingestion.
"""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

from common import config as strict
from common.config import check
from pipelines.filters import registry as filter_registry
from pipelines.filters.normalize import UNICODE_FORMS
from pipelines.profiles import DEFAULT_PROFILE, ProfileName


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
    # A document that is not valid UTF-8 gets its charset detected (charset-normalizer) and is
    # decoded with it, counted per encoding; false: it is rejected as ingest:invalid_utf8.
    detect_charset: bool = True
    # Tried first for a non-UTF-8 document: used when the detector finds its reading plausible
    # (or the document is too short to judge), else the detector's own best charset.
    fallback_encoding: str = "cp1252"
    # A document with a NUL byte or a larger share of control bytes is ingest:binary.
    max_control_ratio: float = 0.05
    # Keep the documents of a compressed member cut off by the end of the file (its integrity
    # check cannot run); false: they are quarantined as ingest:corrupt_compression.
    keep_truncated_member: bool = False
    # Cut Project Gutenberg's licence header and footer off each document (the books profile);
    # the cut text is quarantined, not lost (``pipelines.ingest.boilerplate``).
    strip_boilerplate: bool = False

    def validate(self) -> None:
        import codecs

        check(self.batch_size >= 1, "batch_size must be >= 1")
        check(self.max_document_bytes >= 1, "max_document_bytes must be >= 1")
        check(0 <= self.max_control_ratio <= 1, "max_control_ratio must be in [0, 1]")
        try:
            codecs.lookup(self.fallback_encoding)
        except LookupError:
            check(False, f"fallback_encoding {self.fallback_encoding!r} is not a known codec")


# The filter blocks (``pipelines.filters``): each block module declares its name, its config
# section and its place in the order (``pipelines.filters.registry``); everything below is
# derived from those declarations, so adding a block is adding its module.
_BLOCKS = filter_registry.blocks()
FilterBlock = Literal[tuple(b.name for b in _BLOCKS)]  # type: ignore[valid-type]
FILTER_BLOCKS: tuple[str, ...] = typing.get_args(FilterBlock)
FILTER_SECTIONS = FILTER_BLOCKS  # each block is configured by the section of its name


class _FilterSettings:
    """What ``FilterConfig`` holds besides one section per block (made below from the registry):

    * ``unicode_form``: the normalisation every document gets first (``pipelines.filters.normalize``);
    * ``blocks``: the blocks run, in this order; the first block that drops a document decides
      its reason. Default: the blocks declared ``default=True``, by position;
    * ``<block>``: one section per declared block (``filter.c4``, ``filter.pii``, ...);
    * ``by_language``: per-language settings over the sections above and the language's shipped
      profile (``pipelines/language/profiles.py``): ``{"ja": {"gopher_quality": {"min_doc_words":
      30}, "lm_quality": {"reference": "s3://.../ja.txt.gz"}}}``. Checked against the sections' fields;
    * ``min_kept_share``: a build whose filter stage keeps a smaller share of its documents fails
      with the drop report's one line (``pipelines.orchestration.drop_report.check_kept``); 0 keeps
      any share (the line is then a manifest warning). It decides whether the stage's output is
      used, never what it is, so it is not in the stage's cache key (``CorpusConfig.sections``).
    """

    def validate(self) -> None:
        check(len(set(self.blocks)) == len(self.blocks), f"blocks lists a block twice: {self.blocks}")
        check(0 <= self.min_kept_share <= 1, "min_kept_share must be in [0, 1]")
        for code, sections in self.by_language.items():
            check(isinstance(code, str) and 2 <= len(code) <= 3 and code.isalpha() and code.islower(),
                  f"by_language: {code!r} is not an ISO 639 code (two or three lower-case letters)")
            check(isinstance(sections, dict), f"by_language.{code}: expected a mapping of filter sections")
            for name, values in sections.items():
                check(name in FILTER_SECTIONS, f"by_language.{code}: unknown section {name!r}; known: "
                                               f"{sorted(FILTER_SECTIONS)}")
                check(isinstance(values, dict), f"by_language.{code}.{name}: expected a mapping of fields")
                strict.from_dict(type(getattr(self, name)), {**dataclasses.asdict(getattr(self, name)), **values},
                                 where=f"by_language.{code}.{name}")

    def section(self, name: str, code: str, shipped: dict[str, dict[str, Any]]) -> Any:
        """Section ``name`` for language ``code``: this config's, the language profile's fields
        (``shipped``) where this config left the field at its default (a value the user or the
        input profile set wins), then ``by_language.<code>.<name>``."""
        base = getattr(self, name)
        default = type(base)()
        table = {k: v for k, v in shipped.get(name, {}).items() if getattr(base, k) == getattr(default, k)}
        extra = {**table, **self.by_language.get(code, {}).get(name, {})}
        return dataclasses.replace(base, **extra) if extra else base


FilterConfig = dataclasses.make_dataclass(
    "FilterConfig",
    [("unicode_form", Literal[UNICODE_FORMS], field(default="NFC")),  # type: ignore[valid-type]
     ("blocks", list[FilterBlock],  # type: ignore[valid-type]
      field(default_factory=lambda: [b.name for b in _BLOCKS if b.default])),
     *[(b.name, b.config, field(default_factory=b.config)) for b in _BLOCKS],
     ("by_language", dict, field(default_factory=dict)),
     ("min_kept_share", float, field(default=0.05))],
    bases=(_FilterSettings,), namespace={"__module__": __name__, "__doc__": _FilterSettings.__doc__})


def __getattr__(name: str) -> type:
    """A block's section class by its name (``pipelines.config.C4Config``), as before blocks
    declared their own: it lives in the block's module (``pipelines.filters.c4.C4Config``)."""
    for b in _BLOCKS:
        if b.config.__name__ == name:
            return b.config
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass
class DecontaminateConfig:
    # GLUE-format task folders, folders of them and SQuAD JSON files (any storage location;
    # pipelines/decontaminate/protected.py): a document sharing any n-gram of their dev and test
    # texts is dropped (reason decontaminate:<task>). Empty: off. build-corpus --decontaminate DIR.
    paths: list[str] = field(default_factory=list)
    ngram: int = 13  # tokens per window (GPT-3's 13-gram overlap); shorter shared fragments never drop

    def validate(self) -> None:
        check(self.ngram >= 5, "ngram must be >= 5 (shorter windows drop ordinary phrases)")


@dataclass
class DedupConfig:
    exact: bool = True
    near: bool = True
    ngram: int = 5  # word n-grams (shingles) over each run of spaced words
    # Character n-grams over each run of characters of scripts written without spaces, in the same
    # shingle set (pipelines/dedup/minhash.py): as discriminating as 5 words, and robust to edits.
    spaceless_ngram: int = 3
    num_bands: int = 14
    rows_per_band: int = 8  # num_perm = bands * rows = 112; threshold ~ (1/b)^(1/r) ~ 0.72
    # An LSH candidate is linked only when the Jaccard estimated from the two signatures reaches
    # this (pipelines/dedup/near.py); null links every candidate (datatrove's behaviour).
    jaccard_threshold: float | None = 0.7
    seed: int = 1
    max_cc_iterations: int = 50

    def validate(self) -> None:
        check(self.ngram >= 1 and self.spaceless_ngram >= 1 and self.num_bands >= 1 and self.rows_per_band >= 1,
              "ngram, spaceless_ngram, num_bands and rows_per_band must be >= 1")
        check(self.jaccard_threshold is None or 0 < self.jaccard_threshold <= 1,
              "jaccard_threshold must be in (0, 1] or null")


@dataclass
class TokenizerConfig:
    kind: Literal["wordpiece", "unigram"] = "wordpiece"
    vocab_size: int = 30522
    # Lower-casing and accent stripping (two switches). None, the default: for a trained
    # tokenizer (and a bare vocab.txt) lower-casing is on and accent stripping follows it, as in
    # BERT (cased keeps accents); what the files say for a pretrained tokenizer that says it (a
    # model folder's tokenizer_config.json, a tokenizer.json's normaliser), where a value set here
    # that contradicts them is an error (pipelines.tokenizer_pretrained).
    lowercase: bool | None = None
    strip_accents: bool | None = None
    min_frequency: int = 2
    # Characters the vocabulary may hold (rarer ones encode as [UNK]): the limit_alphabet most
    # frequent of the sample (BERT's vocabulary builders keep 1000; None: every character), and
    # beyond them as many as it takes to cover character_coverage of the sample's characters
    # (SentencePiece's rule: a text with thousands of characters keeps them; 0: the limit alone).
    limit_alphabet: int | None = 1000
    character_coverage: float = 0.9999
    sample_bytes: int = 256 << 20  # bound on the text the tokenizer is trained on
    sample_seed: int = 12345  # which documents make up that sample
    # An existing tokenizer to use instead of training (any storage location): a tokenizer.json,
    # a BERT vocab.txt, or a Hugging Face model folder (a released model's download, e.g.
    # google/electra-base-discriminator: its vocab.txt or tokenizer.json with the lower-casing of
    # its tokenizer_config.json). Which file decides: pipelines/tokenizer_pretrained.py.
    pretrained: str | None = None
    # The build measures the share of [UNK] in the tokens of a sample of the corpus, whichever
    # tokenizer (pipelines/tokenizer_coverage.py): above 1% it warns, above this it fails (a
    # tokenizer that does not cover the text); raise it to build such a corpus anyway.
    max_unk_share: float = 0.20

    def validate(self) -> None:
        check(0 <= self.max_unk_share <= 1, "max_unk_share must be in [0, 1]")
        check(self.vocab_size > len(("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")),
              "vocab_size must exceed the 5 special tokens")
        check(self.limit_alphabet is None or self.limit_alphabet >= 1, "limit_alphabet must be >= 1 or null")
        check(0 <= self.character_coverage <= 1, "character_coverage must be in [0, 1]")

    def resolved(self) -> TokenizerConfig:
        """This section with the flags unset (None) resolved as BERT resolves them: lower-casing
        on, accent stripping as lower-casing (a cased tokenizer keeps its accents). What a trained
        tokenizer and a bare vocab.txt use."""
        lowercase = self.lowercase is not False
        return dataclasses.replace(self, lowercase=lowercase,
                                   strip_accents=lowercase if self.strip_accents is None else self.strip_accents)


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
class ShuffleConfig:
    """Sizes of the storage shuffles (the dedups and the shard shuffle; pipelines/engine/shuffle.py).
    They change a build's requests, memory and speed, never its shards, so neither a stage's cache
    key nor the build's identity covers them (the manifest records them)."""
    map_file_mb: float = 128  # rows per map file: a map task sorts about 3x this in memory
    partition_mb: float = 64  # rows per partition: one reduce call holds one partition
    reduce_tasks: int = 0  # reduce tasks per shuffle; 0: one per cluster CPU, fewer for a small shuffle
    task_memory_mb: float = 256  # slices a reduce task buffers before it spills sorted runs to local disk
    slice_mb: float = 16  # the least a reduce task reads from one map file: map files hold reduce_tasks x this

    def validate(self) -> None:
        check(self.map_file_mb > 0 and self.partition_mb > 0 and self.task_memory_mb > 0 and self.slice_mb > 0,
              "map_file_mb, partition_mb, task_memory_mb and slice_mb must be > 0")
        check(self.reduce_tasks >= 0, "reduce_tasks must be >= 0 (0: one per CPU of the cluster)")

    @property
    def file_bytes(self) -> int:
        return max(1, int(self.map_file_mb * (1 << 20)))

    @property
    def partition_bytes(self) -> int:
        return max(1, int(self.partition_mb * (1 << 20)))

    @property
    def memory_bytes(self) -> int:
        return max(1, int(self.task_memory_mb * (1 << 20)))

    @property
    def slice_bytes(self) -> int:
        return max(1, int(self.slice_mb * (1 << 20)))

    def options(self) -> dict[str, Any]:
        """Keyword arguments of ``shuffle.group_apply`` (and ``shuffle``/``reduce``) for these sizes."""
        return {"file_bytes": self.file_bytes, "ranges": self.reduce_tasks or None, "memory_bytes": self.memory_bytes,
                "slice_bytes": self.slice_bytes}


@dataclass
class RejectedConfig:
    # Quarantined documents keep id, reason, detail and this many characters of text; the full
    # text only when asked for (it can be as large as the corpus itself).
    text_prefix_chars: int = 300
    full_text: bool = False


@dataclass
class CorpusConfig:
    # Which preset ``from_dict`` starts from (``pipelines.profiles``: PROFILES names them).
    profile: ProfileName = DEFAULT_PROFILE
    # The languages to keep (ISO 639-1, build-corpus --language): sets filter.language.languages,
    # and each document is filtered with its language's profile (pipelines/language/profiles.py).
    # None: filter.language.languages as configured (English by default).
    language: list[str] | None = None
    ingest: IngestConfig = field(default_factory=IngestConfig)
    filter: FilterConfig = field(default_factory=FilterConfig)
    decontaminate: DecontaminateConfig = field(default_factory=DecontaminateConfig)
    dedup: DedupConfig = field(default_factory=DedupConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    pack: PackConfig = field(default_factory=PackConfig)
    shard: ShardConfig = field(default_factory=ShardConfig)
    shuffle: ShuffleConfig = field(default_factory=ShuffleConfig)
    rejected: RejectedConfig = field(default_factory=RejectedConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, where: str = "corpus config") -> CorpusConfig:
        """Strictly load ``d`` over the preset of its ``profile`` (``pipelines.profiles``);
        ``language`` becomes ``filter.language.languages``."""
        from pipelines.profiles import merge, with_profile

        raw = with_profile(d, where=where)
        language = raw.get("language")
        if language is not None:
            if not isinstance(language, list) or not language or not all(
                    isinstance(c, str) and 2 <= len(c) <= 3 and c.isalpha() and c.islower() for c in language):
                raise strict.ConfigError(f"{where}.language: {language!r}; expected ISO 639-1 codes such as "
                                         '["ja"] or ["zh", "en"]')
            filt = d.get("filter") if isinstance(d.get("filter"), dict) else {}
            said = (filt.get("language") or {}).get("languages", language) if isinstance(filt, dict) else language
            if not isinstance(said, list) or set(said) != set(language):
                raise strict.ConfigError(f"{where}: language {language} contradicts filter.language.languages "
                                         f"{said}; give the languages once (--language)")
            raw = merge(raw, {"filter": {"language": {"languages": list(language)}}})
        return strict.from_dict(cls, raw, where=where)

    @property
    def languages(self) -> list[str] | None:
        """The languages kept (None: any), whichever key said them."""
        return self.filter.language.languages

    def sections(self, names: tuple[str, ...]) -> dict[str, Any]:
        """The named sections as plain dicts (what a stage's cache key covers). A trained
        tokenizer's section holds the flags it uses (``TokenizerConfig.resolved``): leaving them
        unset keys as setting them to what they resolve to, the same tokenizer. Its
        ``max_unk_share`` decides whether the stage's output is used, never what it is: left out
        (publish applies it again to the recorded share: ``tokenizer_coverage.check_recorded``).
        So is the filter's ``min_kept_share``: a build it failed, rerun with a lower one, reuses
        the filter stage it ran (``drop_report.check_kept`` reads the stage's record)."""
        def section(n: str) -> dict[str, Any]:
            s = getattr(self, n)
            if n == "filter":
                d = dataclasses.asdict(s)
                del d["min_kept_share"]
                return d
            if not isinstance(s, TokenizerConfig):
                return dataclasses.asdict(s)
            d = dataclasses.asdict(s if s.pretrained else s.resolved())
            del d["max_unk_share"]
            return d
        return {n: section(n) for n in names}
