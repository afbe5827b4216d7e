"""Sanity of the committed non-English test assets (``tests/assets/languages``).

Each development language's asset exists, holds 20-40 documents of at least 200 characters,
none repeated, mostly in the expected script (Han for Chinese, Latin for the others); the
licence record ``SOURCES.md`` names every asset; held-out languages never appear among the
assets. The held-out loader is checked when ``bench_out/languages/heldout`` exists, else skipped.
"""
from __future__ import annotations

import unicodedata
from collections import Counter

import pytest

from tests.pipelines._languages import (ASSETS, HELDOUT_LANGS, HELDOUT_MISSING, LANGS, SCRIPT,
                                        asset_path, documents, heldout_documents)

# First word of a letter's Unicode name -> script. Kana only matter for the held-out ``ja``.
_SCRIPT_OF_NAME = {"CJK": "Han", "LATIN": "Latin", "CYRILLIC": "Cyrillic",
                   "HIRAGANA": "Kana", "KATAKANA": "Kana", "GREEK": "Greek", "HANGUL": "Hangul"}


def script_counts(text: str) -> Counter:
    """Letters of ``text`` per script (by the first word of their Unicode name)."""
    counts: Counter = Counter()
    for ch in text:
        if ch.isalpha():
            word = unicodedata.name(ch, "UNKNOWN").split()[0]
            counts[_SCRIPT_OF_NAME.get(word, "Other")] += 1
    return counts


def dominant_script(text: str) -> str:
    """The script most letters are in; Han and kana together count as Japanese when kana
    make up at least a tenth of the letters (Japanese prose mixes both)."""
    counts = script_counts(text)
    letters = sum(counts.values())
    if counts["Kana"] >= 0.1 * letters:
        return "Japanese"
    return counts.most_common(1)[0][0] if counts else "None"


@pytest.mark.parametrize("lang", LANGS)
def test_asset_documents(lang):
    path = asset_path(lang)
    assert path.is_file() and path.stat().st_size > 0, f"{path} missing or empty"
    docs = documents(lang)
    assert 20 <= len(docs) <= 40, f"{lang}: {len(docs)} documents"
    short = [d[:60] for d in docs if len(d) < 200]
    assert not short, f"{lang}: documents under 200 characters: {short}"
    dupes = [d[:60] for d, n in Counter(docs).items() if n > 1]
    assert not dupes, f"{lang}: repeated documents: {dupes}"
    for doc in docs:
        assert dominant_script(doc) == SCRIPT[lang], f"{lang}: {script_counts(doc)} in {doc[:80]!r}"
    # the whole file too, and clearly: at least 60% of its letters in the expected script
    counts = script_counts("\n".join(docs))
    assert counts[SCRIPT[lang]] >= 0.6 * sum(counts.values()), (lang, counts)


def test_only_dev_assets_and_sources_listed():
    files = sorted(p.stem for p in ASSETS.glob("*.txt"))
    assert files == sorted(LANGS), files
    assert not set(files) & set(HELDOUT_LANGS)
    sources = (ASSETS / "SOURCES.md").read_text(encoding="utf-8")
    for lang in LANGS:
        assert f"{lang}.txt" in sources, f"SOURCES.md does not mention {lang}.txt"


def test_documents_splits_on_separator_lines(tmp_path, monkeypatch):
    from tests.pipelines import _languages

    monkeypatch.setattr(_languages, "ASSETS", tmp_path)
    (tmp_path / "fr.txt").write_text("un\n\ndeux\n%%%\ntrois %%% quatre\n%%%\n\n", encoding="utf-8")
    assert _languages.documents("fr") == ["un\n\ndeux", "trois %%% quatre"]
    with pytest.raises(ValueError):
        _languages.documents("ja")  # held out: no asset, by design


@pytest.mark.parametrize("lang", HELDOUT_LANGS)
def test_heldout_documents(lang):
    docs = heldout_documents(lang)
    if docs is None:
        pytest.skip(HELDOUT_MISSING)
    assert len(docs) >= 100, f"{lang}: only {len(docs)} held-out documents"
    counts = script_counts("\n".join(docs[:200]))
    expected = {"Japanese": ("Han", "Kana")}.get(SCRIPT[lang], (SCRIPT[lang],))
    assert sum(counts[s] for s in expected) >= 0.6 * sum(counts.values()), (lang, counts)


def test_heldout_documents_absent_is_none(tmp_path):
    assert heldout_documents("ja", root=tmp_path) is None
