"""Pretrained tokenizers: a ``tokenizer.json``, a BERT ``vocab.txt`` or a Hugging Face model folder.

``tokenizer.pretrained`` (``--tokenizer LOCATION``) is any storage location. ``open_pretrained``
reads it, decides what it is and checks it; the build calls it twice: at planning (its
``fingerprint`` goes into the tokenizer stage's key, so every error here comes before any Ray
work) and in the stage, which writes the result (``load_pretrained``).

A file. ``*.json`` is a ``tokenizers`` tokenizer.json, used as it is: its normaliser decides
lower-casing. Anything else is a BERT vocab.txt (a token per line, the id is the line number),
made into BERT's pipeline with the config's flags (unset: lower-cased, ELECTRA's uncased default;
accent stripping follows lower-casing unless set, as transformers' BertTokenizer).

A folder (a location ending in ``/``, or one the store calls a directory): what a user downloads
for a released model such as google/electra-base-discriminator (config.json, weights, vocab.txt,
tokenizer.json, tokenizer_config.json, special_tokens_map.json). Only tokenizer_config.json,
vocab.txt, tokenizer.json and (when tokenizer_config.json names no class) config.json are read,
each by name (no listing: an https folder works too). The aim is transformers' ids for the folder
(``AutoTokenizer`` / ``ElectraTokenizerFast.from_pretrained``). The class is AutoTokenizer's
(``tokenizer_files.folder_class``): tokenizer_config.json's ``tokenizer_class``; else BERT's for a
BERT-family ``model_type`` in config.json (electra, bert, ...; config.json's own
``tokenizer_class`` first); else none, and then transformers
uses tokenizer.json as it is.

1. vocab.txt, when the class is BERT's, or when there is no tokenizer.json: BERT's WordPiece
   pipeline built from it, with transformers' BertTokenizer flags from tokenizer_config.json
   (``bert_flags``): ``do_lower_case`` (absent: True), ``strip_accents`` (null or absent: follows
   do_lower_case), ``tokenize_chinese_chars`` (absent: True). That is the pipeline transformers 5
   rebuilds for these classes, with the vocabulary of tokenizer.json when the folder has one: a
   tokenizer.json beside the vocab.txt must hold the same vocabulary, else the folder is refused
   (two answers, no right one).
2. Otherwise tokenizer.json, as it is. A class or a tokenizer_config.json that contradicts its
   normaliser is refused in one line rather than followed: transformers' answer then depends on
   the class (the BERT classes rebuild the normaliser from the config's flags, or their defaults
   when it has none; the generic class keeps the file's), and a folder at odds with itself is
   more likely broken than meant. With a BERT class the file must be a BERT WordPiece with the
   flags above; with another class, a ``do_lower_case`` / ``strip_accents`` the config states
   must agree.
3. Neither file: refused in one line naming what was looked for.

Scripts. A BERT normaliser that strips accents splits Hangul into jamo and drops Thai, Indic and
Arabic marks (``pipelines.tokenizer_accents``). transformers does the same with the folder, so
the corpus keeps the released model's ids; the tokens of its vocabulary that this makes
unreachable are reported (``Pretrained.warnings``).

Flags. Lower-casing and accent stripping of a folder or a tokenizer.json are theirs, never our
config's defaults (``TokenizerConfig.lowercase/strip_accents`` are None unless set). A value the
user set (``--lowercase``/``--no-lowercase``) that contradicts them is refused in one line naming
the file, both values and the fix; the manifest records what the tokenizer does.

Special tokens keep the vocabulary's ids (released BERT/ELECTRA vocabularies have [PAD]=0,
[UNK]=100, [CLS]=101, [SEP]=102, [MASK]=103): the manifest records them and the trainer reads
them from there; only [PAD] must be 0. As in transformers they are added tokens, so "[MASK]" in
raw text is the mask token, not "[", "mask", "]".

Identity (``Pretrained.fingerprint``): the sha256 of each tokenizer file read (an absent one
counts as absent), the class config.json picked where it did, which file the
tokenizer comes from and ``FORMAT``, never the location: an edited or completed folder rebuilds
the tokenizer; a moved one does not.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from common import storage
from common.config import ConfigError
from common.hashing import sha256_bytes
from pipelines import schema
from pipelines import tokenizer_accents as accents
from pipelines.config import TokenizerConfig
from pipelines.tokenizer import _attach_post_processor, _check_specials, _write
from pipelines.tokenizer_files import (BERT_CLASSES, MODEL_CONFIG, folder_class, folder_json, folder_source,
                                       is_bert_compatible, normalizer_flags, spec as _spec)

CONFIG, VOCAB, JSON = schema.TOKENIZER_CONFIG, schema.VOCAB_TXT, schema.TOKENIZER_JSON
FOLDER_FILES = (VOCAB, JSON, CONFIG)  # read from a folder, in the order the error lists them
# Bump when the same files would give another tokenizer (2: folders; a vocab.txt's special
# tokens became added tokens; 3: config.json picks the class, as in AutoTokenizer):
# it is in the fingerprint, so the tokenizer is rebuilt.
FORMAT = 3


@dataclass(frozen=True)
class BertFlags:
    """transformers' BertTokenizer switches, resolved (``strip_accents`` is never "follow")."""
    lowercase: bool = True
    strip_accents: bool = True
    chinese_chars: bool = True


