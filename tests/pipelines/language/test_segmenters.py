"""pipelines.language: scripts and word splitters, on real sentences.

Chinese and Japanese against hand-segmented references of well-known text (the opening of
Natsume Soseki's 吾輩は猫である, public domain; a sentence of the Debian Reference, tests/assets);
every script without spaces becomes character tokens under ``space_out``; English and every
ASCII text keep exactly ``str.split`` and their former tokens.
"""
from __future__ import annotations

import pytest

from pipelines.language.scripts import space_out, spaceless_share
from pipelines.language.segmenters import default_splitter, splitter
from tests.pipelines._languages import documents

NEKO = "吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。"


def test_japanese_morphemes():
    assert splitter("fugashi")(NEKO) == ["吾輩", "は", "猫", "で", "ある", "。", "名前", "は", "まだ", "無い", "。",
                                         "どこ", "で", "生れ", "た", "か", "と", "んと", "見当", "が", "つか", "ぬ", "。"]
    # spaces and Latin words inside Japanese text: split there too, no whitespace token
    assert splitter("fugashi")("Linux の コマンド") == ["Linux", "の", "コマンド"]


def test_chinese_words_on_the_debian_reference():
    words = splitter("jieba")("Linux 系统是一个面向网络计算机的功能强大的计算平台。")
    assert words == ["Linux", "系统", "是", "一个", "面向", "网络计算机", "的", "功能强大", "的", "计算", "平台", "。"]
    doc = documents("zh-cn")[0]
    split = splitter("jieba")(doc)
    assert "".join(split) == "".join(doc.split())  # a partition of the text, whitespace aside
    assert 1.2 < len("".join(split)) / len(split) < 2.5  # Chinese words: one to three characters


def test_thai_words():
    assert splitter("pythainlp")("ผมรักภาษาไทยมากครับ วันนี้อากาศดี") == [
        "ผม", "รัก", "ภาษาไทย", "มาก", "ครับ", "วันนี้", "อากาศ", "ดี"]


@pytest.mark.parametrize("text", ["Plain English, with punctuation.", "naïve “quoted” don’t — dash",
                                  "Ünïcödé Latin and Кириллица текст", ""])
def test_spaced_scripts_keep_their_tokens(text):
    assert space_out(text) is text  # no spaceless character: the very same string
    assert splitter("characters")(text) == text.split() == splitter("whitespace")(text)


def test_spaceless_scripts_become_characters():
    assert space_out("吾輩は猫。ABC！") .split() == ["吾", "輩", "は", "猫", "ABC"]
    lao = "ພາສາລາວ"  # Lao: no segmenter here, the character rule
    assert splitter(default_splitter("lo"))(lao) == list(lao)
    assert spaceless_share(NEKO) > 0.8 and spaceless_share("English text") == 0.0


def test_every_language_gets_a_splitter():
    assert [default_splitter(c) for c in ("ja", "zh", "th", "fr", "lo")] == [
        "fugashi", "jieba", "pythainlp", "characters", "characters"]
    with pytest.raises(ValueError, match="word splitter 'mecab'"):
        splitter("mecab")
