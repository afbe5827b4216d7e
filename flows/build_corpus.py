"""Prefect flow ``build-corpus``: raw text → WebDataset shards + manifest, one task per stage.

The flow only orders :mod:`pipelines.orchestration.runner`'s plan: one Prefect task per stage of the stage
table, then ``publish``, then a markdown artifact with each stage's statistics. Caching, resume
after a kill, pruning and retrying a stage whose attempt failed for a passing reason (the store
unavailable, a lost Ray node) are the runner's; the flow holds no business logic.

Direct use, no server needed::

    python -m flows.build_corpus --source data/raw --out corpora/demo --vocab-size 8000
    python -m flows.build_corpus --source s3://bucket/raw --out s3://bucket/corpora/c --ray-address auto
"""
from __future__ import annotations

import argparse
import copy
import logging
import sys
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NONE

from common import config as strict
from pipelines.engine import raydata
from pipelines.config import CorpusConfig
from pipelines.orchestration.runner import CorpusBuild

_task = dict(cache_policy=NONE, persist_result=False)


@task(name="stage", **_task)
def run_stage(build: CorpusBuild, name: str):
    return build.run_stage(name)


@task(name="publish", retries=2, retry_delay_seconds=5, **_task)
def publish(build: CorpusBuild):
    return build.publish()

# Named flags and the config keys they set; a flag the user did not pass sets nothing.
FLAG_KEYS = {"vocab_size": "tokenizer.vocab_size", "seq_len": "pack.seq_len",
             "validation_fraction": "pack.validation_fraction", "lowercase": "tokenizer.lowercase"}


def corpus_config(*, config: dict[str, Any] | str | None = None, overrides: list[str] = (),
                  **flags: Any) -> CorpusConfig:
    """The config file's values, then ``--set`` overrides, then the named flags that were passed
    (``None`` = not passed), checked by the strict loader before any work starts."""
    # A deep copy: the flags below edit nested sections, never the caller's mapping.
    raw = strict.load_json(config) if isinstance(config, str) else copy.deepcopy(dict(config or {}))
    for item in overrides:
        strict.apply_override(raw, item)
    for name, value in flags.items():
        if value is None:
            continue
        if name == "profile":
            raw["profile"] = value
        elif name == "tokenizer":
            if value in ("wordpiece", "unigram"):
                strict.set_path(raw, "tokenizer.kind", value)
            else:
                strict.set_path(raw, "tokenizer.pretrained", value)
        elif name == "seed":
            strict.set_path(raw, "pack.seed", value)
            strict.set_path(raw, "tokenizer.sample_seed", value)
        elif name == "decontaminate":  # added to the config file's paths
            section = raw.get("decontaminate") if isinstance(raw.get("decontaminate"), dict) else {}
            paths = section.get("paths", [])
            if not isinstance(paths, list):
                raise strict.ConfigError(f"decontaminate.paths: expected a list of locations, got {paths!r}")
            strict.set_path(raw, "decontaminate.paths", paths + list(value))
        elif name == "language":
            raw["language"] = list(value)
        elif name == "lowercase":
            strict.set_path(raw, "tokenizer.lowercase", value)
            strict.set_path(raw, "tokenizer.strip_accents", value)
        else:
            strict.set_path(raw, FLAG_KEYS[name], value)
    return CorpusConfig.from_dict(raw)


def _stats_table(manifest) -> str:
    rows = ["| stage | docs in | docs out | dropped | seconds | docs/s | MB/s |", "|---|---|---|---|---|---|---|"]
    for name in ("ingest", "filter", "exact_dedup", "near_dedup"):
        s = manifest.stats.get(name, {})
        dropped = ", ".join(f"{k}={v}" for k, v in s.get("dropped", {}).items()) or "-"
        rows.append(f"| {name} | {s.get('documents_in', '-')} | {s.get('documents_out', '-')} | {dropped} | "
                    f"{s.get('seconds', '-')} | {s.get('docs_per_sec', '-')} | {s.get('mb_per_sec', '-')} |")
    for name in ("tokenizer", "pack", "shard"):
        s = manifest.stats.get(name, {})
        rows.append(f"| {name} | | | | {s.get('seconds', '-')} | | {s.get('mb_per_sec', '-')} |")
    lines = ["# build-corpus", "", *rows, ""]
    for split, info in manifest.splits.items():
        lines.append(f"- **{split}**: {info.num_documents} documents, {info.num_examples} examples, "
                     f"{info.num_tokens} tokens, fill {info.fill:.1%}, {len(manifest.shards_for(split))} shards")
    lines.append(f"- tokenizer: {manifest.tokenizer.kind}, vocab {manifest.tokenizer.vocab_size}, "
                 f"sha256 `{manifest.tokenizer.sha256[:12]}`")
    lines += [f"- warning: {w}" for w in manifest.warnings]
    lines.append(f"- shards: {manifest.stats.get('shard', {}).get('bytes_per_token')} bytes per token")
    return "\n".join(lines)


