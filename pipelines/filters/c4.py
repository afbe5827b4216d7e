"""C4's line-level rules (Raffel et al. 2020, section 2.2), as datatrove's C4QualityFilter.

Each line (stripped) goes through these rules in order; a line that fails one is removed, and
some rules drop the whole document. ``filter.c4`` (booleans switch a rule, None disables a
threshold):

=========================  ======================================================  =========
field                      rule                                                    effect
=========================  ======================================================  =========
max_word_length            a whitespace-separated word longer than 1000 chars      line
remove_citations           "[1]", "[edit]", "[citation needed]" cut out            (rewrite)
filter_no_terminal_punct   line does not end in . ? ! " ' or ends in "..."         line
allow_closing_quotes       (not in datatrove) also accept . ? ! followed by        (relaxes
                           closing quotes or brackets: '.”' '?’' '.)' '!»'         the above)
min_words_per_line         fewer than 3 whitespace-separated words                 line
filter_lorem_ipsum         "lorem ipsum" (any case)                                document
filter_javascript          "javascript" (any case)                                 line
filter_curly_bracket       "{"                                                     document
filter_policy              "terms of use", "privacy policy", "cookie policy",      line
                           "uses cookies", "use of cookies", "use cookies"
min_num_sentences          fewer than 5 sentences in the lines kept                document
=========================  ======================================================  =========

``allow_closing_quotes`` (default on) is this project's one deviation: datatrove accepts a
straight closing quote alone but removes lines ending in typographic quotes or ``.)``, which
costs most dialogue of well-edited prose; set it to false for datatrove's exact rule.

As in datatrove (and C4), the document rules only look at lines that survived the line rules
before them: "lorem ipsum" on a line without terminal punctuation removes that line, not the
page. The kept lines are joined with one newline, so paragraph breaks (blank lines) go away, as
in datatrove. Sentences are counted by ``pipelines.filters.text.sentence_count`` instead of
NLTK's punkt (which would need a download).

Document reasons: ``filter:c4:lorem_ipsum``, ``filter:c4:curly_bracket``,
``filter:c4:min_num_sentences``; with ``min_num_sentences`` off, a document that loses every
line is dropped as ``filter:empty``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from common.config import check
from pipelines.filters.block import Doc, Verdict, below, nonnegative
from pipelines.filters.registry import register
from pipelines.filters.text import CLOSERS, sentence_count


@dataclass
class C4Config:
    remove_citations: bool = True  # "[1]", "[edit]", "[citation needed]" removed from kept lines
    filter_no_terminal_punct: bool = True  # lines must end in . ? ! " ' (not "...")
    # Not in datatrove: a terminal mark followed by closing quotes or brackets ('.”', '?)')
    # also ends a line (datatrove drops book dialogue and typographic quotes). false: datatrove's rule.
    allow_closing_quotes: bool = True
    min_num_sentences: int | None = 5  # documents with fewer sentences left are dropped
    min_words_per_line: int | None = 3
    max_word_length: int | None = 1000  # lines with a longer word are removed
    filter_lorem_ipsum: bool = True  # documents
    filter_javascript: bool = True  # lines
    filter_curly_bracket: bool = True  # documents
    filter_policy: bool = True  # lines (cookies, terms of use, privacy policy)
    # The characters a kept line may end in (datatrove's . ? ! " '); a language's profile gives
    # its own (pipelines/language/profiles.py: 。！？ and CJK closing brackets for Chinese).
    end_punctuation: str = ".?!\"'"

    def validate(self) -> None:
        nonnegative(self, "min_num_sentences", "min_words_per_line", "max_word_length")
        check(bool(self.end_punctuation), "end_punctuation must name at least one character")


_P = "filter:c4:"
_CITATION = re.compile(r"\[\d*]|\[edit]|\[citation needed]")
_POLICY = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies", "use cookies")


class C4:
    name = "c4"

    def __init__(self, cfg: C4Config):
        self.cfg = cfg
        self.ends = tuple(cfg.end_punctuation)  # a line ends in one of these
        self.marks = tuple(c for c in cfg.end_punctuation if c not in "\"'")  # the same before closers

    def _terminal(self, line: str) -> bool:
        if line.endswith("..."):
            return False
        if line.endswith(self.ends):
            return True
        return self.cfg.allow_closing_quotes and line.rstrip(CLOSERS).endswith(self.marks)

    def __call__(self, doc: Doc) -> Verdict | None:
        cfg = self.cfg
        max_len, min_words = cfg.max_word_length, cfg.min_words_per_line
        sentences = 0
        kept: list[str] = []
        changed = False  # a non-blank line removed or rewritten (the tokens change)
        for raw in doc.text.split("\n"):
            line = raw.strip()
            if not line:
                continue  # a blank line: removed (no terminal punctuation) without changing a word
            original = line
            if cfg.remove_citations and "[" in line:
                cut = _CITATION.sub("", line)
                changed |= cut != line
                line = cut
            if cfg.filter_no_terminal_punct and not self._terminal(line):
                changed = True  # the cheap test first: a segmenter's words are only needed after it
                continue
            words = doc.split(original)  # counted before the citations went, as datatrove does
            if not words or (max_len is not None and max(map(len, words)) > max_len):
                changed = True
                continue
            if min_words is not None and len(words) < min_words:
                changed = True
                continue
            lower = line.lower()
            if cfg.filter_lorem_ipsum and "lorem ipsum" in lower:
                return Verdict(_P + "lorem_ipsum", f"'lorem ipsum' in line {len(kept) + 1} of those kept")
            if cfg.filter_javascript and "javascript" in lower:
                changed = True
                continue
            if cfg.filter_curly_bracket and "{" in line:
                return Verdict(_P + "curly_bracket", "'{' in a kept line")
            if cfg.filter_policy and any(p in lower for p in _POLICY):
                changed = True
                continue
            if cfg.min_num_sentences is not None:
                sentences += sentence_count(line)
            kept.append(line)
        found = below(_P + "min_num_sentences", "sentences", sentences, cfg.min_num_sentences)
        if found:
            return found
        doc.set_text("\n".join(kept).strip(), same_words=not changed)
        return None


@register("c4", config=C4Config, position=40, counts_words=True)
def build(cfg: C4Config) -> C4:
    return C4(cfg)
