"""A trained tokenizer keeps every script whole (pipelines/tokenizer_accents.py) and an alphabet
that follows the text (``tokenizer.character_coverage``), with or without a language list.

Real text: the Korean Debian FAQ, the Chinese Debian Reference and fortunes (committed assets,
tests/assets/languages/SOURCES.md), plus a few sentences of Thai, Hindi and Arabic."""
from __future__ import annotations

import json
import unicodedata
from collections import Counter

import pytest
from tokenizers import Tokenizer

from pipelines import tokenizer_accents as accents
from pipelines.config import TokenizerConfig
from pipelines.tokenizer import train_tokenizer
from synthetic.prose import documents as prose
from tests.pipelines._languages import documents

UNK = 1
# Real sentences whose letters carry non-spacing marks that BERT's accent stripping drops.
MARKED = ["ภาษาไทยเป็นภาษาราชการของประเทศไทย และมีผู้พูดหลายล้านคน",
          "หนังสือเล่มนี้น่าอ่านมาก ฉันอ่านจบแล้วเมื่อวานนี้",
          "हिंदी भारत की राजभाषा है और इसे करोड़ों लोग बोलते हैं।",
          "मुझे किताबें पढ़ना बहुत पसंद है।",
          "إن اللغة العربية هي لغة رسمية في كثير من الدول.",
          "أهلاً وسهلاً بكم في هذه المدينة الجميلة."]


def _train(texts, tmp_path, name, **cfg):
    out = tmp_path / name
    info = train_tokenizer(texts, TokenizerConfig(**cfg), str(out))
    return info, Tokenizer.from_file(str(out / "tokenizer.json")), out


def _is_jamo(c: str) -> bool:
    return 0x1100 <= ord(c) <= 0x11FF or 0x3130 <= ord(c) <= 0x318F


def test_accent_stripping_takes_accents_not_letters():
    strip = accents.script_safe_bert(lowercase=True)
    bert = accents.bert_normalizer(lowercase=True, strip_accents=True)
    for text, want in [("Café Über naïve Zoë", "cafe uber naive zoe"), ("Καλημέρα", "καλημερα"),
                       ("Ёлка йод", "елка иод"), ("Việt Nam", "viet nam")]:
        assert strip.normalize_str(text) == want == unicodedata.normalize("NFC", bert.normalize_str(text))
    for text in ["한국어 텍스트", "ก่อนหน้า", "हिंदी", "أهلاً", "שָׁלוֹם", *MARKED]:
        # nothing of these scripts is an accent: the text comes back as it was (canonically)
        assert strip.normalize_str(text) == unicodedata.normalize("NFC", text).lower(), text
        assert bert.normalize_str(text) != unicodedata.normalize("NFC", text).lower(), text  # BERT's is not
    assert accents.bert_damages("abcéΩж一丁", lowercase=True) == []
    assert set(accents.bert_damages("한ก่िं", lowercase=True)) == {"한", "่", "ं"}  # ि is a spacing mark


