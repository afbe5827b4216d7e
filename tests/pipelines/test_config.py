"""The corpus config: strict loading through ``common.config`` (keys, types, allowed values)."""
from __future__ import annotations

import json

import pytest

from common.config import ConfigError, apply_override, load_json
from pipelines.config import CorpusConfig


def test_defaults_are_kept_for_keys_not_given():
    cfg = CorpusConfig.from_dict({"dedup": {"num_bands": 20}, "pack": {"seq_len": 512}})
    assert cfg.dedup.num_bands == 20 and cfg.dedup.rows_per_band == 8
    assert cfg.pack.seq_len == 512 and cfg.tokenizer.vocab_size == 30522
    assert (cfg.tokenizer.sample_seed, cfg.shard.chunk_tokens) == (12345, 1 << 16)
    assert (cfg.rejected.text_prefix_chars, cfg.rejected.full_text) == (300, False)
    assert CorpusConfig.from_dict({}) == CorpusConfig()
    assert CorpusConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg  # JSON round trip


def test_unknown_keys_are_named_with_the_known_ones():
    with pytest.raises(ConfigError, match=r"corpus config\.dedup: unknown key\(s\) \['num_band'\]; known keys: "
                                          r"\[.*'num_bands'.*\]"):
        CorpusConfig.from_dict({"dedup": {"num_band": 20}})
    with pytest.raises(ConfigError, match=r"corpus config: unknown key\(s\) \['shards'\].*'rejected'.*'shard'"):
        CorpusConfig.from_dict({"shards": {}})
    with pytest.raises(ValueError):  # ConfigError is a ValueError
        CorpusConfig.from_dict({"rejected": {"prefix": 10}})


@pytest.mark.parametrize("section,key,value,allowed", [
    ("tokenizer", "kind", "bpe", "['wordpiece', 'unigram']"),
    ("ingest", "text_mode", "paragraph", "['file', 'blank_line', 'line']"),
    ("filter", "unicode_form", "nfc", "['NFC', 'NFKC', 'NFD', 'NFKD', 'none']"),
])
def test_enum_fields_accept_only_their_values(section, key, value, allowed):
    with pytest.raises(ConfigError) as info:
        CorpusConfig.from_dict({section: {key: value}})
    assert str(info.value) == f"corpus config.{section}.{key}: {value!r} is not one of {allowed}"


@pytest.mark.parametrize("raw,match", [
    ({"pack": {"seq_len": "128"}}, r"corpus config\.pack\.seq_len: expected int, got '128'"),
    ({"pack": {"seq_len": 128.5}}, r"corpus config\.pack\.seq_len: expected int, got 128\.5"),
    ({"dedup": {"exact": 1}}, r"corpus config\.dedup\.exact: expected bool, got 1"),
    ({"dedup": {"num_bands": True}}, r"corpus config\.dedup\.num_bands: expected int, got True"),
    ({"rejected": {"full_text": "yes"}}, r"corpus config\.rejected\.full_text: expected bool"),
    ({"tokenizer": {"pretrained": 5}}, r"corpus config\.tokenizer\.pretrained"),
    ({"pack": []}, r"corpus config\.pack: expected a JSON object, got list"),
])
def test_wrong_types_are_errors_naming_the_key(raw, match):
    with pytest.raises(ConfigError, match=match):
        CorpusConfig.from_dict(raw)


def test_numbers_json_writes_as_floats_and_nulls():
    cfg = CorpusConfig.from_dict({"shard": {"target_bytes": 1e8, "chunk_tokens": 4096},
                                  "filter": {"gopher_quality": {"max_non_alpha_words_ratio": 1}},
                                  "tokenizer": {"pretrained": None}})
    assert cfg.shard.target_bytes == 100_000_000 and isinstance(cfg.shard.target_bytes, int)
    ratio = cfg.filter.gopher_quality.max_non_alpha_words_ratio
    assert ratio == 1.0 and isinstance(ratio, float)
    assert cfg.tokenizer.pretrained is None
    assert CorpusConfig.from_dict({"tokenizer": {"pretrained": "s3://b/vocab.txt"}}).tokenizer.pretrained \
        == "s3://b/vocab.txt"


