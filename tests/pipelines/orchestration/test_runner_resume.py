"""A stage attempt that fails for a passing reason late in its writer pass: the retry redoes only
the blocks that had not finished, and the build is the one an uninterrupted run makes.

Builds run in a subprocess on a local 1-CPU Ray (blocks run one after another, so "the blocks
before it finished" is a fact, not a race) with ``_transient/sitecustomize.py`` on the path of
the driver and every worker: it numbers the stage's part writes, makes write number ``k`` raise
``StoreUnavailableError`` (transient: the runner tries again) and logs every write and every
read task of the stage's input. Small row groups give the small corpus many read blocks.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from benchmarks.corpus.node_loss import ATTEMPT_LOG
from synthetic import prose
from tests._procs import run_in_group

# slow: builds failed and resumed at each stage (fault recovery, make test-all)
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[3]
HOOK = Path(__file__).resolve().parent / "_transient"
CFG = {"tokenizer": {"vocab_size": 700, "min_frequency": 1}, "shard": {"min_shards_per_split": 3},
       "pack": {"seq_len": 64, "validation_fraction": 0.1, "seed": 7}}
SCRIPT = """
import json, os, sys
from pipelines.engine import raydata
from pipelines.config import CorpusConfig
from pipelines.orchestration.runner import CorpusBuild
from pipelines.corpus_job import CorpusJob
""" + ATTEMPT_LOG + """raydata.init_ray(num_cpus=1)
b = CorpusBuild(CorpusJob([sys.argv[1]], sys.argv[2], CorpusConfig.from_dict(json.loads(sys.argv[3])),
                          keep_cache=True))
b.run()
print("RESULT " + json.dumps({s: {"attempts": b.result(s).stats["attempts"], "folder": b.cache(s)}
                              for s in b.order}))
"""
# What differs between two runs of the same build: times, rates, memory, and the attempts.
VOLATILE = {"seconds", "docs_per_sec", "mb_per_sec", "tokens_per_sec", "map_seconds", "map_task_peak_rss",
            "attempts"}
# (stage, the stage whose parts it reads): pack transforms in its read tasks, filter maps after them
CASES = [("pack", "near_dedup"), ("filter", "ingest")]


def run_build(raw: Path, out: Path, log: Path, stage: str = "", nth: int = 0) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{HOOK}{os.pathsep}{REPO}", "TRANSIENT_LOG": str(log),
           "TRANSIENT_STAGE": stage, "TRANSIENT_NTH": str(nth), "TRANSIENT_ROW_GROUP_ROWS": "4"}
    proc = run_in_group([sys.executable, "-c", SCRIPT, str(raw), str(out), json.dumps(CFG)], cwd=str(REPO), env=env)
    assert proc.returncode == 0, proc.output[-5000:]
    line = next(x for x in proc.output.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def stable(value):
    if isinstance(value, dict):
        return {k: stable(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [stable(v) for v in value]
    return value


def unsealed(manifest: Path) -> dict:
    """A manifest's fields without its seal, which covers the times too (common.sealed)."""
    d = json.loads(manifest.read_text())
    d.pop("sha256", None)
    return d


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    return prose.write_corpus(tmp_path_factory.mktemp("raw"), num_docs=150, seed=5)


@pytest.fixture(scope="module")
def clean(raw, tmp_path_factory):
    """One uninterrupted build, logging every stage's part writes and read tasks."""
    out = tmp_path_factory.mktemp("clean")
    result = run_build(raw, out / "corpus", out / "clean.log")
    return out / "corpus", result, (out / "clean.log").read_text().splitlines()


@pytest.mark.parametrize("stage,source", CASES)
def test_a_failed_attempt_keeps_its_finished_blocks(raw, clean, tmp_path, stage, source):
    corpus, result, clean_log = clean
    writes = sum(1 for x in clean_log if x.startswith(f"write {stage} "))
    assert writes >= 12, f"{stage}: {writes} part writes, too few blocks for the test"
    nth = writes - 3  # late in the pass: most blocks finished before it
    log = tmp_path / "fault.log"
    faulted = run_build(raw, tmp_path / "corpus", log, stage, nth=nth)

    assert faulted[stage]["attempts"] == 2
    assert all(faulted[s]["attempts"] == 1 for s in faulted if s != stage)
    lines = log.read_text().splitlines()
    fault, retry = lines.index(f"write {stage} {nth}"), lines.index(f"attempt {stage} 2")
    assert fault < retry
    # The first attempt finished the blocks before the failed one, and those already running.
    finished = sum(1 for x in lines[:retry] if x.startswith(f"write {stage} ")) - 1
    retry_writes = sum(1 for x in lines[retry + 1:] if x.startswith(f"write {stage} "))
    retry_reads = sum(1 for x in lines[retry + 1:] if x == f"read {source}")
    unfinished = writes - finished
    # The retry ran only the blocks that had not finished (a block is one or two writes here),
    # not the stage again: the wipe it replaces rewrote all `writes` and reread every block.
    assert nth - 1 <= finished < writes
    assert 1 <= retry_writes <= 2 * unfinished, (retry_writes, unfinished, writes)
    assert 1 <= retry_reads <= 2 * unfinished, (retry_reads, unfinished, writes)

    # The build is the uninterrupted one: shards, manifest (but for times and attempts), and the
    # retried stage's record and part lists, byte for byte.
    got = tmp_path / "corpus"
    assert files(got / "shards") == files(corpus / "shards")
    assert stable(unsealed(got / "manifest.json")) == stable(unsealed(corpus / "manifest.json"))
    folder, clean_folder = Path(faulted[stage]["folder"]), Path(result[stage]["folder"])
    assert folder.name == clean_folder.name  # same stage key
    marker, clean_marker = (json.loads((f / "_SUCCESS").read_text()) for f in (folder, clean_folder))
    assert stable(marker) == stable(clean_marker)
    for name in ("_files.arrow", "_rejected.arrow"):  # pack quarantines nothing: no second list
        assert (folder / name).exists() == (clean_folder / name).exists()
        if (clean_folder / name).exists():
            assert (folder / name).read_bytes() == (clean_folder / name).read_bytes()
    # Nothing left over: no journal, and the data folder holds exactly the listed parts, once each.
    import pyarrow.ipc

    listed = pyarrow.ipc.open_file(str(folder / "_files.arrow")).read_all().column("name").to_pylist()
    assert sorted(os.listdir(folder / "data")) == sorted(listed) and len(set(listed)) == len(listed)
    assert not (folder / "journal").exists() and not (folder / "work").exists()
