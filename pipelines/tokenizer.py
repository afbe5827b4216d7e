"""Tokenizer training (WordPiece or Unigram) on a bounded sample of the deduplicated corpus.

Two kinds, both with the special tokens ``[PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4`` and the
BERT post-processor (``[CLS] $A [SEP]`` / ``[CLS] $A [SEP] $B:1 [SEP]:1``), so fine-tuning code
can encode sentence pairs with the tokenizer as written:

* ``wordpiece`` — BERT-style: ``BertNormalizer`` (clean text, CJK spacing, lower-casing and accent
  stripping as two independent switches), ``BertPreTokenizer``, WordPiece with ``##``
  continuation pieces. What ELECTRA used (vocab 30522, uncased). Where BERT's accent stripping
  would split or drop letters of 0.1% or more of the sample's characters (Hangul, kana, Thai,
  Devanagari, Arabic), the same steps with a stripping that takes only Latin, Greek and Cyrillic
  accents (``pipelines.tokenizer_accents``).
* ``unigram`` — SentencePiece-style: NFKC, whitespace runs collapsed to one space (SentencePiece
  does the same; it also keeps pieces free of newlines so ``vocab.txt`` stays one piece per
  line), optional lower-casing / that same script-safe accent stripping, ``Metaspace``
  pre-tokenizer. The trainer has no ``min_frequency``; that field only affects WordPiece.

The alphabet (the characters the vocabulary may hold; the others encode as ``[UNK]``) follows
the text: the ``limit_alphabet`` most frequent characters, and more until they cover
``character_coverage`` of the sample (``alphabet``), so a multilingual corpus keeps its rarer Han
and kana without a language list.

Determinism. ``tokenizers`` 0.23 training is not reproducible out of the box (tokenizers issue
#1794; threads are not the cause, ``RAYON_NUM_THREADS=1`` does not help):

* WordPiece (trained by the BPE trainer) assigns ids to ``##c`` continuation characters in
  hash-map order, and those ids break ties between equally frequent merges, so two runs can
  learn different vocabularies. Fix: every ``##c`` the corpus can produce is registered up front,
  in sorted order, as a trainer "special token" (special tokens get their ids first and in the
  given order); afterwards they are removed from the added-token list again and stay ordinary
  vocabulary entries. The set is every character of the alphabet that can follow another one
  inside a word, probed with the tokenizer's own normaliser and pre-tokenizer: punctuation
  (isolated by ``BertPreTokenizer``) and CJK ideographs (spaced by ``BertNormalizer``) never
  get a ``##`` entry, which could never be produced. Characters that only start words in the
  sample still get one (a few slots; any other word can produce it).
* The trainer's ``limit_alphabet`` cut sorts equal counts in hash-map order. Fix: the
  alphabet (``alphabet``: ties by code point) is computed here and given as the trainer's initial alphabet with
  a limit of its own size, so the trainer drops exactly the other characters; they encode as
  ``[UNK]``. The Unigram trainer has no such limit: pieces with a character outside the same
  alphabet are removed after training (the vocabulary comes out that much smaller).
* Unigram sums floats in hash-map order, so scores differ in the last bits and near-equal pieces
  can swap ids; and the characters it appends after EM get a score ladder (min + k * 1e-4) in
  hash-map order. Fix: scores are rounded to 1e-6, the ladder is reassigned in character order,
  and pieces are re-sorted by (score, piece).

Pretrained tokenizers (a ``tokenizer.json``, a BERT ``vocab.txt`` or a Hugging Face model folder)
are read and checked by ``pipelines.tokenizer_pretrained``; ``load_pretrained`` writes them out
like a trained one.

Export: ``hf_files`` writes ``tokenizer.json``, ``tokenizer_config.json`` naming the
``transformers`` class that reproduces it, and ``vocab.txt`` only for BERT-style WordPiece.
transformers' BERT/ELECTRA tokenizer classes rebuild a BERT WordPiece from any vocabulary, so
for every other tokenizer the config holds a value that makes them raise (``pipelines.tokenizer_files.NOT_BERT``) instead
of encoding nearly everything as ``[UNK]``.

Trade-off of the sample (``pipelines.tokenizer_sample``): the sample is bounded in bytes
(``TokenizerConfig.sample_bytes``) and chosen by a hash of (seed, uid), so it does not depend on
Ray's block order; rare words outside the sample become sub-word pieces, which is what a 30k
vocabulary does to them anyway.
"""
from __future__ import annotations

