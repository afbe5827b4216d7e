"""What a node's resources allow a shuffle (pipelines.engine.node_space): the spill bound against
a simulation of the spill's merge rule, the fewest reduce tasks that fit against a brute-force
scan, map tasks in flight against hand arithmetic, the driver's pre-flight check with its free
space faked (``shutil.disk_usage``), and the error's one line: the CLI's, never retried."""
from __future__ import annotations

import collections
import math
import os
import shutil
import subprocess
import sys

import pytest

from pipelines.engine import node_space as ns

MiB, GiB = 1 << 20, 1 << 30
Usage = collections.namedtuple("Usage", "total used free")


def _fake_free(monkeypatch, free: int) -> None:
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(free * 2, free, free))


def _simulated_peak(spills: int, budget: int, k: int) -> int:
    """Peak bytes on disk of a spill that writes ``spills`` runs of ``budget`` bytes, merging the
    last k runs of one level into one of the next (inputs and output on disk together)."""
    runs: list[tuple[int, int]] = []  # (level, bytes)
    peak = 0
    for _ in range(spills):
        runs.append((0, budget))
        peak = max(peak, sum(b for _, b in runs))
        while len(runs) >= k and len({lv for lv, _ in runs[-k:]}) == 1:
            out = sum(b for _, b in runs[-k:])
            peak = max(peak, sum(b for _, b in runs) + out)
            runs[-k:] = [(runs[-1][0] + 1, out)]
    return peak


@pytest.mark.parametrize("k", [2, 3, 4])
def test_task_spill_bytes_bounds_the_simulated_peak_and_is_reached(k):
    budget = 1000
    for n in range(0, 130):
        bound = ns.task_spill_bytes(n * budget, budget, k)
        assert _simulated_peak(n, budget, k) <= bound
        top = k ** int(math.log(n, k) + 1e-9) if n >= k else 0  # the largest merge's runs
        assert bound == n * budget + top * budget
        if n >= k and n % top == 0:  # the last spill ends in the largest merge: the bound is met
            assert _simulated_peak(n, budget, k) == bound
    assert ns.task_spill_bytes(5 * budget + 999, budget, 64) == 5 * budget + 999  # no merge below 64 runs


