"""pipelines.orchestration.progress: a stage's start line and its progress lines while it runs."""
from __future__ import annotations

import logging

from pipelines.config import CorpusConfig
from pipelines.ingest import resolve_sources
from pipelines.orchestration.progress import Progress, beat_line
from pipelines.orchestration.stages import STAGES, StageResult, StageRun


def stage_run(tmp_path, name: str, inputs: dict[str, StageResult]) -> StageRun:
    (tmp_path / "raw").mkdir(exist_ok=True)
    (tmp_path / "raw" / "a.txt").write_bytes(b"x" * 1_500_000)
    (tmp_path / "raw" / "b.txt").write_bytes(b"y" * 500_000)
    stage = {s.name: s for s in STAGES}[name]
    out = tmp_path / "corpus"
    return StageRun(stage=stage, key="k1", cfg=CorpusConfig(), corpus=str(out), cache=str(out / ".work" / f"{name}-k1"),
                    sources=resolve_sources([str(tmp_path / "raw")]), inputs=inputs,
                    cache_of=lambda n: str(out / ".work" / f"{n}-k0"))


def test_start_line_says_what_the_stage_reads(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="pipelines.orchestration.progress")
    with Progress(stage_run(tmp_path, "ingest", {}), every=0):
        pass
    near = StageResult("near_dedup", "k0", stats={"documents_out": 58, "bytes_out": 52_500_000})
    tok = StageResult("tokenizer", "k0", stats={"vocab_size": 30522})
    with Progress(stage_run(tmp_path, "pack", {"near_dedup": near, "tokenizer": tok}), every=0, attempt=2):
        pass
    assert caplog.messages == ["ingest: start; reads 2 files, 2.0 MB",
                               "pack: start (attempt 2); reads near_dedup: 58 documents, 52.5 MB; "
                               "tokenizer: vocabulary 30522"]


def test_a_beat_counts_what_the_stage_wrote_so_far(tmp_path):
    near = StageResult("near_dedup", "k0", stats={"documents_out": 58, "bytes_out": 52_500_000})
    run = stage_run(tmp_path, "filter", {"ingest": near})
    with Progress(run, every=0) as progress:
        assert progress.beat().startswith("filter: running 0 s; written so far: 0 files, 0.0 MB")
        data = tmp_path / "corpus" / ".work" / "filter-k1" / "data"
        data.mkdir(parents=True)
        (data / "p1.parquet").write_bytes(b"0" * 3_000_000)
        (data / "p2.parquet").write_bytes(b"0" * 1_000_000)
        rejected = tmp_path / "corpus" / "rejected" / "filter-k1"
        rejected.mkdir(parents=True)
        (rejected / "r1.jsonl.zst").write_bytes(b"0" * 10)
        assert "; written so far: 2 files, 4.0 MB (" in progress.beat()
        assert progress.beat().endswith("MB/s), 1 quarantine parts")
    assert beat_line("pack", 40, 12, 80_000_000, 0) == (
        "pack: running 40 s; written so far: 12 files, 80.0 MB (2.00 MB/s)")
