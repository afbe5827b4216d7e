"""Accent stripping that keeps every script's letters whole, and when BERT's own does the same.

BERT's accent stripping (``BertNormalizer(strip_accents=True)``, and ``StripAccents``) is "NFD,
then drop every non-spacing mark". That is right for Latin, Greek and Cyrillic, whose marks are
accents (``Café`` -> ``cafe``), and wrong everywhere NFD or the marks carry letters:

- Hangul: NFD splits every syllable into conjoining jamo (``한`` -> ``ᄒ ᅡ ᆫ``), which are not
  marks and stay split, so a Korean vocabulary learns jamo instead of syllables;
- Thai, Lao, Devanagari and the other Indic scripts: vowel signs, tone marks, anusvara and
  virama are non-spacing marks (``ก่อน`` -> ``กอน``, ``हिंदी`` -> ``हिदी``), so words merge;
- Arabic and Hebrew: hamza above/below is a mark after NFD (``أ`` -> ``ا``), as are the
  vowel points.

``strip_steps`` is the stripping this project trains with: NFD, then drop only the marks of the
combining-diacritics blocks (the accents of Latin, Greek and Cyrillic, ``DIACRITICS``), then NFC,
which recomposes what NFD split and nothing dropped (Hangul syllables come back whole). On text
in Latin, Greek and Cyrillic it gives what BERT gives (letters like Cyrillic ``й`` -> ``и`` and
Vietnamese tones lose their marks in both: that is what "uncased" means there).

Compatibility. transformers' BERT and ELECTRA tokenizer classes rebuild ``BertNormalizer`` from
the vocabulary and cannot hold this normaliser, so a WordPiece keeps ``BertNormalizer`` whenever
the two agree on every character its vocabulary may hold (``bert_damages`` of the alphabet is
empty): a character outside the alphabet is ``[UNK]`` either way, except that a stray mark of an
uncovered script after a covered letter is dropped, as BERT drops it. Only a tokenizer that
covers a damaged script (a Korean, Thai or Hindi build, or any corpus where they are frequent
enough to enter the alphabet) gets the sequence, and its ``tokenizer_config.json`` then names the
generic class (``pipelines.tokenizer_files``). Released tokenizers are used as transformers
applies them; ``bert_damages`` of their vocabulary says which of their tokens BERT's stripping
can never produce (``pipelines.tokenizer_pretrained`` reports them).
"""
from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Regex, normalizers

from pipelines.tokenizer_files import DIACRITICS


def strip_steps() -> list[normalizers.Normalizer]:
    """NFD, drop the diacritics of Latin/Greek/Cyrillic, NFC (module docstring)."""
    return [normalizers.NFD(), normalizers.Replace(Regex(DIACRITICS), ""), normalizers.NFC()]


def bert_normalizer(*, lowercase: bool, strip_accents: bool, chinese_chars: bool = True) -> normalizers.Normalizer:
    return normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=chinese_chars,
                                      strip_accents=strip_accents, lowercase=lowercase)


def script_safe_bert(*, lowercase: bool, chinese_chars: bool = True) -> normalizers.Normalizer:
    """BERT's normaliser with ``strip_steps`` in place of its accent stripping (BERT strips
    before it lower-cases; so does this)."""
    steps = [bert_normalizer(lowercase=False, strip_accents=False, chinese_chars=chinese_chars), *strip_steps()]
    return normalizers.Sequence(steps + ([normalizers.Lowercase()] if lowercase else []))


def bert_damages(chars: Iterable[str], *, lowercase: bool, chinese_chars: bool = True) -> list[str]:
    """The characters (sorted) that BERT's accent stripping turns into something else than
    ``strip_steps`` does: split Hangul, a dropped vowel sign or hamza. Empty for Latin, Greek,
    Cyrillic and CJK."""
    bert = bert_normalizer(lowercase=lowercase, strip_accents=True, chinese_chars=chinese_chars)
    safe = script_safe_bert(lowercase=lowercase, chinese_chars=chinese_chars)
    return sorted(c for c in set(chars) if bert.normalize_str(c) != safe.normalize_str(c))


def describe(chars: list[str], limit: int = 8) -> str:
    """``'한' (U+D55C), 'ก่' ...`` for a message."""
    shown = ", ".join(f"{c!r} (U+{ord(c):04X})" for c in chars[:limit])
    return shown + (f" and {len(chars) - limit} more" if len(chars) > limit else "")
