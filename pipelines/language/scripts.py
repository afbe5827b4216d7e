"""Scripts written without spaces between words, and the character rule for them.

Most scripts separate words with spaces; Han (Chinese, Japanese kanji), kana, Thai, Lao, Khmer,
Myanmar and Tibetan do not. Anything that cuts text at whitespace (``str.split``, the MinHash
byte scanner, the decontamination token regex) sees a whole clause of such text as one "word":
an 800-character Japanese paragraph is a few dozen of them, and two paragraphs that differ in
2% of their characters share almost no 5-word shingle.

``space_out(text)`` is the script-level fix, for code that needs tokens, not linguistic words:
every character of a spaceless script becomes a token of its own (surrounded by spaces), and the
CJK punctuation and full-width forms that end or separate those clauses (``。、「」！？`` ...)
become spaces. Character n-grams are then what word n-grams are elsewhere: five consecutive
characters of Chinese carry about as much as five English words carry letters. Text without any
character of those scripts is returned unchanged (checked in one regex scan), so English and
the other spaced scripts keep exactly their former tokens.

Hangul is not here: Korean writes spaces between words (eojeol).
"""
from __future__ import annotations

import functools
import re

# Spaceless scripts, as character ranges (BMP; CJK extension B and later are rare in text).
SPACELESS_RANGES = (
    ("\u3005", "\u3007"),  # 々 〆 〇: iteration mark, closing mark, ideographic zero
    ("\u3021", "\u3029"),  # Hangzhou numerals
    ("\u3031", "\u3035"),  # vertical kana repeat marks
    ("\u3038", "\u303c"),  # more Hangzhou numerals, 〻 〼
    ("\u0e00", "\u0e7f"),  # Thai
    ("\u0e80", "\u0eff"),  # Lao
    ("\u0f00", "\u0fff"),  # Tibetan
    ("\u1000", "\u109f"),  # Myanmar
    ("\u1780", "\u17ff"),  # Khmer
    ("\u19e0", "\u19ff"),  # Khmer symbols
    ("\u3040", "\u309f"),  # Hiragana
    ("\u30a0", "\u30ff"),  # Katakana
    ("\u31f0", "\u31ff"),  # Katakana phonetic extensions
    ("\u3400", "\u4dbf"),  # CJK extension A
    ("\u4e00", "\u9fff"),  # CJK unified ideographs
    ("\uf900", "\ufaff"),  # CJK compatibility ideographs
    ("\uff66", "\uff9f"),  # half-width katakana
)
# Punctuation of those scripts: CJK symbols and punctuation, full-width ASCII punctuation,
# half-width CJK punctuation. (Full-width letters and digits stay letters.)
CJK_PUNCTUATION_RANGES = (
    ("\u3000", "\u3004"), ("\u3008", "\u3020"), ("\u302a", "\u3030"), ("\u3036", "\u3037"),
    ("\u303d", "\u303f"),
    ("\uff01", "\uff0f"), ("\uff1a", "\uff20"), ("\uff3b", "\uff40"), ("\uff5b", "\uff65"),
    ("\u30fb", "\u30fb"),  # katakana middle dot
)


def _class(ranges) -> str:
    return "".join(f"{a}-{b}" if a != b else a for a, b in ranges)


SPACELESS = re.compile(f"[{_class(SPACELESS_RANGES)}]")
_SPACELESS_OR_PUNCT = re.compile(f"[{_class(SPACELESS_RANGES)}{_class(CJK_PUNCTUATION_RANGES)}]")
_PUNCT = re.compile(f"[{_class(CJK_PUNCTUATION_RANGES)}]")


@functools.cache
def _table() -> dict[int, str]:
    """``str.translate``'s table: a spaceless character -> itself between spaces, punctuation -> a
    space (about 29,000 entries; translate looks them up in C, several times a regex's speed)."""
    out = {c: f" {chr(c)} " for a, b in SPACELESS_RANGES for c in range(ord(a), ord(b) + 1)}
    out.update({c: " " for a, b in CJK_PUNCTUATION_RANGES for c in range(ord(a), ord(b) + 1)})
    return out


def space_out(text: str) -> str:
    """``text`` with every spaceless-script character a separate token and CJK punctuation a
    space; unchanged when it holds neither."""
    if text.isascii() or _SPACELESS_OR_PUNCT.search(text) is None:
        return text
    return text.translate(_table())


def spaceless_share(text: str) -> float:
    """The share of ``text``'s non-space characters that belong to spaceless scripts."""
    if text.isascii():
        return 0.0
    chars = len(text) - sum(text.count(c) for c in " \n\t\r")
    return (len(text) - len(SPACELESS.sub("", text))) / chars if chars else 0.0
