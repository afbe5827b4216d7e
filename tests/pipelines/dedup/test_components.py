"""Connected components by large-star/small-star: hand-built graphs, random graphs, and Ray."""
from __future__ import annotations

import random

import numpy as np
import pytest
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components as scipy_components

from common.hashing import fmix64
from pipelines.dedup.components import (ComponentsNotConverged, connected_components,
                                  large_star_partition, small_star_partition)


def attr(n):
    """The attribute every node carries (in dedup: the index of its document's part)."""
    return np.asarray(n, np.int64) % 7


def _partitioned(x: np.ndarray, y: np.ndarray, parts: int) -> list[dict[str, np.ndarray]]:
    """What group_apply hands to the partition functions: rows split by a hash of x."""
    p = (fmix64(x.astype(np.uint64)) % np.uint64(parts)).astype(np.int64)
    return [{"x": x[p == i], "y": y[p == i], "fx": attr(x[p == i]), "fy": attr(y[p == i])}
            for i in range(parts) if np.any(p == i)]


def _run_partitions(fn, x, y, parts):
    outs = [fn(b) for b in _partitioned(x, y, parts)]
    cols = {c: np.concatenate([o[c] for o in outs]) if outs else np.zeros(0, np.int64) for c in ("u", "v", "fu", "fv")}
    edge = cols["u"] >= 0  # the attributes ride along with both endpoints of every edge
    assert (cols["fu"][edge] == attr(cols["u"][edge])).all() and (cols["fv"][edge] == attr(cols["v"][edge])).all()
    return cols["u"], cols["v"]


def local_components(edges: list[tuple[int, int]], parts: int = 3,
                     max_iterations: int = 50) -> tuple[dict[int, int], int]:
    """The Ray driver's loop, with the shuffle done in-process: {node: root}, iterations."""
    u = np.array([e[0] for e in edges], dtype=np.int64)
    v = np.array([e[1] for e in edges], dtype=np.int64)
    for iteration in range(1, max_iterations + 1):
        lu, lv = _run_partitions(large_star_partition, np.concatenate([u, v]),
                                 np.concatenate([v, u]), parts)
        edge = lu >= 0
        if lv[lu == -1].sum() == 0:
            roots = {int(a): int(b) for a, b in zip(lu[edge], lv[edge])}
            assert len(roots) == lv[lu == -3].sum()  # leaves marker = number of non-roots
            return roots, iteration
        lu, lv = lu[edge], lv[edge]
        u, v = _run_partitions(small_star_partition, np.maximum(lu, lv), np.minimum(lu, lv), parts)
    raise AssertionError("did not converge")


def _edge_items(edges):
    return [{"u": a, "v": b, "fu": int(attr(a)), "fv": int(attr(b))} for a, b in edges]


def expected_roots(edges: list[tuple[int, int]]) -> dict[int, int]:
    nodes = sorted({n for e in edges for n in e})
    index = {n: i for i, n in enumerate(nodes)}
    rows = [index[a] for a, _ in edges]
    cols = [index[b] for _, b in edges]
    graph = coo_matrix((np.ones(len(edges)), (rows, cols)), shape=(len(nodes), len(nodes)))
    _, label = scipy_components(graph, directed=False)
    smallest: dict[int, int] = {}
    for n in nodes:
        smallest.setdefault(label[index[n]], n)
    return {n: smallest[label[index[n]]] for n in nodes if smallest[label[index[n]]] != n}


HAND_BUILT = {
    "chain": [(i, i + 1) for i in range(10, 30)],
    "reversed_chain": [(i + 1, i) for i in range(40, 60)],
    "star": [(100, k) for k in range(101, 110)],
    "star_off_centre": [(205, k) for k in (200, 201, 209, 210, 211)],
    "two_components_and_a_cycle": [(1, 2), (2, 3), (3, 1), (7, 8), (8, 9), (9, 5)],
    "duplicate_and_self_edges": [(4, 5), (5, 4), (4, 5), (6, 6), (6, 5)],
}


@pytest.mark.parametrize("name", sorted(HAND_BUILT))
def test_hand_built_graphs(name):
    roots, _ = local_components(HAND_BUILT[name])
    assert roots == expected_roots(HAND_BUILT[name])


def test_chain_merges_transitively_into_one_cluster():
    roots, iterations = local_components([(i, i + 1) for i in range(1, 65)], parts=4)
    assert set(roots.values()) == {1} and len(roots) == 64
    assert iterations > 1  # a long chain needs several rounds, not one bucket


@pytest.mark.parametrize("seed", range(6))
def test_random_graphs_match_scipy(seed):
    rng = random.Random(seed)
    nodes = rng.sample(range(1, 1 << 40), 300)
    edges = [(rng.choice(nodes), rng.choice(nodes)) for _ in range(rng.choice([100, 250, 400]))]
    roots, _ = local_components(edges, parts=rng.randint(1, 5))
    assert roots == expected_roots(edges)


@pytest.mark.slow
@pytest.mark.parametrize("parts", [1, 3])
def test_ray_components_on_a_hand_built_graph(ray_local, monkeypatch, parts, tmp_path):
    """On Ray, with the partition count the edge count gives (the minimum here) and with several."""
    import pipelines.dedup.components as components

    sized = []
    monkeypatch.setattr(components, "partitions_for", lambda n, **_: sized.append(n) or parts)
    edges = HAND_BUILT["chain"][:6] + HAND_BUILT["star_off_centre"] + [(1, 2), (3, 2)]
    ds = ray_local.data.from_items(_edge_items(edges))
    comps = connected_components(ds, max_iterations=20, work=str(tmp_path / "cc"))
    rows = comps.edges.take_all()
    got = {r["u"]: r["v"] for r in rows}
    assert got == expected_roots(edges)
    assert all((r["fu"], r["fv"]) == (r["u"] % 7, r["v"] % 7) for r in rows)
    assert comps.members == len(got) and comps.clusters == 3 and comps.iterations >= 2
    assert sized == [len(edges) * 2 * 32]  # sized from the data: both directions, 32 bytes a row
    assert len(comps.shuffles) == 2 * comps.iterations - 1 and all(s["partitions"] == parts for s in comps.shuffles)
    assert not list((tmp_path / "cc").rglob("*.arrows"))  # every round's files are gone


def test_ray_components_of_no_edges(ray_local, tmp_path):
    from ray.data.expressions import col

    ds = ray_local.data.from_items(_edge_items([(1, 0)])).filter(expr=col("u") < 0)
    comps = connected_components(ds, max_iterations=5, work=str(tmp_path))
    assert (comps.iterations, comps.clusters, comps.members) == (0, 0, 0)
    assert comps.edges.take_all() == []


@pytest.mark.slow
def test_ray_components_raise_when_capped(ray_local, tmp_path):
    ds = ray_local.data.from_items(_edge_items([(i, i + 1) for i in range(30)]))
    with pytest.raises(ComponentsNotConverged):
        connected_components(ds, max_iterations=1, work=str(tmp_path))
