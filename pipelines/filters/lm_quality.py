"""A language model's view of a document: drop text whose word order carries no meaning.

Rules over counts of words, symbols and lines cannot see text made of real, common words in
sentence shape with punctuation and stop words but no meaning (spam generators, scrapes of
garbled pages, shuffled sentences): every count is a prose document's. A language model can. This
block scores each document with a word trigram Kneser-Ney model (``pipelines.filters.kneser_ney``)
built from a clean reference text and applies three rules, in this order:

* ``unknown_words`` (on): more than ``max_unknown_frac`` of the tokens are ones the reference
  never had (made-up words, another script, tables of codes and numbers). English prose of another domain
  stays far below: its rare words are a few per hundred.
* ``context_gain`` (on): the mean gain, in nats per known word, of the model's probability of
  each word given the two tokens before it over the same model's probability with no context. Meaningful text
  gains (its words follow one another as in the reference); text in random order loses, whatever
  its words, since an unseen context falls through the smoothing's back-off weights. The threshold
  (-0.25) was set on the project's own data: prose of books the reference does not contain and the
  generated demo text lie above it, word salad and shuffled sentences below (README, "Corpus
  quality", has the distributions); it is not tuned to any junk kind.
* ``perplexity`` (off): CCNet's signal, ``exp(-mean log p)``. It also rises with a domain or a
  vocabulary unlike the reference's (modern prose scored by a model of old books), so an absolute
  threshold depends on the reference and would drop good text unlike it; the gain mostly cancels
  that, which is why it decides here.

Why an n-gram model and not a fastText classifier (DCLM, FineWeb-Edu): a classifier needs
negative examples, and the only junk the project has is its own generator's, so it would learn
that generator; the n-gram model learns from clean text alone and knows nothing of any junk kind.
KenLM (CCNet) would need a compiled binary and a downloaded model; this model is built in well
under a second from the reference.

The reference: by default 2.4 MB of public-domain books shipped in
``pipelines/filters/reference/`` (their list is beside them); ``filter.lm_quality.reference``
names another UTF-8 text file (``.txt`` or ``.txt.gz``, any storage location; documents separated
by blank lines): use text of the corpus's own domain and language. The model is built once per
process and reference content. Only the first
``max_tokens`` tokens of a document are scored: a few hundred words decide, and the cost stays
bounded on whole books.
"""
from __future__ import annotations

import functools
import gzip
from dataclasses import dataclass
from pathlib import Path

from common.config import check
from pipelines.filters.block import Doc, Verdict, above, below
from pipelines.filters.kneser_ney import KneserNey
from pipelines.filters.registry import register


@dataclass
class LmQualityConfig:
    # Not in datatrove (pipelines/filters/lm_quality.py): a word trigram Kneser-Ney model of a
    # clean reference text. null: the English books shipped in pipelines/filters/reference/;
    # else a UTF-8 .txt or .txt.gz file (any storage location), documents separated by blank lines.
    reference: str | None = None
    min_count: int = 2  # reference words seen fewer times are <unk>
    max_unknown_frac: float | None = 0.5  # max share of tokens the reference never had
    # Mean nats per word the two tokens before each word add to the model's probability of it;
    # text in random word order loses (< 0), meaningful text gains.
    min_context_gain: float | None = -0.25
    max_perplexity: float | None = None  # CCNet's signal; depends on the reference's domain
    max_tokens: int | None = 2000  # tokens scored per document (its start); null: all

    def validate(self) -> None:
        check(self.min_count >= 1, "min_count must be >= 1")
        check(self.max_unknown_frac is None or 0 <= self.max_unknown_frac <= 1, "max_unknown_frac must be in [0, 1]")
        check(self.max_perplexity is None or self.max_perplexity > 0, "max_perplexity must be > 0 or null")
        check(self.max_tokens is None or self.max_tokens >= 1, "max_tokens must be >= 1 or null")


_P = "filter:lm_quality:"
REFERENCE = Path(__file__).parent / "reference" / "en.txt.gz"
# The Gutenberg files it was cut from (reference/SOURCES.md): the filter benchmark and the tests
# take their clean prose from the other books.
REFERENCE_SOURCES = ("pg140.txt", "pg2376.txt", "pg541.txt", "pg14474.txt", "pg5827.txt", "pg36.txt", "pg4367.txt")


def reference_text(uri: str | None) -> str:
    """The reference's text: the shipped English one for None, else the named file."""
    if uri is None:
        return gzip.decompress(REFERENCE.read_bytes()).decode("utf-8")
    from common import storage

    data = storage.read_bytes(uri)
    if uri.endswith(".gz"):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise ValueError(f"filter.lm_quality.reference: {uri} is not a gzip file ({exc})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"filter.lm_quality.reference: {uri} is not UTF-8 text ({exc})") from None


def reference_documents(text: str) -> list[str]:
    return [d for d in text.replace("\r\n", "\n").split("\n\n") if d.strip()]


def model(uri: str | None, min_count: int, splitter: str = "") -> KneserNey:
    """The model of reference ``uri``, built once per process and reference content (the shipped
    one is kept apart, so that named references never evict it). ``splitter``: the language's word
    splitter (``pipelines.language.segmenters``) when its words are not runs of letters between
    spaces; "" for the module's English tokens."""
    if uri is None:
        return _shipped(min_count)
    # one model per reference and tokenisation: the splitters that keep English's tokens share it
    return _named(reference_text(uri), min_count, splitter if tokenizer(splitter) is not None else "")


def tokenizer(splitter: str):
    """Tokens for a language's model: its splitter's words, lower-cased, as the English regex
    cuts them (letters, digits, sentence marks); None for the English tokens."""
    if not splitter or splitter in ("whitespace", "characters"):
        return None
    from pipelines.filters.kneser_ney import tokens
    from pipelines.language.segmenters import splitter as named

    split = named(splitter)
    return lambda text: tokens(" ".join(split(text)))


def _build(text: str, min_count: int, splitter: str = "") -> KneserNey:
    return KneserNey(reference_documents(text), min_count=min_count, tokenize=tokenizer(splitter))


_shipped = functools.cache(lambda min_count: _build(reference_text(None), min_count))
_named = functools.lru_cache(maxsize=4)(_build)  # cached by the text itself, not its location


class LmQuality:
    name = "lm_quality"

    def __init__(self, cfg: LmQualityConfig, splitter: str = ""):
        self.cfg = cfg
        self.model = model(cfg.reference, cfg.min_count, splitter)

    def __call__(self, doc: Doc) -> Verdict | None:
        cfg = self.cfg
        score = self.model.score(doc.text, cfg.max_tokens)
        if not score.tokens:
            return None  # nothing to judge: the other blocks decide about empty text
        extra = f" (ppl={score.perplexity:.0f}, {score.tokens} tokens)"
        verdict = above(_P + "unknown_words", "unknown_frac", score.unknown_frac, cfg.max_unknown_frac)
        if verdict is None:
            verdict = below(_P + "context_gain", "context_gain", score.context_gain, cfg.min_context_gain)
        if verdict is None:
            verdict = above(_P + "perplexity", "perplexity", score.perplexity, cfg.max_perplexity)
        return None if verdict is None else Verdict(verdict.reason, verdict.detail + extra)


@register("lm_quality", config=LmQualityConfig, position=70, splitter=True, counts_words=True)
def build(cfg: LmQualityConfig, splitter: str = "") -> LmQuality:
    return LmQuality(cfg, splitter)
