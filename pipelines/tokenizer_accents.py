"""Accent stripping that keeps every script's letters whole, and when BERT's own does the same.

BERT's accent stripping (``BertNormalizer(strip_accents=True)``, and ``StripAccents``) is "NFD,
then drop every non-spacing mark". That is right for Latin, Greek and Cyrillic, whose marks are
accents (``Café`` -> ``cafe``), and wrong everywhere NFD or the marks carry letters:

- Hangul: NFD splits every syllable into conjoining jamo (``한`` -> ``ᄒ ᅡ ᆫ``), which are not
  marks and stay split, so a Korean vocabulary learns jamo instead of syllables;
- Thai, Lao, Devanagari and the other Indic scripts: vowel signs, tone marks, anusvara and
  virama are non-spacing marks (``ก่อน`` -> ``กอน``, ``हिंदी`` -> ``हिदी``), so words merge;
- Arabic and Hebrew: hamza above/below is a mark after NFD (``أ`` -> ``ا``), as are the
  vowel points;
- Japanese kana: (han)dakuten are marks after NFD (``が`` -> ``か``).

``strip_steps`` is the stripping this project trains with: NFD, then drop only the marks of the
combining-diacritics blocks (the accents of Latin, Greek and Cyrillic, ``DIACRITICS``), then NFC,
which recomposes what NFD split and nothing dropped (Hangul syllables come back whole). On text
in Latin, Greek and Cyrillic it gives what BERT gives (letters like Cyrillic ``й`` -> ``и`` and
Vietnamese tones lose their marks in both: that is what "uncased" means there).

Compatibility. transformers' BERT and ELECTRA tokenizer classes rebuild ``BertNormalizer`` from
the vocabulary and cannot hold this normaliser, so a trained WordPiece keeps ``BertNormalizer``
unless the characters BERT's stripping damages (``bert_damages``: Hangul syllables, kana with
(han)dakuten, Thai, Indic and Arabic marks) make up ``DAMAGED_SHARE`` (0.1%) of its sample. Then
it gets the sequence, its ``tokenizer_config.json`` names the generic class
(``pipelines.tokenizer_files``) and the build says so. Below that (stray words of those scripts
in, say, an English web crawl) the damage is confined to them and the tokenizer stays loadable by
the BERT classes; the training task logs a warning naming the characters and their share. A
threshold rather than "any character": a 256 MB sample of nearly any web text holds a few.
Released tokenizers are used as transformers applies them; ``bert_damages`` of their vocabulary
says which of their tokens BERT's stripping can never produce (``pipelines.tokenizer_pretrained``
reports them).
"""
from __future__ import annotations

import json
from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, normalizers

from pipelines.tokenizer_files import DIACRITICS, is_bert_compatible, normalizer_flags

DAMAGED_SHARE = 0.001  # of a sample's characters, from which a trained WordPiece keeps every script whole


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
    ``strip_steps`` does: split Hangul, a dropped vowel sign, hamza or dakuten. Empty for Latin,
    Greek, Cyrillic and Han."""
    bert = bert_normalizer(lowercase=lowercase, strip_accents=True, chinese_chars=chinese_chars)
    safe = script_safe_bert(lowercase=lowercase, chinese_chars=chinese_chars)
    return sorted(c for c in set(chars) if bert.normalize_str(c) != safe.normalize_str(c))


def describe(chars: list[str], limit: int = 8) -> str:
    """``'한' (U+D55C), 'ก่' ...`` for a message."""
    shown = ", ".join(f"{c!r} (U+{ord(c):04X})" for c in chars[:limit])
    return shown + (f" and {len(chars) - limit} more" if len(chars) > limit else "")


def trained_warnings(tokenizer_json: str) -> list[str]:
    """One line when a trained WordPiece took the script-safe stripping (module docstring): which
    of its characters BERT's would damage, and that transformers' BERT classes cannot load it."""
    tok = Tokenizer.from_str(tokenizer_json)
    lowercase, strip = normalizer_flags(tok)
    if not strip or is_bert_compatible(tok) or json.loads(tokenizer_json)["model"].get("type") != "WordPiece":
        return []
    chars = {c for t in tok.get_vocab() for c in t.removeprefix("##")}
    return [f"the trained tokenizer strips only Latin, Greek and Cyrillic accents: BERT's stripping would split or "
            f"drop letters its vocabulary holds ({describe(bert_damages(chars, lowercase=lowercase), 5)}), so "
            "transformers loads it with AutoTokenizer and its BERT and ELECTRA tokenizer classes refuse it "
            "(tokenizer.strip_accents=false keeps BERT's normaliser)"]
