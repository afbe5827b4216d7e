"""The blocks' interface and registry, the config's block list, and ``filter_batch``."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from common.config import ConfigError
from pipelines.engine import parts
from pipelines.config import FILTER_BLOCKS, CorpusConfig, FilterConfig
from pipelines.filters import Doc, build_blocks, filter_batch, normalize_text, registry, run_blocks
from tests.pipelines.filters._docs import prose

FRENCH = ("Le conseil municipal s'est réuni mardi soir pour discuter du budget de l'année prochaine. "
          "Après un long hiver, la rivière a enfin dégelé et les bateaux sont revenus au port. ") * 3


def test_every_block_is_registered_with_a_section():
    declared = registry.blocks()
    assert [s.name for s in declared] == list(FILTER_BLOCKS)
    for spec in declared:
        section = getattr(FilterConfig(), spec.name)
        assert type(section) is spec.config and dataclasses.is_dataclass(section)
        assert spec.module == f"pipelines.filters.{spec.name}"  # one block, one module of its name
        (b,) = build_blocks(FilterConfig(blocks=[spec.name]))
        assert b.name == spec.name


def test_the_order_and_defaults_are_todays():
    # The order decides which block names a drop: it must not move when a block is added.
    assert FILTER_BLOCKS == ("gopher_quality", "gopher_repetition", "code", "c4", "fineweb", "language",
                             "lm_quality", "pii")
    assert [f.name for f in dataclasses.fields(FilterConfig)] == ["unicode_form", "blocks", *FILTER_BLOCKS,
                                                                  "by_language", "min_kept_share"]


def test_word_counting_blocks_are_what_uncalibrated_languages_skip():
    from pipelines.language.profiles import WORD_BLOCKS

    assert {s.name for s in registry.blocks() if s.counts_words} == set(WORD_BLOCKS)


def test_a_block_name_is_declared_once():
    spec = registry.spec("c4")
    with pytest.raises(ValueError, match="declared twice"):
        registry.register("c4", config=spec.config, position=1)(lambda cfg: None)
    with pytest.raises(KeyError, match="no filter block 'c5'"):
        registry.spec("c5")


def test_default_blocks_and_order():
    assert FilterConfig().blocks == ["gopher_quality", "gopher_repetition", "code", "c4", "fineweb", "language",
                                    "lm_quality"]
    assert [b.name for b in build_blocks(FilterConfig(blocks=["language", "pii"]))] == ["language", "pii"]


@pytest.mark.parametrize("raw,match", [
    ({"blocks": ["gopher_quality", "c5"]}, r"filter\.blocks\[1\]: 'c5' is not one of"),
    ({"blocks": ["c4", "c4"]}, "blocks lists a block twice"),
    ({"gopher_quality": {"min_words": 3}}, r"filter\.gopher_quality: unknown key"),
    ({"gopher_quality": {"min_doc_words": -1}}, "min_doc_words must be >= 0"),
    ({"gopher_repetition": {"top_n_grams": [[2.5, 0.2]]}}, r"top_n_grams: expected \[n >= 1"),
    ({"language": {"languages": "en"}}, r"filter\.language\.languages: expected a list"),
])
def test_config_errors_at_load_time(raw, match):
    with pytest.raises(ConfigError, match=match):
        CorpusConfig.from_dict({"filter": raw})


def test_config_nulls_and_datatrove_defaults():
    cfg = CorpusConfig.from_dict({"filter": {"gopher_quality": {"max_doc_words": None},
                                             "language": {"languages": None, "min_score": 0.5}}}).filter
    assert cfg.gopher_quality.max_doc_words is None and cfg.language.languages is None
    q = FilterConfig().gopher_quality
    assert (q.min_doc_words, q.max_doc_words, q.min_avg_word_length, q.max_avg_word_length,
            q.max_non_alpha_words_ratio, q.min_stop_words) == (50, 100_000, 3, 10, 0.8, 2)
    assert (FilterConfig().language.languages, FilterConfig().language.min_score) == (["en"], 0.65)


def test_first_verdict_wins_and_reasons_are_named():
    blocks = build_blocks(FilterConfig())
    assert run_blocks(Doc("too short"), blocks).reason == "filter:gopher_quality:min_doc_words"
    assert run_blocks(Doc(FRENCH), blocks).reason == "filter:gopher_quality:min_stop_words"
    only_language = build_blocks(FilterConfig(blocks=["language"]))
    assert run_blocks(Doc(FRENCH), only_language).reason == "filter:language:languages"
    assert run_blocks(Doc(""), blocks) == ("filter:empty", "no text left after normalisation")
    assert run_blocks(Doc("anything"), []) is None


def _batch(texts, reasons=None):
    n = len(texts)
    return {"id": np.array([f"f:{i}" for i in range(n)], dtype=object),
            "uid": np.arange(n, dtype=np.int64), "text": np.array(texts, dtype=object),
            "reason": np.array(reasons or [""] * n, dtype=object), "detail": np.array([""] * n, dtype=object)}


def test_filter_batch():
    good = "  " + prose(3).replace("\n\n", "\r\n\r\n\r\n") + "\t "
    batch = _batch([good, "Too short.", "raw \xff bytes\t\t", FRENCH, "\x00\u200b "],
                   ["", "", "ingest:invalid_utf8", "", ""])
    batch["detail"][2] = "line 3"
    out = filter_batch(batch, FilterConfig())
    assert list(out["reason"]) == ["", "filter:gopher_quality:min_doc_words", "ingest:invalid_utf8",
                                   "filter:gopher_quality:min_stop_words", "filter:empty"]
    assert list(out["detail"][:3]) == ["", "words=2 < 50", "line 3"]
    # Kept: normalised, then C4's rewrite (paragraph breaks go); dropped: normalised input.
    assert out["text"][0] == normalize_text(good, FilterConfig()).replace("\n\n", "\n")
    assert out["text"][1] == "Too short." and out["text"][2] == "raw \xff bytes\t\t"
    # Every document the stage filters is counted under a language, whichever block dropped it:
    # the ones dropped before the language block are identified then; no text left: "und".
    assert [out["language"][i] for i in (0, 2, 3, 4)] == ["en", "", "fr", "und"]
    assert out["language"][1] not in ("", "und")  # two words: some language, not "not looked at"
    assert list(batch["reason"]) == ["", "", "ingest:invalid_utf8", "", ""]  # input not mutated


def test_filter_batch_languages_are_counted_and_not_written(tmp_path):
    cfg = FilterConfig(blocks=["language"])
    out = filter_batch(_batch([prose(2), FRENCH, prose(3), "Short English text."]), cfg)
    assert list(out["language"]) == ["en", "fr", "en", "en"]
    assert list(out["reason"]) == ["", "filter:language:languages", "", "filter:language:min_score"]
    expected = {"en": {"kept": 2, "dropped": 1}, "fr": {"kept": 0, "dropped": 1}}
    assert parts.language_counts(list(out["language"]), list(out["reason"])) == expected
    import pyarrow as pa

    table = pa.table({k: list(v) for k, v in out.items()})
    summary = parts._write_document_block(table, data=str(tmp_path / "d"), rejected=str(tmp_path / "r"),
                                          prefix_chars=10, full_text=False)
    import json

    row = json.loads(summary["summary"][0])
    assert row["languages"] == expected
    import pyarrow.parquet as pq

    (part,) = (tmp_path / "d").glob("*.parquet")
    assert "language" not in pq.read_table(part).column_names  # downstream schema unchanged


def test_without_the_language_block_nothing_is_identified():
    out = filter_batch(_batch([prose(2), "Too short."]), FilterConfig(blocks=["gopher_quality"]))
    assert list(out["reason"]) == ["", "filter:gopher_quality:min_doc_words"]
    assert list(out["language"]) == ["", ""]


def test_every_drop_is_counted_under_its_language():
    """The per-language counts add up to the documents filtered, whichever block dropped them
    (the manifest's ``languages``; docs/languages.md)."""
    from tests.pipelines._languages import documents

    spanish = documents("es")[:6]
    short = [" ".join(d.split()[:12]) for d in spanish]  # dropped by min_doc_words, before the language block
    from pipelines.config import CorpusConfig

    cfg = CorpusConfig.from_dict({"language": ["es"]}).filter
    texts = spanish + short + [prose(2), " "]
    out = filter_batch(_batch(texts), cfg)
    counts = parts.language_counts(list(out["language"]), list(out["reason"]))
    assert sum(c["kept"] + c["dropped"] for c in counts.values()) == len(texts)
    assert counts["es"]["dropped"] >= len(short) and counts["und"] == {"kept": 0, "dropped": 1}
    assert counts["en"] == {"kept": 0, "dropped": 1}  # the language block's own drop