@pytest.mark.parametrize("kind", ["wordpiece", "unigram"])
def test_a_korean_vocabulary_holds_syllables(kind, tmp_path):
    texts = documents("ko")
    info, tok, out = _train(texts, tmp_path, kind, kind=kind, vocab_size=3000)  # defaults: lower-cased, stripped
    vocab = [t for t in tok.get_vocab() if not t.startswith("[")]
    syllables = [t for t in vocab if any(0xAC00 <= ord(c) <= 0xD7A3 for c in t)]
    assert len(syllables) > len(vocab) / 2 and not [t for t in vocab if any(map(_is_jamo, t))]
    encoded = tok.encode_batch(texts, add_special_tokens=False)
    tokens = [t for e in encoded for t in e.tokens]
    assert not any(_is_jamo(c) for t in tokens for c in t)
    assert sum(e.ids.count(UNK) for e in encoded) / len(tokens) < 0.001
    assert tok.normalizer.normalize_str("Café") == "cafe"  # Latin accents still stripped
    # transformers loads the folder with the same ids; its BERT classes, which cannot hold this
    # normaliser, are named out of the config
    import transformers

    config = json.loads((out / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast" and not (out / "vocab.txt").exists()
    if kind == "wordpiece":  # the build says so, once
        (line,) = accents.trained_warnings((out / "tokenizer.json").read_text())
        assert line.startswith("the trained tokenizer strips only Latin, Greek and Cyrillic accents") and "'" in line
    hf = transformers.AutoTokenizer.from_pretrained(str(out), local_files_only=True)
    for text in texts[:5]:
        assert hf(text)["input_ids"] == tok.encode(text).ids


@pytest.mark.parametrize("kind", ["wordpiece", "unigram"])
def test_thai_hindi_and_arabic_keep_their_marks(kind, tmp_path):
    texts = documents("ko")[:10] + MARKED * 20
    _, tok, _ = _train(texts, tmp_path, kind, kind=kind, vocab_size=1500)
    for text in MARKED:
        enc = tok.encode(text, add_special_tokens=False)
        assert UNK not in enc.ids, (text, enc.tokens)
        joined = "".join(t.removeprefix("##").replace("\u2581", "") for t in enc.tokens)
        assert joined == "".join(unicodedata.normalize("NFC", text).lower().split()), (text, enc.tokens)


def test_latin_text_keeps_bert_normalizer(tmp_path, caplog):
    """A few stray words of a damaged script (below accents.DAMAGED_SHARE of the characters) keep
    BERT's normaliser, and transformers' BERT classes; the training says what they lose."""
    stray = ["日本語のテキストがあります。", "한국어"]
    texts = prose(150, seed=4) + ["Café Über naïve façade Zoë Ёлка Καλημέρα"] * 5 + stray
    with caplog.at_level("WARNING", logger="pipelines.tokenizer"):
        _, tok, out = _train(texts, tmp_path, "en", vocab_size=800)
    assert json.loads(tok.to_str())["normalizer"]["type"] == "BertNormalizer"
    assert json.loads((out / "tokenizer_config.json").read_text())["tokenizer_class"] == "BertTokenizerFast"
    assert accents.trained_warnings((out / "tokenizer.json").read_text()) == []
    (line,) = [r.getMessage() for r in caplog.records]
    assert "BERT's accent stripping splits or drops letters of 0.0" in line and "'が' (U+304C)" in line
    assert "'한' (U+D55C)" in line and "tokenizer.strip_accents=false keeps them whole" in line


def _mixed() -> list[str]:
    return (prose(200, seed=1) + documents("zh-cn") + documents("zh-tw") + documents("zh-fortunes")
            + documents("ko") + documents("fr") + documents("de"))


def test_the_alphabet_follows_a_mixed_corpus_without_a_language_list(tmp_path):
    """2,564 distinct characters (Han, Hangul, Latin): BERT's 1,000 most frequent left the rarer
    Han and Hangul as [UNK]; the alphabet now covers 99.99% of the characters."""
    texts = _mixed()
    _, tok, _ = _train(texts, tmp_path, "mixed", vocab_size=8000)
    counts = Counter(c for t in texts for c in tok.normalizer.normalize_str(t) if not c.isspace())
    ranked = sorted(counts, key=lambda c: (-counts[c], c))
    total, covered, need = sum(counts.values()), 0, None
    for i, c in enumerate(ranked):  # the shortest prefix covering 99.99%, at least 1,000
        covered += counts[c]
        if covered >= 0.9999 * total:
            need = ranked[:max(1000, i + 1)]
            break
    assert len(need) > 2000
    vocab = tok.get_vocab()
    assert [c for c in need if c not in vocab] == []  # every character of the alphabet has its entry
    assert not [c for c in ranked[len(need):] if c in vocab]  # and the rarest have none
    encoded = tok.encode_batch(texts, add_special_tokens=False)
    unk = sum(e.ids.count(UNK) for e in encoded) / sum(len(e.ids) for e in encoded)
    assert unk < 0.0005, unk
    # character_coverage 0: BERT's rule alone, the 1,000 most frequent
    _, limited, _ = _train(texts, tmp_path, "limited", vocab_size=8000, character_coverage=0.0)
    assert {c for c in ranked if c in limited.get_vocab()} == set(ranked[:1000])


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_a_released_tokenizer_keeps_transformers_ids_and_says_what_it_splits(do_lower_case, tmp_path):
    """A released BERT folder is used as transformers applies it (uncased: Hangul split into jamo,
    Thai marks dropped), and the tokens of its vocabulary that this makes unreachable are named."""
    import transformers

    from pipelines.tokenizer_pretrained import open_pretrained
    from tests.pipelines._hf_folders import bert_vocab

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("".join(f"{t}\n" for t in bert_vocab() + ["한", "국", "##어", "ᄒ", "ᅡ", "ᆫ", "ก", "่"]))
    folder = tmp_path / "model"
    transformers.ElectraTokenizerFast(vocab=str(vocab), do_lower_case=do_lower_case).save_pretrained(str(folder))
    pre = open_pretrained(str(folder), TokenizerConfig())
    hf = transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    for text in ["한국어 한", "ก่ ก", "Café Über"]:
        assert pre.tokenizer.encode(text).ids == hf(text)["input_ids"], text
    if not do_lower_case:
        assert pre.warnings == []
        return
    (line,) = pre.warnings
    assert line.startswith(f"tokenizer.pretrained={folder}: its normaliser strips accents as BERT does")
    assert "4 of its" in line and "'한' (U+D55C)" in line and "'่' (U+0E48)" in line and "\n" not in line
