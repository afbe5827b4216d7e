"""Why a filter stage kept (nearly) nothing, in one line, with the likely cause and the fix.

A build whose filters drop every document used to fail three stages later, in the tokenizer,
with "no text to train on", naming neither the block nor the language. The usual causes are
three: the text is not in the languages kept (``filter.language.languages``, English by default);
the word-count rules of one language are applied to text of another (English stop words on
Russian, English word lengths on Japanese before the language block has run); or the documents
are not documents: plain text of hard-wrapped paragraphs split at blank lines
(``ingest.text_mode=blank_line``, the ``web`` profile) gives thousands of 20-word "documents"
that the length rules drop. So, when the filter stage keeps fewer than ``WARN_SHARE`` of its
documents:

- the line names the drop reasons with their counts (the first block that dropped a document
  decides its reason), and the languages of the dropped documents: the stage's per-language
  counts (every document is identified when the language block is among the blocks:
  ``pipelines.filters.base``), or, without that block, a sample of up to ``SAMPLE`` of them
  from the quarantine (``rejected/``), identified with the language block's model;
- the cause and the fix are chosen from the top reason, the dropped documents' languages and
  their shape, in this order: a language that is not kept -> ``--language`` for it; a word rule
  dropping mostly text of a language that is not kept -> ``--language`` too (a minority of
  another language among the drops is not the cause: Spanish documentation quotes English
  commands); a length rule (``_LENGTH_RULES``) dropping blank-line blocks of plain text that
  are hard-wrapped lines of one long text (``wrapped_cause``, from a quarantine sample: the records'
  text prefix, length and file) -> ``--profile books`` or ``--set ingest.text_mode=file``;
  otherwise the rule to relax.

The stage itself fails only when it kept nothing (``NothingKept``, a ``ConfigError``: the CLI
prints it as its one-line error, exit 2); a few kept is recorded as a warning in its statistics.
Whether the build goes on is ``filter.min_kept_share`` (default 0.05), applied by ``check_kept``
to the stage's record when the record is used: by the next stage (``exact_dedup``) and at publish.
The threshold is not in the stage's cache key, so a build it stopped, rerun with
``--set filter.min_kept_share=0``, reuses the filter stage and finishes, the line then a manifest
warning. Only these paths read the quarantine: a build that keeps its documents pays nothing.
Either way the line ends with the quarantine folder, where every dropped document is one JSON
line with its reason.

Ingest can keep nothing too (every file empty, binary, or in an undecodable encoding): the
filter stage would then see no document and the tokenizer fail on an empty sample, three stages
and several tracebacks later. ``ingest_report`` is the same line for ingest: its reasons with
counts, the cause and the fix chosen from the top reason (a table, ``_INGEST_CAUSES``), and the
folder. Languages are never known there (identification is a filter block).
"""
from __future__ import annotations

import io
import json
import re
import statistics
from collections import Counter
from typing import TYPE_CHECKING, Any, Sequence

from common import storage
from common.config import ConfigError

if TYPE_CHECKING:
    from pipelines.config import CorpusConfig
    from pipelines.engine.part_list import PartList

WARN_SHARE = 0.05  # keeping fewer than this share of the documents is "nearly everything dropped"
SAMPLE = 200  # dropped documents read from the quarantine for the message
MAX_FILES = 8  # quarantine parts read at most for that sample
_WORD_BLOCKS = ("gopher_quality", "gopher_repetition", "c4", "fineweb", "lm_quality")
# Rules that drop a document for being short: what splitting one long text into paragraphs trips.
_LENGTH_RULES = ("gopher_quality:min_doc_words", "c4:min_num_sentences", "gopher_quality:min_stop_words")
# Codes an identifier gives text without a language (symbols, numbers): never a --language fix.
NOT_LANGUAGES = frozenset({"zxx", "und", "mul", "mis"})
_WORDS = re.compile(r"words=(\d+) <")
ALLOW = "--set filter.min_kept_share=0"


