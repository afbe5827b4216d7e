"""Why a filter stage kept (nearly) nothing, in one line, with the likely cause and the fix.

A build whose filters drop every document used to fail three stages later, in the tokenizer,
with "no text to train on", naming neither the block nor the language. The usual causes are
two: the text is not in the languages kept (``filter.language.languages``, English by default),
or the word-count rules of one language are applied to text of another (English stop words on
Russian, English word lengths on Japanese before the language block has run). So, when the filter
stage keeps fewer than ``NEARLY`` of its documents:

- the line names the drop reasons with their counts (the first block that dropped a document
  decides its reason), and the languages of the dropped documents: a sample of up to ``SAMPLE``
  of them from the quarantine (``rejected/``), identified with the language block's model (the
  documents dropped before the language block was reached were never identified);
- the cause and the fix are chosen from the top reason and the sampled languages: a language
  that is not kept -> ``--language`` for it; a word rule dropping text of a language that is not
  the one the build filters for -> ``--language`` too; otherwise the rule to relax.

With nothing kept the stage fails with the line (``NothingKept``, a ``ConfigError``: the CLI
prints it as its one-line error, exit 2); with a few kept it becomes a manifest warning. Only this
path reads the quarantine: a build that keeps its documents pays nothing. Either way the line ends
with the quarantine folder, where every dropped document is one JSON line with its reason.

Ingest can keep nothing too (every file empty, binary, or in an undecodable encoding): the
filter stage would then see no document and the tokenizer fail on an empty sample, three stages
and several tracebacks later. ``ingest_report`` is the same line for ingest: its reasons with
counts, the cause and the fix chosen from the top reason (a table, ``_INGEST_CAUSES``), and the
folder. Languages are never known there (identification is a filter block).
"""
from __future__ import annotations

import io
import json
from collections import Counter
from typing import TYPE_CHECKING, Any, Sequence

from common import storage
from common.config import ConfigError

if TYPE_CHECKING:
    from pipelines.engine.part_list import PartList

NEARLY = 0.05  # keeping fewer than this share of the documents is "nearly everything dropped"
SAMPLE = 200  # dropped documents whose language is identified for the message
MAX_FILES = 8  # quarantine parts read at most for that sample
_WORD_BLOCKS = ("gopher_quality", "gopher_repetition", "c4", "fineweb", "lm_quality")
# Codes an identifier gives text without a language (symbols, numbers): never a --language fix.
NOT_LANGUAGES = frozenset({"zxx", "und", "mul", "mis"})


class NothingKept(ConfigError):
    """A stage kept no document at all: its line names the reasons, the cause, the fix and the
    quarantine folder. A ``ConfigError``, so the CLI prints it as one line and exits 2."""


def sampled_languages(rejected: str, files: Sequence[dict[str, Any]] | PartList, *, sample: int = SAMPLE,
                      chars: int | None = 2000) -> Counter:
    """Languages of up to ``sample`` dropped documents (their quarantined text prefix)."""
    import zstandard

    from pipelines.filters.language import classify

    out: Counter = Counter()
    for f in files[:MAX_FILES]:
        data = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(storage.read_bytes(storage.join(rejected,
                                                                                                    f["name"]))))
        for line in io.TextIOWrapper(data, encoding="utf-8"):
            text = json.loads(line).get("text") or ""
            if text.strip():
                out[classify(text, chars)[0][0]] += 1
                if sum(out.values()) >= sample:
                    return out
    return out


def explain(stats: dict[str, Any], languages: list[str] | None, sampled: Counter) -> str:
    """The one line (module docstring) for a filter stage's ``stats``."""
    n_in, n_out = stats["documents_in"], stats["documents_out"]
    reasons = sorted(stats["dropped"].items(), key=lambda kv: (-kv[1], kv[0]))
    shown = ", ".join(f"{r.removeprefix('filter:')} {n}" for r, n in reasons[:4])
    real = Counter({code: n for code, n in sampled.items() if code not in NOT_LANGUAGES})
    seen = [code for code, n in real.most_common() if n >= 0.2 * sum(real.values())] or \
        [code for code, _ in real.most_common(1)]
    langs = ", ".join(f"{code} {n}" for code, n in sampled.most_common(5))
    kept = "any language" if languages is None else "/".join(languages)
    top = reasons[0][0] if reasons else ""
    block = top.removeprefix("filter:").split(":")[0]
    fix_lang = " ".join(f"--language {code}" for code in seen) or "--language CODE (the text's language)"
    foreign = [code for code in seen if languages is not None and code not in languages]
    if top == "filter:language:languages" or (foreign and block in _WORD_BLOCKS):
        cause = (f"the documents are in {'/'.join(seen)}, and the build keeps {kept}"
                 + (f", filtering them with {kept} word rules" if block in _WORD_BLOCKS else ""))
        fix = f"build with {fix_lang}"
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
    return (f"filter kept {n_out} of {n_in} documents; dropped by {shown or 'nothing'}; dropped documents' "
            f"languages ({sum(sampled.values())} sampled): {langs or 'none identified'}; likely cause: {cause}; "
            f"fix: {fix}")


def where(rejected: str) -> str:
    """The line's last clause: the folder holding one JSON line per dropped document."""
    return f"each dropped document and its reason: {rejected.rstrip('/')}/"


def report(stats: dict[str, Any], *, rejected: str, files: Sequence[dict[str, Any]] | PartList,
           languages: list[str] | None) -> str | None:
    """The line when fewer than ``NEARLY`` of the documents were kept, else None."""
    n_in, n_out = stats["documents_in"], stats["documents_out"]
    if n_in == 0 or n_out >= NEARLY * n_in:
        return None
    return f"{explain(stats, languages, sampled_languages(rejected, files))}; {where(rejected)}"


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


def ingest_report(stats: dict[str, Any], *, rejected: str, files: int) -> str | None:
    """The one line of an ingest stage that kept no document, else None."""
    if stats["documents_out"] > 0:
        return None
    reasons = sorted(stats["dropped"].items(), key=lambda kv: (-kv[1], kv[0]))
    shown = ", ".join(f"{r.removeprefix('ingest:')} {n}" for r, n in reasons[:5])
    top = reasons[0][0].removeprefix("ingest:") if reasons else ""
    cause, fix = _INGEST_CAUSES.get(top, ("the sources hold no document the readers accept",
                                          "check the sources and ingest.text_mode"))
    return (f"ingest kept 0 of {stats['documents_in']} documents in {files} file{'s' if files != 1 else ''}, "
            f"every one rejected: {shown or 'nothing'}; likely cause: {cause}; fix: {fix}; {where(rejected)}")