@dataclass
class Pretrained:
    """A pretrained tokenizer as read from ``location``."""
    location: str
    tokenizer: Tokenizer
    used: str  # the kind of file it comes from: "vocab.txt" or "tokenizer.json"
    lowercase: bool  # what its normaliser does
    strip_accents: bool
    files: dict[str, str | None] = field(default_factory=dict)  # each file read -> sha256, None if absent
    model_class: str | None = None  # the class a folder's config.json picked, where it did
    warnings: list[str] = field(default_factory=list)  # what the build reports about it

    @property
    def fingerprint(self) -> dict[str, Any]:
        """What decides the tokenizer, for the stage key."""
        return {"format": FORMAT, "used": self.used, "files": self.files, "model_class": self.model_class}


def _js(value: Any) -> str:
    return json.dumps(value)


def _read(uri: str, *, optional: bool = False) -> bytes | None:
    try:
        return storage.read_bytes(uri)
    except storage.MissingObject as exc:
        if optional:
            return None
        raise FileNotFoundError(f"{uri}: pretrained tokenizer not found") from exc


def is_folder(location: str) -> bool:
    """A location ending in ``/``, or one the store says is a directory."""
    if str(location).endswith("/"):
        return True
    got = storage.info(location)
    if got is None:
        raise FileNotFoundError(f"{location}: pretrained tokenizer not found (no such file or folder)")
    return got.get("type") == "directory"


# ---------------------------------------------------------------- the two kinds of file
def parse_vocab_txt(path: str, data: bytes) -> dict[str, int]:
    """A BERT vocab.txt: token -> line number (from 0); empty lines and duplicates are errors."""
    vocab: dict[str, int] = {}
    for lineno, line in enumerate(data.decode("utf-8").split("\n"), 1):
        token = line.rstrip("\r")
        if not token and lineno == data.count(b"\n") + 1:
            break  # the empty remainder after the final newline
        if not token:
            raise ValueError(f"{path}:{lineno}: empty line in vocab.txt")
        if token in vocab:
            raise ValueError(f"{path}:{lineno}: duplicate token {token!r}")
        vocab[token] = len(vocab)
    missing = [t for t in schema.SPECIAL_TOKENS if t not in vocab]
    if missing:
        raise ValueError(f"{path}: missing special token(s) {missing}")
    return vocab


def parse_tokenizer_json(path: str, data: bytes) -> Tokenizer:
    try:
        return Tokenizer.from_str(data.decode("utf-8"))
    except Exception as exc:  # tokenizers raises a bare Exception on malformed JSON
        raise ValueError(f"{path}: not a tokenizers tokenizer.json ({exc})") from exc


def wordpiece_from_vocab(vocab: dict[str, int], flags: BertFlags) -> Tokenizer:
    """BERT's pipeline over ``vocab``, as transformers' BertTokenizer builds it: BertNormalizer,
    BertPreTokenizer, WordPiece with ``##`` pieces, the special tokens as added tokens (matched
    in the raw text) and the ``[CLS] A [SEP] B [SEP]`` post-processor."""
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = accents.bert_normalizer(lowercase=flags.lowercase, strip_accents=flags.strip_accents,
                                             chinese_chars=flags.chinese_chars)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    specials = sorted(schema.SPECIAL_TOKENS, key=vocab.__getitem__)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    _attach_post_processor(tok)
    return tok


# ---------------------------------------------------------------- a folder's tokenizer_config.json
def read_tokenizer_config(path: str, data: bytes | None) -> dict[str, Any]:
    """The folder's tokenizer_config.json as a mapping ({} when absent)."""
    if data is None:
        return {}
    try:
        config = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: invalid JSON ({exc})") from exc
    if not isinstance(config, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(config).__name__}")
    if not isinstance(config.get("tokenizer_class", ""), str):
        raise ValueError(f"{path}: tokenizer_class={_js(config['tokenizer_class'])}; expected a class name")
    return config


