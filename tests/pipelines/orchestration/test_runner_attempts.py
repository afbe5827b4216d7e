"""A stage's attempts are bounded by progress: the count starts again at an attempt that journalled
blocks no attempt before it had finished, so the stage fails only when ``attempts`` attempts in a
row got no further than the last one that made progress.

The stage's work is replaced by a script (``build.stages[name]``): attempt k journals a block or
not, then fails with ``StoreUnavailableError``, or succeeds; no Ray, no store but a local folder.
"""
from __future__ import annotations

import dataclasses
import logging

import pytest

from common import storage
from pipelines.config import CorpusConfig
from pipelines.corpus_job import CorpusJob
from pipelines.orchestration.runner import JOURNAL, CorpusBuild
from synthetic import prose

CFG = {"tokenizer": {"vocab_size": 600, "min_frequency": 1}, "shard": {"min_shards_per_split": 2},
       "pack": {"seq_len": 64, "validation_fraction": 0.1, "seed": 3}}


def scripted(tmp_path, script: list[str], attempts: int) -> tuple[CorpusBuild, list[int]]:
    """A build whose ingest stage follows ``script``, one entry per attempt: ``"progress"`` (a
    new block journalled, then the store fails), ``"stuck"`` (the store fails, nothing new) or
    ``"done"`` (the attempt succeeds with no files). Returns the build and the attempts' numbers."""
    raw = prose.write_corpus(tmp_path / "raw", num_docs=4, seed=1)
    build = CorpusBuild(CorpusJob([str(raw)], str(tmp_path / "out"), CorpusConfig.from_dict(CFG)), attempts=attempts)
    journal = storage.join(build.cache("ingest"), JOURNAL)
    ran: list[int] = []

    def run(stage_run):
        ran.append(len(ran) + 1)
        step = script[len(ran) - 1]
        if step == "done":
            return {"stats": {}, "files": [], "rejected": []}
        if step == "progress":
            storage.write_json(storage.join(journal, "pass", f"block{len(ran)}.json"), {"summaries": []})
        raise storage.StoreUnavailableError(f"s3://b/k: the store kept failing for 300 s (attempt {len(ran)})")

    build.stages["ingest"] = dataclasses.replace(build.stages["ingest"], run=run)
    return build, ran


def test_attempts_that_make_progress_are_retried_past_the_count(tmp_path, caplog):
    # Six failures with a count of 3 (which used to fail at the third): progress keeps coming.
    script = ["progress", "stuck", "progress", "stuck", "progress", "progress", "done"]
    build, ran = scripted(tmp_path, script, attempts=3)
    with caplog.at_level(logging.WARNING, logger="pipelines.orchestration.runner"):
        result = build.run_stage("ingest")
    assert ran == [1, 2, 3, 4, 5, 6, 7] and result.stats["attempts"] == 7
    warned = [r.getMessage() for r in caplog.records if "failed (attempt" in r.getMessage()]
    assert [w.split("(")[1].split(")")[0] for w in warned] == \
        ["attempt 1 of 3", "attempt 2 of 3", "attempt 1 of 3", "attempt 2 of 3", "attempt 1 of 3", "attempt 1 of 3"]
    assert warned[3].endswith("keeping the 2 blocks it finished")
    assert not storage.exists(storage.join(build.cache("ingest"), JOURNAL))  # done: the journal goes


def test_attempts_in_a_row_without_progress_fail_the_stage(tmp_path):
    # Nothing, then progress (the count starts again), then two attempts that finish nothing new:
    # the third attempt since the progress ends it.
    build, ran = scripted(tmp_path, ["stuck", "progress", "stuck", "stuck", "done"], attempts=3)
    with pytest.raises(storage.StoreUnavailableError, match=r"attempt 4\)$"):
        build.run_stage("ingest")
    assert ran == [1, 2, 3, 4]


def test_a_permanent_failure_is_not_retried(tmp_path):
    build, ran = scripted(tmp_path, ["done"], attempts=3)

    def denied(stage_run):
        ran.append(1)
        raise storage.StorageError("s3://b/k: access denied (403 Forbidden); check the credentials")
    build.stages["ingest"] = dataclasses.replace(build.stages["ingest"], run=denied)
    with pytest.raises(storage.StorageError, match="access denied"):
        build.run_stage("ingest")
    assert ran == [1]
