"""The block journal: a writer pass that failed part-way is resumed, reading only the blocks that
had not finished, and gives what an uninterrupted pass gives (local Ray, six one-task blocks)."""
from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest

from common import storage
from pipelines.engine import block_journal, parts


def _summary(table: pa.Table) -> dict:
    return {"all": {"rows": table.num_rows}}


def _logged(table: pa.Table, index: int, *, log: str, fail: str) -> pa.Table:
    """Logs each read task; the first one of part 3 while ``fail`` exists raises a transient error."""
    with open(log, "a") as f:
        f.write(f"{index}\n")
    if index == 3 and os.path.exists(fail):
        os.remove(fail)
        raise storage.StoreUnavailableError("injected outage")
    return table


@pytest.fixture()
def source(tmp_path):
    files = []
    for i in range(6):
        t = pa.table({"uid": np.arange(i * 10, i * 10 + 10, dtype=np.int64), "ordinal": np.zeros(10, np.int64),
                      "text": [f"d{j}" for j in range(10)]})
        files.append(parts.write_parquet(str(tmp_path / "in"), f"p{i}.parquet", t))
    return parts.Parts(str(tmp_path / "in"), files)


def _pass(source: parts.Parts, out: str, log: str, fail: str) -> dict:
    ds = source.read(transform=_logged, transform_kwargs={"log": log, "fail": fail})
    return parts.write_examples(ds, data=out, summarise=_summary)


def test_a_retried_pass_reads_only_the_blocks_that_had_not_finished(ray_local, source, tmp_path):
    log, fail = str(tmp_path / "reads.log"), str(tmp_path / "fail")
    clean = _pass(source, str(tmp_path / "clean"), log, fail)  # no stage attempt: no journal
    assert clean["splits"] == {"all": {"rows": 60}} and len(clean["files"]) == 6
    assert not os.path.exists(tmp_path / "journal")

    journal, out = str(tmp_path / "journal"), str(tmp_path / "out")
    open(fail, "w").close()
    with block_journal.stage(journal, "key", resume=False), pytest.raises(Exception) as failed:
        _pass(source, out, log, fail)
    assert "injected outage" in str(failed.value)
    # One block at least ended before part 3's started (two CPUs, six blocks in order). Blocks
    # still running when the error came out go on and journal themselves (the retry skips those
    # it finds), so the count is not fixed.
    assert any(p.endswith(".json") for p in storage.find(journal))
    os.remove(log)
    with block_journal.stage(journal, "key", resume=True):
        resumed = _pass(source, out, log, fail)
    reads = open(log).read().split()
    # the failed block again, each unjournalled block once, at least one finished block skipped
    assert "3" in reads and len(reads) == len(set(reads)) <= 5, reads
    assert resumed["splits"] == clean["splits"]
    assert resumed["files"].names.to_pylist() == clean["files"].names.to_pylist()
    assert resumed["files"].column("bytes").tolist() == clean["files"].column("bytes").tolist()


def test_a_journalled_block_whose_part_is_gone_is_read_again(ray_local, source, tmp_path):
    log, fail, journal, out = (str(tmp_path / n) for n in ("reads.log", "fail", "journal", "out"))
    with block_journal.stage(journal, "key", resume=False):
        first = _pass(source, out, log, fail)
    assert len(storage.find(journal)) == 6
    storage.remove(storage.join(out, first["files"].names.to_pylist()[0]))  # one part lost
    os.remove(log)
    with block_journal.stage(journal, "key", resume=True):
        again = _pass(source, out, log, fail)
    assert len(open(log).read().split()) == 1  # only the block of the lost part
    assert again["files"].names.to_pylist() == first["files"].names.to_pylist()
    assert storage.exists(storage.join(out, first["files"].names.to_pylist()[0]))


def test_a_pass_identity_ignores_what_differs_between_attempts_but_not_the_marks():
    """Two attempts' ``Marks`` differ in their shuffle's timings and memory (not compared), so they
    must give one identity; other marked parts must not."""
    import numpy as np

    from pipelines.dedup.marks import Marks
    from pipelines.engine.block_journal import _digest

    first = Marks("w/marks", np.array([1, 4]), np.array([7, 9]), 2, stats={"map_seconds": 0.31, "peak": 1 << 20})
    again = Marks("w/marks", np.array([1, 4]), np.array([7, 9]), 2, stats={"map_seconds": 0.52, "peak": 2 << 20})
    other = Marks("w/marks", np.array([1, 5]), np.array([7, 9]), 2)
    assert _digest({"marks": first}) == _digest({"marks": again})
    assert _digest({"marks": first}) != _digest({"marks": other})
