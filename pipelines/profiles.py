"""Input profiles: config presets for the three shapes of raw text a corpus is built from.

A profile decides what a *document* is and which filters make sense for it. Picking the wrong
one is the usual cause of a poor corpus: paragraph-level web filters tear a book apart, and
splitting a book at blank lines turns it into thousands of short "documents" that the filters
drop and the packer pads (examples then hold far fewer tokens than ``seq_len``).

==============  ==========================  =====================================================
profile         a document is               filters (``filter.blocks``)
==============  ==========================  =====================================================
``web``         a JSONL/Parquet/JSON/WARC   the full set: Gopher quality and repetition, source
(default)       record; in plain text, a    code, C4's line rules, FineWeb's ratios, language
                blank-line-separated block  identification, the language model's context gain.
``books``       a whole file, without a     Gopher quality without its upper word limit (a novel
                Project Gutenberg licence   has more than 100,000 words), language
                header and footer           identification. No line or paragraph rules: verse,
                                            dialogue, chapter headings and hard-wrapped lines are
                                            what books are made of.
``bert-format`` a blank-line-separated      Gopher quality and language identification: one
                block of one sentence per   sentence per line is what the original BERT and
                line                        ELECTRA data scripts expect, and already-curated text
                                            (Wikipedia, BookCorpus) needs no web rules. The
                                            packer's lines are then sentences, as in the paper.
==============  ==========================  =====================================================

A profile is applied by ``CorpusConfig.from_dict`` (and so by the flow's ``--profile``): its
preset is merged *under* the user's mapping, so anything the config file or a ``--set``
override says still wins; mappings merge key by key, lists (such as ``filter.blocks``) are
replaced whole. The dataclass defaults are the ``web`` profile, so ``CorpusConfig()`` and
``from_dict({})`` agree.
"""
from __future__ import annotations

import copy
from typing import Any, Literal

from common.config import ConfigError

PROFILES: dict[str, dict[str, Any]] = {
    "web": {},
    "books": {
        "ingest": {"text_mode": "file", "strip_boilerplate": True},
        "filter": {"blocks": ["gopher_quality", "language"],
                   "gopher_quality": {"max_doc_words": None}},
    },
    "bert-format": {
        "ingest": {"text_mode": "blank_line"},
        "filter": {"blocks": ["gopher_quality", "language"]},
    },
}

# The profiles' names: what ``CorpusConfig.profile`` and build-corpus's --profile accept (the
# CLI's choices come from this Literal through the config's annotation). The keys above.
ProfileName = Literal[tuple(PROFILES)]  # type: ignore[valid-type]
PROFILE_NAMES: tuple[str, ...] = tuple(PROFILES)
DEFAULT_PROFILE = "web"  # the dataclass defaults are this profile


def with_profile(raw: dict[str, Any], *, where: str = "corpus config") -> dict[str, Any]:
    """``raw`` merged over its profile's preset (``raw["profile"]``, default ``DEFAULT_PROFILE``)."""
    name = raw.get("profile", DEFAULT_PROFILE)
    if name not in PROFILES:
        raise ConfigError(f"{where}: profile={name!r}; expected one of {sorted(PROFILES)}")
    return merge(PROFILES[name], raw)


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """A new mapping: ``over`` on top of ``base``, nested mappings merged, everything else replaced."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
