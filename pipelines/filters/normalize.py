"""Normalisation of a document before anything hashes, counts or filters it.

``normalize_text`` canonicalises a document so that exact dedup and the filters see one spelling
of each text, in this order: every line break as ``\\n``
(``\\r\\n``, ``\\r``, ``\\v``, ``\\f``, U+0085, U+2028/9); control characters and invisible junk
(BOM, zero-width space, soft hyphen) removed; the Unicode normal form (``unicode_form``); tabs and
Unicode spaces as a plain space and runs of spaces collapsed; trailing spaces stripped per line;
three or more newlines collapsed to a paragraph break; the whole stripped. Zero-width
(non-)joiners are kept: they carry meaning in several scripts. The result is idempotent.
"""
from __future__ import annotations

import re
import unicodedata
from typing import Any

UNICODE_FORMS = ("NFC", "NFKC", "NFD", "NFKD", "none")

_LINE_BREAKS = re.compile("\r\n?|[\x0b\x0c\x85\u2028\u2029]")
# C0/C1 controls except \t and \n (line breaks are already \n), BOM, zero-width space, soft hyphen.
_CONTROL = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f\ufeff\u200b\u00ad]")
# Two or more spaces, or any single non-ASCII space/tab: a lone " " (the common case) is left alone.
_SPACE_CHARS = "\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000"  # non-ASCII spaces (category Zs)
_SPACES = re.compile(f"[\t {_SPACE_CHARS}]{{2,}}|[\t{_SPACE_CHARS}]")
_TRAILING_SPACE = re.compile(" +\n")
_MANY_NEWLINES = re.compile("\n{3,}")


def normalize_text(text: str, cfg: Any) -> str:
    """Canonical form of a document (see the module docstring for each step); ``cfg``: the
    filter config (``pipelines.config.FilterConfig``, which takes its ``unicode_form`` choices
    from ``UNICODE_FORMS`` here, so this module does not import it)."""
    form = cfg.unicode_form
    if form not in UNICODE_FORMS:
        raise ValueError(f"filter.unicode_form={form!r}; expected one of {UNICODE_FORMS}")
    # Each substitution is skipped when a (memchr-fast) containment test shows it has nothing to
    # do, which is the common case for clean text.
    if not text.isascii() or "\r" in text or "\x0b" in text or "\x0c" in text:
        text = _LINE_BREAKS.sub("\n", text)
    # Controls go before the normal form: removing one between a letter and a combining mark
    # afterwards would leave a composable pair behind (and the function not idempotent).
    text = _CONTROL.sub("", text)
    if form != "none":
        text = unicodedata.normalize(form, text)
    if not text.isascii() or "  " in text or "\t" in text:
        text = _SPACES.sub(" ", text)
    if " \n" in text:
        text = _TRAILING_SPACE.sub("\n", text)
    if "\n\n\n" in text:
        text = _MANY_NEWLINES.sub("\n\n", text)
    return text.strip()
