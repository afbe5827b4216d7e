"""``S3Proxy.chaos``, the tests' store that keeps failing: its outcomes are fixed by the seed, in
the shares asked for, cuts and stalls only on GETs, stalls capped. Decisions only: no request is
sent (the proxy is never started)."""
from __future__ import annotations

from collections import Counter

import pytest

from tests._s3proxy import S3Proxy

METHODS = ["GET", "GET", "PUT", "HEAD"] * 2500  # 10,000 requests, half of them GETs


def decisions(seed: int, **shares) -> tuple[list[tuple[str, str, float | None]], S3Proxy]:
    proxy = S3Proxy("http://127.0.0.1:9")
    proxy.chaos(seed=seed, **shares)
    return [(m, *proxy.decide(m, f"/b/k{i}", "")) for i, m in enumerate(METHODS)], proxy


def test_the_seed_fixes_the_outcomes_in_the_shares_asked_for():
    shares = dict(slowdown=0.15, drop=0.03, cut=0.02, stall=0.01, stall_s=0.0, stalls=3)
    got, proxy = decisions(51, **shares)
    assert got == decisions(51, **shares)[0] and got != decisions(52, **shares)[0]
    counts = proxy.counts
    assert sum(counts.values()) == len(METHODS) and set(counts) == {"forward", "slowdown", "reset", "cut", "stall"}
    assert 1300 < counts["slowdown"] < 1700 and 220 < counts["reset"] < 380, counts
    assert 150 < counts["cut"] < 250, counts  # 2% of all requests: those drawn by a HEAD or PUT fall on a GET
    assert counts["stall"] == 3, counts  # capped
    assert {m for m, o, _ in got if o in ("cut", "stall")} == {"GET"}
    assert all(0 <= frac < 1 for _, o, frac in got if o in ("cut", "stall"))
    assert [o for _, _, o in proxy.log] == [o for _, o, _ in got]


def test_a_cut_drawn_by_a_request_without_a_body_falls_on_the_next_get():
    proxy = S3Proxy("http://127.0.0.1:9")
    proxy.chaos(seed=3, slowdown=0.0, drop=0.0, cut=1.0)
    assert [proxy.decide(m, "/b/k", "")[0] for m in ("HEAD", "PUT")] == ["forward", "forward"]
    proxy._rules.chaos.shares = (("cut", 0.0),)  # from now on every draw forwards
    assert [proxy.decide(m, "/b/k", "")[0] for m in ("HEAD", "GET", "PUT", "GET", "GET")] == \
        ["forward", "cut", "forward", "cut", "forward"]


def test_keys_narrow_it_and_clear_ends_it():
    proxy = S3Proxy("http://127.0.0.1:9")
    proxy.chaos(seed=1, slowdown=1.0, drop=0.0, cut=0.0, keys=r"^/b/raw/")
    assert proxy.decide("GET", "/b/raw/a.txt", "") == ("slowdown", None)
    assert proxy.decide("GET", "/b/out/a.txt", "")[0] == "forward"
    proxy.clear()
    assert proxy.decide("GET", "/b/raw/a.txt", "")[0] == "forward"


def test_shares_that_cannot_be_probabilities_are_refused():
    with pytest.raises(ValueError, match="chaos shares"):
        S3Proxy("http://127.0.0.1:9").chaos(slowdown=0.9, drop=0.2)
