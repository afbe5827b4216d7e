"""The tokenizer folder's contract: the files ``transformers`` loads, derived from ``tokenizer.json``.

A corpus's ``tokenizer/`` folder and every Hugging Face export carry the same three files:
``tokenizer.json`` (the tokenizer, as the ``tokenizers`` library writes it), ``tokenizer_config.json``
naming the transformers class that rebuilds it correctly, and ``vocab.txt`` only where that class is
BERT's. Both sides derive the two extra files from ``tokenizer.json`` with the functions here, so an
older or hand-made folder cannot leave a misleading ``vocab.txt`` or config behind. Like the shard
schema, this is part of the corpus contract that the trainer reads (``electra.hf_export``); it
depends on nothing else in ``pipelines``.
"""
from __future__ import annotations

import json
from typing import Any

from tokenizers import Tokenizer

from pipelines import schema

MODEL_MAX_LENGTH = 512


def normalizer_flags(tok: Tokenizer) -> tuple[bool, bool]:
    """(lowercase, strip_accents) as the tokenizer's normaliser actually applies them."""
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
        strip = strip or step.get("type") == "StripAccents"
    return lowercase, strip



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