@flow(name="build-corpus", log_prints=True)
def build_corpus(source: list[str] | str, out: str, tokenizer: str | None = None,
                 vocab_size: int | None = None, seq_len: int | None = None, lowercase: bool | None = None,
                 validation_fraction: float | None = None, seed: int | None = None,
                 ray_address: str | None = None, config: dict[str, Any] | str | None = None,
                 overrides: list[str] | None = None, keep_cache: bool = False,
                 ray_worker_pip: str | None = None, profile: str | None = None,
                 decontaminate: list[str] | None = None, language: list[str] | None = None) -> dict[str, Any]:
    """Build an ELECTRA pre-training corpus at ``out`` (path or URI); returns the manifest."""
    logger = get_run_logger()
    cfg = corpus_config(config=config, overrides=list(overrides or ()), profile=profile, tokenizer=tokenizer,
                        vocab_size=vocab_size, seq_len=seq_len, lowercase=lowercase,
                        validation_fraction=validation_fraction, seed=seed, decontaminate=decontaminate,
                        language=language)
    build = CorpusBuild([source] if isinstance(source, str) else list(source), out, cfg, keep_cache=keep_cache)
    pending = build.plan()
    logger.info("build-corpus: %d input files → %s; stages to run: %s", len(build.sources.files), out,
                ", ".join(pending) or "none (published)")
    if pending:
        raydata.init_ray(ray_address, worker_pip=ray_worker_pip)
    for name in pending:
        run_stage.with_options(name=name)(build, name)
    manifest = publish(build)
    create_markdown_artifact(key="build-corpus-stats", markdown=_stats_table(manifest),
                             description=f"build-corpus → {out}")
    return manifest.to_dict()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m flows.build_corpus", description=__doc__.split("\n\n")[0])
    p.add_argument("--source", action="append", required=True,
                   help="file, directory, glob or URI (s3://, gs://, https://); repeatable")
    p.add_argument("--out", required=True, help="corpus location to write: a path, s3://bucket/prefix or gs://...")
    p.add_argument("--config", default=None, help="JSON file (path or URI) with a corpus config "
                                                  "(sections ingest, filter, decontaminate, dedup, tokenizer, pack, shard, rejected)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", dest="overrides",
                   help="any corpus config field, e.g. filter.gopher_quality.min_doc_words=50 (repeatable)")
    p.add_argument("--profile", default=None, choices=("web", "books", "bert-format"),
                   help="input profile (README 'Input profiles'): web (default; records or blank-line blocks, "
                        "every filter), books (a file is a document), bert-format (a sentence per line)")
    p.add_argument("--language", action="append", default=None, metavar="CODE",
                   help="keep documents in this language (ISO 639-1, repeatable; config 'language'): each is "
                        "filtered with its own word splitter and thresholds (README 'Other languages'); "
                        "default: filter.language.languages (English)")
    p.add_argument("--tokenizer", default=None,
                   help="wordpiece | unigram (train one) | location of an existing tokenizer: a tokenizer.json, "
                        "a BERT vocab.txt, or a Hugging Face model folder (e.g. a download of "
                        "google/electra-base-discriminator), whose tokenizer_config.json decides lower-casing")
    p.add_argument("--vocab-size", type=int, default=None, help="tokenizer.vocab_size (default 30522)")
    p.add_argument("--seq-len", type=int, default=None, help="pack.seq_len (default 128)")
    p.add_argument("--lowercase", action=argparse.BooleanOptionalAction, default=None,
                   help="lower-case and strip accents (tokenizer.lowercase/strip_accents; default on for a "
                        "trained tokenizer; a pretrained one brings its own, and a contradicting flag is an error)")
    p.add_argument("--validation-fraction", type=float, default=None,
                   help="pack.validation_fraction: share of documents held out (default 0.01)")
    p.add_argument("--seed", type=int, default=None, help="pack.seed and tokenizer.sample_seed")
    p.add_argument("--decontaminate", action="append", default=None, metavar="DIR",
                   help="GLUE task folder (or a folder of them) or SQuAD JSON file whose dev/test texts must "
                        "not be in the corpus: documents sharing a 13-token window with them are dropped "
                        "(decontaminate.paths; repeatable)")
    p.add_argument("--ray-address", default=None,
                   help="Ray cluster address (auto on the head, or host:port); default: a private local Ray")
    p.add_argument("--ray-worker-pip", default=None, metavar="REQUIREMENTS",
                   help="with --ray-address: pip requirements file installed for this job on every worker "
                        "(infra/worker-requirements.txt) when the cluster does not run the project's image")
    p.add_argument("--keep-cache", action="store_true",
                   help="keep every stage's intermediate data (fast reruns with another later-stage config)")
    return p.parse_args(argv)


