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

    def validate(self) -> None:
        import codecs

        check(self.batch_size >= 1, "batch_size must be >= 1")
        check(self.max_document_bytes >= 1, "max_document_bytes must be >= 1")
        check(0 <= self.max_control_ratio <= 1, "max_control_ratio must be in [0, 1]")
        try:
            codecs.lookup(self.fallback_encoding)
        except LookupError:
            check(False, f"fallback_encoding {self.fallback_encoding!r} is not a known codec")


# The filter blocks (``pipelines.filters``), run in the order ``filter.blocks`` lists them.
FilterBlock = Literal["gopher_quality", "gopher_repetition", "code", "c4", "fineweb", "language", "lm_quality",
                      "pii"]
FILTER_BLOCKS: tuple[str, ...] = typing.get_args(FilterBlock)
FILTER_SECTIONS = FILTER_BLOCKS  # each block is configured by the section of its name


def _positive(section: Any, *names: str) -> None:
    for n in names:
        v = getattr(section, n)
        check(v is None or v >= 0, f"{n} must be >= 0 or null (null disables the rule)")


# One section per block. Field names and defaults are datatrove's (0.10.1) constructor arguments;
# every threshold is ``X | None`` and None disables that rule.
@dataclass
class GopherQualityConfig:
    min_doc_words: int | None = 50
    max_doc_words: int | None = 100_000
    min_avg_word_length: float | None = 3
    max_avg_word_length: float | None = 10
    max_symbol_word_ratio: float | None = 0.1  # '#' and ellipses per word
    max_bullet_lines_ratio: float | None = 0.9
    max_ellipsis_lines_ratio: float | None = 0.3
    max_non_alpha_words_ratio: float | None = 0.8  # datatrove's name: the MIN share of words with a letter
    min_stop_words: int | None = 2
    stop_words: list[str] = field(default_factory=lambda: ["the", "be", "to", "of", "and", "that", "have", "with"])

    def validate(self) -> None:
        _positive(self, "min_doc_words", "max_doc_words", "min_avg_word_length", "max_avg_word_length",
                  "max_symbol_word_ratio", "max_bullet_lines_ratio", "max_ellipsis_lines_ratio",
                  "max_non_alpha_words_ratio", "min_stop_words")


@dataclass
class GopherRepetitionConfig:
    dup_line_frac: float | None = 0.3
    dup_para_frac: float | None = 0.3
    dup_line_char_frac: float | None = 0.2
    dup_para_char_frac: float | None = 0.2
    # [n, max character fraction] pairs; a null fraction disables that n.
    # (Typed loosely here, checked in validate(): the loader types a list's items alike.)
    top_n_grams: list[list[Any]] = field(default_factory=lambda: [[2, 0.2], [3, 0.18], [4, 0.16]])
    dup_n_grams: list[list[Any]] = field(default_factory=lambda: [
        [5, 0.15], [6, 0.14], [7, 0.13], [8, 0.12], [9, 0.11], [10, 0.10]])

    def validate(self) -> None:
        _positive(self, "dup_line_frac", "dup_para_frac", "dup_line_char_frac", "dup_para_char_frac")
        for name in ("top_n_grams", "dup_n_grams"):
            for pair in getattr(self, name):
                check(len(pair) == 2 and type(pair[0]) is int and pair[0] >= 1
                      and (pair[1] is None or (type(pair[1]) in (int, float) and pair[1] >= 0)),
                      f"{name}: expected [n >= 1, fraction or null] pairs, got {list(pair)}")


@dataclass
class C4Config:
    remove_citations: bool = True  # "[1]", "[edit]", "[citation needed]" removed from kept lines
    filter_no_terminal_punct: bool = True  # lines must end in . ? ! " ' (not "...")
    # Not in datatrove: a terminal mark followed by closing quotes or brackets ('.”', '?)')
    # also ends a line (datatrove drops book dialogue and typographic quotes). false: datatrove's rule.
    allow_closing_quotes: bool = True
    min_num_sentences: int | None = 5  # documents with fewer sentences left are dropped
    min_words_per_line: int | None = 3
    max_word_length: int | None = 1000  # lines with a longer word are removed
    filter_lorem_ipsum: bool = True  # documents
    filter_javascript: bool = True  # lines
    filter_curly_bracket: bool = True  # documents
    filter_policy: bool = True  # lines (cookies, terms of use, privacy policy)
    # The characters a kept line may end in (datatrove's . ? ! " '); a language's profile gives
    # its own (pipelines/language/profiles.py: 。！？ and CJK closing brackets for Chinese).
    end_punctuation: str = ".?!\"'"

    def validate(self) -> None:
        _positive(self, "min_num_sentences", "min_words_per_line", "max_word_length")
        check(bool(self.end_punctuation), "end_punctuation must name at least one character")


