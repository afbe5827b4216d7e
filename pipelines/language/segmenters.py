"""A word splitter per language: what the filter blocks count as words.

``splitter(code)`` returns a function ``text -> list[str]`` of tokens, in order:

- ``whitespace`` (English and every language written with spaces): ``str.split``, in C, as the
  Gopher paper and C4 count words; punctuation stays attached ("the," is one token) and the
  blocks tell punctuation-only tokens apart themselves (``pipelines.filters.text.is_symbol``).
- ``ja``: fugashi (MeCab) with the unidic-lite dictionary: morphemes, the unit Japanese word
  counts use; ``zh``: jieba's dictionary and algorithm (precise mode with its HMM for unknown
  words) through rjieba, its Rust port, many times faster than jieba itself (docs/languages.md);
  ``th``: pythainlp's ``newmm`` (maximal matching over its bundled
  dictionary). All three ship their dictionaries in the wheel (nothing is downloaded); their
  punctuation tokens are kept as tokens, like attached punctuation above.
- ``characters``: whitespace tokens, with every character of a spaceless script a token of its
  own (``scripts.space_out``): the rule for Lao, Khmer, Myanmar, Tibetan and any spaceless text in
  a language without a segmenter. It is also what ``whitespace`` does not do: English keeps
  ``str.split`` exactly, so its counts, and its corpora, stay what they were.

Segmenters are built once per process (a dictionary load) and their whitespace tokens are
dropped, so spaced text inside a Chinese or Japanese document (Latin names, numbers, code) is
split at its spaces as well. Trade-off: a segmenter costs far more per character than
``str.split`` (docs/languages.md measures each); only the languages that need one pay.
"""
from __future__ import annotations

import functools
from collections.abc import Callable

from pipelines.language.scripts import space_out

Splitter = Callable[[str], list[str]]
SEGMENTED = {"ja": "fugashi", "zh": "jieba", "th": "pythainlp"}  # language -> segmenter (a splitter name)


def whitespace(text: str) -> list[str]:
    return text.split()


def characters(text: str) -> list[str]:
    return space_out(text).split()


@functools.cache
def _fugashi():
    import fugashi  # unidic-lite's dictionary is found by fugashi itself

    return fugashi.Tagger()


def japanese(text: str) -> list[str]:
    return [s for s in (w.surface for w in _fugashi()(text)) if s.strip()]


@functools.cache
def _jieba():
    import rjieba  # jieba's dictionary and algorithm, in Rust

    return rjieba.cut


def chinese(text: str) -> list[str]:
    return [w for w in _jieba()(text) if w.strip()]


@functools.cache
def _thai():
    from pythainlp.tokenize import word_tokenize

    return functools.partial(word_tokenize, engine="newmm", keep_whitespace=False)


def thai(text: str) -> list[str]:
    cut = _thai()
    return [w for chunk in text.split() for w in cut(chunk) if w.strip()]


_BY_NAME: dict[str, Splitter] = {"whitespace": whitespace, "characters": characters, "fugashi": japanese,
                                 "jieba": chinese, "pythainlp": thai}


def splitter(name: str) -> Splitter:
    """The splitter called ``name`` (``whitespace``, ``characters``, ``fugashi``, ``jieba``,
    ``pythainlp``)."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"word splitter {name!r}; known: {sorted(_BY_NAME)}") from None


def default_splitter(code: str) -> str:
    """The splitter a language gets when nothing says otherwise: its segmenter, else whitespace
    (spaceless text in it then goes through the character rule: ``characters``)."""
    return SEGMENTED.get(code, "characters")
