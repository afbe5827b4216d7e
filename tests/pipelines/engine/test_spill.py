"""A reduce task's RangeSpill: each partition's rows whole and in the order added, whatever the
budget (in memory, a run per add, or in between); its local files gone when it closes."""
from __future__ import annotations

import glob
import os
import tempfile

import numpy as np
import pyarrow as pa
import pytest

from pipelines.engine import spill as sp
from pipelines.engine.map_file import PART

LO, HI = 5, 17  # a range that does not start at 0


def _slices(count: int = 12, seed: int = 0) -> list[pa.Table]:
    """Tables as a reduce task adds them (its range's slice of each map file): keys numbered in
    order of addition, a string, ``_part`` int32 in [LO, HI) (some partitions never seen), several
    record batches each, sizes from empty to a few hundred rows."""
    rng = np.random.default_rng(seed)
    out, key = [], 0
    for i in range(count):
        n = 0 if i == 3 else int(rng.integers(1, 400))
        part = rng.choice([5, 6, 8, 9, 10, 13, 16], n).astype(np.int32)  # 7, 11, 12, 14, 15 stay empty
        keys = np.arange(key, key + n, dtype=np.int64)
        key += n
        table = pa.table({"k": keys, "s": [f"v{k}" for k in keys], PART: part})
        cuts = sorted({0, n, *rng.integers(0, n + 1, 2).tolist()})
        batches = [b for a, z in zip(cuts, cuts[1:]) for b in table.slice(a, z - a).to_batches()]
        out.append(pa.Table.from_batches(batches, schema=table.schema))
    return out


def _expected(tables: list[pa.Table]) -> list[tuple[int, list[int], list[str]]]:
    """Each non-empty partition's rows in the order added, computed with numpy over the concatenation."""
    keys = np.concatenate([t.column("k").to_numpy() for t in tables])
    part = np.concatenate([t.column(PART).to_numpy() for t in tables])
    out = []
    for p in range(LO, HI):
        sel = keys[part == p]
        if len(sel):
            out.append((p, sel.tolist(), [f"v{k}" for k in sel]))
    return out


def _drain(spill: sp.RangeSpill) -> list[tuple[int, list[int], list[str]]]:
    out = []
    for p, rows in spill.partitions():
        assert rows.column_names == ["k", "s"]  # without the partition column, columns in order
        out.append((p, rows.column("k").to_pylist(), rows.column("s").to_pylist()))
    return out


def _runs(base) -> list[str]:
    return sorted(glob.glob(os.path.join(str(base), "electra-spill-*", "run-*.arrow")))


@pytest.mark.parametrize("budget", ["never", 1, "some"])
def test_each_partition_comes_back_whole_in_the_order_added(tmp_path, monkeypatch, budget):
    monkeypatch.setenv(sp.SPILL_DIR_ENV, str(tmp_path / "spill"))
    tables = _slices()
    assert sum(t.column("k").num_chunks > 1 for t in tables) >= 6 and tables[3].num_rows == 0
    sizes = [t.nbytes for t in tables if t.num_rows]
    limit = {"never": 1 << 40, 1: 1, "some": 3 * int(np.mean(sizes))}[budget]
    want = _expected(tables)
    with sp.RangeSpill(LO, HI, budget=limit) as spill:
        runs_seen = []
        for t in tables:
            spill.add(t)
            runs_seen.append(len(_runs(tmp_path / "spill")))
        if budget == "never":
            assert spill.spilled_bytes == 0 and runs_seen[-1] == 0
            assert spill.peak_buffered == sum(sizes)  # everything held, nothing written
        elif budget == 1:  # a run after every non-empty add
            assert runs_seen == list(np.cumsum([t.num_rows > 0 for t in tables]))
        else:  # some runs, and rows left in the buffer
            assert 1 < runs_seen[-1] < len(sizes)
        if budget != "never":
            assert spill.spilled_bytes == sum(os.path.getsize(f) for f in _runs(tmp_path / "spill")) > 0
        assert spill.peak_buffered <= limit + max(sizes)
        assert spill.peak_buffered >= max(sizes)
        got = _drain(spill)
    assert got == want
    assert sorted(k for _, ks, _ in got for k in ks) == list(range(sum(t.num_rows for t in tables)))
    assert [p for p, _, _ in got] == [5, 6, 8, 9, 10, 13, 16]