@dataclass
class FineWebConfig:
    line_punct_thr: float | None = 0.12  # min share of lines ending in terminal punctuation
    line_punct_exclude_zero: bool = False
    # Not in datatrove: a terminal mark followed by closing quotes or brackets ('."', '?”', '.)')
    # also counts as a punctuated line. false: datatrove's rule.
    allow_closing_quotes: bool = True
    short_line_thr: float | None = 0.67  # max share of lines of <= short_line_length characters
    short_line_length: int = 30
    char_duplicates_ratio: float | None = 0.01  # max characters in duplicated lines / all
    new_line_ratio: float | None = 0.3  # max newlines per word (lists)

    def validate(self) -> None:
        _positive(self, "line_punct_thr", "short_line_thr", "char_duplicates_ratio", "new_line_ratio")
        check(self.short_line_length >= 0, "short_line_length must be >= 0")


@dataclass
class LanguageConfig:
    languages: list[str] | None = field(default_factory=lambda: ["en"])  # null: any language
    min_score: float | None = 0.65  # datatrove's language_threshold (the top language's probability)
    # Not in datatrove: characters classified (the start of the document, cut at a space);
    # null: the whole text. Language ID is the costliest block on long documents.
    sample_chars: int | None = 2000

    def validate(self) -> None:
        _positive(self, "min_score", "sample_chars")


@dataclass
class CodeConfig:
    # Not in datatrove (pipelines/filters/code.py): source code without braces or with comments.
    max_code_line_frac: float | None = 0.3  # max share of non-empty lines that read as code
    min_code_lines: int = 3  # ... and only when at least this many lines do
    max_symbol_ratio: float | None = 0.05  # max share of { } [ ] < > = ; | \ $ # in non-space characters

    def validate(self) -> None:
        _positive(self, "max_code_line_frac", "max_symbol_ratio")
        check(self.min_code_lines >= 1, "min_code_lines must be >= 1")


@dataclass
class LmQualityConfig:
    # Not in datatrove (pipelines/filters/lm_quality.py): a word trigram Kneser-Ney model of a
    # clean reference text. null: the English books shipped in pipelines/filters/reference/;
    # else a UTF-8 .txt or .txt.gz file (any storage location), documents separated by blank lines.
    reference: str | None = None
    min_count: int = 2  # reference words seen fewer times are <unk>
    max_unknown_frac: float | None = 0.5  # max share of tokens the reference never had
    # Mean nats per word the two tokens before each word add to the model's probability of it;
    # text in random word order loses (< 0), meaningful text gains.
    min_context_gain: float | None = -0.25
    max_perplexity: float | None = None  # CCNet's signal; depends on the reference's domain
    max_tokens: int | None = 2000  # tokens scored per document (its start); null: all

    def validate(self) -> None:
        check(self.min_count >= 1, "min_count must be >= 1")
        check(self.max_unknown_frac is None or 0 <= self.max_unknown_frac <= 1, "max_unknown_frac must be in [0, 1]")
        check(self.max_perplexity is None or self.max_perplexity > 0, "max_perplexity must be > 0 or null")
        check(self.max_tokens is None or self.max_tokens >= 1, "max_tokens must be >= 1 or null")


@dataclass
class PiiConfig:
    # datatrove's PIIFormatter: e-mail addresses and (public) IP addresses replaced, never dropped.
    remove_emails: bool = True
    remove_ips: bool = True
    only_remove_public_ips: bool = True
    email_replacement: list[str] = field(
        default_factory=lambda: ["email@example.com", "firstname.lastname@example.org"])
    ip_replacement: list[str] = field(default_factory=lambda: ["22.214.171.124", "126.96.36.199", "188.8.131.52",
                                                              "184.108.40.206", "220.127.116.11", "18.104.22.168"])


