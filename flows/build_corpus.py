"""Prefect flow ``build-corpus``: raw text → WebDataset shards + manifest, one task per stage.

The flow only orders the runner's phases (``pipelines.orchestration.runner.CorpusBuild``): load
the job (``pipelines.corpus_job.CorpusJob``), plan, start Ray when a stage must run, one Prefect
task per stage of the plan, then ``publish``, then the statistics table
(``pipelines.orchestration.summary``) as a markdown artifact. Caching, resume after a kill,
pruning and retrying a stage whose attempt failed for a passing reason (the store unavailable, a
lost Ray node) are the runner's; the flow holds no business logic.

Its parameters are the deployment's (``prefect.yaml``; ``--param source=... --param out=...``);
the command line is ``cli/build_corpus.py`` (``electra-build-corpus``).
"""
from __future__ import annotations

if __name__ == "__main__":  # the old entry `python -m flows.build_corpus`: before the imports below
    from flows._script import point_to_command

    point_to_command("build_corpus")

from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NONE

from pipelines.corpus_job import CorpusJob
from pipelines.engine import raydata
from pipelines.orchestration import summary
from pipelines.orchestration.runner import CorpusBuild

_task = dict(cache_policy=NONE, persist_result=False)


@task(name="stage", **_task)
def run_stage(build: CorpusBuild, name: str):
    return build.run_stage(name)


# A plain count: the store's failures reach it only as whole retry budgets without progress (common.retry).
@task(name="publish", retries=2, retry_delay_seconds=5, **_task)
def publish(build: CorpusBuild):
    return build.publish()


@flow(name="build-corpus", log_prints=True)
def build_corpus(source: list[str] | str, out: str, tokenizer: str | None = None,
                 vocab_size: int | None = None, seq_len: int | None = None, lowercase: bool | None = None,
                 validation_fraction: float | None = None, seed: int | None = None,
                 ray_address: str | None = None, config: dict[str, Any] | str | None = None,
                 overrides: list[str] | None = None, keep_cache: bool = False,
                 ray_worker_pip: str | None = None, profile: str | None = None,
                 decontaminate: list[str] | None = None, language: list[str] | None = None,
                 append: bool = False) -> dict[str, Any]:
    """Build an ELECTRA pre-training corpus at ``out`` (path or URI); returns the manifest.
    Parameters: ``CorpusJob``'s fields and its named config flags (``pipelines.corpus_job``)."""
    logger = get_run_logger()
    job = CorpusJob.load(sources=source, out=out, config=config, overrides=list(overrides or ()),
                         flags=dict(profile=profile, tokenizer=tokenizer, vocab_size=vocab_size, seq_len=seq_len,
                                    lowercase=lowercase, validation_fraction=validation_fraction, seed=seed,
                                    decontaminate=decontaminate, language=language),
                         keep_cache=keep_cache, ray_address=ray_address, ray_worker_pip=ray_worker_pip,
                         append=append)
    build = CorpusBuild(job)
    pending = build.plan()
    logger.info("build-corpus: %d input files → %s; stages to run: %s", len(build.sources.files), out,
                ", ".join(pending) or "none (published)")
    if pending:
        raydata.init_ray(job.ray_address, worker_pip=job.ray_worker_pip)
    for name in pending:
        run_stage.with_options(name=name)(build, name)
    manifest = publish(build)
    create_markdown_artifact(key="build-corpus-stats", markdown=summary.markdown(manifest),
                             description=f"build-corpus → {out}")
    return manifest.to_dict()
