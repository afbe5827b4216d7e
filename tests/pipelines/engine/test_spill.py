"""A reduce task's RangeSpill: each partition's rows whole and in the order added, whatever the
budget (in memory, a run per add, or in between) and however many runs it merged; its local
files under ``<ELECTRA_SPILL_DIR or the temp folder>/electra-spill``, gone when it closes, and a
killed attempt's folder of the same name removed by the next one.

The expected merge counts and run levels are computed here from the rule the module states
(``MAX_RUNS`` consecutive runs of one level become one run of the next): after ``n`` spills the
runs alive are ``n`` written in base ``MAX_RUNS`` (digit ``l`` = runs of level ``l``), and the
merges made are ``sum_l n // MAX_RUNS**l``."""
from __future__ import annotations

import collections
import glob
import hashlib
import os
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from pipelines.engine import spill as sp
from pipelines.engine.map_file import PART

LO, HI = 5, 17  # a range that does not start at 0


def _slices(count: int = 12, seed: int = 0, rows: int = 400) -> list[pa.Table]:
    """Tables as a reduce task adds them (its range's slice of each map file): keys numbered in
    order of addition, a string, ``_part`` int32 in [LO, HI) (some partitions never seen), several
    record batches each, sizes from empty to ``rows`` rows."""
    rng = np.random.default_rng(seed)
    out, key = [], 0
    for i in range(count):
        n = 0 if i == 3 else int(rng.integers(1, rows))
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
    """The run files of every spill under ``base`` (ELECTRA_SPILL_DIR or the temp folder)."""
    return sorted(glob.glob(os.path.join(str(base), "electra-spill", "*", "run-*.arrow")))


def _tag(name: str) -> str:
    """The folder a named spill uses: blake2b of the name, 8 bytes, in hex."""
    return hashlib.blake2b(name.encode(), digest_size=8).hexdigest()


def _digits(n: int, base: int) -> list[int]:
    """``n`` in ``base``, least significant digit first."""
    out = []
    while n:
        n, d = divmod(n, base)
        out.append(d)
    return out