class NothingKept(ConfigError):
    """A stage kept no document at all (or less than ``filter.min_kept_share``): its line names
    the reasons, the cause, the fix and the quarantine folder. A ``ConfigError``, so the CLI
    prints it as one line and exits 2."""


def by_count(dropped: dict[str, int]) -> list[tuple[str, int]]:
    """A stage's drop reasons, most documents first (ties by name): the first decides the cause."""
    return sorted(dropped.items(), key=lambda kv: (-kv[1], kv[0]))


def sampled_records(rejected: str, files: Sequence[dict[str, Any]] | PartList, *,
                    sample: int = SAMPLE) -> list[dict[str, Any]]:
    """Up to ``sample`` quarantine records with text (``id``, ``reason``, ``text`` prefix, ``chars``)."""
    import zstandard

    out: list[dict[str, Any]] = []
    for f in files[:MAX_FILES]:
        data = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(storage.read_bytes(storage.join(rejected,
                                                                                                    f["name"]))))
        for line in io.TextIOWrapper(data, encoding="utf-8"):
            record = json.loads(line)
            if (record.get("text") or "").strip():
                out.append(record)
                if len(out) >= sample:
                    return out
    return out


def sampled_languages(rejected: str, files: Sequence[dict[str, Any]] | PartList, *, sample: int = SAMPLE,
                      chars: int | None = 2000, records: list[dict[str, Any]] | None = None) -> Counter:
    """Languages of up to ``sample`` dropped documents (their quarantined text prefix)."""
    from pipelines.filters.language import classify

    if records is None:
        records = sampled_records(rejected, files, sample=sample)
    return Counter(classify(r["text"], chars)[0][0] for r in records[:sample])


def dropped_languages(stats: dict[str, Any]) -> Counter:
    """The stage's own count of dropped documents per language (empty without the language block)."""
    return Counter({code: c["dropped"] for code, c in stats.get("languages", {}).items() if c.get("dropped")})


def wrapped_cause(records: list[dict[str, Any]], top: str, text_mode: str) -> str | None:
    """The cause clause when ``top`` (a reason) is a length rule dropping blank-line blocks of
    plain text that are hard-wrapped lines of a longer text: most sampled records of that reason
    come from plain-text files (by the id's file name), several from each file, and a quarter or
    more of them span lines (their prefix holds a line break). None otherwise."""
    from pipelines.ingest.documents import file_kind
    from pipelines.ingest.text_stream import compression_of

    rule = top.removeprefix("filter:")
    if rule not in _LENGTH_RULES or text_mode == "file":
        return None
    mine = [r for r in records if r.get("reason") == top]
    files = [compression_of(str(r.get("id", "")).rsplit(":", 1)[0])[1] for r in mine]
    plain = [r for r, f in zip(mine, files) if file_kind(f) == "text"]
    if len(plain) < 10 or len(plain) < 0.5 * len(mine) or len(plain) < 5 * len(set(files)):
        return None
    wrapped = sum("\n" in r["text"].strip() for r in plain)
    if wrapped < 0.25 * len(plain):
        return None
    names = sorted(set(f.rsplit("/", 1)[-1] for f in files))
    # gopher_quality's detail counts the words ("words=12 < 50"); other rules: the length
    counted = [int(m.group(1)) for r in plain if (m := _WORDS.match(str(r.get("detail", ""))))]
    median = (f"{statistics.median(counted):g} words" if len(counted) == len(plain) else
              f"{statistics.median(r.get('chars', len(r['text'])) for r in plain):g} characters")
    unit = "blank-line block" if text_mode == "blank_line" else "line"
    return (f"ingest.text_mode={text_mode} made each {unit} of the plain text ({', '.join(names[:3])}"
            f"{' ...' if len(names) > 3 else ''}: hard-wrapped paragraphs, median {median}) a document, "
            f"and {rule.replace(':', '.')} drops such short ones")


