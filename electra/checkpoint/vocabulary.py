"""What a model's vocabulary is, so that a corpus and a checkpoint can be checked against each other.

A model's embedding rows mean the tokens of the tokenizer it was trained with, id by id. A corpus
tokenised with another vocabulary (or the same one with other lower-casing or accent stripping)
trains a continued model on nonsense without a single error, so the trainer compares, before
anything starts:

- the tokens in id order (sha256 of them, one per line, and their count),
- the special tokens' ids (``[PAD] [UNK] [CLS] [SEP] [MASK]``),
- lower-casing, where both sides state it,
- the tokens each side gives for ``PROBE``, a fixed text in many scripts (cased and accented
  Latin, Greek, Cyrillic, CJK, Hangul, Thai, Devanagari, Arabic, a sentence pair): what the
  comparisons above cannot see, such as accent stripping or Chinese-character spacing.

Both sides are read the way ``transformers`` would: a tokenizer folder's class as AutoTokenizer
picks it (``pipelines.tokenizer_files.folder_class``), its ``vocab.txt`` for a BERT class, else its
``tokenizer.json`` (its model's vocabulary plus added tokens), and lower-casing from
``tokenizer_config.json``'s ``do_lower_case`` when it says, else from the normaliser in
``tokenizer.json``. The probe is tokenised by transformers' ``AutoTokenizer`` for a checkpoint's
folder (what its users get; ``with_probe``, once the cheaper comparisons agree: loading
transformers takes seconds) and by ``tokenizers`` from the corpus's ``tokenizer.json`` (what built
the corpus).
"""
from __future__ import annotations

import json
from typing import NamedTuple

from common import storage
from common.hashing import sha256_bytes
from pipelines import schema
from pipelines.tokenizer_files import MODEL_CONFIG, folder_class, folder_json, folder_source

SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# Texts both sides tokenise (one per script family, then a pair): cased, accented, CJK, Hangul,
# Indic, Thai, Arabic, digits and punctuation.
PROBE = ("The Café Über naïve façade, THE RIVER 3.14!", "Ωμέγα Ёлка й", "一丁七万 東京 中文",
         "한국어 텍스트입니다", "हिंदी क़लम", "ก่อนหน้า", "أهلاً بالعالم")
PROBE_PAIR = ("Zoë's [MASK] bridge", "Ça va? 한국어")


class Vocabulary(NamedTuple):
    sha256: str  # of the tokens in id order, one per line
    size: int
    specials: dict[str, int | None]
    lowercase: bool | None  # None: not stated
    where: str  # the file it was read from, for messages
    probe: tuple[tuple[str, ...], ...] | None = None  # the tokens of PROBE and PROBE_PAIR (None: not read)

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
        if not out and None not in (self.probe, other.probe) and self.probe != other.probe:
            texts = [*PROBE, " / ".join(PROBE_PAIR)]
            k = next(i for i, (a, b) in enumerate(zip(self.probe, other.probe)) if a != b)
            out.append(f"the probe text {texts[k]!r} tokenizes as {' '.join(self.probe[k])} vs "
                       f"{' '.join(other.probe[k])}")
        return out


def _from_tokens(tokens: list[str], lowercase: bool | None, where: str,
                 probe: tuple[tuple[str, ...], ...] | None = None) -> Vocabulary:
    index = {t: i for i, t in enumerate(tokens)}
    return Vocabulary(sha256_bytes("".join(f"{t}\n" for t in tokens).encode("utf-8")), len(tokens),
                      {t: index.get(t) for t in SPECIAL}, lowercase, where, probe)


def _probe(encode) -> tuple[tuple[str, ...], ...]:
    """``encode(text, pair=None) -> tokens`` over ``PROBE`` and ``PROBE_PAIR``."""
    return tuple(tuple(encode(t)) for t in PROBE) + (tuple(encode(*PROBE_PAIR)),)


def with_probe(vocabulary: Vocabulary, folder: str) -> Vocabulary:
    """``vocabulary`` (of the tokenizer folder ``folder``) with the probe's tokens as transformers
    gives them for that folder."""
    return vocabulary._replace(probe=transformers_probe(folder))


def transformers_probe(folder: str) -> tuple[tuple[str, ...], ...]:
    """The probe's tokens as transformers' ``AutoTokenizer`` gives them for a local ``folder``."""
    import transformers

    try:
        hf = transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except Exception as exc:  # transformers raises many kinds; the folder is what to name
        raise ValueError(f"{folder}: transformers' AutoTokenizer cannot load this tokenizer folder "
                         f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None

    def encode(text: str, pair: str | None = None) -> list[str]:
        return hf.convert_ids_to_tokens(hf(text, pair)["input_ids"])
    return _probe(encode)


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
    return _from_tokens(tokens, lowercase, where, _probe(lambda text, pair=None: tok.encode(text, pair).tokens))


def _normaliser_lowercases(spec: dict | None) -> bool | None:
    if not spec:
        return False
    steps = spec.get("normalizers", []) if spec.get("type") == "Sequence" else [spec]
    return any(s.get("type") == "Lowercase" or (s.get("type") == "BertNormalizer" and s.get("lowercase"))
               for s in steps)


def from_folder(folder: str) -> Vocabulary:
    """The vocabulary of a Hugging Face tokenizer folder (a model folder, our ``RUN/tokenizer`` or
    a corpus's tokenizer folder), chosen as build-corpus's ``--tokenizer FOLDER`` chooses: a
    folder with a BERT class's ``vocab.txt`` (lower-cased unless ``do_lower_case`` says otherwise,
    as BertTokenizer), else ``tokenizer.json``. Without the probe, which ``with_probe`` adds: it
    loads transformers, so it is worth its seconds only once everything else agrees."""
    config = folder_json(storage.join(folder, schema.TOKENIZER_CONFIG))
    model = {} if config.get("tokenizer_class") else folder_json(storage.join(folder, MODEL_CONFIG))
    cls, _ = folder_class(config, model)
    stated = config.get("do_lower_case") if isinstance(config.get("do_lower_case"), bool) else None
    tok_uri, vocab_uri = storage.join(folder, schema.TOKENIZER_JSON), storage.join(folder, schema.VOCAB_TXT)
    source = folder_source(cls, has_vocab=storage.exists(vocab_uri), has_json=storage.exists(tok_uri))
    if source is None:
        raise FileNotFoundError(f"{folder}: no tokenizer.json or vocab.txt (the tokenizer files of a Hugging Face "
                                "model folder)")
    if source == schema.VOCAB_TXT:
        text = storage.read_bytes(vocab_uri).decode("utf-8")
        tokens = [line.rstrip("\r") for line in text.split("\n")]
        if tokens and tokens[-1] == "":
            tokens.pop()
        return _from_tokens(tokens, True if stated is None else stated, vocab_uri)
    return from_tokenizer_json(storage.read_bytes(tok_uri), tok_uri, lowercase=stated)._replace(probe=None)
