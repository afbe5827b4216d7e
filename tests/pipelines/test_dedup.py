"""Exact and near dedup: the partition functions without Ray, then the stages on Ray Data."""
from __future__ import annotations

import random

import numpy as np
import pytest

from pipelines import synthetic
from pipelines.config import DedupConfig
from pipelines.dedup import (EXACT, NEAR, bucket_edges, dedup, exact_partition,
                             mark_near_duplicates)


def _rows(texts: list[str], uids: list[int], reasons: list[str] | None = None) -> dict:
    n = len(texts)
    return {"id": np.array([f"t:{i}" for i in range(n)], dtype=object),
            "uid": np.array(uids, dtype=np.int64),
            "text": np.array(texts, dtype=object),
            "reason": np.array(reasons or [""] * n, dtype=object),
            "detail": np.array([""] * n, dtype=object)}


def test_exact_partition_keeps_smallest_uid_and_passes_rejected_rows():
    from pipelines.dedup import _digest_columns

    batch = _rows(["same", "other", "same", "same", "same"], [50, 7, 9, 30, 1],
                  ["", "", "", "", "filter:min_words"])
    out = exact_partition(_digest_columns(batch))
    assert list(out["reason"]) == ["dedup:exact", "", "", "dedup:exact", "filter:min_words"]
    assert list(out["detail"]) == ["duplicate of uid 9", "", "", "duplicate of uid 9", ""]
    assert "_h0" not in out and list(out["uid"]) == [50, 7, 9, 30, 1]


def test_bucket_edges_link_members_to_the_bucket_minimum():
    batch = {"bucket": np.array([5, 5, 5, 8, 8, 9, 5], dtype=np.int64),
             "uid": np.array([30, 10, 20, 40, 41, 99, 10], dtype=np.int64)}
    out = bucket_edges(batch)
    assert sorted(zip(out["u"].tolist(), out["v"].tolist())) == [(20, 10), (30, 10), (41, 40)]


def test_mark_near_duplicates_joins_labels_by_uid():
    docs = _rows(["a", "b", "c"], [3, 4, 5], ["", "", "filter:x"])
    docs["_kind"] = np.zeros(3, np.int64)
    docs["_root"] = np.full(3, -1, np.int64)
    labels = _rows(["", ""], [4, 5])
    labels["_kind"] = np.ones(2, np.int64)
    labels["_root"] = np.array([3, 3], np.int64)
    batch = {k: np.concatenate([docs[k], labels[k]]) for k in docs}
    out = mark_near_duplicates(batch)
    assert list(out["uid"]) == [3, 4, 5]
    assert list(out["reason"]) == ["", NEAR, "filter:x"]
    assert out["detail"][1] == "duplicate of uid 3"


# ----------------------------------------------------------------------------- Ray Data


def _shingles(text: str, n: int = 5) -> set[tuple[str, ...]]:
    words = text.lower().split()
    return {tuple(words[i:i + n]) for i in range(max(1, len(words) - n + 1))}


def _jaccard(a: str, b: str) -> float:
    sa, sb = _shingles(a), _shingles(b)
    return len(sa & sb) / len(sa | sb)


