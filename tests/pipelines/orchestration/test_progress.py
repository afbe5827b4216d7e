"""pipelines.orchestration.progress: a stage's start line and its progress lines while it runs."""
from __future__ import annotations

import logging
import random
from pathlib import Path

from pipelines.config import CorpusConfig
from pipelines.engine import parts
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


def test_a_beat_counts_what_the_stage_wrote_so_far(tmp_path, ray_local):
    """The beat counts what the stage's tasks reported writing (no listing of the store); the
    figures are checked against the files on disk, and a write before the stage is not counted."""
    near = StageResult("near_dedup", "k0", stats={"documents_out": 58, "bytes_out": 52_500_000})
    run = stage_run(tmp_path, "filter", {"ingest": near})
    # incompressible texts, so that the bytes are in the line's first decimal
    docs = [{"id": f"f:{i}", "uid": 1000 + i, "text": random.Random(i).randbytes(2000).hex(),
             "reason": "" if i % 3 else "filter:x", "detail": ""} for i in range(300)]
    rows = ray_local.data.from_items(docs, override_num_blocks=6)
    parts.write_documents(rows, data=str(tmp_path / "before"), rejected=str(tmp_path / "before-q"), prefix_chars=9,
                          full_text=False)  # before the stage: not its writes
    with Progress(run, every=0) as progress:
        assert progress.beat().startswith("filter: running 0 s; written so far: 0 files, 0.0 MB")
        parts.write_documents(rows, data=run.data, rejected=run.rejected, prefix_chars=9, full_text=False)
        data = [p.stat().st_size for p in Path(run.data).iterdir()]
        quarantined = len(list(Path(run.rejected).iterdir()))
        assert len(data) > 1 and quarantined > 1
        line = progress.beat()
        assert sum(data) > 200_000 and f"; written so far: {len(data)} files, {sum(data) / 1e6:.1f} MB (" in line
        assert line.endswith(f"MB/s), {quarantined} quarantine parts")
    assert beat_line("pack", 40, 12, 80_000_000, 0) == (
        "pack: running 40 s; written so far: 12 files, 80.0 MB (2.00 MB/s)")
