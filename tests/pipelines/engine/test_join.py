"""The join of two shuffles partitioned alike: every partition's rows of both sides meet once,
in partition order, and a subset of ranges reads only its ranges. Expected pairs come from a
dict join of the generated rows, not from the module."""
from __future__ import annotations

import collections

import numpy as np
import pyarrow as pa
import pytest

from pipelines.engine import join as jn
from pipelines.engine import shuffle as sh

P, R = 10, 4  # ranges [0, 2) [2, 5) [5, 7) [7, 10)


def _side(ray, n: int, seed: int, folder: str, *, partitions: int = P, ranges: int = R, only=None) -> sh.Shuffled:
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 300, n)
    part = sh.hash_partition(keys, partitions)
    if only is not None:  # rows of some partitions only (the other side has the rest too)
        keys, part = keys[np.isin(part, only)], part[np.isin(part, only)]
    rows = [{"k": int(k), "v": seed * 10_000 + i, sh.PART: int(p)} for i, (k, p) in enumerate(zip(keys, part))]
    ds = ray.data.from_items(rows, override_num_blocks=3)
    return sh.shuffle(ds, partitions=partitions, folder=folder, file_bytes=4 << 10, ranges=ranges, slice_bytes=1)


def _pairs(left: pa.Table | None, right: pa.Table | None) -> dict:
    """Per partition: the keys of both sides, and a marker of which sides came."""
    lk = sorted(left.column("k").to_pylist()) if left is not None else []
    rk = sorted(right.column("k").to_pylist()) if right is not None else []
    return pa.table({"lk": pa.array([lk], pa.list_(pa.int64())), "rk": pa.array([rk], pa.list_(pa.int64())),
                     "sides": [(left is not None) * 1 + (right is not None) * 2]})


def test_a_join_gives_each_partition_both_sides_once(ray_local, tmp_path):
    left = _side(ray_local, 900, 1, str(tmp_path / "l"))
    right = _side(ray_local, 700, 2, str(tmp_path / "r"), only=[0, 1, 3, 5, 6, 8])  # a left-only partition or four
    want = collections.defaultdict(lambda: ([], []))
    for side, (n, seed) in enumerate([(900, 1), (700, 2)]):
        keys = np.random.default_rng(seed).integers(0, 300, n)
        for k in keys:
            p = int(sh.hash_partition(np.array([k]), P)[0])
            if side == 1 and p not in (0, 1, 3, 5, 6, 8):
                continue
            want[p][side].append(int(k))

    out = jn.join(left, right, _pairs, memory_bytes=2 << 10).take_all()  # small budget: both sides spill
    got = {}
    for row in out:
        lk, rk = list(row["lk"]), list(row["rk"])
        p = int(sh.hash_partition(np.array([(lk or rk)[0]]), P)[0])
        assert p not in got  # one call per partition
        got[p] = (lk, rk, int(row["sides"]))
    assert sorted(got) == sorted(want) == list(range(P))
    for p, (lk, rk) in want.items():
        assert got[p] == (sorted(lk), sorted(rk), 1 * bool(lk) + 2 * bool(rk))
    assert {p for p, g in got.items() if g[2] == 1} == {2, 4, 7, 9}

    # ranges 1 and 3 only: partitions [2, 5) and [7, 10), in order within each range
    seen = [p for r in (1, 3) for p, _, _ in jn.join_range(left, right, r)]
    assert seen == [2, 3, 4, 7, 8, 9]
    sub = jn.join(left, right, _pairs, ranges=[1, 3]).take_all()
    assert sorted(len(row["lk"]) for row in sub) == sorted(len(want[p][0]) for p in seen)
    left.remove()
    right.remove()


def test_shuffles_partitioned_differently_do_not_join(ray_local, tmp_path):
    a = _side(ray_local, 50, 1, str(tmp_path / "a"))
    b = _side(ray_local, 50, 2, str(tmp_path / "b"), ranges=R - 1)
    with pytest.raises(ValueError, match=r"partitioned differently"):
        jn.join(a, b, _pairs)
    with pytest.raises(ValueError, match=r"partitioned differently"):
        list(jn.join_range(a, b, 0))
    with pytest.raises(IndexError, match=r"ranges \[4\] of a 4-range shuffle"):
        jn.join(a, a, _pairs, ranges=[0, 4])
    assert jn.join(a, a, _pairs, ranges=[]).take_all() == []
    with pytest.raises(IndexError, match=r"ranges \[5\] of a 4-range shuffle"):
        sh.reduce(a, lambda rows: rows, ranges=[5])
    a.remove()
    b.remove()