def bert_flags(config: dict[str, Any], path: str) -> BertFlags:
    """transformers' BertTokenizer flags from a tokenizer_config.json mapping (its defaults:
    do_lower_case True, strip_accents null = follow do_lower_case, tokenize_chinese_chars True)."""
    def flag(key: str, default: Any) -> Any:
        value = config.get(key, default)
        if not isinstance(value, bool) and not (value is None and default is None):
            raise ValueError(f"{path}: {key}={_js(value)}; expected true or false"
                             + (" or null" if default is None else ""))
        return value
    lowercase = flag("do_lower_case", True)
    strip = flag("strip_accents", None)
    return BertFlags(lowercase, lowercase if strip is None else strip, flag("tokenize_chinese_chars", True))


def _stated(config: dict[str, Any]) -> str:
    keys = ("tokenizer_class", "do_lower_case", "strip_accents", "tokenize_chinese_chars")
    return ", ".join(f"{k}={_js(config[k])}" for k in keys if k in config) or "no flags"


def _check_json_against_config(tok: Tokenizer, config: dict[str, Any], cls: str | None, *, config_path: str,
                               class_from: str, json_path: str) -> None:
    """Rule 2 of the module docstring: a tokenizer.json used as it is must agree with the class
    transformers picks (``cls``; ``class_from``: the file that names it) and the folder's
    tokenizer_config.json (at ``config_path``)."""
    lowercase, strip = normalizer_flags(tok)
    got = {"do_lower_case": lowercase, "strip_accents": strip}
    by_model_type = not config.get("tokenizer_class")
    fix = f"name the class in {CONFIG} (tokenizer_class)" if by_model_type else "fix tokenizer_class"
    if cls in BERT_CLASSES:
        if not is_bert_compatible(tok):
            raise ValueError(f"{class_from} names {cls}, but {json_path} is not a BERT WordPiece tokenizer "
                             f"(transformers' {cls} would rebuild one from its vocabulary): {fix}")
        flags = bert_flags(config, config_path)
        want = {"do_lower_case": flags.lowercase, "strip_accents": flags.strip_accents,
                "tokenize_chinese_chars": flags.chinese_chars}
        got["tokenize_chinese_chars"] = bool(_spec(tok.normalizer).get("handle_chinese_chars"))
    else:
        want = {k: config[k] for k in ("do_lower_case", "strip_accents") if config.get(k) is not None}
    wrong = [k for k in want if want[k] != got[k]]
    if not wrong:
        return
    gives = ", ".join(f"{k}={_js(got[k])}" for k in wrong)
    if by_model_type and cls in BERT_CLASSES:  # the class comes from config.json, the flags from defaults
        stated = f"{config_path} ({_stated(config)})" if config else f"its defaults ({CONFIG} is absent)"
        raise ValueError(f"{class_from} makes transformers use {cls} with {stated}, but {json_path}'s normaliser "
                         f"gives {gives}: state tokenizer_class and the flags in {CONFIG}")
    raise ValueError(f"{config_path} ({_stated(config)}) contradicts {json_path}, whose normaliser gives {gives}: "
                     "transformers' BERT classes follow the config, the others the normaliser; make the two files "
                     "agree")


# ---------------------------------------------------------------- opening a location
def _check_user_flags(cfg: TokenizerConfig, lowercase: bool, strip_accents: bool, decided_by: str) -> None:
    """A flag the user set (not None) must be what the tokenizer does."""
    for key, want, got in (("lowercase", cfg.lowercase, lowercase),
                           ("strip_accents", cfg.strip_accents, strip_accents)):
        if want is not None and want != got:
            raise ConfigError(f"tokenizer.{key}={_js(want)} contradicts {decided_by}, which gives {key}={_js(got)}: "
                              "a pretrained tokenizer brings its own lower-casing; drop --lowercase/--no-lowercase "
                              "(tokenizer.lowercase/strip_accents)")


def _open_file(location: str, cfg: TokenizerConfig) -> Pretrained:
    data = _read(location)
    files = {JSON if location.endswith(".json") else VOCAB: sha256_bytes(data)}
    if location.endswith(".json"):
        tok = parse_tokenizer_json(location, data)
        lowercase, strip = normalizer_flags(tok)
        _check_user_flags(cfg, lowercase, strip, f"{location}'s normaliser")
        return Pretrained(location, tok, JSON, lowercase, strip, files)
    flags = cfg.resolved()  # a bare vocab.txt says nothing: the config decides, as BertTokenizer's defaults
    tok = wordpiece_from_vocab(parse_vocab_txt(location, data), BertFlags(flags.lowercase, flags.strip_accents))
    return Pretrained(location, tok, VOCAB, flags.lowercase, flags.strip_accents, files)


