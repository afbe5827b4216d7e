"""pipelines.orchestration.drop_report: the one line of a filter stage that kept (nearly) nothing."""
from __future__ import annotations

import io
import json
from collections import Counter

import pytest
import zstandard

from pipelines.orchestration.drop_report import explain, report, sampled_languages
from tests.pipelines._languages import documents


def stats(kept: int, dropped: dict[str, int]) -> dict:
    return {"documents_in": kept + sum(dropped.values()), "documents_out": kept, "dropped": dropped}


def test_english_rules_on_chinese_text_point_to_the_language():
    line = explain(stats(0, {"filter:gopher_quality:min_avg_word_length": 150, "filter:c4:min_num_sentences": 58}),
                   ["en"], Counter({"zh": 41, "ja": 2}))
    assert line.startswith("filter kept 0 of 208 documents; dropped by gopher_quality:min_avg_word_length 150, "
                           "c4:min_num_sentences 58; dropped documents' languages (43 sampled): zh 41, ja 2")
    assert "likely cause: the documents are in zh, and the build keeps en, filtering them with en word rules" in line
    assert line.endswith("fix: build with --language zh")


def test_other_causes_and_fixes():
    wrong_language = explain(stats(3, {"filter:language:languages": 297}), ["en"], Counter({"ru": 150, "it": 140}))
    assert "the documents are in ru/it, and the build keeps en" in wrong_language
    assert wrong_language.endswith("fix: build with --language ru --language it")
    rule = explain(stats(1, {"filter:gopher_quality:min_doc_words": 99}), ["fr"], Counter({"fr": 99}))
    assert "the rule gopher_quality.min_doc_words drops nearly all fr text of this kind" in rule
    assert "relax filter.by_language.fr.gopher_quality.min_doc_words" in rule
    unsure = explain(stats(0, {"filter:language:min_score": 20}), ["de"], Counter({"de": 20}))
    assert "lower filter.language.min_score" in unsure


