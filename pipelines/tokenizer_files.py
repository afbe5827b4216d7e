"""The tokenizer folder's contract: the files ``transformers`` loads, derived from ``tokenizer.json``.

A corpus's ``tokenizer/`` folder and every Hugging Face export carry the same three files:
``tokenizer.json`` (the tokenizer, as the ``tokenizers`` library writes it), ``tokenizer_config.json``
naming the transformers class that rebuilds it correctly, and ``vocab.txt`` only where that class is
BERT's. Both sides derive the two extra files from ``tokenizer.json`` with the functions here, so an
older or hand-made folder cannot leave a misleading ``vocab.txt`` or config behind. Like the shard
schema, this is part of the corpus contract that the trainer reads (``electra.checkpoint.hf_export``); it
depends on nothing else in ``pipelines``.
"""
from __future__ import annotations

import json
from typing import Any

from tokenizers import Tokenizer

from common import storage
from pipelines import schema

MODEL_MAX_LENGTH = 512
MODEL_CONFIG = "config.json"  # a model folder's model config: its model_type can pick the tokenizer class


# Combining Diacritical Marks (+ Extended, Supplement, for Symbols, Half Marks): the accents of
# Latin, Greek and Cyrillic, which the script-safe accent stripping removes (a ``Replace`` of
# this pattern after NFD: ``pipelines.tokenizer_accents``). Every other script's marks are in
# that script's own block.
DIACRITICS = "[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]"


def normalizer_flags(tok: Tokenizer) -> tuple[bool, bool]:
    """(lowercase, strip_accents) as the tokenizer's normaliser actually applies them (BERT's
    stripping, ``StripAccents`` or the script-safe ``Replace`` of ``DIACRITICS``)."""
    if tok.normalizer is None:
        return False, False
    spec = json.loads(tok.normalizer.__getstate__())
    steps = spec.get("normalizers", [spec]) if spec.get("type") == "Sequence" else [spec]
    lowercase = strip = False
    for step in steps:
        if step.get("type") == "BertNormalizer":
            lowercase = lowercase or bool(step.get("lowercase"))
            accents = step.get("strip_accents")
            strip = strip or bool(step.get("lowercase") if accents is None else accents)
        lowercase = lowercase or step.get("type") == "Lowercase"
        strip = strip or step.get("type") == "StripAccents" or (
            step.get("type") == "Replace" and step.get("pattern") == {"Regex": DIACRITICS} and not step.get("content"))
    return lowercase, strip



# transformers classes that rebuild BERT's WordPiece pipeline from a vocabulary and the config's
# flags (BertTokenizer and its subclasses that keep its normaliser; ConvBERT's takes tokenizer.json
# as it is), and the model types (a model folder's config.json) for which AutoTokenizer picks such
# a class when no file names one. As transformers 5 does it: tests/pipelines/test_tokenizer_layouts
# checks both lists against the installed transformers.
BERT_CLASSES = frozenset(f"{name}Tokenizer{fast}" for fast in ("", "Fast") for name in (
    "Bert", "Electra", "DistilBert", "MobileBert", "SqueezeBert", "LayoutLM", "Lxmert",
    "DPRQuestionEncoder", "DPRContextEncoder", "DPRReader"))
BERT_MODEL_TYPES = frozenset({"bert", "convbert", "distilbert", "electra", "ernie", "layoutlm", "megatron-bert",
                              "nomic_bert", "squeezebert"})


