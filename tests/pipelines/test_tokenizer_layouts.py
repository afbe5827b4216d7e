"""Every way a released tokenizer can be laid out gives transformers' ids (issue: a cased bare
vocab.txt lost its accents). For each layout, a tokenizer opened by
``pipelines.tokenizer_pretrained`` must encode cased, uncased, accented, CJK, Hangul, Thai,
Devanagari, Arabic, Hebrew and Cyrillic text and sentence pairs to the ids transformers gives
for the same files (``AutoTokenizer`` and ``ElectraTokenizerFast`` on a folder,
``BertTokenizerFast(vocab=...)`` for a bare vocab.txt with the same flags), or be refused in one
line where the folder contradicts itself."""
from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from pipelines.config import TokenizerConfig
from pipelines.tokenizer_pretrained import open_pretrained
from tests.pipelines._hf_folders import PAIRS, SENTENCES, bert_vocab

# Tokens of other scripts, composed and decomposed (jamo), so a normaliser that splits or drops
# letters changes ids instead of giving [UNK] on both sides.
EXTRA = ["한", "국", "어", "ᄒ", "ᅡ", "ᆫ", "ᄀ", "ᅮ", "ᆨ", "ᄋ", "ᅥ", "ก", "่", "อ", "น", "ि", "ं", "ह", "द", "ी",
         "अ", "أ", "ا", "ٔ", "ه", "ل", "κ", "α", "ά", "λ", "ё", "е", "й", "и", "ל", "ש", "ו", "ם", "##어", "##ं"]
VOCAB = bert_vocab() + [t for t in EXTRA if t not in bert_vocab()]
TEXTS = SENTENCES + ["한국어 텍스트", "ก่อน อน", "हिंदी", "أهلاً", "Καλά κάλα", "Ёлка и йод", "שָׁלוֹם"]
ABSENT = object()


