"""common.lease: one holder at a time, stale holders taken over, only the owner releases."""
from __future__ import annotations

import json
import multiprocessing as mp
import subprocess
import sys

import pytest

from common.lease import Lease, LeaseHeld


class Clock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_second_claimant_backs_off_until_release(tmp_path):
    clock = Clock()
    a = Lease(tmp_path / "lease.json", ttl=60, clock=clock, flow_run_id="run-a")
    b = Lease(tmp_path / "lease.json", ttl=60, clock=clock)
    info = a.acquire()
    assert json.loads((tmp_path / "lease.json").read_text())["owner"] == a.owner == info.owner
    with pytest.raises(LeaseHeld, match="run-a") as held:
        b.acquire()
    assert held.value.info.owner == a.owner
    assert b.holder().owner == a.owner
    b.release()  # not b's: nothing happens
    assert (tmp_path / "lease.json").is_file()
    a.release()
    assert not (tmp_path / "lease.json").exists() and b.holder() is None
    assert b.acquire().owner == b.owner


def test_expired_heartbeat_is_taken_over_and_the_old_owner_stops_renewing(tmp_path):
    clock = Clock()
    a = Lease(tmp_path / "l.json", ttl=60, clock=clock)
    b = Lease(tmp_path / "l.json", ttl=60, clock=clock)
    a.acquire()
    clock.t += 59
    assert a.refresh()  # heartbeat at 1059
    clock.t += 60
    with pytest.raises(LeaseHeld):  # 60 s since the heartbeat: not older than the ttl yet
        b.acquire()
    clock.t += 1
    assert "no heartbeat for 61 s" in b.stale(b.read())
    b.acquire()
    assert not a.refresh()  # a was presumed dead: it must not overwrite b's lease
    assert b.read().owner == b.owner
    a.release()
    assert b.read().owner == b.owner


def test_dead_pid_on_this_host_is_taken_over_at_once(tmp_path):
    code = ("import sys; from common.lease import Lease; "
            "Lease(sys.argv[1], ttl=3600).acquire()")  # exits without releasing: a crash
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "l.json")], check=True)
    b = Lease(tmp_path / "l.json", ttl=3600)
    dead = b.read()
    assert dead is not None and "has exited" in b.stale(dead)
    assert b.acquire().owner == b.owner


def test_owner_reported_finished_is_taken_over(tmp_path):
    a = Lease(tmp_path / "l.json", flow_run_id="r1")
    a.acquire()  # this process is alive and the heartbeat is fresh
    seen = []
    b = Lease(tmp_path / "l.json", is_dead=lambda info: seen.append(info.flow_run_id) or True)
    assert b.stale(b.read()) == "its owner reports finished" and seen == ["r1"]
    b.acquire()
    assert b.read().owner == b.owner


def test_context_manager_releases_on_error(tmp_path):
    with pytest.raises(ZeroDivisionError):
        with Lease(tmp_path / "l.json"):
            assert (tmp_path / "l.json").is_file()
            1 / 0
    assert not (tmp_path / "l.json").exists()


def _race(path: str, barrier, results) -> None:
    barrier.wait()  # both processes try at the same moment
    try:
        Lease(path, ttl=3600).acquire()
        results.put("won")
    except LeaseHeld:
        results.put("held")
    barrier.wait()  # stay alive until all have tried: a dead winner may be taken over


def test_racing_processes_get_exactly_one_winner(tmp_path):
    ctx = mp.get_context("spawn")
    for attempt in range(3):
        path = str(tmp_path / f"l{attempt}.json")
        barrier, results = ctx.Barrier(3), ctx.Queue()
        procs = [ctx.Process(target=_race, args=(path, barrier, results)) for _ in range(3)]
        for p in procs:
            p.start()
        outcomes = sorted(results.get(timeout=120) for _ in procs)
        for p in procs:
            p.join()
        # the others tried while the winner was alive (the second barrier)
        assert outcomes == ["held", "held", "won"]
