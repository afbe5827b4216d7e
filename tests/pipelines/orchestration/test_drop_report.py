"""pipelines.orchestration.drop_report: the one line of a filter stage that kept (nearly) nothing."""
from __future__ import annotations

import io
import json
from collections import Counter

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