import json
import logging
import unicodedata
from collections import Counter
from collections.abc import Iterable
from typing import Any

import numpy as np
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from common import storage
from common.hashing import sha256_bytes
from pipelines import schema
from pipelines import tokenizer_accents as accents
from pipelines.config import TokenizerConfig
from pipelines.tokenizer_files import hf_files

log = logging.getLogger(__name__)

KINDS = ("wordpiece", "unigram")
_SCORE_DECIMALS = 6
_LADDER_STEP = 1e-4  # tokenizers' Unigram penalty step for characters added after EM
_METASPACE = "\u2581"  # the word-start marker of the Metaspace pre-tokenizer


# ---------------------------------------------------------------- pipelines (untrained)
def _unigram_normalizer(cfg: TokenizerConfig) -> normalizers.Normalizer:
    steps = [normalizers.NFKC(), normalizers.Replace(Regex(r"\s+"), " ")]
    if cfg.strip_accents:
        steps += accents.strip_steps()
    if cfg.lowercase:
        steps.append(normalizers.Lowercase())
    return normalizers.Sequence(steps)


def _empty_tokenizer(cfg: TokenizerConfig, normalizer: normalizers.Normalizer) -> Tokenizer:
    if cfg.kind == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece(prefix="##")
    elif cfg.kind == "unigram":
        tok = Tokenizer(models.Unigram())
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
    else:
        raise ValueError(f"tokenizer kind {cfg.kind!r}; expected one of {KINDS}")
    tok.normalizer = normalizer
    return tok


def _attach_post_processor(tok: Tokenizer) -> None:
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])


# ---------------------------------------------------------------- the alphabet
def char_counts(texts: list[str], *, compose: bool = False) -> Counter[str]:
    """How often each character occurs in ``texts`` (numpy; with ``compose``, NFKC-composed
    first, as the Unigram normaliser starts with NFKC)."""
    raw: Counter[str] = Counter()
    for t in texts:
        t = unicodedata.normalize("NFKC", t) if compose else t
        codes, n = np.unique(np.frombuffer(t.encode("utf-32-le", "surrogatepass"), np.uint32), return_counts=True)
        raw.update(dict(zip(map(chr, codes.tolist()), n.tolist())))
    return raw


def alphabet(raw: Counter[str], normalizer: normalizers.Normalizer, cfg: TokenizerConfig) -> list[str]:
    """The characters the vocabulary may contain, sorted, from the raw character counts of the
    sample (``char_counts``): every normalised character when ``limit_alphabet`` is null.

    The normalised characters ranked by count (ties by code point, so the choice never depends on
    hash order as the trainer's own cut does); kept: the ``limit_alphabet`` most frequent (BERT's
    builders keep 1000) and, beyond them, as many more as it takes to cover
    ``character_coverage`` of the sample's characters (SentencePiece's rule). The first keeps
    every character of a small alphabet (English has ~100); the second follows a text whose
    alphabet is large (Chinese and Japanese need thousands), whatever the language setting says.

    Each distinct character is normalised alone: normalising the whole sample through
    ``tokenizers`` is many times slower. That is exact for BertNormalizer, which works character
    by character; a normaliser that composes (NFC, NFKC) can join characters the raw text holds
    decomposed, which this counts apart (compose with ``char_counts(compose=True)``).
    """
    counts: Counter[str] = Counter()
    for ch, n in raw.items():
        for c in normalizer.normalize_str(ch):
            if not c.isspace():
                counts[c] += n
    chars = sorted(counts, key=lambda c: (-counts[c], c))
    if cfg.limit_alphabet is None:
        return sorted(chars)
    covered = np.cumsum([counts[c] for c in chars], dtype=np.float64)
    need = cfg.character_coverage * (covered[-1] if len(chars) else 0)
    by_coverage = int(np.searchsorted(covered, need - 1e-9 * max(need, 1.0))) + 1 if cfg.character_coverage else 0
    return sorted(chars[:max(cfg.limit_alphabet, by_coverage)])