def _lsm(spills: int, k: int) -> tuple[int, list[int]]:
    """(merges made, levels of the runs alive, oldest first) after ``spills`` spills merged by
    levels of ``k``: each carry of a base-``k`` counter is one merge."""
    merges = sum(spills // k**level for level in range(1, len(_digits(spills, k)) + 1))
    alive = [level for level, d in reversed(list(enumerate(_digits(spills, k)))) for _ in range(d)]
    return merges, alive


def test_the_lsm_arithmetic_of_this_file():
    """_lsm against a direct simulation of the stated rule (a list of levels, merged while its
    last k entries are k of one level), so the expectations below rest on two derivations."""
    for k in (2, 3, 4):
        runs: list[int] = []
        merges = 0
        for n in range(1, 200):
            runs.append(0)
            while len(runs) >= k and len(set(runs[-k:])) == 1:
                runs[-k:] = [runs[-1] + 1]
                merges += 1
            assert _lsm(n, k) == (merges, runs)
    assert _lsm(40, 3) == (13 + 4 + 1, [3, 2, 1, 0]) and _lsm(45, 3) == (15 + 5 + 1, [3, 2, 2])  # 40 = 1111, 45 = 1200 in base 3


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
        elif budget == 1:  # a run after every non-empty add (11 of them: fewer than MAX_RUNS, no merge)
            assert runs_seen == list(np.cumsum([t.num_rows > 0 for t in tables]))
            assert sp.MAX_RUNS == 64 and spill.merges == 0
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
    assert os.listdir(tmp_path / "spill") == ["electra-spill"]  # the configured folder and its root kept
    assert os.listdir(tmp_path / "spill" / "electra-spill") == []  # its own folder gone
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
    assert os.listdir(tmp_path / "spill" / "electra-spill") == []


def test_the_spill_folder_is_under_electra_spill_dir_else_the_temp_folder(tmp_path, monkeypatch):
    tables = _slices(3)
    monkeypatch.setenv(sp.SPILL_DIR_ENV, str(tmp_path / "configured" / "deeper"))  # made when needed
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    os.makedirs(tmp_path / "tmp")
    assert sp.spill_root() == str(tmp_path / "configured" / "deeper" / "electra-spill")
    with sp.RangeSpill(LO, HI, budget=1) as spill:  # no name: a fresh folder range-*
        for t in tables:
            spill.add(t)
        runs = _runs(tmp_path / "configured" / "deeper")
        assert len(runs) == 3 and os.listdir(tmp_path / "tmp") == []
        (folder,) = os.listdir(tmp_path / "configured" / "deeper" / "electra-spill")
        assert folder.startswith("range-") and {os.path.basename(os.path.dirname(f)) for f in runs} == {folder}
    with sp.RangeSpill(LO, HI, budget=1, name="s3://b/work/x/map#2") as spill:  # named: blake2b of the name
        for t in tables:
            spill.add(t)
        (folder,) = os.listdir(tmp_path / "configured" / "deeper" / "electra-spill")
        assert folder.startswith(f"{_tag('s3://b/work/x/map#2')}.{os.getpid()}.")
        assert len(_runs(tmp_path / "configured" / "deeper")) == 3
        assert _drain(spill) == _expected(tables)
    assert os.listdir(tmp_path / "configured" / "deeper" / "electra-spill") == []
    for unset in ("delete", ""):  # unset or empty: the system's temp folder
        if unset == "delete":
            monkeypatch.delenv(sp.SPILL_DIR_ENV)
        else:
            monkeypatch.setenv(sp.SPILL_DIR_ENV, "")
        assert sp.spill_root() == str(tmp_path / "tmp" / "electra-spill")
        with sp.RangeSpill(LO, HI, budget=1) as spill:
            for t in tables:
                spill.add(t)
            assert len(_runs(tmp_path / "tmp")) == 3
            assert _drain(spill) == _expected(tables)
        assert os.listdir(tmp_path / "tmp") == ["electra-spill"] and os.listdir(tmp_path / "tmp" / "electra-spill") == []
    assert os.listdir(tmp_path / "configured" / "deeper" / "electra-spill") == []  # not used meanwhile


def test_a_killed_attempts_folder_is_removed_by_the_next_attempt_of_the_same_name(tmp_path, monkeypatch):
    """A kill (SIGKILL, OOM) skips ``close``: the next attempt of the range, same name, starts by
    removing what is left. Another range's folder, alive beside it, is left alone."""
    monkeypatch.setenv(sp.SPILL_DIR_ENV, str(tmp_path))
    root = tmp_path / "electra-spill"
    name, other = "/work/build/dedup/map#3", "/work/build/dedup/map#4"
    assert _tag(name) != _tag(other)
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # a pid no process holds now: what a killed attempt leaves in its folder's name
    left = root / f"{_tag(name)}.{child.pid}.abc"
    (left / "sub").mkdir(parents=True)
    for junk in ("run-000000.arrow", "run-000007.arrow", "sub/run-000001.arrow", "notes"):
        (left / junk).write_bytes(b"junk of a killed attempt")
    busy = [root / f"{_tag(other)}.{child.pid}.def", root / f"{_tag(name)}.{os.getpid()}.ghi"]  # another
    for folder in busy:  # range's (even of a dead process), and a live read of the same range
        folder.mkdir()
        (folder / "run-000000.arrow").write_bytes(b"another range's run, in use")
    tables = _slices(5)
    with sp.RangeSpill(LO, HI, budget=1, name=name) as spill:
        assert not left.exists()  # gone as the attempt starts, before it spills anything
        spill.add(tables[0])
        left = Path(spill._dir)
        assert left.name.startswith(f"{_tag(name)}.{os.getpid()}.")
        assert sorted(os.listdir(left)) == ["run-000000.arrow", "run-000000.arrow.batch.npy",
                                            "run-000000.arrow.counts.npy"]  # the run and its index
        assert (left / "run-000000.arrow").read_bytes()[:6] == b"ARROW1"
        for t in tables[1:]:
            spill.add(t)
        assert sorted(os.listdir(left)) == sorted(f"run-{i:06d}.arrow{x}" for i in range(sum(t.num_rows > 0 for t in tables))
                                                  for x in ("", ".batch.npy", ".counts.npy"))
        assert spill.spilled_bytes == sum(os.path.getsize(f) for f in glob.glob(str(left / "run-*.arrow")))
        assert _drain(spill) == _expected(tables)  # none of the junk read
    assert not left.exists()
    assert sorted(os.listdir(root)) == sorted(f.name for f in busy)
    assert all((f / "run-000000.arrow").read_bytes() == b"another range's run, in use" for f in busy)


def _record_merges(monkeypatch) -> list[tuple[list[int], int]]:
    """Each merge as (levels of the runs alive when it starts, runs written so far on disk)."""
    seen: list[tuple[list[int], int]] = []
    real = sp.RangeSpill._merge

    def merge(self):
        seen.append(([r.level for r in self._runs], len(glob.glob(os.path.join(self._dir, "run-*.arrow")))))
        return real(self)

    monkeypatch.setattr(sp.RangeSpill, "_merge", merge)
    return seen


@pytest.mark.parametrize("spills", [2, 3, 4, 8, 9, 10, 26, 27, 40, 45])
def test_runs_are_merged_by_levels(tmp_path, monkeypatch, spills):
    """MAX_RUNS = 3 and a spill per add: after each add the merges, the runs alive and their
    levels are those of a base-3 counter; never more than MAX_RUNS runs of one level; the output
    is the order added, whatever the merging."""
    k = 3
    monkeypatch.setattr(sp, "MAX_RUNS", k)
    monkeypatch.setenv(sp.SPILL_DIR_ENV, str(tmp_path))
    merges_seen = _record_merges(monkeypatch)
    # small adds (partitions missing from most runs); _slices' fourth is empty
    tables = [t for t in _slices(spills + 1, seed=spills, rows=8) if t.num_rows][:spills]
    assert len(tables) == spills
    # an empty add between two (it spills nothing and counts for nothing)
    empty = tables[0].slice(0, 0)
    top = len(_digits(spills, k)) - 1  # the highest level reached: the largest l with k**l <= spills
    assert k**top <= spills < k ** (top + 1)
    with sp.RangeSpill(LO, HI, budget=1) as spill:
        for n, t in enumerate(tables, 1):
            spill.add(t)
            spill.add(empty)
            merges, alive = _lsm(n, k)
            assert spill.merges == merges
            assert [r.level for r in spill._runs] == alive
            assert max(collections.Counter(alive).values()) < k  # merged down as soon as k are there
            on_disk = _runs(tmp_path)
            assert len(on_disk) == len(alive) == sum(_digits(n, k))
            assert spill.spilled_bytes == sum(os.path.getsize(f) for f in on_disk)
        assert max(r.level for r in spill._runs) == top
        # each run's index is a memory map of a file (page cache, not the task's heap), and the
        # live runs' counts add up to the rows added per partition (np.bincount of the adds)
        assert all(isinstance(r.counts, np.memmap) and isinstance(r.batch, np.memmap) for r in spill._runs)
        added = np.bincount(np.concatenate([t.column(PART).to_numpy() for t in tables]) - LO, minlength=HI - LO)
        assert np.sum([np.asarray(r.counts) for r in spill._runs], axis=0).tolist() == added.tolist()
        assert _drain(spill) == _expected(tables)
    assert len(merges_seen) == _lsm(spills, k)[0]
    for levels, files in merges_seen:
        # a merge takes the last k runs, all of one level; no level ever has more than k runs
        assert len(levels) >= k and len(set(levels[-k:])) == 1
        assert max(collections.Counter(levels).values()) <= k and levels[-1] <= top - 1 and max(levels) <= top
        assert files == len(levels)  # the runs on disk are exactly those alive
    assert os.listdir(tmp_path / "electra-spill") == []


def test_merges_with_rows_left_in_the_buffer(tmp_path, monkeypatch):
    """A budget of a few adds: the spills (counted here from the adds' sizes) merge by levels, and
    the rows still buffered at the end come after every run's."""
    k = 3
    monkeypatch.setattr(sp, "MAX_RUNS", k)
    monkeypatch.setenv(sp.SPILL_DIR_ENV, str(tmp_path))
    tables = _slices(120, seed=11, rows=30)
    budget = int(2.5 * np.mean([t.nbytes for t in tables if t.num_rows]))
    spills, held = 0, 0  # the buffer's rule, written out: a spill once it holds budget bytes
    for t in tables:
        if t.num_rows:
            held += t.nbytes
            if held >= budget:
                spills, held = spills + 1, 0
    assert held > 0 and spills >= 27  # rows left in the buffer, and at least three levels
    with sp.RangeSpill(LO, HI, budget=budget) as spill:
        for t in tables:
            spill.add(t)
        merges, alive = _lsm(spills, k)
        assert spill.merges == merges and [r.level for r in spill._runs] == alive
        assert len(_runs(tmp_path)) == len(alive)
        assert _drain(spill) == _expected(tables)


def test_two_live_reads_of_one_range_never_share_a_folder(tmp_path, monkeypatch):
    """Two spills of the same name alive at once (two reads of one range) keep their own runs."""
    monkeypatch.setenv(sp.SPILL_DIR_ENV, str(tmp_path))

    def rows(keys, p):
        return pa.table({"k": pa.array(keys, pa.int64()), sp.PART: pa.array([p] * len(keys), pa.int32())})

    a = sp.RangeSpill(0, 2, budget=1, name="shuffle#1")
    a.add(rows([1, 2, 3], 0))
    b = sp.RangeSpill(0, 2, budget=1, name="shuffle#1")
    b.add(rows([100], 1))
    assert a._dir != b._dir
    assert [(p, t.column("k").to_pylist()) for p, t in a.partitions()] == [(0, [1, 2, 3])]
    assert [(p, t.column("k").to_pylist()) for p, t in b.partitions()] == [(1, [100])]
    a.close()
    b.close()


# --- room on the spill disk (pipelines.engine.node_space): free space faked through shutil.disk_usage


def _free(monkeypatch, free) -> None:
    """Fake the spill disk's free space: a number, or a function of the folder asked about."""
    import shutil

    Usage = collections.namedtuple("Usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(1 << 50, 0, free(path) if callable(free) else free))


def test_a_spill_without_room_for_its_nodes_tasks_fails_as_it_starts(tmp_path, monkeypatch):
    """A node of 4 CPUs, 10 reduce tasks of E bytes each: 4 at once need 4 E; the line names the
    folder, 4 E, the free space and the fewest reduce tasks that fit (4 x ceil(10 E / N) <= free)."""
    from pipelines.engine import node_space

    monkeypatch.setenv(sp.SPILL_DIR_ENV, str(tmp_path / "spill"))
    monkeypatch.setattr(node_space, "node_cpus", lambda: 4)
    tables = _slices()
    e = sum(t.nbytes for t in tables)
    budget = max(t.nbytes for t in tables)  # fewer than MAX_RUNS runs: no merge in the bound
    assert e // budget < sp.MAX_RUNS
    free = 3 * e  # less than 4 E
    _free(monkeypatch, free)
    with pytest.raises(sp.SpillSpaceError) as caught:
        sp.RangeSpill(LO, HI, budget=budget, name="s3://b/x#3", expected_bytes=e, ranges=10)
    fewest = next(n for n in range(11, 1000) if 4 * -(-10 * e // n) <= free)
    assert fewest == 14  # 4 x 10 E / N <= 3 E: N >= 13.3
    root = str(tmp_path / "spill" / "electra-spill")
    assert str(caught.value) == (
        f"spill folder {root} on node {os.uname().nodename} needs {node_space.human_bytes(4 * e)} (4 reduce tasks "
        f"at once x {node_space.human_bytes(e)}: a task's range of the shuffle plus its largest merge) but has "
        f"{node_space.human_bytes(free)} free; set ELECTRA_SPILL_DIR to a folder on a bigger disk, or use more "
        f"reduce tasks: --set shuffle.reduce_tasks={fewest}")
    assert not (tmp_path / "spill").exists()  # nothing written
    # fewer tasks than CPUs: a node runs all 3 at once, 3 E fits; and a spill of unknown size is not checked
    for kwargs in ({"expected_bytes": e, "ranges": 3}, {}):
        with sp.RangeSpill(LO, HI, budget=budget, **kwargs) as spill:
            for t in tables:
                spill.add(t)
            assert spill.spilled_bytes > 0 and _drain(spill) == _expected(tables)
    with pytest.raises(sp.SpillSpaceError, match=r"needs .* \(4 reduce tasks at once .* with a larger N$"):
        sp.RangeSpill(LO, HI, budget=budget, expected_bytes=e)  # the shuffle's task count unknown: as many as CPUs


def test_other_live_spills_on_the_node_count_as_room(tmp_path, monkeypatch):
    """Runs of a live spill already on the disk are part of the node's bound, not taken from it."""
    from pipelines.engine import node_space

    monkeypatch.setenv(sp.SPILL_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(node_space, "node_cpus", lambda: 2)
    tables = _slices()
    e = sum(t.nbytes for t in tables)
    budget = max(t.nbytes for t in tables)  # no merge in the bound
    free = [e]
    _free(monkeypatch, lambda path: free[0])  # 2 tasks at once need 2 E
    with pytest.raises(sp.SpillSpaceError):
        sp.RangeSpill(LO, HI, budget=budget, expected_bytes=e, ranges=2)
    free[0] = 1 << 40
    with sp.RangeSpill(LO, HI, budget=1, name="another range") as other:  # live, this process
        other.add(pa.table({"k": np.arange(e // 8, dtype=np.int64), PART: np.full(e // 8, LO, np.int32)}))
        assert other.spilled_bytes >= e
        free[0] = e  # what is left once the other wrote its run
        with sp.RangeSpill(LO, HI, budget=budget, expected_bytes=e, ranges=2) as spill:
            for t in tables:
                spill.add(t)
            assert spill.spilled_bytes > 0 and _drain(spill) == _expected(tables)


def test_a_disk_that_fills_mid_way_fails_with_the_same_line_before_the_run(tmp_path, monkeypatch):
    """Free space shrinks by what the spill writes: the run that would not fit is refused before a
    byte of it is written, with the one line, and the runs already written go when it closes."""
    monkeypatch.setenv(sp.SPILL_DIR_ENV, str(tmp_path))
    tables = [t for t in _slices(12, seed=3) if t.num_rows]
    sizes = [t.nbytes for t in tables]
    capacity = sum(sizes[:4]) + sizes[4] // 2  # the fifth run does not fit
    _free(monkeypatch, lambda path: capacity - sum(os.path.getsize(f) for f in _runs(tmp_path)))
    on_disk = [0]  # bytes of run files after each add that succeeded (a run each: budget 1)
    with pytest.raises(sp.SpillSpaceError) as caught:
        with sp.RangeSpill(LO, HI, budget=1, name="s3://b/x#0") as spill:
            for t in tables:
                spill.add(t)
                assert len(_runs(tmp_path)) == len(on_disk)
                on_disk.append(sum(os.path.getsize(f) for f in _runs(tmp_path)))
    runs_made = len(on_disk) - 1
    assert 2 <= runs_made <= 4  # each IPC run file is a little larger than its rows' bytes
    # refused: the first run whose rows' bytes exceed what is free
    assert all(sizes[i] <= capacity - on_disk[i] for i in range(runs_made))
    assert sizes[runs_made] > capacity - on_disk[runs_made]
    line = str(caught.value)
    assert line.startswith(f"spill folder {tmp_path}/electra-spill/{_tag('s3://b/x#0')}.{os.getpid()}.")
    assert f"needs {sp.node_space.human_bytes(sizes[runs_made])} (a reduce task's next run) but has " in line
    assert line.endswith("set ELECTRA_SPILL_DIR to a folder on a bigger disk, or use more reduce tasks: "
                         "--set shuffle.reduce_tasks=N with a larger N")
    assert os.listdir(tmp_path / "electra-spill") == []


def test_a_write_that_finds_the_disk_full_raises_the_same_line(tmp_path, monkeypatch):
    """ENOSPC from Arrow (errno only in its message) or from an index's numpy write becomes the one
    line; any other OSError passes through as it is."""
    import errno

    monkeypatch.setenv(sp.SPILL_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(sp.node_space, "node_cpus", lambda: 1)
    tables = [t for t in _slices(3) if t.num_rows]
    arrow_full = OSError("[Errno 28] Error writing bytes to file. Detail: [errno 28] No space left on device")
    for failure, where in ((arrow_full, "ipc"), (OSError(errno.ENOSPC, "No space left on device"), "save"),
                           (PermissionError(errno.EACCES, "Permission denied"), "ipc")):
        def fail(*args, **kwargs):
            raise failure

        with monkeypatch.context() as m:
            m.setattr(sp.pa.ipc, "new_file", fail) if where == "ipc" else m.setattr(sp.np, "save", fail)
            with pytest.raises((OSError, sp.SpillSpaceError)) as caught:
                with sp.RangeSpill(LO, HI, budget=1, expected_bytes=10, ranges=1) as spill:
                    spill.add(tables[0])
        if isinstance(failure, PermissionError):
            assert caught.value is failure
        else:
            assert isinstance(caught.value, sp.SpillSpaceError) and caught.value.__cause__ is failure
            assert "(a reduce task's next run) but has " in str(caught.value)
            assert str(caught.value).endswith("--set shuffle.reduce_tasks=2")
        assert os.listdir(tmp_path / "electra-spill") == []
