"""A stage attempt that fails for a passing reason runs again; its partial outputs are discarded.

The driver talks to the S3 server through the tests' proxy, the Ray workers talk to it directly
(their environment was set when the session's Ray started), and the driver's storage calls make
exactly one request each (no retry budget, the client libraries' own retries off): so one refused
request of the driver is one ``StoreUnavailableError``, at a request the test picks.
"""
from __future__ import annotations

import logging

from common import storage
from pipelines import schema
from pipelines.config import CorpusConfig
from pipelines.orchestration.runner import CorpusBuild
from pipelines.corpus_job import CorpusJob
from synthetic import prose
from tests._s3proxy import one_request_per_attempt, s3_proxy  # noqa: F401  (fixtures)

CFG = {"tokenizer": {"vocab_size": 600, "min_frequency": 1}, "shard": {"min_shards_per_split": 2},
       "pack": {"seq_len": 64, "validation_fraction": 0.1, "seed": 3}}


def _shards(corpus: str) -> list[bytes]:
    m = schema.Manifest.load(corpus)
    return [storage.read_bytes(storage.join(corpus, s.path)) for s in m.shards]


def test_a_stage_whose_attempt_fails_on_the_store_runs_again(ray_s3, one_request_per_attempt, monkeypatch,  # noqa: F811
                                                             tmp_path, caplog):
    proxy = one_request_per_attempt
    _, s3 = ray_s3
    raw = prose.write_corpus(tmp_path / "raw", num_docs=80, seed=4)
    bucket = s3.bucket("retries")
    for rel in storage.find(str(raw)):
        storage.write_bytes(f"{bucket}/raw/{rel}", (raw / rel).read_bytes())
    local = CorpusBuild(CorpusJob([str(raw)], str(tmp_path / "local"), CorpusConfig.from_dict(CFG)))
    local.run()
    monkeypatch.setenv("ELECTRA_STORE_RETRY_SECONDS", "0")  # one request per storage call
    # The driver's check of the filter stage's outputs (a listing of its data folder) is refused
    # once: that attempt fails with StoreUnavailableError; the stage runs again from scratch.
    window = proxy.slowdown(trigger=r"prefix=[^&]*\.work/filter-[0-9a-f]+/data", requests=1)
    build = CorpusBuild(CorpusJob([f"{bucket}/raw"], f"{bucket}/out", CorpusConfig.from_dict(CFG)))
    with caplog.at_level(logging.WARNING, logger="pipelines.orchestration.runner"):
        build.run()
    assert window.opened_at is not None and proxy.counts["slowdown"] == 1
    assert build.result("filter").stats["attempts"] == 2
    assert all(build.result(s).stats["attempts"] == 1 for s in build.order if s != "filter")
    warned = [r.getMessage() for r in caplog.records if "failed (attempt" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith("stage filter failed (attempt 1 of 3): StoreUnavailableError")
    assert _shards(f"{bucket}/out") == _shards(str(tmp_path / "local"))
    # The retried stage's folder holds exactly what its marker lists: the first attempt's parts
    # were discarded (the names hash their rows, so they were written again, once).
    data = storage.find(f"{bucket}/out/.work/filter-{build.keys['filter']}")
    # consumed and pruned once the next stage finished: the marker and its quarantine-part list
    assert data == ["_SUCCESS", "_rejected.arrow"]


def test_which_failures_a_stage_attempt_is_retried_for():
    """``checks.transient``: the store unavailable past its budget and Ray's lost nodes, workers
    and objects, also when Ray wraps them; never a permanent store error or a bug."""
    import ray.exceptions as rx

    from pipelines.orchestration.checks import transient, unwrapped

    down = storage.StoreUnavailableError("s3://b/k: the store kept failing for 300 s")
    denied = storage.StorageError("s3://b/k: access denied (403 Forbidden)")
    assert transient(down) and not transient(denied) and not transient(ValueError("a bug"))
    wrapped = rx.RayTaskError("fn", "traceback", down).as_instanceof_cause()
    assert transient(wrapped) and unwrapped(wrapped) is down and str(unwrapped(wrapped)).startswith("s3://b/k")
    assert not transient(rx.RayTaskError("fn", "traceback", denied).as_instanceof_cause())
    try:
        try:
            raise down
        except storage.StoreUnavailableError as exc:
            raise OSError("reading a part failed") from exc  # a reader's own wrapper keeps the cause
    except OSError as chained:
        assert transient(chained)
    assert transient(rx.NodeDiedError("node 1 died")) and transient(rx.WorkerCrashedError())
    assert transient(rx.ObjectLostError("ff" * 28, None, "call site"))
