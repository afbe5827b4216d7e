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

Every grouped step is a storage shuffle (``pipelines.engine.shuffle.group_apply``): rows get a
partition number from a hash of their key, each partition reaches one reduce call, and that call
works on the whole partition with numpy (sort, ``reduceat``) rather than a Python call per node.
Edges are stored as ``(u, v)`` int64 columns with ``v < u`` (``v`` is the smaller uid), plus
``fu``/``fv``: a per-node attribute carried along unchanged (the index of the document part a
node's document lives in), so the finished stars say where each removed document is without a
join. A row with ``u < 0`` is a statistics marker, never an edge (uids are 63-bit non-negative).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import ray

from common import storage
from pipelines.config import ShuffleConfig
from pipelines.engine.raydata import partitions_for
from pipelines.engine.shuffle import group_apply

_MARK_VIOLATIONS, _MARK_CENTRES, _MARK_LEAVES = -1, -2, -3


class ComponentsNotConverged(RuntimeError):
    """Raised when large-star/small-star did not reach a star forest within the iteration cap."""


@dataclass
class Components:
    """Star-forest edges ``(u -> v)``: every non-root node ``u`` with its component root ``v``
    (and their attributes ``fu``, ``fv``)."""
    edges: ray.data.Dataset
    iterations: int
    clusters: int  # components with at least two nodes
    members: int  # non-root nodes (= documents a filter removes)
    shuffles: list[dict] = field(default_factory=list)  # each shuffle's statistics


def _ints(a) -> np.ndarray:
    return np.asarray(a, dtype=np.int64)


def _edges(u, v, fu, fv) -> dict[str, np.ndarray]:
    return {"u": _ints(u), "v": _ints(v), "fu": _ints(fu), "fv": _ints(fv)}


def _both_directions(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    keep = batch["u"] >= 0
    u, v, fu, fv = (batch[c][keep] for c in ("u", "v", "fu", "fv"))
    return {"x": np.concatenate([u, v]), "y": np.concatenate([v, u]),
            "fx": np.concatenate([fu, fv]), "fy": np.concatenate([fv, fu])}


def _larger_first(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    keep = batch["u"] >= 0
    u, v, fu, fv = (batch[c][keep] for c in ("u", "v", "fu", "fv"))
    swap = v > u
    return {"x": np.where(swap, v, u), "y": np.where(swap, u, v),
            "fx": np.where(swap, fv, fu), "fy": np.where(swap, fu, fv)}


def unique_pairs(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct (x, y) pairs sorted by x then y, and the index of each in the input (a
    lexsort: ~3x faster than ``np.unique(axis=0)``, which sorts rows as opaque byte strings)."""
    x, y = _ints(x), _ints(y)
    order = np.lexsort((y, x))
    x, y = x[order], y[order]
    keep = np.ones(len(x), dtype=bool)
    keep[1:] = (x[1:] != x[:-1]) | (y[1:] != y[:-1])
    return x[keep], y[keep], order[keep]


def _grouped(batch: dict[str, np.ndarray]):
    """Unique (x, y) rows sorted by x then y with their attributes, and where each x's group
    starts. A node's attribute is the same on every row that names it."""
    x, y, index = unique_pairs(batch["x"], batch["y"])
    fx, fy = _ints(batch["fx"])[index], _ints(batch["fy"])[index]
    starts = np.flatnonzero(np.diff(x, prepend=x[:1] - 1)) if len(x) else np.zeros(0, np.int64)
    return x, y, fx, fy, starts


def large_star_partition(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Large-star on one partition of (x, y) neighbour rows, plus convergence markers."""
    x, y, fx, fy, starts = _grouped(batch)
    if len(x) == 0:
        return _edges([], [], [], [])
    group = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(x))))
    node = x[starts]
    # y is sorted within a group: the first is the smallest neighbour
    node_is_min = node < y[starts]
    m = np.where(node_is_min, node, y[starts])
    fm = np.where(node_is_min, fx[starts], fy[starts])
    smaller = np.add.reduceat((y < x).astype(np.int64), starts)
    larger = np.add.reduceat((y > x).astype(np.int64), starts)
    violations = int(np.count_nonzero(((smaller > 0) & (larger > 0)) | (smaller > 1)))
    centres = int(np.count_nonzero((smaller == 0) & (larger > 0)))
    leaves = int(np.count_nonzero((smaller == 1) & (larger == 0)))
    out = y > x
    marks = [_MARK_VIOLATIONS, _MARK_CENTRES, _MARK_LEAVES]
    return _edges(np.concatenate([y[out], marks]), np.concatenate([m[group][out], [violations, centres, leaves]]),
                  np.concatenate([fy[out], [0, 0, 0]]), np.concatenate([fm[group][out], [0, 0, 0]]))


def small_star_partition(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Small-star on one partition of (x, y) rows with y < x (the smaller neighbours of x)."""
    x, y, fx, fy, starts = _grouped(batch)
    if len(x) == 0:
        return _edges([], [], [], [])
    counts = np.diff(np.append(starts, len(x)))
    m, fm = y[starts], fy[starts]  # the smallest smaller neighbour; always < x
    leaves = y != np.repeat(m, counts)
    return _edges(np.concatenate([x[starts], y[leaves]]), np.concatenate([m, np.repeat(m, counts)[leaves]]),
                  np.concatenate([fx[starts], fy[leaves]]), np.concatenate([fm, np.repeat(fm, counts)[leaves]]))


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
    return {c: batch[c][keep] for c in ("u", "v", "fu", "fv")}


def connected_components(edges: ray.data.Dataset, *, max_iterations: int, work: str,
                         shuffle: ShuffleConfig | None = None) -> Components:
    """Components of the undirected graph given by int64 columns ``u``, ``v`` (uids >= 0) with
    node attributes ``fu``, ``fv``.

    Returns the star-forest edges ``u -> root`` (root = smallest uid of the component) for every
    non-root node, with both attributes. Raises ``ComponentsNotConverged`` after
    ``max_iterations`` rounds. Shuffle partitions follow the number of edges (each round
    shuffles both directions of every edge, 32 bytes per row), not the cluster's CPUs; each
    round's shuffle files go under ``work`` and are deleted once the next round has read them.
    """
    shuffle = shuffle or ShuffleConfig()
    current = edges.materialize()
    num_edges = current.count()
    if num_edges == 0:  # nothing to shuffle
        return Components(edges=current, iterations=0, clusters=0, members=0)
    parts = partitions_for(num_edges * 2 * 32, partition_bytes=shuffle.partition_bytes)
    shuffles: list[dict] = []

    def grouped(ds: ray.data.Dataset, fn, name: str) -> ray.data.Dataset:
        out, sh = group_apply(ds, fn, key="x", partitions=parts, folder=storage.join(work, name), name=name,
                              **shuffle.options())
        out = out.materialize()  # small (edges only); the round's shuffle files can go
        sh.remove()
        shuffles.append(sh.stats)
        return out

    for iteration in range(1, max_iterations + 1):
        large = grouped(current.map_batches(_both_directions, batch_format="numpy"), large_star_partition,
                        f"cc{iteration}_large")
        marks = _marker_sums(large)
        if marks.get(_MARK_VIOLATIONS, 0) == 0:
            # The input was already the star forest, so large-star returned it unchanged.
            stars = large.map_batches(_without_markers, batch_format="numpy")
            return Components(edges=stars, iterations=iteration,
                              clusters=marks.get(_MARK_CENTRES, 0),
                              members=marks.get(_MARK_LEAVES, 0), shuffles=shuffles)
        current = grouped(large.map_batches(_larger_first, batch_format="numpy"), small_star_partition,
                          f"cc{iteration}_small")
    raise ComponentsNotConverged(
        f"connected components did not converge in {max_iterations} large/small-star rounds; "
        "raise dedup.max_cc_iterations")