@dataclass
class FilterConfig:
    unicode_form: Literal["NFC", "NFKC", "NFD", "NFKD", "none"] = "NFC"
    # Run in this order; the first block that drops a document decides its reason.
    blocks: list[FilterBlock] = field(default_factory=lambda: [
        "gopher_quality", "gopher_repetition", "code", "c4", "fineweb", "language", "lm_quality"])
    gopher_quality: GopherQualityConfig = field(default_factory=GopherQualityConfig)
    gopher_repetition: GopherRepetitionConfig = field(default_factory=GopherRepetitionConfig)
    c4: C4Config = field(default_factory=C4Config)
    fineweb: FineWebConfig = field(default_factory=FineWebConfig)
    code: CodeConfig = field(default_factory=CodeConfig)
    language: LanguageConfig = field(default_factory=LanguageConfig)
    lm_quality: LmQualityConfig = field(default_factory=LmQualityConfig)
    pii: PiiConfig = field(default_factory=PiiConfig)
    # Per-language settings over the sections above and the language's shipped profile
    # (pipelines/language/profiles.py): {"ja": {"gopher_quality": {"min_doc_words": 30},
    # "lm_quality": {"reference": "s3://.../ja.txt.gz"}}}. Checked against the sections' fields.
    by_language: dict = field(default_factory=dict)

    def validate(self) -> None:
        check(len(set(self.blocks)) == len(self.blocks), f"blocks lists a block twice: {self.blocks}")
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
    ngram: int = 5  # word n-grams (shingles)
    # Character n-grams for a document mostly in scripts written without spaces (each character
    # a word there: pipelines/dedup/minhash.py): as discriminating as 5 words, and robust to edits.
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
    # Lower-casing and accent stripping (two switches). None, the default: True for a trained
    # tokenizer (and a bare vocab.txt); what the files say for a pretrained tokenizer that says it
    # (a model folder's tokenizer_config.json, a tokenizer.json's normaliser), where a value set
    # here that contradicts them is an error (pipelines.tokenizer_pretrained).
    lowercase: bool | None = None
    strip_accents: bool | None = None
    min_frequency: int = 2
    # Characters the vocabulary may hold: the most frequent ones of the sample (BERT's vocabulary
    # builders keep 1000); rarer characters encode as [UNK]. None keeps every character.
    limit_alphabet: int | None = 1000
    sample_bytes: int = 256 << 20  # bound on the text the tokenizer is trained on
    sample_seed: int = 12345  # which documents make up that sample
    # An existing tokenizer to use instead of training (any storage location): a tokenizer.json,
    # a BERT vocab.txt, or a Hugging Face model folder (a released model's download, e.g.
    # google/electra-base-discriminator: its vocab.txt or tokenizer.json with the lower-casing of
    # its tokenizer_config.json). Which file decides: pipelines/tokenizer_pretrained.py.
    pretrained: str | None = None

    def validate(self) -> None:
        check(self.vocab_size > len(("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")),
              "vocab_size must exceed the 5 special tokens")
        check(self.limit_alphabet is None or self.limit_alphabet >= 1, "limit_alphabet must be >= 1 or null")

    def resolved(self) -> TokenizerConfig:
        """This section with the flags unset (None) made True: what a trained tokenizer and a bare
        vocab.txt use."""
        return dataclasses.replace(self, lowercase=self.lowercase is not False,
                                   strip_accents=self.strip_accents is not False)


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
    # Which preset ``from_dict`` starts from (pipelines.profiles): web, books or bert-format.
    profile: Literal["web", "books", "bert-format"] = "web"
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
        return strict.from_dict(cls, _spaceless_alphabet(raw, d), where=where)

    @property
    def languages(self) -> list[str] | None:
        """The languages kept (None: any), whichever key said them."""
        return self.filter.language.languages

    def sections(self, names: tuple[str, ...]) -> dict[str, Any]:
        """The named sections as plain dicts (what a stage's cache key covers). A trained
        tokenizer's section holds the flags it uses (``TokenizerConfig.resolved``): leaving them
        unset keys as setting them True, the same tokenizer."""
        def section(n: str) -> Any:
            s = getattr(self, n)
            return s.resolved() if isinstance(s, TokenizerConfig) and not s.pretrained else s
        return {n: dataclasses.asdict(section(n)) for n in names}


def _spaceless_alphabet(raw: dict[str, Any], user: dict[str, Any]) -> dict[str, Any]:
    """A build keeping a language written without spaces (Chinese, Japanese, Thai...) trains its
    tokenizer on every character of the sample (``tokenizer.limit_alphabet`` null), as BERT keeps
    every CJK character, unless the user's config sets the limit: thousands of characters, not a
    thousand, are that text's alphabet."""
    from pipelines.language.profiles import SPACELESS_LANGUAGES
    from pipelines.profiles import merge

    filt = raw.get("filter") if isinstance(raw.get("filter"), dict) else {}
    languages = (filt.get("language") or {}).get("languages") if isinstance(filt.get("language"), dict) else None
    tok = user.get("tokenizer") if isinstance(user.get("tokenizer"), dict) else {}
    if isinstance(languages, list) and any(c in SPACELESS_LANGUAGES for c in languages) and "limit_alphabet" not in tok:
        return merge(raw, {"tokenizer": {"limit_alphabet": None}})
    return raw