def _vocab(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{t}\n" for t in VOCAB), encoding="utf-8")
    return path


def _same_ids(ours, hf) -> None:
    for text in TEXTS:
        assert hf(text)["input_ids"] == ours.encode(text).ids, (text, hf.tokenize(text), ours.encode(text).tokens)
    for a, b in PAIRS + [("한국어", "ก่อน")]:
        enc, got = ours.encode(a, b), hf(a, b, return_token_type_ids=True)
        assert (got["input_ids"], got["token_type_ids"]) == (enc.ids, enc.type_ids), (a, b)


def _hf(folder: Path, cls: str):
    import transformers

    return getattr(transformers, cls).from_pretrained(str(folder), local_files_only=True)


@pytest.mark.parametrize("lowercase,strip", list(itertools.product([None, True, False], repeat=2)))
def test_a_bare_vocab_txt_encodes_like_bert_tokenizer_with_the_same_flags(lowercase, strip, tmp_path):
    import transformers

    vocab = _vocab(tmp_path / "vocab.txt")
    pre = open_pretrained(str(vocab), TokenizerConfig(lowercase=lowercase, strip_accents=strip))
    flags = {"do_lower_case": lowercase is not False} | ({} if strip is None else {"strip_accents": strip})
    _same_ids(pre.tokenizer, transformers.BertTokenizerFast(vocab=str(vocab), **flags))
    assert pre.strip_accents is (flags["do_lower_case"] if strip is None else strip)


CONFIGS = [{k: v for k, v in zip(("tokenizer_class", "do_lower_case", "strip_accents"), combo) if v is not ABSENT}
           for combo in itertools.product([ABSENT, "ElectraTokenizer"], [ABSENT, True, False], [ABSENT, None, True, False])]


@pytest.mark.parametrize("config", CONFIGS + [{"do_lower_case": False, "tokenize_chinese_chars": False}],
                         ids=lambda c: json.dumps(c))
def test_a_vocab_txt_folder_encodes_like_transformers(config, tmp_path):
    folder = tmp_path / "model"
    _vocab(folder / "vocab.txt")
    (folder / "config.json").write_text(json.dumps({"model_type": "electra", "vocab_size": len(VOCAB)}))
    if config:
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
    pre = open_pretrained(str(folder), TokenizerConfig())
    for cls in ("AutoTokenizer", "ElectraTokenizerFast"):
        _same_ids(pre.tokenizer, _hf(folder, cls))


@pytest.mark.parametrize("do_lower_case,strip,chinese", list(itertools.product([True, False], [None, True, False],
                                                                                 [True, False])))
@pytest.mark.parametrize("keep_vocab_txt", [True, False])
def test_a_saved_folder_encodes_like_transformers(do_lower_case, strip, chinese, keep_vocab_txt, tmp_path):
    import transformers

    folder = tmp_path / "model"
    vocab = _vocab(folder / "vocab.txt")
    flags = {"do_lower_case": do_lower_case, "tokenize_chinese_chars": chinese} | (
        {} if strip is None else {"strip_accents": strip})
    transformers.ElectraTokenizerFast(vocab=str(vocab), **flags).save_pretrained(str(folder))
    (folder / "config.json").write_text(json.dumps({"model_type": "electra", "vocab_size": len(VOCAB)}))
    if not keep_vocab_txt:
        vocab.unlink()
    pre = open_pretrained(str(folder), TokenizerConfig())
    for cls in ("AutoTokenizer", "ElectraTokenizerFast"):
        _same_ids(pre.tokenizer, _hf(folder, cls))


@pytest.mark.parametrize("model_type", ["electra", None])
def test_a_tokenizer_json_alone_follows_the_class_config_json_names(model_type, tmp_path):
    """No tokenizer_config.json: AutoTokenizer takes its class from config.json's model_type
    (ELECTRA: BERT's, which rebuilds an uncased normaliser), or, with no model type, uses
    tokenizer.json as it is."""
    import transformers

    folder = tmp_path / "model"
    vocab = _vocab(folder / "vocab.txt")
    transformers.ElectraTokenizerFast(vocab=str(vocab), do_lower_case=True).save_pretrained(str(folder))
    vocab.unlink()
    (folder / "tokenizer_config.json").unlink()
    (folder / "config.json").write_text(json.dumps({"model_type": model_type} if model_type else {}))
    pre = open_pretrained(str(folder), TokenizerConfig())
    assert pre.model_class == ("BertTokenizer" if model_type else None) and pre.lowercase is True
    _same_ids(pre.tokenizer, _hf(folder, "AutoTokenizer"))


def test_a_cased_tokenizer_json_that_transformers_would_lower_case_is_refused(tmp_path):
    import transformers

    folder = tmp_path / "model"
    vocab = _vocab(folder / "vocab.txt")
    transformers.ElectraTokenizerFast(vocab=str(vocab), do_lower_case=False).save_pretrained(str(folder))
    vocab.unlink()
    (folder / "tokenizer_config.json").unlink()
    (folder / "config.json").write_text(json.dumps({"model_type": "electra"}))
    assert _hf(folder, "AutoTokenizer").tokenize("Café") == ["cafe"]  # transformers lower-cases it
    with pytest.raises(ValueError) as err:
        open_pretrained(str(folder), TokenizerConfig())
    line = str(err.value)
    assert "\n" not in line and line.startswith(f"{folder}/config.json (model_type=\"electra\") makes "
                                                 "transformers use BertTokenizer with its defaults")
    assert "do_lower_case=false" in line and line.endswith("state tokenizer_class and the flags in "
                                                          "tokenizer_config.json")


@pytest.mark.parametrize("named", [{"tokenizer_config": "DistilBertTokenizer"}, {"tokenizer_config": "ConvBertTokenizerFast"},
                                   {"config": "PreTrainedTokenizerFast"}, {"config": "BertTokenizer"}],
                         ids=lambda n: json.dumps(n))
def test_every_file_and_class_that_names_the_class_is_followed(named, tmp_path):
    """A BERT subclass named in tokenizer_config.json (DistilBERT, ConvBERT, ...) rebuilds BERT's
    pipeline from the config's flags; with none named there, config.json's own tokenizer_class
    decides before its model_type. Here tokenizer.json is cased and the flags say uncased: which
    one transformers follows depends on the class, and ours must be the same."""
    import transformers

    folder = tmp_path / "model"
    vocab = _vocab(folder / "vocab.txt")
    transformers.ElectraTokenizerFast(vocab=str(vocab), do_lower_case=False).save_pretrained(str(folder))
    config = {"model_max_length": 512}
    if "tokenizer_config" in named:
        config["tokenizer_class"] = named["tokenizer_config"]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))  # no flags: BERT's default, uncased
    model = {"model_type": "bert"} | ({"tokenizer_class": named["config"]} if "config" in named else {})
    (folder / "config.json").write_text(json.dumps(model))
    hf = _hf(folder, "AutoTokenizer")
    try:
        pre = open_pretrained(str(folder), TokenizerConfig())
    except ValueError as exc:  # the folder at odds with itself: refused, in one line, never other ids
        assert "\n" not in str(exc) and hf.tokenize("Café") != ["Café"]
        return
    _same_ids(pre.tokenizer, hf)


def _rebuilds(folder: Path) -> bool:
    """Whether AutoTokenizer rebuilt BERT's pipeline from the config (uncased by default) instead
    of using the folder's cased tokenizer.json as it is."""
    return _hf(folder, "AutoTokenizer").tokenize("Café") == ["cafe"]


def test_the_bert_class_lists_are_what_transformers_does(tmp_path):
    import transformers

    from pipelines.tokenizer_files import BERT_CLASSES, BERT_MODEL_TYPES

    vocab = _vocab(tmp_path / "vocab.txt")
    cased = tmp_path / "cased"
    transformers.ElectraTokenizerFast(vocab=str(vocab), do_lower_case=False).save_pretrained(str(cased))
    for name in sorted(BERT_CLASSES) + ["ConvBertTokenizer", "PreTrainedTokenizerFast"]:
        (cased / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": name}))
        assert _rebuilds(cased) == (name in BERT_CLASSES), name
    (cased / "tokenizer_config.json").write_text("{}")
    for model_type in sorted(BERT_MODEL_TYPES) + ["realm", "roberta"]:
        (cased / "config.json").write_text(json.dumps({"model_type": model_type}))
        assert _rebuilds(cased) == (model_type in BERT_MODEL_TYPES), model_type