def _wordpiece_normalizer(raw: Counter[str], cfg: TokenizerConfig) -> tuple[normalizers.Normalizer, list[str]]:
    """BERT's normaliser, unless its accent stripping splits or drops letters of at least
    ``accents.DAMAGED_SHARE`` of the sample's characters (``pipelines.tokenizer_accents``): then
    the script-safe one. And the alphabet under it."""
    bert = accents.bert_normalizer(lowercase=cfg.lowercase, strip_accents=cfg.strip_accents)
    if not cfg.strip_accents:
        return bert, alphabet(raw, bert, cfg)
    damaged = accents.bert_damages(raw, lowercase=cfg.lowercase)
    share = sum(raw[c] for c in damaged) / max(1, sum(n for c, n in raw.items() if not c.isspace()))
    if share < accents.DAMAGED_SHARE:
        if damaged:
            log.warning("tokenizer: BERT's accent stripping splits or drops letters of %.4f%% of the sample's "
                        "characters (%s), kept for transformers' BERT classes; tokenizer.strip_accents=false keeps "
                        "them whole", 100 * share, accents.describe(damaged))
        return bert, alphabet(raw, bert, cfg)
    log.info("tokenizer: BERT's accent stripping would split or drop letters of %.2f%% of the sample's characters "
             "(%s); stripping only Latin, Greek and Cyrillic accents instead", 100 * share, accents.describe(damaged))
    safe = accents.script_safe_bert(lowercase=cfg.lowercase)
    return safe, alphabet(raw, safe, cfg)


# ---------------------------------------------------------------- training
def _continues_words(tok: Tokenizer, chars: list[str]) -> list[str]:
    """The characters that can follow another character inside a word. The others are always
    a word of their own (``BertPreTokenizer`` isolates punctuation, ``BertNormalizer`` puts
    spaces around CJK ideographs), so a ``##c`` entry for them could never be produced.
    Probed with the tokenizer's own normaliser and pre-tokenizer, so no rule is copied here."""
    def joined(c: str) -> bool:
        words = tok.pre_tokenizer.pre_tokenize_str(tok.normalizer.normalize_str("a" + c))
        return len(words) == 1
    return [c for c in chars if joined(c)]


def _train_wordpiece(texts: list[str], cfg: TokenizerConfig) -> Tokenizer:
    raw = char_counts(texts)
    normalizer, chars = _wordpiece_normalizer(raw, cfg)
    tok = _empty_tokenizer(cfg, normalizer)
    pinned = [f"##{c}" for c in _continues_words(tok, chars)]
    # With a limit the chosen characters go in as the initial alphabet: the trainer ranks them
    # above every other character, so its cut removes exactly the others.
    limit = {} if cfg.limit_alphabet is None else {"limit_alphabet": len(chars), "initial_alphabet": chars}
    trainer = trainers.WordPieceTrainer(
        vocab_size=cfg.vocab_size, min_frequency=cfg.min_frequency, show_progress=False,
        special_tokens=list(schema.SPECIAL_TOKENS) + pinned, continuing_subword_prefix="##", **limit)
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    # The pinned ##c were only there to fix their ids: make them ordinary vocabulary again.
    spec = json.loads(tok.to_str())
    spec["added_tokens"] = [t for t in spec["added_tokens"] if t["content"] in schema.SPECIAL_TOKENS]
    return Tokenizer.from_str(json.dumps(spec))


