"""The filter blocks by language, on real text (tests/assets/languages: Debian Reference sections
in six languages, fortune files): each document filtered with its language's profile.

- Chinese prose is dropped whole by the English rules (the failure the issue reported) and kept by
  its own; its grouped sections (web-page size) are all kept; junk made of it is still dropped.
- The rules a profile changes do change what is kept, and the table's fields reach the blocks.
- A language without a calibrated profile runs only the script-independent blocks (its prose is
  not dropped for English word counts), and the manifest warns about it once per language.
- Several languages: each document is identified and filtered with its own profile.
"""
from __future__ import annotations

import numpy as np
import pytest

from pipelines.config import CorpusConfig
from pipelines.filters.base import Filters, filter_batch
from pipelines.language.profiles import TABLE, blocks_for, language_warnings, profile_for
from tests.pipelines._languages import documents

NEKO = ("吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。何でも薄暗いじめじめした所でニャーニャー"
        "泣いていた事だけは記憶している。吾輩はここで始めて人間というものを見た。")


def run(texts: list[str], **config) -> list[str]:
    """The reason of each document ("" = kept) under a web-profile config."""
    cfg = CorpusConfig.from_dict(config)
    n = len(texts)
    out = filter_batch({"text": np.array(texts, dtype=object), "reason": np.array([""] * n, dtype=object),
                        "detail": np.array([""] * n, dtype=object)}, cfg.filter)
    return list(out["reason"])


def grouped(lang: str, size: int = 4) -> list[str]:
    """Consecutive sections joined into documents of web-page size."""
    docs = documents(lang)
    return ["\n\n".join(docs[i:i + size]) for i in range(0, len(docs), size)]


@pytest.mark.parametrize("lang,code", [("zh-cn", "zh"), ("zh-tw", "zh"), ("fr", "fr"), ("de", "de"),
                                       ("es", "es"), ("pt", "pt")])
def test_grouped_prose_is_kept_with_its_profile(lang, code):
    reasons = run(grouped(lang), language=[code])
    assert reasons.count("") >= len(reasons) - 1, reasons  # at most one of ~8 documents dropped


def test_english_rules_drop_chinese_its_own_keep_it():
    docs = grouped("zh-cn")
    english = run(docs, filter={"blocks": ["gopher_quality", "c4", "fineweb"]})  # no language block
    assert english.count("") == 0 and {r.split(":")[1] for r in english} <= {"gopher_quality", "c4"}
    own = run(docs, language=["zh"], filter={"blocks": ["gopher_quality", "c4", "fineweb"]})
    assert own.count("") >= len(docs) - 1


def test_chinese_junk_is_still_dropped():
    prose = grouped("zh-cn")[0]
    shuffled_lines = "\n".join(ch for ch in prose.replace("\n", "") if ch.strip())  # one character per line
    salad = "的是在和了有" * 60  # stop words, no sentence
    menu = "\n".join(["首页", "新闻", "联系我们", "登录", "注册", "关于"] * 5)
    reasons = run([shuffled_lines, salad, menu], language=["zh"])
    assert all(reasons), reasons


def test_the_profile_reaches_the_blocks():
    cfg = CorpusConfig.from_dict({"language": ["zh"]}).filter
    doc = _doc("Linux 系统是一个面向网络计算机的功能强大的计算平台。")
    blocks = {b.name: b for b in Filters(cfg).prepare(doc)}
    assert blocks["gopher_quality"].cfg.min_avg_word_length == TABLE["zh"].overrides["gopher_quality"][
        "min_avg_word_length"]
    assert blocks["c4"].cfg.end_punctuation == TABLE["zh"].overrides["c4"]["end_punctuation"]
    assert "lm_quality" not in blocks  # no Chinese reference configured
    assert doc.words[:3] == ["Linux", "系统", "是"]  # the profile's splitter
    user = CorpusConfig.from_dict({"language": ["zh"], "filter": {"by_language": {
        "zh": {"gopher_quality": {"min_doc_words": 7}}}}}).filter
    (gq,) = [b for b in Filters(user).prepare(_doc(NEKO)) if b.name == "gopher_quality"]
    assert gq.cfg.min_doc_words == 7  # the user's field over the table's ...
    assert gq.cfg.max_non_alpha_words_ratio == TABLE["zh"].overrides["gopher_quality"]["max_non_alpha_words_ratio"]
    own = CorpusConfig.from_dict({"language": ["zh"], "filter": {"c4": {"min_num_sentences": None}}}).filter
    (c4,) = [b for b in Filters(own).prepare(_doc(NEKO)) if b.name == "c4"]
    assert c4.cfg.min_num_sentences is None  # a section value the user set is not the table's to change
    assert c4.cfg.min_words_per_line == TABLE["zh"].overrides["c4"]["min_words_per_line"]