@pytest.mark.parametrize("budget", [1, 2000, 1 << 40])
def test_the_output_does_not_depend_on_the_budget(tmp_path, monkeypatch, budget):
    """Many small adds (a batch per row range), a single partition, and a partition per add."""
    monkeypatch.setenv(sp.SPILL_DIR_ENV, str(tmp_path))
    tables = []
    for i in range(30):
        part = np.full(10, LO + (i % 3 == 0) * (HI - 1 - LO), dtype=np.int32)  # LO, or HI-1 every third
        tables.append(pa.table({"k": np.arange(10 * i, 10 * i + 10, dtype=np.int64),
                                "s": [f"v{k}" for k in range(10 * i, 10 * i + 10)], PART: part}))
    with sp.RangeSpill(LO, HI, budget=budget) as spill:
        for t in tables:
            spill.add(t)
        assert _drain(spill) == _expected(tables)
        assert spill.peak_buffered <= budget + max(t.nbytes for t in tables)


def test_nothing_added_yields_nothing_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv(sp.SPILL_DIR_ENV, str(tmp_path / "spill"))
    with sp.RangeSpill(LO, HI, budget=1) as spill:
        spill.add(pa.table({"k": pa.array([], pa.int64()), PART: pa.array([], pa.int32())}))
        assert list(spill.partitions()) == [] and spill.spilled_bytes == 0 and spill.peak_buffered == 0
    assert not (tmp_path / "spill").exists()


def test_run_files_are_removed_on_close(tmp_path, monkeypatch):
    monkeypatch.setenv(sp.SPILL_DIR_ENV, str(tmp_path / "spill"))
    tables = _slices(6)
    with sp.RangeSpill(LO, HI, budget=1) as spill:
        for t in tables:
            spill.add(t)
        runs = _runs(tmp_path / "spill")
        assert len(runs) == sum(t.num_rows > 0 for t in tables)
        first = next(spill.partitions())  # partly read: the runs are open (memory-mapped)
        assert first[0] == 5
    assert not any(os.path.exists(f) for f in runs)
    assert os.listdir(tmp_path / "spill") == []  # its own folder gone, the configured one kept
    spill.close()  # closing again does nothing


def test_run_files_are_removed_on_an_exception_inside_the_with(tmp_path, monkeypatch):
    monkeypatch.setenv(sp.SPILL_DIR_ENV, str(tmp_path / "spill"))
    runs = []
    with pytest.raises(RuntimeError, match="the reduce function failed"):
        with sp.RangeSpill(LO, HI, budget=1) as spill:
            for t in _slices(4):
                spill.add(t)
            runs = _runs(tmp_path / "spill")
            for p, _ in spill.partitions():
                raise RuntimeError("the reduce function failed")
    assert len(runs) >= 3 and not any(os.path.exists(f) for f in runs)
    assert os.listdir(tmp_path / "spill") == []


def test_the_spill_folder_is_electra_spill_dir_else_the_temp_folder(tmp_path, monkeypatch):
    tables = _slices(3)
    monkeypatch.setenv(sp.SPILL_DIR_ENV, str(tmp_path / "configured" / "deeper"))  # made when needed
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    os.makedirs(tmp_path / "tmp")
    with sp.RangeSpill(LO, HI, budget=1) as spill:
        for t in tables:
            spill.add(t)
        assert len(_runs(tmp_path / "configured" / "deeper")) == 3 and os.listdir(tmp_path / "tmp") == []
    monkeypatch.delenv(sp.SPILL_DIR_ENV)
    with sp.RangeSpill(LO, HI, budget=1) as spill:
        for t in tables:
            spill.add(t)
        assert len(_runs(tmp_path / "tmp")) == 3
        assert _drain(spill) == _expected(tables)
    assert os.listdir(tmp_path / "tmp") == []
