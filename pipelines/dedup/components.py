"""Distributed connected components on Ray Data: alternating large-star / small-star rounds.

The near-dedup stage produces candidate edges (every member of an LSH bucket -> the bucket's
smallest uid). Documents that are near-duplicates through a chain (A~B in one band, B~C in
another) must end up in one cluster, so clusters are the connected components of that graph.
datatrove runs a single-process union-find here, its known bottleneck; this module keeps the
graph in Ray Data and works on it with grouped shuffles only (Kiveris et al., "Connected
Components in MapReduce and Beyond", SoCC 2014):

* large-star: for every node ``u`` with neighbourhood ``N(u)``, ``m = min(N(u) + {u})``; link
  every neighbour ``v > u`` to ``m``.
* small-star: for every node ``u`` with smaller neighbours ``S(u)``, ``m = min(S(u) + {u})``;
  link every ``v`` in ``S(u) + {u}`` other than ``m`` to ``m``.

Both keep the components and shrink their diameter; alternated they converge in O(log^2 n)
rounds to a forest of stars, each centred on its component's smallest uid. The convergence test
needs no extra pass: large-star groups every node with all of its neighbours anyway, so it
counts the nodes that are not yet in star form (a node with a smaller and a larger neighbour,
or with two smaller ones). When that count is zero the input already is the star forest.

Every grouped step goes through ``raydata.group_apply``: rows get a partition number from a hash of their
key, Ray Data's ``groupby(...).map_groups`` hands each partition to one call, and that call
works on the whole partition with numpy (sort, ``reduceat``) rather than a Python call per node.
Edges are stored as ``(u, v)`` int64 columns with ``v < u`` (``v`` is the smaller uid); a row with
``u < 0`` is a statistics marker, never an edge (uids are 63-bit non-negative).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import ray

from pipelines.engine.raydata import group_apply, partitions_for

_MARK_VIOLATIONS, _MARK_CENTRES, _MARK_LEAVES = -1, -2, -3


class ComponentsNotConverged(RuntimeError):
    """Raised when large-star/small-star did not reach a star forest within the iteration cap."""


@dataclass
class Components:
    """Star-forest edges ``(u -> v)``: every non-root node ``u`` with its component root ``v``."""
    edges: ray.data.Dataset
    iterations: int
    clusters: int  # components with at least two nodes
    members: int  # non-root nodes (= documents a filter removes)


def _edges(u: np.ndarray, v: np.ndarray) -> dict[str, np.ndarray]:
    return {"u": np.asarray(u, dtype=np.int64), "v": np.asarray(v, dtype=np.int64)}


def _both_directions(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    keep = batch["u"] >= 0
    u, v = batch["u"][keep], batch["v"][keep]
    return {"x": np.concatenate([u, v]), "y": np.concatenate([v, u])}


def _larger_first(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    keep = batch["u"] >= 0
    u, v = batch["u"][keep], batch["v"][keep]
    return {"x": np.maximum(u, v), "y": np.minimum(u, v)}


def unique_pairs(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (x, y) pairs sorted by x then y (a lexsort: ~3x faster than
    ``np.unique(axis=0)``, which sorts rows as opaque byte strings)."""
    x, y = np.asarray(x, np.int64), np.asarray(y, np.int64)
    order = np.lexsort((y, x))
    x, y = x[order], y[order]
    keep = np.ones(len(x), dtype=bool)
    keep[1:] = (x[1:] != x[:-1]) | (y[1:] != y[:-1])
    return x[keep], y[keep]


def _grouped(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unique (x, y) pairs sorted by x then y, and the index where each x's group starts."""
    x, y = unique_pairs(x, y)
    starts = np.flatnonzero(np.diff(x, prepend=x[:1] - 1)) if len(x) else np.zeros(0, np.int64)
    return x, y, starts


def large_star_partition(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Large-star on one partition of (x, y) neighbour rows, plus convergence markers."""
    x, y, starts = _grouped(batch["x"], batch["y"])
    if len(x) == 0:
        return _edges([], [])
    group = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(x))))
    node = x[starts]
    m = np.minimum(node, y[starts])  # y is sorted within a group: the first is the smallest
    smaller = np.add.reduceat((y < x).astype(np.int64), starts)
    larger = np.add.reduceat((y > x).astype(np.int64), starts)
    violations = int(np.count_nonzero(((smaller > 0) & (larger > 0)) | (smaller > 1)))
    centres = int(np.count_nonzero((smaller == 0) & (larger > 0)))
    leaves = int(np.count_nonzero((smaller == 1) & (larger == 0)))
    out = y > x
    u = np.concatenate([y[out], [_MARK_VIOLATIONS, _MARK_CENTRES, _MARK_LEAVES]])
    v = np.concatenate([m[group][out], [violations, centres, leaves]])
    return _edges(u, v)


def small_star_partition(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Small-star on one partition of (x, y) rows with y < x (the smaller neighbours of x)."""
    x, y, starts = _grouped(batch["x"], batch["y"])
    if len(x) == 0:
        return _edges([], [])
    counts = np.diff(np.append(starts, len(x)))
    m = y[starts]  # the smallest smaller neighbour; always < x
    leaves = y != np.repeat(m, counts)
    u = np.concatenate([x[starts], y[leaves]])
    v = np.concatenate([m, np.repeat(m, counts)[leaves]])
    return _edges(u, v)


def _marker_sums(ds: ray.data.Dataset) -> dict[int, int]:
    def pick(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        mark = batch["u"] < 0
        return {"u": batch["u"][mark], "v": batch["v"][mark]}

    sums: dict[int, int] = {}
    for row in ds.map_batches(pick, batch_format="numpy").take_all():
        sums[int(row["u"])] = sums.get(int(row["u"]), 0) + int(row["v"])
    return sums


def _without_markers(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    keep = batch["u"] >= 0
    return {"u": batch["u"][keep], "v": batch["v"][keep]}


def connected_components(edges: ray.data.Dataset, *, max_iterations: int) -> Components:
    """Components of the undirected graph given by int64 columns ``u``, ``v`` (uids >= 0).

    Returns the star-forest edges ``u -> root`` (root = smallest uid of the component) for every
    non-root node. Raises ``ComponentsNotConverged`` after ``max_iterations`` rounds. Shuffle
    partitions follow the number of edges (each round shuffles both directions of every edge,
    16 bytes per row), not the cluster's CPUs.
    """
    current = edges.materialize()
    num_edges = current.count()
    if num_edges == 0:  # nothing to shuffle
        return Components(edges=current, iterations=0, clusters=0, members=0)
    parts = partitions_for(num_edges * 2 * 16)
    for iteration in range(1, max_iterations + 1):
        neighbours = current.map_batches(_both_directions, batch_format="numpy")
        large = group_apply(neighbours, large_star_partition, key="x",
                            num_partitions=parts).materialize()
        marks = _marker_sums(large)
        if marks.get(_MARK_VIOLATIONS, 0) == 0:
            # The input was already the star forest, so large-star returned it unchanged.
            stars = large.map_batches(_without_markers, batch_format="numpy")
            return Components(edges=stars, iterations=iteration,
                              clusters=marks.get(_MARK_CENTRES, 0),
                              members=marks.get(_MARK_LEAVES, 0))
        smaller = large.map_batches(_larger_first, batch_format="numpy")
        current = group_apply(smaller, small_star_partition, key="x",
                              num_partitions=parts).materialize()
    raise ComponentsNotConverged(
        f"connected components did not converge in {max_iterations} large/small-star rounds; "
        "raise dedup.max_cc_iterations")