def _near_copy(rng: random.Random, text: str, low: float = 0.85, high: float = 0.95) -> str:
    """A copy with a few words replaced, at a true 5-gram Jaccard in [low, high]."""
    words = text.split(" ")
    for _ in range(300):
        edited = list(words)
        for _ in range(rng.randint(1, max(1, len(words) // 40))):
            edited[rng.randrange(len(words))] = rng.choice(["zebra", "quartz", "nimbus", "fjord"])
        copy = " ".join(edited)
        if low <= _jaccard(text, copy) <= high:
            return copy
    raise AssertionError("could not plant a near-duplicate")


@pytest.fixture(scope="module")
def planted():
    """Distinct documents, groups of exact and near copies, and a chain of successive edits."""
    rng = random.Random(5)
    originals = [d for d in synthetic.documents(160, seed=11) if len(d.split()) >= 120][:90]
    groups = [[d] for d in originals]
    for g in rng.sample(groups, 20):
        g.append(_near_copy(rng, g[0]))
    for g in rng.sample(groups, 8):
        g.append(g[0])  # exact copy
    chain = groups[0]  # successive edits: the last is far from the first, but linked
    del chain[1:]
    for _ in range(7):
        chain.append(_near_copy(rng, chain[-1], 0.84, 0.9))
    texts, group_of = [], []
    for gi, g in enumerate(groups):
        texts += g
        group_of += [gi] * len(g)
    uids = rng.sample(range(1, 1 << 62), len(texts))
    rows = [{"id": f"t:{i}", "uid": u, "text": t, "reason": "", "detail": ""}
            for i, (u, t) in enumerate(zip(uids, texts))]
    rows.append({"id": "bad", "uid": 3, "text": texts[0], "reason": "filter:min_words",
                 "detail": "kept out"})
    return {"rows": rows, "group": dict(zip(uids, group_of)),
            "chain_sim": _jaccard(chain[0], chain[-1])}


def _run(ray_local, rows, *, blocks: int, partitions: int):
    ds = ray_local.data.from_items(rows).repartition(blocks)
    out, stats = dedup(ds, DedupConfig(), num_partitions=partitions)
    return sorted(out.take_all(), key=lambda r: r["uid"]), stats


@pytest.fixture(scope="module")
def first_run(ray_local, planted):
    return _run(ray_local, planted["rows"], blocks=1, partitions=2)


def test_dedup_precision_recall_on_planted_duplicates(first_run, planted):
    rows, stats = first_run
    group = planted["group"]
    kept = {r["uid"] for r in rows if r["reason"] == ""}
    removed = [r for r in rows if r["reason"] in (EXACT, NEAR)]
    members: dict[int, list[int]] = {}
    for uid, g in group.items():
        members.setdefault(g, []).append(uid)
    expected = sum(len(m) - 1 for m in members.values())
    keeper_of = {r["uid"]: int(r["detail"].rsplit(" ", 1)[1]) for r in removed}
    correct = 0
    for r in removed:
        keeper = keeper_of[r["uid"]]
        while keeper in keeper_of:  # an exact keeper may itself be a near-duplicate
            keeper = keeper_of[keeper]
        if group.get(r["uid"]) == group.get(keeper) and keeper in kept:
            correct += 1
            assert keeper == min(members[group[keeper]]), r  # the smallest uid is kept
    precision = correct / max(len(removed), 1)
    recall = correct / expected
    print(f"\ndedup on planted corpus: {len(removed)} removed, {expected} planted, "
          f"precision {precision:.3f}, recall {recall:.3f}, chain ends at Jaccard "
          f"{planted['chain_sim']:.2f}, {stats}")
    assert precision >= 0.95 and recall >= 0.9
    assert stats.exact_removed == sum(r["reason"] == EXACT for r in rows) >= 8
    assert stats.near_removed == sum(r["reason"] == NEAR for r in rows)
    assert stats.clusters >= 20 and stats.cc_iterations >= 1
    # The whole chain collapses onto its smallest uid, transitively, although its two ends are
    # far below the LSH threshold (they are never in one bucket).
    assert planted["chain_sim"] < 0.6
    chain = members[0]
    assert all(r["reason"] != "" for r in rows if r["uid"] in chain and r["uid"] != min(chain))
    # A row that arrived rejected passes through untouched.
    bad = next(r for r in rows if r["uid"] == 3)
    assert (bad["reason"], bad["detail"]) == ("filter:min_words", "kept out")
    assert len(rows) == len(planted["rows"])


def test_dedup_is_deterministic_across_block_and_partition_counts(ray_local, planted, first_run):
    again, stats = _run(ray_local, planted["rows"], blocks=7, partitions=3)
    assert again == first_run[0]
    assert (stats.exact_removed, stats.near_removed, stats.clusters) == \
        (first_run[1].exact_removed, first_run[1].near_removed, first_run[1].clusters)


def test_documents_without_words_and_rejected_rows(ray_local):
    """No word means no shingle and no bucket: near dedup skips its shuffles, nothing breaks."""
    rows = [{"id": "a", "uid": 1, "text": "x y", "reason": "filter:short", "detail": "why"},
            {"id": "b", "uid": 5, "text": "...", "reason": "", "detail": ""},
            {"id": "c", "uid": 2, "text": "...", "reason": "", "detail": ""}]
    out, stats = dedup(ray_local.data.from_items(rows), DedupConfig(), num_partitions=2)
    got = {r["uid"]: (r["reason"], r["detail"]) for r in out.take_all()}
    assert got == {1: ("filter:short", "why"), 2: ("", ""), 5: (EXACT, "duplicate of uid 2")}
    assert (stats.exact_removed, stats.near_removed, stats.cc_iterations) == (1, 0, 0)


def test_a_text_that_is_not_a_string_is_a_clear_error():
    from pipelines.dedup import _digest_columns, signature_buckets

    batch = _rows(["fine text", "also fine"], [1, 2])
    batch["text"][1] = None
    with pytest.raises(TypeError, match="'t:1'.*NoneType"):
        _digest_columns(batch)
    with pytest.raises(TypeError, match="'t:1'"):
        signature_buckets(batch, cfg=DedupConfig())


def test_shuffle_join_marks_the_same_rows_as_the_broadcast(ray_local, planted):
    """Past ``broadcast_limit`` the labels meet the documents in a shuffle: same result."""
    from pipelines.dedup import near_dedup

    ds = ray_local.data.from_items(planted["rows"]).repartition(3)
    broadcast = sorted(near_dedup(ds, DedupConfig(), num_partitions=2).take_all(), key=lambda r: r["uid"])
    shuffled = sorted(near_dedup(ds, DedupConfig(), num_partitions=2, broadcast_limit=0).take_all(),
                      key=lambda r: r["uid"])
    assert broadcast == shuffled
    assert sum(r["reason"] == NEAR for r in broadcast) >= 20
    assert len(broadcast) == len(planted["rows"])