def folder_json(uri: str) -> dict[str, Any]:
    """A JSON object file of a model folder (config.json, tokenizer_config.json): {} when absent or
    not an object; ``ValueError`` naming the file and line when it is not JSON."""
    try:
        data = storage.read_bytes(uri)
    except storage.MissingObject:
        return {}
    try:
        got = json.loads(data.decode("utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{uri}:{exc.lineno}: invalid JSON: {exc.msg}") from exc
    except UnicodeDecodeError as exc:
        raise ValueError(f"{uri}: not UTF-8 ({exc.reason} at byte {exc.start})") from exc
    return got if isinstance(got, dict) else {}


def folder_source(cls: str | None, *, has_vocab: bool, has_json: bool) -> str | None:
    """The file a model folder's tokenizer comes from, as transformers reads it for the class
    ``folder_class`` gives: vocab.txt for a BERT class or where there is no tokenizer.json, else
    tokenizer.json; None where the folder has neither."""
    if has_vocab and (cls in BERT_CLASSES or not has_json):
        return schema.VOCAB_TXT
    return schema.TOKENIZER_JSON if has_json else None


def folder_class(tokenizer_config: dict[str, Any], model_config: dict[str, Any] | None) -> tuple[str | None, str]:
    """The tokenizer class ``AutoTokenizer`` uses for a model folder, and which file says so:
    tokenizer_config.json's ``tokenizer_class``; else config.json's; else, for a model type of
    ``BERT_MODEL_TYPES`` in config.json, ``BertTokenizer``; else ``model_type:<type>`` (another
    family's class); else None (transformers then uses tokenizer.json as it is)."""
    cls = tokenizer_config.get("tokenizer_class")
    if cls:
        return cls, f"{schema.TOKENIZER_CONFIG} (tokenizer_class={json.dumps(cls)})"
    cls = (model_config or {}).get("tokenizer_class")
    if isinstance(cls, str) and cls:
        return cls, f"{MODEL_CONFIG} (tokenizer_class={json.dumps(cls)})"
    model_type = (model_config or {}).get("model_type")
    if isinstance(model_type, str) and model_type:
        said = f"{MODEL_CONFIG} (model_type={json.dumps(model_type)})"
        return ("BertTokenizer" if model_type in BERT_MODEL_TYPES else f"model_type:{model_type}"), said
    return None, f"no tokenizer class ({schema.TOKENIZER_CONFIG} names none, no {MODEL_CONFIG} model_type)"


# transformers' BertTokenizer (= BertTokenizerFast, ElectraTokenizer, ElectraTokenizerFast in
# transformers 5) ignores the model in tokenizer.json: it rebuilds WordPiece + BertNormalizer +
# BertPreTokenizer from the vocabulary. For any other tokenizer that gives wrong ids (a Unigram
# vocabulary encodes as nearly all [UNK]) without a word. This value makes its BertNormalizer
# raise instead; AutoTokenizer and PreTrainedTokenizerFast, which load tokenizer.json as it is,
# keep it as an unused attribute.
NOT_BERT = ("not a BERT WordPiece tokenizer: load it with AutoTokenizer or PreTrainedTokenizerFast, "
            "not BertTokenizer(Fast) or ElectraTokenizer(Fast)")


def spec(component: Any) -> dict[str, Any]:
    return json.loads(component.__getstate__()) if component is not None else {}


def is_bert_compatible(tok: Tokenizer) -> bool:
    """Whether transformers' BertTokenizer would rebuild exactly this tokenizer: WordPiece with
    ``##`` pieces, a BertNormalizer that cleans text, the BertPreTokenizer."""
    model, norm = spec(tok.model), spec(tok.normalizer)
    return (model.get("type") == "WordPiece" and model.get("continuing_subword_prefix") == "##"
            and norm.get("type") == "BertNormalizer" and norm.get("clean_text") is True
            and spec(tok.pre_tokenizer).get("type") == "BertPreTokenizer")


def config_json(tok: Tokenizer) -> dict[str, Any]:
    specials = {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]",
                "sep_token": "[SEP]", "mask_token": "[MASK]"}
    base = {"model_max_length": MODEL_MAX_LENGTH, "padding_side": "right",
            "model_input_names": ["input_ids", "token_type_ids", "attention_mask"], **specials}
    if is_bert_compatible(tok):
        lowercase, strip_accents = normalizer_flags(tok)
        return {"tokenizer_class": "BertTokenizerFast", "do_lower_case": lowercase, "strip_accents": strip_accents,
                "tokenize_chinese_chars": bool(spec(tok.normalizer).get("handle_chinese_chars")), **base}
    return {"tokenizer_class": "PreTrainedTokenizerFast", "tokenize_chinese_chars": NOT_BERT, **base}


def vocab_lines(tok: Tokenizer) -> bytes:
    vocab = tok.get_vocab(with_added_tokens=True)
    by_id = sorted(vocab.items(), key=lambda kv: kv[1])
    if [i for _, i in by_id] != list(range(len(by_id))):
        raise ValueError("tokenizer ids are not contiguous; cannot write vocab.txt")
    bad = [t for t, _ in by_id if "\n" in t or "\r" in t]
    if bad:
        raise ValueError(f"token(s) with a line break cannot go into vocab.txt: {bad[:5]}")
    return "".join(f"{t}\n" for t, _ in by_id).encode("utf-8")


def hf_files(tok: Tokenizer) -> dict[str, bytes]:
    """The tokenizer files of a folder that ``transformers`` loads: ``tokenizer.json`` (last),
    ``tokenizer_config.json`` with the class to use, and ``vocab.txt`` only for a tokenizer the
    BERT classes rebuild exactly (a Unigram ``vocab.txt`` would read as a WordPiece one, in
    transformers' BERT classes and in ``load_pretrained``, and encode as [UNK])."""
    config = json.dumps(config_json(tok), indent=2, sort_keys=True) + "\n"
    files = {schema.VOCAB_TXT: vocab_lines(tok)} if is_bert_compatible(tok) else {}
    files[schema.TOKENIZER_CONFIG] = config.encode()
    files[schema.TOKENIZER_JSON] = tok.to_str(pretty=True).encode("utf-8")
    return files