def explain(stats: dict[str, Any], languages: list[str] | None, sampled: Counter, *,
            shape: str | None = None, sampled_label: str | None = None) -> str:
    """The one line (module docstring) for a filter stage's ``stats``; ``sampled``: the dropped
    documents' languages, ``shape``: ``wrapped_cause``'s clause."""
    n_in, n_out = stats["documents_in"], stats["documents_out"]
    reasons = by_count(stats["dropped"])
    shown = ", ".join(f"{r.removeprefix('filter:')} {n}" for r, n in reasons[:4])
    real = Counter({code: n for code, n in sampled.items() if code not in NOT_LANGUAGES})
    seen = [code for code, n in real.most_common() if n >= 0.2 * sum(real.values())] or \
        [code for code, _ in real.most_common(1)]
    langs = ", ".join(f"{code} {n}" for code, n in sampled.most_common(5))
    kept = "any language" if languages is None else "/".join(languages)
    top = reasons[0][0] if reasons else ""
    block = top.removeprefix("filter:").split(":")[0]
    fix_lang = " ".join(f"--language {code}" for code in seen) or "--language CODE (the text's language)"
    # Only a majority of the drops in languages not kept makes the language the cause of a word
    # rule's drops: a minority of another language is quoted text, not the wrong --language.
    foreign = sum(n for code, n in real.items() if languages is not None and code not in languages)
    if top == "filter:language:languages" or (block in _WORD_BLOCKS and foreign > 0.5 * sum(real.values())):
        cause = (f"the documents are in {'/'.join(seen)}, and the build keeps {kept}"
                 + (f", filtering them with {kept} word rules" if block in _WORD_BLOCKS else ""))
        fix = f"build with {fix_lang}"
    elif shape is not None:
        cause, fix = shape, "--profile books (a whole file is one document), or --set ingest.text_mode=file"
    elif top.startswith("decontaminate:"):
        cause = f"the documents share 13-token windows with the {top.split(':', 1)[1]} evaluation files"
        fix = "check that the sources are not the evaluation sets themselves, or drop --decontaminate"
    elif top == "filter:empty":
        cause = "the documents are empty after normalisation or after the line rules removed every line"
        fix = "check the sources and ingest.text_mode, or remove c4 from filter.blocks"
    elif top == "filter:language:min_score":
        cause = "language identification is not confident on these documents (short, mixed or unusual text)"
        fix = "lower filter.language.min_score or raise filter.language.sample_chars"
    elif top:
        rule = top.removeprefix("filter:").replace(":", ".")
        cause = f"the rule {rule} drops nearly all {'/'.join(seen) or kept} text of this kind"
        where = f"filter.by_language.{seen[0]}." if seen else "filter."
        fix = (f"relax {where}{block}.{top.split(':')[-1]}, or remove {block} from filter.blocks "
               "(e.g. --profile books for whole books)")
    else:
        cause, fix = "every document was empty after normalisation", "check the sources and ingest.text_mode"
    label = sampled_label or f"{sum(sampled.values())} sampled"
    return (f"filter kept {n_out} of {n_in} documents; dropped by {shown or 'nothing'}; "
            f"dropped documents' languages ({label}): {langs or 'none identified'}; likely cause: {cause}; "
            f"fix: {fix}")


def where(rejected: str) -> str:
    """The line's last clause: the folder holding one JSON line per dropped document."""
    return f"each dropped document and its reason: {rejected.rstrip('/')}/"


def report(stats: dict[str, Any], *, rejected: str, files: Sequence[dict[str, Any]] | PartList,
           languages: list[str] | None, text_mode: str = "blank_line", below: float = WARN_SHARE) -> str | None:
    """The line when fewer than ``below`` of the documents were kept, else None."""
    n_in, n_out = stats["documents_in"], stats["documents_out"]
    if n_in == 0 or n_out >= below * n_in:
        return None
    records = sampled_records(rejected, files)
    counted = dropped_languages(stats)
    if counted:  # every dropped document was identified by the stage
        sampled, label = counted, f"all {sum(counted.values())}"
    else:
        sampled, label = sampled_languages(rejected, files, records=records), None
    top = (by_count(stats["dropped"]) or [("", 0)])[0][0]
    line = explain(stats, languages, sampled, shape=wrapped_cause(records, top, text_mode), sampled_label=label)
    return f"{line}; {where(rejected)}"


