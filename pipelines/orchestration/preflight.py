"""What a build checks before any server or cluster starts: a user's mistake costs seconds.

A Prefect server and a Ray instance take tens of seconds to start, minutes on a loaded machine,
and a mistake found by the first stage used to cost all of that and then print its message once
per log that saw the failure. So the command line (``cli/build_corpus.py``) runs ``preflight``
after loading the job (an unknown key or a bad value is already the loader's one line) and
before it starts either:

1. **sources and output**: the sources resolved (a missing file, a glob matching nothing, two
   files that would share a name: ``SourceError``) and the output location checked, by building
   the runner (``CorpusBuild``) and its plan. The plan also says when there is nothing to run.
2. **a cluster address** that nothing answers at (``ray_start.check_address``), when a stage
   must run.
3. **sources without text**: every listed file empty, or, for a small input (at most
   ``READ_FILES`` files and ``READ_BYTES`` bytes), every file rejected by ingest's own reader
   (``pipelines.ingest.documents.iter_rows``: empty, binary, undecodable, ...), so this check and
   the ingest stage never disagree. Larger inputs are the stage's to judge (its line,
   ``drop_report.ingest_report``, is printed once by the CLI); reading them here would double
   the build's reads.
4. **the input's shape** (``pipelines.ingest.shape``): plain text whose blank-line blocks are the
   hard-wrapped paragraphs of long texts gets a note naming the profile that fits, before the
   filters drop the paragraphs one by one.

The flow plans again (a deployment run has no command line in front of it): listing the
sources twice costs a few LIST calls, nothing next to a build.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from pipelines.corpus_job import CorpusJob
from pipelines.orchestration.drop_report import NothingKept, ingest_cause
from pipelines.orchestration.runner import CorpusBuild

READ_FILES = 64  # sources read whole for the "no text" check: at most this many files ...
READ_BYTES = 8 << 20  # ... holding at most this many bytes in all
SHOWN = 3  # files named per reason in the line


@dataclass
class Checked:
    """A job that passed: its runner, the stages to run, and notes to show before they run."""
    build: CorpusBuild
    pending: list[str]
    notes: list[str] = field(default_factory=list)


def preflight(job: CorpusJob) -> Checked:
    """Steps 1-4 of the module docstring; raises the first user error found (one line)."""
    from pipelines.engine.ray_start import check_address

    build = CorpusBuild(job)
    pending = build.plan()
    checked = Checked(build, pending)
    if not pending:
        return checked
    check_address(job.ray_address)
    if "ingest" in pending:
        _check_text(build)
        checked.notes += _shape_notes(build)
    return checked


def _check_text(build: CorpusBuild) -> None:
    """``NothingKept`` (step 3) when no source file can yield a document."""
    sources = build.sources
    sizes = [s for s in sources.sizes if s is not None]
    if len(sizes) == len(sources.files) and not any(sizes):
        raise NothingKept(_line({"ingest:empty_file": list(sources.names)}, len(sources.files)))
    if len(sources.files) > READ_FILES or len(sizes) < len(sources.files) or sum(sizes) > READ_BYTES:
        return
    from pipelines.ingest.documents import iter_rows

    rejected: dict[str, list[str]] = {}
    for path, name in zip(sources.files, sources.names):
        for row in iter_rows(path, build.cfg.ingest, name=name, size=sources.size(path)):
            if not row.reason and row.text.strip():
                return  # a document: the stage's to filter
            rejected.setdefault(row.reason or "ingest:empty_document", []).append(name)
    raise NothingKept(_line(rejected, len(sources.files)))


def _line(rejected: dict[str, list[str]], files: int) -> str:
    """``rejected``: reason -> the names of the files (one per rejected document)."""
    by_reason = sorted(((reason, list(dict.fromkeys(names))) for reason, names in rejected.items()),
                       key=lambda kv: (-len(kv[1]), kv[0]))
    shown = "; ".join(f"{reason.removeprefix('ingest:')}: {', '.join(names[:SHOWN])}"
                      + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")
                      for reason, names in by_reason)
    cause, fix = ingest_cause(by_reason[0][0] if by_reason else "")
    return (f"no source file holds a document ({files} file{'s' if files != 1 else ''}; {shown}); "
            f"likely cause: {cause}; fix: {fix}")


def _shape_notes(build: CorpusBuild) -> list[str]:
    from pipelines.ingest.shape import wrapped_paragraphs_hint

    hint = wrapped_paragraphs_hint(build.sources.files, build.cfg, names=build.sources.names)
    return [hint] if hint else []
