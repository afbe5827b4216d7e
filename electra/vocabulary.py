"""What a model's vocabulary is, so that a corpus and a checkpoint can be checked against each other.

A model's embedding rows mean the tokens of the tokenizer it was trained with, id by id. A corpus
tokenised with another vocabulary (or the same one with other lower-casing) trains a continued
model on nonsense without a single error, so the trainer compares, before anything starts:

- the tokens in id order (sha256 of them, one per line, and their count),
- the special tokens' ids (``[PAD] [UNK] [CLS] [SEP] [MASK]``),
- lower-casing, where both sides state it.

Both sides are read the way ``transformers`` would: a tokenizer folder's ``tokenizer.json`` (its
model's vocabulary plus added tokens) or its ``vocab.txt``, and lower-casing from
``tokenizer_config.json``'s ``do_lower_case`` when it says, else from the normaliser in
``tokenizer.json``. Nothing here tokenises text.
"""
from __future__ import annotations

import json
from typing import NamedTuple

from common import storage
from common.hashing import sha256_bytes
from pipelines import schema

SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


class Vocabulary(NamedTuple):
    sha256: str  # of the tokens in id order, one per line
    size: int
    specials: dict[str, int | None]
    lowercase: bool | None  # None: not stated
    where: str  # the file it was read from, for messages

    def describe(self) -> str:
        case = {True: "lower-cased", False: "cased", None: "casing unknown"}[self.lowercase]
        ids = ", ".join(f"{t}={i}" for t, i in self.specials.items())
        return f"{self.size} tokens, sha256 {self.sha256[:12]}, {case}, {ids}"

    def differences(self, other: Vocabulary) -> list[str]:
        """What differs between two vocabularies (empty: the same)."""
        out = []
        if self.size != other.size:
            out.append(f"size {self.size} vs {other.size}")
        elif self.sha256 != other.sha256:
            out.append("the tokens differ")
        if self.specials != other.specials:
            out.append(f"special ids {self.specials} vs {other.specials}")
        if None not in (self.lowercase, other.lowercase) and self.lowercase != other.lowercase:
            out.append(f"lower-casing {self.lowercase} vs {other.lowercase}")
        return out


def _from_tokens(tokens: list[str], lowercase: bool | None, where: str) -> Vocabulary:
    index = {t: i for i, t in enumerate(tokens)}
    return Vocabulary(sha256_bytes("".join(f"{t}\n" for t in tokens).encode("utf-8")), len(tokens),
                      {t: index.get(t) for t in SPECIAL}, lowercase, where)


def from_tokenizer_json(data: bytes, where: str, *, lowercase: bool | None = None) -> Vocabulary:
    """The vocabulary of a ``tokenizers`` ``tokenizer.json`` (``lowercase``: stated elsewhere)."""
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_str(data.decode("utf-8"))
    except Exception as exc:  # tokenizers raises a bare Exception on malformed JSON
        raise ValueError(f"{where}: not a tokenizers tokenizer.json ({exc})") from exc
    vocab = tok.get_vocab(with_added_tokens=True)
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    if lowercase is None:
        lowercase = _normaliser_lowercases(json.loads(data).get("normalizer"))
    return _from_tokens(tokens, lowercase, where)


def _normaliser_lowercases(spec: dict | None) -> bool | None:
    if not spec:
        return False
    steps = spec.get("normalizers", []) if spec.get("type") == "Sequence" else [spec]
    return any(s.get("type") == "Lowercase" or (s.get("type") == "BertNormalizer" and s.get("lowercase"))
               for s in steps)


# tokenizer_config.json classes that rebuild a WordPiece from vocab.txt (no class: the same)
BERT_CLASSES = (None, "BertTokenizer", "BertTokenizerFast", "ElectraTokenizer", "ElectraTokenizerFast")


def from_folder(folder: str) -> Vocabulary:
    """The vocabulary of a Hugging Face tokenizer folder (a model folder, our ``RUN/tokenizer`` or
    a corpus's tokenizer folder), chosen as build-corpus's ``--tokenizer FOLDER`` chooses: a
    BERT-family folder's ``vocab.txt`` (lower-cased unless ``do_lower_case`` says otherwise, as
    BertTokenizer), else ``tokenizer.json``."""
    config_uri = storage.join(folder, schema.TOKENIZER_CONFIG)
    config: dict = {}
    if storage.exists(config_uri):
        try:
            config = json.loads(storage.read_bytes(config_uri))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{config_uri}:{exc.lineno}: invalid JSON: {exc.msg}") from exc
    stated = config.get("do_lower_case") if isinstance(config.get("do_lower_case"), bool) else None
    tok_uri, vocab_uri = storage.join(folder, schema.TOKENIZER_JSON), storage.join(folder, schema.VOCAB_TXT)
    has_json, has_vocab = storage.exists(tok_uri), storage.exists(vocab_uri)
    if has_vocab and (config.get("tokenizer_class") in BERT_CLASSES or not has_json):
        text = storage.read_bytes(vocab_uri).decode("utf-8")
        tokens = [line.rstrip("\r") for line in text.split("\n")]
        if tokens and tokens[-1] == "":
            tokens.pop()
        return _from_tokens(tokens, True if stated is None else stated, vocab_uri)
    if has_json:
        return from_tokenizer_json(storage.read_bytes(tok_uri), tok_uri, lowercase=stated)
    raise FileNotFoundError(f"{folder}: no tokenizer.json or vocab.txt (the tokenizer files of a Hugging Face "
                            "model folder)")
