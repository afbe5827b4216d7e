"""Hugging Face model folders as a user's download of a released model looks, made with
``transformers`` itself (nothing is downloaded): a BERT-style vocab.txt with the special tokens
at 0 and 100-103 and ``[unused..]`` fillers, saved by ``ElectraTokenizerFast.save_pretrained``
(tokenizer.json + tokenizer_config.json) beside that vocab.txt, config.json and a weights stub.
"""
from __future__ import annotations

import json
import string
from pathlib import Path

BERT_SPECIAL_IDS = {"[PAD]": 0, "[UNK]": 100, "[CLS]": 101, "[SEP]": 102, "[MASK]": 103}
_WORDS = ["the", "The", "river", "River", "bridge", "Bridge", "cafe", "café", "Cafe", "Café", "uber", "über",
          "Uber", "Über", "naive", "naïve", "facade", "façade", "zoe", "zoë", "Zoe", "Zoë", "watch", "quiet",
          "and", "it", "don", "THE", "RIVER", "一", "丁", "七", "万"]
_CHARS = string.ascii_letters + string.digits + "éëïüçÉÜÇ"

# Sentences and pairs the tests encode: case, accents, CJK, punctuation, special tokens in the
# text, runs of whitespace, a word over WordPiece's 100-character limit.
SENTENCES = ["The Café Über the river.", "Zoë watched it quietly!", "naïve façade, THE RIVER?!",
             "一丁 river 七万", "The [MASK] bridge", "[SEP] and [CLS]", "  extra\tspaces \n and   don't ",
             "x" * 120, "ÜBER Zoë's 'façade' — 3.14"]
PAIRS = [("The Café Über the river.", "Zoë watched it quietly!"), ("一丁 [MASK]", "naïve façade")]


def bert_vocab() -> list[str]:
    """Laid out like BERT's: [PAD], [unused0-98], [UNK] [CLS] [SEP] [MASK], more fillers, then
    punctuation, characters, ``##`` continuations and some whole words."""
    vocab = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab += [f"[unused{i}]" for i in range(99, 140)]
    vocab += list(string.punctuation) + list(_CHARS) + [f"##{c}" for c in _CHARS]
    vocab += _WORDS + ["##ed", "##ly", "##er"]
    assert len(set(vocab)) == len(vocab)
    return vocab


def write_vocab(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{t}\n" for t in bert_vocab()), encoding="utf-8")
    return path


def electra_folder(folder: Path, *, do_lower_case: bool = True, strip_accents: bool | None = None,
                   layout: str = "saved") -> Path:
    """A model folder with vocab.txt and tokenizer.json. ``layout`` "saved": the
    tokenizer_config.json transformers 5 writes (tokenizer_class BertTokenizer, every flag);
    "released": one like google/electra-*'s, with no tokenizer_class, only the flags given;
    "vocab-only": vocab.txt and that released tokenizer_config.json, no tokenizer.json."""
    from transformers import ElectraTokenizerFast

    vocab = write_vocab(folder / "vocab.txt")
    kwargs = {} if strip_accents is None else {"strip_accents": strip_accents}
    ElectraTokenizerFast(vocab=str(vocab), do_lower_case=do_lower_case, **kwargs).save_pretrained(str(folder))
    if layout in ("released", "vocab-only"):
        (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": do_lower_case, **kwargs,
                                                                  "model_max_length": 512}))
    if layout == "vocab-only":
        (folder / "tokenizer.json").unlink()
    # What else a download holds, which the pipeline ignores.
    (folder / "config.json").write_text(json.dumps({"model_type": "electra", "vocab_size": len(bert_vocab())}))
    (folder / "special_tokens_map.json").write_text(json.dumps({"pad_token": "[PAD]", "unk_token": "[UNK]"}))
    (folder / "model.safetensors").write_bytes(b"not read")
    return folder


def unigram_folder(folder: Path, *, lowercase: bool = True) -> Path:
    """A folder with only tokenizer.json (a Unigram, not BERT) and tokenizer_config.json, saved by
    transformers' PreTrainedTokenizerFast; special tokens first, [PAD]=0."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = list(BERT_SPECIAL_IDS)
    pieces = ["\u2581the", "\u2581river", "\u2581caf", "é", "e", "\u2581", "s", "t", "r", "i", "v", "\u2581zo",
              "ë", "\u2581über", "\u2581", "一", "丁", ".", "!", "a", "c", "f", "h", "w", "d", "q", "u", "l", "y",
              "\u2581The", "T", "R", "C", "Z", "Ü", "b", "n", "o", "x"]
    pieces = list(dict.fromkeys(pieces))
    vocab = [(t, 0.0) for t in specials] + [(p, -1.0 - i / 10) for i, p in enumerate(pieces)]
    tok = Tokenizer(models.Unigram(vocab, unk_id=1))
    steps = [normalizers.NFKC()] + ([normalizers.Lowercase()] if lowercase else [])
    tok.normalizer = normalizers.Sequence(steps)
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.add_special_tokens(specials)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                                 sep_token="[SEP]", mask_token="[MASK]")
    hf.save_pretrained(str(folder))
    return folder