@pytest.mark.parametrize("raw,match", [
    ({"pack": {"seq_len": 4}}, r"corpus config\.pack: seq_len must be in \[8, 65535\]"),
    ({"pack": {"validation_fraction": 1.0}}, r"corpus config\.pack: validation_fraction"),
    ({"shard": {"chunk_tokens": 0}}, r"corpus config\.shard: .*chunk_tokens must be positive"),
    ({"tokenizer": {"vocab_size": 5}}, r"corpus config\.tokenizer: vocab_size must exceed"),
    ({"ingest": {"batch_size": 0}}, r"corpus config\.ingest: batch_size must be >= 1"),
    ({"dedup": {"rows_per_band": 0}}, r"corpus config\.dedup: ngram, spaceless_ngram, num_bands"),
])
def test_ranges_are_checked_at_load_time(raw, match):
    with pytest.raises(ConfigError, match=match):
        CorpusConfig.from_dict(raw)


def test_overrides_get_the_same_checks(tmp_path):
    raw = {"pack": {"seq_len": 64}}
    apply_override(raw, "tokenizer.kind=unigram")
    apply_override(raw, "rejected.full_text=true")
    apply_override(raw, "shard.target_bytes=2e6")
    cfg = CorpusConfig.from_dict(raw)
    assert (cfg.tokenizer.kind, cfg.rejected.full_text, cfg.shard.target_bytes, cfg.pack.seq_len) == \
        ("unigram", True, 2_000_000, 64)
    apply_override(raw, "tokenizer.kind=sentencepiece")
    with pytest.raises(ConfigError, match=r"corpus config\.tokenizer\.kind: 'sentencepiece'"):
        CorpusConfig.from_dict(raw)
    path = tmp_path / "corpus.json"
    path.write_text(json.dumps({"pack": {"seq_len": 256}}, indent=2))
    assert CorpusConfig.from_dict(load_json(str(path))).pack.seq_len == 256


def test_sections_are_what_a_stage_key_covers():
    """A stage's key covers its sections only: a filter change leaves ingest's sections alone."""
    a, b = CorpusConfig(), CorpusConfig()
    b.filter.gopher_quality.min_doc_words = 7
    assert a.sections(("ingest", "rejected")) == b.sections(("ingest", "rejected"))
    assert a.sections(("filter", "rejected")) != b.sections(("filter", "rejected"))
    assert set(a.sections(("pack", "shard"))) == {"pack", "shard"}
    assert a.sections(("shard",))["shard"]["chunk_tokens"] == 1 << 16


def test_unset_tokenizer_flags_key_as_true_for_a_trained_tokenizer():
    """lowercase/strip_accents are None until set (a pretrained tokenizer brings its own); a trained
    tokenizer lower-cases, and strips accents as it lower-cases (BERT's rule: cased keeps accents),
    and its key says so: the same key as setting them so."""
    unset = CorpusConfig.from_dict({})
    assert (unset.tokenizer.lowercase, unset.tokenizer.strip_accents) == (None, None)
    explicit = CorpusConfig.from_dict({"tokenizer": {"lowercase": True, "strip_accents": True}})
    assert unset.sections(("tokenizer",)) == explicit.sections(("tokenizer",))
    cased = CorpusConfig.from_dict({"tokenizer": {"lowercase": False}}).sections(("tokenizer",))["tokenizer"]
    assert (cased["lowercase"], cased["strip_accents"]) == (False, False)
    stripped = CorpusConfig.from_dict({"tokenizer": {"lowercase": False, "strip_accents": True}})
    assert stripped.sections(("tokenizer",))["tokenizer"]["strip_accents"] is True
    pretrained = CorpusConfig.from_dict({"tokenizer": {"pretrained": "s3://b/model/"}}).sections(("tokenizer",))
    assert pretrained["tokenizer"]["lowercase"] is None  # the folder decides; its files are in the key