def _doc(text):
    from pipelines.filters.base import Doc

    return Doc(text)


def test_an_uncalibrated_language_runs_only_script_independent_blocks():
    profile = profile_for("ja")
    assert not profile.calibrated and profile.splitter == "fugashi"
    run_, skipped = blocks_for(profile, ["gopher_quality", "gopher_repetition", "code", "c4", "fineweb",
                                         "language", "lm_quality"], {})
    assert run_ == ["gopher_repetition", "code", "language"]
    assert skipped == ["gopher_quality", "c4", "fineweb", "lm_quality"]
    neko = "\n\n".join([NEKO] * 1) + "\n\n" + "吾輩の主人は滅多に吾輩と顔を合せる事がない。職業は教師だそうだ。"
    assert run([neko], language=["ja"]) == [""]  # not dropped for English word counts
    assert run([neko]) != [""]  # with the English default it is
    warnings = language_warnings(["gopher_quality", "language"], {"ja": {"kept": 1, "dropped": 0},
                                                                  "en": {"kept": 3, "dropped": 0}}, {})
    assert warnings == ["language ja: gopher_quality skipped: no calibrated thresholds for this language "
                        "(pipelines/language/profiles.py): only the script-independent blocks ran, "
                        "gopher_repetition without its n-gram rules"]
    cfg = CorpusConfig.from_dict({"language": ["ja"]})
    (rep,) = [b for b in Filters(cfg.filter).prepare(_doc(neko)) if b.name == "gopher_repetition"]
    assert rep.top == rep.dup == [] and rep.cfg.dup_line_frac == 0.3  # line/paragraph rules only
    # The alphabet follows the text (tokenizer.character_coverage), not the language list.
    assert cfg.tokenizer == CorpusConfig.from_dict({}).tokenizer == CorpusConfig.from_dict({"language": ["fr"]}).tokenizer


def test_several_languages_each_document_its_own_profile():
    zh, fr = grouped("zh-cn")[0], grouped("fr")[0]
    cfg = CorpusConfig.from_dict({"language": ["zh", "fr"]}).filter
    filters = Filters(cfg)
    for text, code in ((zh, "zh"), (fr, "fr")):
        doc = _doc(text)
        filters.prepare(doc)
        assert filters.language_of(doc) == code and doc.ranked[0][0] == code
    assert run([zh, fr], language=["zh", "fr"]) == ["", ""]
    only_fr = run([zh, fr], language=["fr"])  # one language: its profile for every document
    assert only_fr[0] and only_fr[1] == ""


def test_unwanted_languages_meet_only_the_language_block():
    """In a zh+fr build a German page is dropped by the language block, without being cut into
    words by another language's profile first; and a Japanese build warns only about Japanese."""
    cfg = CorpusConfig.from_dict({"language": ["zh", "fr"]}).filter
    doc = _doc(grouped("de")[0])
    assert [b.name for b in Filters(cfg).prepare(doc)] == ["language"]
    assert run([grouped("de")[0]], language=["zh", "fr"]) == ["filter:language:languages"]
    seen = {"ja": {"kept": 3, "dropped": 0}, "fr": {"kept": 0, "dropped": 2}}  # fr: dropped as unwanted
    assert [w.split(":")[0] for w in language_warnings(["gopher_quality", "language"], seen, {})] == ["language ja"]


def test_a_block_configured_for_an_uncalibrated_language_runs():
    cfg = CorpusConfig.from_dict({"language": ["ja"], "filter": {"by_language": {
        "ja": {"gopher_quality": {"min_doc_words": 10, "min_avg_word_length": 1, "stop_words": ["は", "の"]}}}}})
    blocks = {b.name: b for b in Filters(cfg.filter).prepare(_doc(NEKO))}
    assert "gopher_quality" in blocks and blocks["gopher_quality"].cfg.min_doc_words == 10
    assert "c4" not in blocks  # not configured: still skipped for an uncalibrated language