def user_error(exc: BaseException) -> str | None:
    """The one line to show for an error the user can act on (a location, a source, a config
    key, the store), found anywhere in what ``exc`` wraps (Ray wraps task errors); else None."""
    from common.retry import chain, ray_cause
    from common.storage import StorageError
    from pipelines.dedup.components import ComponentsNotConverged
    from pipelines.ingest import SourceError

    for e in chain(exc):
        if ray_cause(e) is None and isinstance(e, (StorageError, SourceError, strict.ConfigError,
                                                   ComponentsNotConverged)):
            return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return None


class _OneLineUserErrors(logging.Filter):
    """Log records of a user error keep their first line and lose their traceback (Ray Data and
    Prefect each log a failing task's traceback; the CLI then prints the one line that matters)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None and user_error(record.exc_info[1]) is not None:
            record.msg, record.args = record.getMessage().splitlines()[0], ()
            record.exc_info, record.exc_text = None, None
        return True


def quiet_user_errors() -> None:
    """Install ``_OneLineUserErrors`` on the console handlers of Ray Data, Prefect and the root."""
    import ray.data  # noqa: F401  (configures Ray Data's loggers and handlers)

    for name in ("ray.data", "ray", "prefect", ""):
        for handler in logging.getLogger(name).handlers:
            handler.addFilter(_OneLineUserErrors())


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    args = parse_args(argv)
    quiet_user_errors()
    try:
        manifest = build_corpus(source=args.source, out=args.out, tokenizer=args.tokenizer,
                                vocab_size=args.vocab_size, seq_len=args.seq_len, lowercase=args.lowercase,
                                validation_fraction=args.validation_fraction, seed=args.seed,
                                ray_address=args.ray_address, config=args.config, overrides=args.overrides,
                                keep_cache=args.keep_cache, ray_worker_pip=args.ray_worker_pip,
                                profile=args.profile, decontaminate=args.decontaminate, language=args.language)
    except Exception as exc:  # a user error is one line; anything else keeps its traceback
        line = user_error(exc)
        if line is None:
            raise
        print(f"build-corpus: error: {line}", file=sys.stderr)
        return 2
    for split, info in manifest["splits"].items():
        print(f"{split}: {info['num_documents']} documents, {info['num_examples']} examples, "
              f"{info['num_tokens']} tokens, fill {info['fill']:.1%}")
    decon = manifest.get("decontamination") or {}
    if decon:
        removed = ", ".join(f"{task} {n}" for task, n in decon["removed"].items())
        print(f"decontamination: {decon['ngrams']} {decon['ngram']}-grams of {len(decon['files'])} files; "
              f"documents removed: {removed}")
    for warning in manifest.get("warnings", []):
        print(f"warning: {warning}")
    print(f"corpus written to {args.out} (manifest.json)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