def _train_unigram(texts: list[str], cfg: TokenizerConfig) -> Tokenizer:
    tok = _empty_tokenizer(cfg, _unigram_normalizer(cfg))
    trainer = trainers.UnigramTrainer(vocab_size=cfg.vocab_size, show_progress=False,
                                      special_tokens=list(schema.SPECIAL_TOKENS), unk_token="[UNK]")
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    head = [p for p in vocab if p[0] in schema.SPECIAL_TOKENS]
    rest = [[p, round(s, _SCORE_DECIMALS)] for p, s in vocab if p not in schema.SPECIAL_TOKENS]
    if cfg.limit_alphabet is not None:
        chars = alphabet(char_counts(texts, compose=True), tok.normalizer, cfg)
        # The trainer has no alphabet limit: drop every piece with a character outside the
        # alphabet, so those characters encode as [UNK] as with WordPiece.
        allowed = set(chars) | {_METASPACE}
        rest = [ps for ps in rest if set(ps[0]) <= allowed]
    spec["model"]["vocab"] = head + _canonical_ladder(rest)
    spec["model"]["unk_id"] = [p for p, _ in head].index("[UNK]")
    return Tokenizer.from_str(json.dumps(spec))


def _canonical_ladder(pieces: list[list[Any]]) -> list[list[Any]]:
    """Fix the order-dependent scores of the Unigram trainer's "required characters".

    Characters the EM did not keep are appended with scores ``min + k * 1e-4`` in hash-map
    order, so equally rare characters swap scores between runs. The characters on that ladder
    get the ladder's scores in character order instead; then everything is sorted by
    (score descending, piece).
    """
    if not pieces:
        return pieces
    low = min(s for _, s in pieces)

    def on_ladder(score: float) -> bool:
        k = round((score - low) / _LADDER_STEP)
        return 0 <= k < 10_000 and abs(score - low - k * _LADDER_STEP) < 2 * 10 ** -_SCORE_DECIMALS

    rungs = [i for i, (p, s) in enumerate(pieces) if len(p) == 1 and on_ladder(s)]
    for i, char, score in zip(rungs, sorted(pieces[i][0] for i in rungs), sorted(pieces[i][1] for i in rungs)):
        pieces[i] = [char, score]
    return sorted(pieces, key=lambda ps: (-ps[1], ps[0]))


def train_tokenizer(texts: Iterable[str], cfg: TokenizerConfig, out_dir: str) -> schema.TokenizerInfo:
    """Train a tokenizer of ``cfg.kind`` on ``texts`` and write it to ``out_dir``.

    ``texts`` is materialised (it is read twice for WordPiece); it is a bounded sample anyway.
    The same texts in the same order give a byte-identical ``tokenizer.json``.
    """
    texts = [t for t in texts if t]
    if not texts:
        raise ValueError("train_tokenizer: no text to train on (the corpus sample is empty)")
    cfg = cfg.resolved()  # unset: lower-cased, accents stripped as lower-casing says
    tok = _train_wordpiece(texts, cfg) if cfg.kind == "wordpiece" else _train_unigram(texts, cfg)
    _attach_post_processor(tok)
    _check_specials(tok, where="trained tokenizer")
    return _write(tok, kind=cfg.kind, lowercase=cfg.lowercase, out_dir=out_dir)


def _check_specials(tok: Tokenizer, *, where: str) -> dict[str, int]:
    ids = {t: tok.token_to_id(t) for t in schema.SPECIAL_TOKENS}
    missing = [t for t, i in ids.items() if i is None]
    if missing:
        raise ValueError(f"{where}: missing special token(s) {missing}")
    if ids["[PAD]"] != 0:
        raise ValueError(f"{where}: [PAD] has id {ids['[PAD]']}; the trainer needs it at id 0")
    return ids


def _write(tok: Tokenizer, *, kind: str, lowercase: bool, out_dir: str) -> schema.TokenizerInfo:
    """The tokenizer files (``hf_files``) into ``out_dir`` (any storage location)."""
    out = str(out_dir)
    files = hf_files(tok)
    for name, data in files.items():
        storage.write_bytes(storage.join(out, name), data)
    return schema.TokenizerInfo(kind=kind, vocab_size=tok.get_vocab_size(with_added_tokens=True),
                                sha256=sha256_bytes(files[schema.TOKENIZER_JSON]), lowercase=lowercase,
                                special_tokens=_check_specials(tok, where=storage.join(out, schema.TOKENIZER_JSON)))