def test_report_reads_the_quarantine_only_when_nearly_everything_went(tmp_path):
    lines = [json.dumps({"id": f"a:{i}", "reason": "filter:c4:min_num_sentences", "text": t}, ensure_ascii=False)
             for i, t in enumerate(documents("zh-cn")[:10] + documents("de")[:2])]
    (tmp_path / "part-1.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(("\n".join(lines) + "\n").encode()))
    files = [{"name": "part-1.jsonl.zst"}]
    assert sampled_languages(str(tmp_path), files) == Counter({"zh": 10, "de": 2})
    assert report(stats(50, {"filter:c4:min_num_sentences": 12}), rejected=str(tmp_path), files=files,
                  languages=["en"]) is None  # most kept: nothing to say, nothing read
    line = report(stats(0, {"filter:c4:min_num_sentences": 12}), rejected=str(tmp_path), files=files,
                  languages=["en"])
    assert "(12 sampled): zh 10, de 2" in line and "--language zh" in line


def test_ingest_that_kept_nothing_names_the_reasons_the_cause_and_the_quarantine():
    from pipelines.orchestration.drop_report import ingest_report

    where = "/c/rejected/ingest-k"
    assert ingest_report(stats(1, {"ingest:binary": 4}), rejected=where, files=5) is None
    binary = ingest_report(stats(0, {"ingest:binary": 4, "ingest:empty_file": 1}), rejected=where, files=5)
    assert binary.startswith("ingest kept 0 of 5 documents in 5 files, every one rejected: binary 4, "
                             "empty_file 1; likely cause: the files are not text")
    assert binary.endswith("; each dropped document and its reason: /c/rejected/ingest-k/")
    empty = ingest_report(stats(0, {"ingest:empty_file": 1}), rejected=where + "/", files=1)
    assert "in 1 file, every one rejected: empty_file 1; likely cause: the files hold no text" in empty
    assert empty.endswith("reason: /c/rejected/ingest-k/")
    odd = ingest_report(stats(0, {"ingest:warc_skipped": 2}), rejected=where, files=1)
    assert "likely cause: the sources hold no document the readers accept" in odd


def test_text_without_a_language_is_never_a_language_fix():
    line = explain(stats(0, {"filter:gopher_quality:min_doc_words": 100}), ["en"], Counter({"zxx": 100}))
    assert "(100 sampled): zxx 100" in line and "--language zxx" not in line
    assert "relax filter.gopher_quality.min_doc_words" in line


def test_a_minority_of_another_language_is_not_the_cause():
    """Spanish documentation quoting English commands: the drops are mostly Spanish, which the
    build keeps, so the word rule is the cause, not the language (issue 48)."""
    line = explain(stats(1, {"filter:gopher_quality:min_doc_words": 3663, "filter:c4:min_num_sentences": 178}),
                   ["es"], Counter({"es": 121, "en": 45, "ext": 8, "gl": 6}))
    assert "--language en" not in line and "the build keeps es" not in line
    assert "relax filter.by_language.es.gopher_quality.min_doc_words" in line
    foreign = explain(stats(1, {"filter:gopher_quality:min_doc_words": 99}), ["es"], Counter({"en": 80, "es": 19}))
    assert foreign.endswith("fix: build with --language en")


def quarantine(tmp_path, texts, reason="filter:gopher_quality:min_doc_words", name="raw/guide.txt"):
    lines = [json.dumps({"id": f"{name}:{i * 300}", "reason": reason, "text": t[:300], "chars": len(t),
                         "detail": f"words={len(t.split())} < 50"}, ensure_ascii=False) for i, t in enumerate(texts)]
    (tmp_path / "part-1.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(("\n".join(lines) + "\n").encode()))
    return [{"name": "part-1.jsonl.zst"}]


def wrapped_paragraphs(lang="es", n=40):
    import textwrap

    words = " ".join(documents(lang)).split()
    return [textwrap.fill(" ".join(words[i * 20:(i + 1) * 20]), width=60) for i in range(n)]


def test_short_wrapped_blocks_of_plain_text_point_to_the_books_profile(tmp_path):
    files = quarantine(tmp_path, wrapped_paragraphs())
    counted = {"documents_in": 41, "documents_out": 1, "dropped": {"filter:gopher_quality:min_doc_words": 40},
               "languages": {"es": {"kept": 1, "dropped": 35}, "en": {"kept": 0, "dropped": 5}}}
    line = report(counted, rejected=str(tmp_path), files=files, languages=["es"])
    assert "dropped documents' languages (all 40): es 35, en 5" in line  # the stage's counts, not a sample
    assert ("likely cause: ingest.text_mode=blank_line made each blank-line block of the plain text (guide.txt: "
            "hard-wrapped paragraphs, median 20 words) a document, and gopher_quality.min_doc_words drops such short "
            "ones; ") in line
    assert "fix: --profile books (a whole file is one document), or --set ingest.text_mode=file; each" in line
    # Whole files already, records, or one-line blocks: the rule, not the shape
    assert "--profile books (a whole" not in report(counted, rejected=str(tmp_path), files=files, languages=["es"],
                                                    text_mode="file")
    files = quarantine(tmp_path, wrapped_paragraphs(), name="raw/pages.jsonl")
    assert "relax filter.by_language.es" in report(counted, rejected=str(tmp_path), files=files, languages=["es"])
    files = quarantine(tmp_path, [p.replace("\n", " ") for p in wrapped_paragraphs()])
    assert "relax filter.by_language.es" in report(counted, rejected=str(tmp_path), files=files, languages=["es"])


def test_min_kept_share_decides_whether_the_build_goes_on(tmp_path):
    from pipelines.config import CorpusConfig
    from pipelines.orchestration.drop_report import NothingKept, check_kept

    files = quarantine(tmp_path, wrapped_paragraphs())
    few = {**stats(1, {"filter:gopher_quality:min_doc_words": 40}),
           "languages": {"es": {"kept": 1, "dropped": 40}}}
    few["warnings"] = [report(few, rejected=str(tmp_path), files=files, languages=["es"])]
    es = {"language": ["es"]}
    with pytest.raises(NothingKept) as raised:
        check_kept(few, CorpusConfig.from_dict(es), rejected=str(tmp_path), files=files)
    assert str(raised.value).startswith(few["warnings"][0])
    assert str(raised.value).endswith("; kept 2.44%, below filter.min_kept_share=0.05: to build anyway, "
                                      "--set filter.min_kept_share=0")
    check_kept(few, CorpusConfig.from_dict({**es, "filter": {"min_kept_share": 0}}), rejected=str(tmp_path),
               files=files)  # allowed: the line stays a warning
    # A share the stage found unremarkable, refused by a stricter threshold: the line is made here.
    half = {**stats(40, {"filter:gopher_quality:min_doc_words": 40}), "languages": {"es": {"kept": 40, "dropped": 40}}}
    with pytest.raises(NothingKept, match=r"^filter kept 40 of 80 documents; dropped by gopher_quality:min_doc_words "
                                          r"40; .*kept 50.00%, below filter.min_kept_share=0.6: "):
        check_kept(half, CorpusConfig.from_dict({**es, "filter": {"min_kept_share": 0.6}}), rejected=str(tmp_path),
                   files=files)
    check_kept(half, CorpusConfig.from_dict(es), rejected=str(tmp_path), files=files)



@pytest.mark.parametrize("value", [-0.1, 1.5])
def test_min_kept_share_is_checked_at_load_time_and_not_in_the_filter_key(value):
    from common.config import ConfigError
    from pipelines.config import CorpusConfig

    with pytest.raises(ConfigError, match=r"filter: min_kept_share must be in \[0, 1\]"):
        CorpusConfig.from_dict({"filter": {"min_kept_share": value}})
    assert CorpusConfig.from_dict({"filter": {"min_kept_share": 0}}).sections(("filter",)) == \
        CorpusConfig().sections(("filter",))
