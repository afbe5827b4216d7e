"""common.ports: a free port drawn below the OS's ephemeral range, where no connection takes it."""
from __future__ import annotations

import random
import socket

import pytest

from common import ports


def _bind(port: int) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_the_range_file_is_read_and_an_unreadable_one_says_nothing(tmp_path):
    good = tmp_path / "range"
    good.write_text("32768\t60999\n")
    assert ports.ephemeral_start(good) == 32768
    (tmp_path / "bad").write_text("not a range\n")
    assert ports.ephemeral_start(tmp_path / "bad") is None
    assert ports.ephemeral_start(tmp_path / "absent") is None


@pytest.mark.skipif(ports.ephemeral_start() is None or ports.ephemeral_start() - ports.LOWEST < ports.DRAWS,
                    reason="this OS gives no ephemeral range with room below it")
def test_ports_come_from_below_the_ephemeral_range_and_are_free():
    top = ports.ephemeral_start()
    got = [ports.free_port() for _ in range(50)]
    assert all(ports.LOWEST <= p < top for p in got), got
    for p in got:
        _bind(p)  # free: binding it raises nothing
    assert len(set(got)) > 40  # drawn, not one fixed port


def test_a_port_in_use_is_not_returned(monkeypatch):
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen(1)
    busy = held.getsockname()[1]
    draws = iter([busy, busy])
    monkeypatch.setattr(ports, "ephemeral_start", lambda: busy + 1)  # the window [LOWEST, busy] holds busy
    real = ports._draw.randrange
    monkeypatch.setattr(ports._draw, "randrange", lambda lo, hi: next(draws, None) or real(lo, hi))
    try:
        p = ports.free_port()
        assert p != busy
        _bind(p)
    finally:
        held.close()


def test_the_os_picks_when_there_is_no_room_or_no_free_draw(monkeypatch):
    real_top = ports.ephemeral_start()
    monkeypatch.setattr(ports, "ephemeral_start", lambda: ports.LOWEST + 3)  # a window of 3 ports: too small
    p = ports.free_port()
    _bind(p)
    if real_top is not None:
        assert p >= real_top  # an ephemeral port, from the OS
    monkeypatch.setattr(ports, "ephemeral_start", lambda: real_top or 32768)
    monkeypatch.setattr(ports, "_bindable", lambda port: False)  # every draw taken
    p = ports.free_port()
    _bind(p)
    if real_top is not None:
        assert p >= real_top


def test_drawing_a_port_leaves_the_random_module_alone():
    # a seeded run must not change with how many ports it opened
    random.seed(5)
    expected = [random.random() for _ in range(3)]
    random.seed(5)
    ports.free_port()
    assert [random.random() for _ in range(3)] == expected