def _open_folder(location: str, cfg: TokenizerConfig) -> Pretrained:
    path = {name: storage.join(location, name) for name in FOLDER_FILES}
    data = {name: _read(path[name], optional=True) for name in FOLDER_FILES}
    files = {name: None if b is None else sha256_bytes(b) for name, b in data.items()}
    config = read_tokenizer_config(path[CONFIG], data[CONFIG])
    model = {} if config.get("tokenizer_class") else folder_json(storage.join(location, MODEL_CONFIG))
    cls, said = folder_class(config, model)
    model_class = cls if model else None
    if data[CONFIG] is not None:
        config_says = f"{path[CONFIG]} ({_stated(config)})"
    else:
        config_says = f"the BertTokenizer defaults ({path[CONFIG]} is absent)"
    source = folder_source(cls, has_vocab=data[VOCAB] is not None, has_json=data[JSON] is not None)
    if source == VOCAB:
        flags = bert_flags(config, path[CONFIG])
        vocab = parse_vocab_txt(path[VOCAB], data[VOCAB])
        if data[JSON] is not None:  # transformers would take the vocabulary from tokenizer.json
            spec = _spec(parse_tokenizer_json(path[JSON], data[JSON]).model)
            if spec.get("type") != "WordPiece" or spec.get("vocab") != vocab:
                raise ValueError(f"{location}: vocab.txt and tokenizer.json hold different vocabularies "
                                 "(transformers would use tokenizer.json's): remove the stale one")
        tok, used, decided_by = wordpiece_from_vocab(vocab, flags), VOCAB, config_says
    elif source == JSON:
        tok, used, decided_by = parse_tokenizer_json(path[JSON], data[JSON]), JSON, f"{path[JSON]}'s normaliser"
        if config or cls in BERT_CLASSES:
            _check_json_against_config(tok, config, cls, config_path=path[CONFIG], json_path=path[JSON],
                                       class_from=storage.join(location, said))
    else:
        raise FileNotFoundError(f"{location}: no pretrained tokenizer in this folder (looked for {VOCAB} and "
                                f"{JSON}, beside {CONFIG}; found neither)")
    lowercase, strip = normalizer_flags(tok)
    _check_user_flags(cfg, lowercase, strip, decided_by)
    return Pretrained(location, tok, used, lowercase, strip, files, model_class=model_class)


def open_pretrained(location: str, cfg: TokenizerConfig) -> Pretrained:
    """Read and check the pretrained tokenizer at ``location`` (a file or a model folder, any
    storage location), with the user's explicit flags in ``cfg`` (None = unset).

    Raises ``FileNotFoundError`` (nothing there), ``ConfigError`` (a set flag contradicts the
    tokenizer) or ``ValueError`` (unusable files), each with a one-line message naming the file.
    """
    location = str(location)
    pre = _open_folder(location, cfg) if is_folder(location) else _open_file(location, cfg)
    _check_specials(pre.tokenizer, where=location)
    if pre.tokenizer.post_processor is None:
        _attach_post_processor(pre.tokenizer)
    pre.warnings += script_warnings(pre)
    return pre


def script_warnings(pre: Pretrained) -> list[str]:
    """One line when the tokenizer's accent stripping splits or drops letters that its own
    vocabulary holds (Hangul syllables, Thai or Devanagari vowel signs: module docstring)."""
    if not pre.strip_accents:
        return []
    tok, safe = pre.tokenizer, accents.script_safe_bert(lowercase=pre.lowercase)
    specials = {t.content for t in tok.get_added_tokens_decoder().values()}
    tokens = [t for t in tok.get_vocab(with_added_tokens=False) if t not in specials]
    chars = {c for t in tokens for c in t.removeprefix("##")}
    damaged = {c for c in chars if tok.normalizer.normalize_str(c).strip() != safe.normalize_str(c).strip()}
    if not damaged:
        return []
    hit = sorted(t for t in tokens if damaged & set(t.removeprefix("##")))
    return [f"tokenizer.pretrained={pre.location}: its normaliser strips accents as BERT does, which splits "
            f"Hangul syllables into jamo, drops kana's dakuten and Thai, Indic and Arabic vowel signs and marks: "
            f"{len(hit)} of its "
            f"{len(tokens)} tokens hold such characters and can never be produced ({accents.describe(sorted(damaged))}); "
            "transformers applies it the same way, so the corpus keeps the model's ids, but text in those scripts "
            "is split or loses those marks"]


def load_pretrained(path: str, cfg: TokenizerConfig, out_dir: str) -> schema.TokenizerInfo:
    """Use an existing tokenizer instead of training one: a ``tokenizer.json``, a BERT
    ``vocab.txt`` or a Hugging Face model folder, any storage location (``open_pretrained``);
    its files are written to ``out_dir`` as a trained one's are."""
    return write_pretrained(open_pretrained(path, cfg), out_dir)


def write_pretrained(pre: Pretrained, out_dir: str) -> schema.TokenizerInfo:
    """``pre``'s tokenizer files written to ``out_dir`` as a trained one's are."""
    return _write(pre.tokenizer, kind="pretrained", lowercase=pre.lowercase, out_dir=out_dir)