def check_kept(stats: dict[str, Any], cfg: CorpusConfig, *, rejected: str,
               files: Sequence[dict[str, Any]] | PartList) -> None:
    """Raise ``NothingKept`` when a finished filter stage (its ``stats``; its quarantine:
    ``rejected``, ``files``) kept less than ``cfg.filter.min_kept_share`` of its documents. The
    stage's own line is reused when it recorded one (below ``WARN_SHARE``), else made here."""
    n_in, n_out = stats["documents_in"], stats["documents_out"]
    share = cfg.filter.min_kept_share
    if n_in == 0 or n_out >= share * n_in:
        return
    line = next((w for w in stats.get("warnings", []) if w.startswith("filter kept ")), None) or \
        report(stats, rejected=rejected, files=files, languages=cfg.filter.language.languages,
               text_mode=cfg.ingest.text_mode, below=1.0)
    raise NothingKept(f"{line}; kept {n_out / n_in:.2%}, below filter.min_kept_share={share:g}: to build anyway, "
                      f"{ALLOW}")


# Ingest's reasons -> (likely cause, fix); the first reason by count decides.
_INGEST_CAUSES: dict[str, tuple[str, str]] = {
    "empty_file": ("the files hold no text (empty, or only blank lines)",
                   "check that --source names the files you meant"),
    "empty_document": ("the files hold no text (empty, or only blank lines)",
                       "check that --source names the files you meant"),
    "binary": ("the files are not text (NUL bytes, or more control bytes than ingest.max_control_ratio): "
               "images, archives of an unknown kind, or UTF-16 without a byte-order mark",
               "point --source at text: .txt, .jsonl, .json, .parquet, .warc/.wet or a MediaWiki .xml dump, "
               "optionally .gz, .bz2 or .zst"),
    "invalid_utf8": ("the text is neither UTF-8 nor in a charset that could be detected",
                     "set ingest.detect_charset=true, or ingest.fallback_encoding to the files' codec"),
    "missing_field": ("the records have no text under the configured field",
                      "set ingest.jsonl_field (JSON) or ingest.parquet_column (Parquet) to the text's field"),
    "bad_json": ("the .json/.jsonl files are not JSON Lines or a JSON array of records",
                 "fix the files, or rename plain text to .txt"),
    "bad_parquet": ("the Parquet files cannot be read", "check the files (truncated or not Parquet)"),
    "oversize": ("every document is larger than ingest.max_document_bytes", "raise ingest.max_document_bytes"),
    "html": ("the WARC payloads are HTML, and no HTML text extractor ships", "use the WET (text) files instead"),
    "corrupt_compression": ("the compressed files fail their integrity checks",
                            "download them again (or set ingest.keep_truncated_member=true for a cut-off "
                            "last member)"),
}


def ingest_cause(reason: str) -> tuple[str, str]:
    """The likely cause and the fix for ingest's drop ``reason`` (``ingest:<why>`` or ``<why>``)."""
    return _INGEST_CAUSES.get(reason.removeprefix("ingest:"), ("the sources hold no document the readers accept",
                                                               "check the sources and ingest.text_mode"))


def ingest_report(stats: dict[str, Any], *, rejected: str, files: int) -> str | None:
    """The one line of an ingest stage that kept no document, else None."""
    if stats["documents_out"] > 0:
        return None
    reasons = by_count(stats["dropped"])
    shown = ", ".join(f"{r.removeprefix('ingest:')} {n}" for r, n in reasons[:5])
    cause, fix = ingest_cause(reasons[0][0] if reasons else "")
    return (f"ingest kept 0 of {stats['documents_in']} documents in {files} file{'s' if files != 1 else ''}, "
            f"every one rejected: {shown or 'nothing'}; likely cause: {cause}; fix: {fix}; {where(rejected)}")
