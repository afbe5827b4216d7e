"""Per-language filter settings: the languages calibrated on real text, and what each changes.

The filter sections (``filter.gopher_quality``, ``filter.c4``, ...) hold datatrove's English
defaults. A document is filtered with its language's *profile*: the word splitter
(``pipelines.language.segmenters``) and the fields its table entry overrides in those sections,
then the user's own ``filter.by_language.<code>.<block>.<field>`` on top. English overrides
nothing, so English corpora are filtered exactly as before.

Which blocks a language runs:

- a **calibrated** language (``TABLE``) runs every configured block, with its own stop words,
  word-length bounds, sentence marks and short-line length;
- any **other** language runs only the script-independent blocks and rules (``language``,
  ``code``, ``pii``, and ``gopher_repetition``'s duplicate line and paragraph rules): the
  word-count blocks (``WORD_BLOCKS``) would apply English numbers to it and drop it whole, and
  the repetition block's n-gram rules measure fractions of word n-grams, whose size depends on
  what a word is (Japanese morphemes are far shorter than English words; docs/languages.md has
  what they cost a held-out Japanese text). A block the user configures for the language
  (``filter.by_language.<code>.<block>``) runs anyway. The manifest warns once per language kept;
- ``lm_quality`` needs a reference text in the language: the shipped one is English;
  ``filter.by_language.<code>.lm_quality.reference`` names one for another language, and
  without it the block is off for that language, with a warning.

Calibration (``benchmarks/corpus/calibrate_languages.py``; the figures are in docs/languages.md). The
Debian Reference is one manual translated section by section; the English default of each rule
is carried to language L by what the same sections measure in both: a count (words, sentences,
words per line) or a length (characters of a short line) is scaled by the median over aligned
sections of stat_L / stat_en, a per-word mean or share (word length, words with a letter) by the
ratio of the two medians; a factor within 15% of 1 keeps English's number; ``zh`` takes the
mean of what its two texts (simplified and traditional) propose. Stop words are L's
most frequent words in every development text of it (the manual and, where there is one, a
fortune collection): function words, not the manual's topics. So a rule removes about as much of
L as it removes of English. Held-out texts and languages were not used.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipelines.language.segmenters import default_splitter

# The blocks that count words or sentences with language-specific numbers.
WORD_BLOCKS = ("gopher_quality", "c4", "fineweb", "lm_quality")
# Sentence-final marks of CJK text (C4's line rule; text.TERMINAL_PUNCTUATION has them for FineWeb).
_CJK_END = "。！？｡．.!?…\"'”’」』）)"


@dataclass(frozen=True)
class Profile:
    code: str  # ISO 639-1
    splitter: str  # a name of segmenters.splitter
    calibrated: bool
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)  # block -> field -> value


TABLE: dict[str, Profile] = {p.code: p for p in (
    Profile("en", "whitespace", True),
    Profile("zh", "jieba", True, {
        "gopher_quality": {"min_avg_word_length": 1.17, "max_avg_word_length": 3.9,
                           "max_non_alpha_words_ratio": 0.65,
                           "stop_words": ["的", "在", "是", "和", "了", "有", "一个", "你"]},
        "c4": {"end_punctuation": _CJK_END, "min_num_sentences": 4, "min_words_per_line": 4},
        "fineweb": {"short_line_length": 12, "new_line_ratio": 0.23},
    }),
    Profile("fr", "characters", True, {
        "gopher_quality": {"stop_words": ["de", "la", "les", "des", "le", "et", "en", "à"]},
        "c4": {"min_words_per_line": 4},
        "fineweb": {"short_line_length": 37, "new_line_ratio": 0.24},
    }),
    Profile("de", "characters", True, {
        "gopher_quality": {"min_avg_word_length": 3.82, "max_avg_word_length": 12.72,
                           "stop_words": ["die", "und", "der", "in", "von", "zu", "für", "das"]},
        "fineweb": {"short_line_length": 36},
    }),
    Profile("es", "characters", True, {
        "gopher_quality": {"stop_words": ["de", "la", "el", "en", "y", "del", "que", "para"]}}),
    Profile("pt", "characters", True, {
        "gopher_quality": {"stop_words": ["de", "o", "a", "para", "do", "e", "com", "é"]}}),
)}


# What an uncalibrated language changes: the repetition block keeps its line/paragraph rules only.
UNCALIBRATED = {"gopher_repetition": {"top_n_grams": [], "dup_n_grams": []}}


def profile_for(code: str) -> Profile:
    """``code``'s calibrated profile, or an uncalibrated one with its default splitter."""
    return TABLE.get(code) or Profile(code, default_splitter(code), False, UNCALIBRATED)


def blocks_for(profile: Profile, blocks: list[str], references: dict[str, str | None],
               configured: frozenset[str] = frozenset()) -> tuple[list[str], list[str]]:
    """(the blocks of ``blocks`` this language runs, those it skips). ``references``: language ->
    lm_quality reference (English: the shipped one, None); ``configured``: the blocks the user set
    fields of for this language (``filter.by_language``), which run whatever the table says."""
    run, skipped = [], []
    for name in blocks:
        if name in configured and (name != "lm_quality" or references.get(profile.code) or profile.code == "en"):
            run.append(name)
        elif name in WORD_BLOCKS and not profile.calibrated:
            skipped.append(name)
        elif name == "lm_quality" and profile.code != "en" and not references.get(profile.code):
            skipped.append(name)
        else:
            run.append(name)
    return run, skipped


def language_warnings(blocks: list[str], languages_seen: dict[str, dict[str, int]],
                      references: dict[str, str | None],
                      configured: dict[str, frozenset[str]] | None = None) -> list[str]:
    """One manifest warning per language kept whose profile skipped some configured block (a
    language the language block dropped was not filtered with its own profile)."""
    out = []
    for code in sorted(languages_seen):
        if not code or not languages_seen[code].get("kept"):
            continue
        profile = profile_for(code)
        _, skipped = blocks_for(profile, blocks, references, (configured or {}).get(code, frozenset()))
        if not skipped:
            continue
        if not profile.calibrated:
            why = ("no calibrated thresholds for this language (pipelines/language/profiles.py): only the "
                   "script-independent blocks ran, gopher_repetition without its n-gram rules")
        else:
            why = (f"no language-model reference for it: set filter.by_language.{code}.lm_quality.reference "
                   "to a text file in the language")
        out.append(f"language {code}: {', '.join(skipped)} skipped: {why}")
    return out
