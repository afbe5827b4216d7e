"""``electra-build-corpus`` (``python -m cli.build_corpus``): raw text → WebDataset shards + manifest.

    python -m cli.build_corpus --source data/raw --out corpora/demo --vocab-size 8000
    python -m cli.build_corpus --source s3://bucket/raw --out s3://bucket/corpora/c --ray-address auto

The flags are generated from the job (``pipelines.corpus_job``: ``CorpusJob`` and its named
config flags). The job is loaded and checked (``pipelines.orchestration.preflight``: config keys
and values, sources, output, a cluster address, sources without text, the input's shape) before
Prefect or Ray start, and before either is even imported: a mistake costs about a second. Then
the ``build-corpus`` flow (``flows/build_corpus.py``) runs under the run's Prefect server
(``flows.runtime``). A user error (a location, a source, a config key, the store, no Prefect
server, no Ray) is one ``build-corpus: error:`` line with exit status 2, printed once; the run's
tail says each split, the warnings (once: not also as log lines) and where the corpus is.
"""
from __future__ import annotations

import argparse
import logging
import sys

from cli._errors import fail, quiet_cli_lines, quiet_user_errors, user_error
from common import cli
from pipelines.corpus_job import add_flags, job_from_args

PROG = "build-corpus"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="electra-build-corpus", description=__doc__.split("\n")[0].split(": ", 1)[1])
    add_flags(p)
    return p


def flow_parameters(args: argparse.Namespace) -> dict:
    """The ``build-corpus`` flow's parameters for a parsed command line."""
    given = cli.given(args)
    return {"source": given.pop("sources"), "config": args.config, "overrides": list(args.set), **given}


def main(argv: list[str] | None = None) -> int:
    from pipelines.orchestration.preflight import preflight

    args = build_parser().parse_args(argv)
    try:  # every user error now, before a server or Ray starts (module docstring)
        checked = preflight(job_from_args(args))
    except Exception as exc:
        line = user_error(exc)
        if line is None:
            raise
        return fail(PROG, line)
    for note in checked.notes:
        print(f"warning: {note}", file=sys.stderr, flush=True)
    from flows.build_corpus import build_corpus  # Prefect's import alone takes seconds
    from flows.runtime import RuntimeUnavailable, prefect_runtime
    from pipelines.orchestration.summary import closing_lines

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    # Prefect configures the root logger at WARNING before this runs: the stages' start, progress
    # and end lines are INFO records of the pipelines package.
    logging.getLogger("pipelines").setLevel(logging.INFO)
    quiet_user_errors()
    quiet_cli_lines()
    try:
        with prefect_runtime(PROG):
            manifest = build_corpus(**flow_parameters(args))
    except RuntimeUnavailable as exc:
        return fail(PROG, exc)
    except Exception as exc:  # a user error is one line; anything else keeps its traceback
        line = user_error(exc)
        if line is None:
            raise
        return fail(PROG, line)
    noted = set(checked.notes)
    for line in closing_lines(manifest, args.out):
        if line.removeprefix("warning: ") not in noted:  # said before the build started
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
