"""Source-code detection: a document whose lines read as code, or whose characters are code's.

C4's curly-bracket and JavaScript rules catch braces and the word "javascript"; code without
braces (Python, SQL, shell sessions, YAML, HTML) and code explained by comments passes them and
every prose rule, since its comments and docstrings are sentences. This block looks at lines:

* a line is *code* when it starts like a statement (``def``, ``class``, ``import``, ``return``,
  ``const``, ``#include``, ``SELECT``, a shell prompt, a comment opener, a markup tag, a closing
  bracket), ends like one (``{``, an opening bracket, ``);``), or holds a token prose never
  has (``==``, ``=>``, ``->``, ``::``, ``&&``, ``()``, ``</``, ``name.call(``, ``snake_case``,
  ``name = value``, a lower-case ``key: value``);
* ``code_lines``: the document is dropped when more than ``max_code_line_frac`` of its non-empty
  lines are code (and at least ``min_code_lines`` of them, so one odd line of a short page does
  not decide);
* ``symbols``: or when the characters ``{ } [ ] < > = ; | \\ $ #`` make up more than
  ``max_symbol_ratio`` of its non-space characters (prose: a few per thousand).

A page that explains code in prose with a snippet or two stays: the thresholds look at shares,
not at the presence of code. The thresholds were set on the project's own prose (books, the
generated demo text) and code; they are not tuned to any test set.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from common.config import check
from pipelines.filters.block import Doc, Verdict, above, nonnegative
from pipelines.filters.registry import register


@dataclass
class CodeConfig:
    # Not in datatrove (pipelines/filters/code.py): source code without braces or with comments.
    max_code_line_frac: float | None = 0.3  # max share of non-empty lines that read as code
    min_code_lines: int = 3  # ... and only when at least this many lines do
    max_symbol_ratio: float | None = 0.05  # max share of { } [ ] < > = ; | \ $ # in non-space characters

    def validate(self) -> None:
        nonnegative(self, "max_code_line_frac", "max_symbol_ratio")
        check(self.min_code_lines >= 1, "min_code_lines must be >= 1")


_P = "filter:code:"

# Patterns matched over the whole document at once (a line is code when a match starts in it),
# each beginning with a literal or an anchor so that the scan is fast; "[ \t]" rather than "\s"
# so that no match runs across a line break. No camelCase rule: brand names ("iPhone", "YouTube",
# "PlayStation") have its shape, and code with it has the other signs.
_STARTS = (r"(?m)^[ \t]*(?:def |class \w+[(:]|import \w|from [\w.]+ import |return\b|elif\b|else:|try:|"
           r"except\b|finally:|function\b|var |let |const |public |private |protected |static |#include|"
           r"#define|package \w|using \w|namespace |fn \w|func \w|SELECT [\w*]|INSERT INTO|UPDATE \w+ SET|"
           r"DELETE FROM|CREATE (?:TABLE|INDEX|VIEW)|@\w+(?:\(|$)|\$ \w|>>> |// |/\*|<!--|"
           r"</?[a-zA-Z][\w-]*(?:[ \t]+[\w-]+=|>|/>)|[}\])]|(?:if|for|while|switch) ?\()")
_PATTERNS = tuple(re.compile(p) for p in (
    _STARTS,
    # opens a block or ends a call statement; not a bare ";" (prose puts it at the end of a
    # hard-wrapped line, and an index at the end of each entry)
    r"(?m)(?:[{(\[]|\);)[ \t]*$",
    r"==|!=|=>|->|::|&&|\|\||\+=|\(\)|\)[ \t]*\{|</|/>",  # operators prose never has
    r"\.(?<=\w\.)\w+\(",  # name.call(
    r"_(?<=[a-z]_)[a-z]",  # snake_case
    r"(?m)^[ \t]*[\w.\[\]\"']+[ \t]*=[ \t]*\S+[ \t]*$",  # key = value
    r"(?m)^[ \t]*[a-z_][\w.\-]*:[ \t]+\S+[ \t]*$",  # YAML's lower-case key: value (not "Author: Jane")
))
_LINE = re.compile(r"(?m)^[ \t]*\S")  # a non-empty line
_SYMBOLS = frozenset("{}[]<>=;|\\$#")


# Addresses and links hold dots, slashes and underscores ("buy_tickets", "info_desk@example.com")
# and are prose's; they are blanked (same length, so lines keep their places) before matching.
_ADDRESS = re.compile(r"(?:https?://|www\.)[^\s<>\"')\]]+|[\w.+-]+@[\w-]+\.[\w.-]+|\]\([^)\s]*\)")


def code_lines(text: str) -> int:
    """The number of lines of ``text`` in which a code match starts."""
    if "_" in text or "(" in text:  # the only signs an address can fake
        text = _ADDRESS.sub(lambda m: "x" * len(m.group()), text)
    return len({text.rfind("\n", 0, m.start()) for p in _PATTERNS for m in p.finditer(text)})


def is_code_line(line: str) -> bool:
    return code_lines(line) > 0


class Code:
    name = "code"

    def __init__(self, cfg: CodeConfig):
        self.cfg = cfg

    def __call__(self, doc: Doc) -> Verdict | None:
        cfg = self.cfg
        text = doc.text
        if cfg.max_code_line_frac is not None:
            code = code_lines(text)
            if code >= cfg.min_code_lines:
                lines = len(_LINE.findall(text))
                verdict = above(_P + "code_lines", "code_line_frac", code / max(lines, 1), cfg.max_code_line_frac)
                if verdict is not None:
                    return verdict
        if cfg.max_symbol_ratio is not None:
            chars = len(text) - text.count(" ") - text.count("\n")
            symbols = sum(text.count(s) for s in _SYMBOLS)
            return above(_P + "symbols", "symbol_ratio", symbols / max(chars, 1), cfg.max_symbol_ratio)
        return None


@register("code", config=CodeConfig, position=30)
def build(cfg: CodeConfig) -> Code:
    return Code(cfg)