def test_node_spill_bytes_is_the_tasks_at_once_times_their_peak():
    # 1 GiB over 8 tasks on a 16-CPU node: all 8 at once, 128 MiB each, no merge (budget 256 MiB)
    assert ns.node_spill_bytes(GiB, 8, 16, 256 * MiB, 64) == 8 * 128 * MiB
    # 100 TiB over 24,576 tasks on 192 CPUs: 192 at once, ceil(100 TiB / 24,576) each; 16 runs: no merge
    each = -(-100 * (1 << 40) // 24576)
    assert each // (256 * MiB) == 16
    assert ns.node_spill_bytes(100 << 40, 24576, 192, 256 * MiB, 64) == 192 * each
    # 1 TiB over 16 tasks on 16 CPUs: 64 GiB each = 256 runs = 4 x 64: the largest merge 64 runs
    assert ns.node_spill_bytes(1 << 40, 16, 16, 256 * MiB, 64) == 16 * (64 * GiB + 64 * 256 * MiB)


def _fits_by_hand(total: int, r: int, cpus: int, room: int) -> bool:
    """No merges (a budget above every task's bytes): min(r, cpus) tasks of ceil(total / r)."""
    return min(r, cpus) * -(-total // r) <= room


@pytest.mark.parametrize("total,cpus,room,at_least", [(1000, 4, 500, 1), (1000, 4, 250, 5), (1000, 4, 100, 9),
                                                      (997, 3, 1000, 1), (997, 3, 2, 1), (50, 8, 40, 2),
                                                      (1000, 4, 0, 1)])
def test_reduce_tasks_needed_is_the_fewest_that_fit(total, cpus, room, at_least):
    got = ns.reduce_tasks_needed(total, cpus, room, budget=1 << 40, fan_in=64, at_least=at_least)
    scan = [r for r in range(at_least, total + 1) if _fits_by_hand(total, r, cpus, room)]
    assert got == (scan[0] if scan else None)


def test_map_tasks_per_node_is_two_per_cpu_within_half_the_store():
    assert ns.map_tasks_per_node(192, 96 * GiB, 128 * MiB) == 384  # 48 GiB / 128 MiB = 384 = 2 x 192
    assert ns.map_tasks_per_node(192, 32 * GiB, 128 * MiB) == 128  # 16 GiB / 128 MiB
    assert ns.map_tasks_per_node(16, 100 * GiB, 128 * MiB) == 32  # the CPUs bound it
    assert ns.map_tasks_per_node(4, 100 * MiB, 128 * MiB) == 1  # never none
    assert ns.map_tasks_per_node(8, 4 * GiB, 128 * MiB, share=0.25) == 8


def test_map_tasks_in_flight_keeps_every_nodes_share_of_its_store():
    fb = 128 * MiB
    same = [ns.Node(f"n{i}", 16, 8 * GiB) for i in range(4)]
    assert ns.map_tasks_in_flight(same, fb) == 128  # 2 x 64 CPUs; 4 GiB x 4 nodes / 128 MiB = 128
    small = [ns.Node(f"n{i}", 16, 2 * GiB) for i in range(4)]
    assert ns.map_tasks_in_flight(small, fb) == 32  # 1 GiB x 4 / 128 MiB
    mixed = [ns.Node("big", 16, 8 * GiB), ns.Node("little", 4, GiB), ns.Node("head", 0, 10 * GiB)]
    # 20 CPUs: big takes 16/20 of the tasks, 4 GiB / 128 MiB x 20/16 = 40; little 4/20, 512 MiB / 128 MiB x 5 = 20
    assert ns.map_tasks_in_flight(mixed, fb) == 20
    assert ns.store_pinned_per_node(20, mixed, fb) == 16 * fb  # big: 20 x 16/20 tasks of 128 MiB
    for n in mixed[:2]:
        assert 20 * n.cpus // 20 * fb <= n.object_store_bytes // 2
    assert ns.map_tasks_in_flight([ns.Node("a", 1, 64 * GiB)], fb) == 16  # a small cluster: the floor
    assert ns.map_tasks_in_flight([], fb, at_least=7) == 7  # no Ray: the floor alone
    assert ns.map_tasks_in_flight([ns.Node("a", 2, MiB)], fb) == 1


def test_the_driver_checks_its_own_nodes_spill_folder(tmp_path, monkeypatch):
    nodes = [ns.Node("head", 0, 8 * GiB), ns.Node("me", 16, 8 * GiB), ns.Node("other", 192, 8 * GiB)]
    total, ranges, budget = 64 * GiB, 64, 256 * MiB  # 1 GiB a task: 4 runs, no merge
    folder = str(tmp_path / "spill" / "electra-spill")  # not made yet: its parent's disk is read
    _fake_free(monkeypatch, 16 * GiB)  # 16 tasks at once x 1 GiB = 16 GiB: fits exactly
    room = ns.check_spill_room(total, ranges, nodes, budget=budget, fan_in=64, node_id="me", folder=folder)
    assert room == ns.SpillRoom(GiB, 64 * GiB, folder, 16 * GiB)  # "other" runs all 64 at once
    _fake_free(monkeypatch, 12 * GiB)
    with pytest.raises(ns.SpillSpaceError) as caught:
        ns.check_spill_room(total, ranges, nodes, budget=budget, fan_in=64, node_id="me", folder=folder)
    line = str(caught.value)
    # the fewest tasks that fit: 16 x ceil(64 GiB / r) <= 12 GiB, r = 86 (by hand: 64 x 16 / 12 = 85.3)
    assert [r for r in range(65, 200) if 16 * -(-total // r) <= 12 * GiB][0] == 86
    assert line == (f"spill folder {folder} on node {os.uname().nodename} needs 16 GiB (16 reduce tasks at once x "
                    f"1 GiB: a task's range of the shuffle plus its largest merge) but has 12 GiB free; set "
                    f"ELECTRA_SPILL_DIR to a folder on a bigger disk, or use more reduce tasks: "
                    f"--set shuffle.reduce_tasks=86")
    # not checked where the driver's node runs no reduce tasks, or is not a node of the cluster
    for me in ("head", "elsewhere", ""):
        assert ns.check_spill_room(total, ranges, nodes, budget=budget, fan_in=64, node_id=me,
                                   folder=folder) == ns.SpillRoom(GiB, 64 * GiB, "", 0)


def test_live_spills_count_as_room_and_dead_ones_do_not(tmp_path, monkeypatch):
    root = tmp_path / "electra-spill"
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    for name, pid, size in (("aa", os.getpid(), 3000), ("bb", child.pid, 5000), ("range-", os.getpid(), 700)):
        folder = root / f"{name}.{pid}.xyz" if name != "range-" else root / f"range-{pid}.xyz"
        folder.mkdir(parents=True)
        (folder / "run-000000.arrow").write_bytes(b"x" * size)
    assert ns.live_spill_bytes(str(root)) == 3000 + 700  # the dead process's 5000 are not a live spill's
    assert ns.live_spill_bytes(str(tmp_path / "none")) == 0
    _fake_free(monkeypatch, 10_000)
    assert ns.spill_room(str(root)) == 13_700


def test_the_error_is_the_clis_one_line_and_is_never_retried():
    from cli._errors import user_error
    from common import storage
    from pipelines.orchestration.checks import transient

    err = ns.no_room("/scratch/electra-spill", need=3 * GiB, why="a reduce task's next run", room=GiB,
                     reduce_tasks=None)
    assert not isinstance(err, storage.StorageError)
    try:
        try:
            raise err
        except ns.SpillSpaceError as inner:
            raise RuntimeError("the reduce task failed") from inner  # as Ray Data wraps a task's error
    except RuntimeError as outer:
        assert user_error(outer) == str(err) and "\n" not in str(err)
        assert not transient(outer)
    assert "needs 3 GiB (a reduce task's next run) but has 1 GiB free" in str(err)
    assert str(err).endswith("--set shuffle.reduce_tasks=N with a larger N")


def test_human_bytes():
    assert [ns.human_bytes(n) for n in (0, 1023, 1024, 1536, 2_100_000_000, 100 * (1 << 40), 5 << 50)] == \
        ["0 B", "1023 B", "1 KiB", "1.5 KiB", "1.96 GiB", "100 TiB", "5 PiB"]
