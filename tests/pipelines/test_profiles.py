"""Input profiles: presets under the user's config, checked by the strict loader."""
from __future__ import annotations

import pytest

from common.config import ConfigError
from pipelines.corpus_job import corpus_config
from pipelines.config import CorpusConfig
from pipelines.profiles import PROFILES, merge


def test_web_is_the_dataclass_default():
    assert CorpusConfig.from_dict({}) == CorpusConfig()
    assert CorpusConfig.from_dict({"profile": "web"}) == CorpusConfig()


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_preset_loads_strictly(name):
    # A preset naming a key the config does not have would fail here, not at a user's build.
    cfg = CorpusConfig.from_dict({"profile": name})
    assert cfg.profile == name
    assert cfg.filter.blocks, "a profile without any filter block"


def test_books_a_file_is_a_document_without_the_web_line_rules():
    cfg = CorpusConfig.from_dict({"profile": "books"})
    assert cfg.ingest.text_mode == "file"
    assert cfg.filter.blocks == ["gopher_quality", "language"]
    assert cfg.filter.gopher_quality.max_doc_words is None  # a novel has > 100,000 words
    web = CorpusConfig()
    assert cfg.filter.gopher_quality.min_doc_words == web.filter.gopher_quality.min_doc_words  # rest untouched
    assert {"c4", "fineweb"} <= set(web.filter.blocks)


def test_bert_format_keeps_sentence_lines_in_blank_line_blocks():
    cfg = CorpusConfig.from_dict({"profile": "bert-format"})
    assert cfg.ingest.text_mode == "blank_line"
    assert "c4" not in cfg.filter.blocks and "fineweb" not in cfg.filter.blocks


def test_the_user_wins_over_the_preset():
    cfg = CorpusConfig.from_dict({"profile": "books", "ingest": {"text_mode": "line"},
                                  "filter": {"blocks": ["language"], "gopher_quality": {"min_doc_words": 80}}})
    assert cfg.ingest.text_mode == "line"
    assert cfg.filter.blocks == ["language"]  # lists are replaced whole, not merged
    assert cfg.filter.gopher_quality.min_doc_words == 80
    assert cfg.filter.gopher_quality.max_doc_words is None  # the preset's other key survives


def test_unknown_profile_is_a_load_time_error_naming_it():
    with pytest.raises(ConfigError, match="profile='novels'"):
        CorpusConfig.from_dict({"profile": "novels"})


def test_flow_flag_overrides_the_config_file_and_sets_flow_through():
    cfg = corpus_config(config={"profile": "web", "pack": {"seq_len": 256}}, profile="books")
    assert cfg.profile == "books" and cfg.ingest.text_mode == "file" and cfg.pack.seq_len == 256
    assert corpus_config(config={"profile": "books"}).ingest.text_mode == "file"  # flag not passed
    cfg = corpus_config(profile="books", overrides=["ingest.text_mode=blank_line"])
    assert cfg.ingest.text_mode == "blank_line"


def test_merge_is_deep_for_mappings_and_never_aliases_the_preset():
    base = {"a": {"b": 1, "c": [1, 2]}, "d": 1}
    out = merge(base, {"a": {"c": [3]}, "e": 2})
    assert out == {"a": {"b": 1, "c": [3]}, "d": 1, "e": 2}
    out["a"]["b"] = 9
    assert base["a"]["b"] == 1
