"""Exact and near dedup: the partition functions without Ray, then the stages on Ray Data."""
from __future__ import annotations

import random

import numpy as np
import pytest

from synthetic import prose
from pipelines.config import DedupConfig
from pipelines.dedup import (EXACT, NEAR, Marks, bucket_edges, digest_rows, exact_dedup, exact_marks,
                             mark_documents, near_dedup, signature_buckets)


def _rows(texts: list[str], uids: list[int], reasons: list[str] | None = None) -> dict:
    n = len(texts)
    return {"id": np.array([f"t:{i}" for i in range(n)], dtype=object),
            "uid": np.array(uids, dtype=np.int64),
            "text": np.array(texts, dtype=object),
            "reason": np.array(reasons or [""] * n, dtype=object),
            "detail": np.array([""] * n, dtype=object)}


def _items(batch: dict) -> list[dict]:
    return [{k: (int(v[i]) if k == "uid" else v[i]) for k, v in batch.items()} for i in range(len(batch["uid"]))]


def test_exact_marks_keep_the_smallest_uid_and_skip_rejected_rows():
    batch = _rows(["same", "other", "same", "same", "same"], [50, 7, 9, 30, 1],
                  ["", "", "", "", "filter:min_words"])
    digests = digest_rows(batch)
    # Only small keys of the active rows go into the shuffle, never the text.
    assert set(digests) == {"h0", "h1", "uid"} and all(v.dtype == np.int64 for v in digests.values())
    assert digests["uid"].tolist() == [50, 7, 9, 30]
    same = digests["uid"] != 7
    assert len({(a, b) for a, b in zip(digests["h0"][same], digests["h1"][same])}) == 1
    # Partition rows arrive in any order: the result is the same.
    rng = np.random.default_rng(0)
    for _ in range(3):
        order = rng.permutation(len(digests["uid"]))
        out = exact_marks({k: v[order] for k, v in digests.items()})
        assert sorted(zip(out["u"].tolist(), out["v"].tolist())) == [(30, 9), (50, 9)]
    empty = exact_marks({k: v[:0] for k, v in digests.items()})
    assert len(empty["u"]) == len(empty["v"]) == 0


def test_bucket_edges_link_members_to_the_bucket_minimum():
    batch = {"bucket": np.array([5, 5, 5, 8, 8, 9, 5], dtype=np.int64),
             "uid": np.array([30, 10, 20, 40, 41, 99, 10], dtype=np.int64)}
    out = bucket_edges(batch)
    assert sorted(zip(out["u"].tolist(), out["v"].tolist())) == [(20, 10), (30, 10), (41, 40)]


def test_signature_buckets_carry_no_text():
    cfg = DedupConfig()
    batch = _rows(["the same five words here now", "...", "other words in this one text", "x y z w v"],
                  [4, 5, 6, 7], ["", "", "", "filter:x"])
    out = signature_buckets(batch, cfg=cfg)
    assert set(out) == {"bucket", "uid"} and out["bucket"].dtype == out["uid"].dtype == np.int64
    # One row per band of each active document with a word; no word, no bucket; rejected: none.
    assert sorted(set(out["uid"].tolist())) == [4, 6] and len(out["uid"]) == 2 * cfg.num_bands


@pytest.mark.parametrize("piece_rows", [1, 2, 3, None])
def test_marks_mark_members_only_whatever_the_piece_size(ray_local, piece_rows):
    """The marks table in many small object-store pieces marks exactly what one piece marks."""
    docs = _rows(["a", "b", "c", "d", "e", "f"], [3, 4, 5, 11, 2, 8], ["", "", "filter:x", "", "", ""])
    member, root = np.array([11, 4, 5, 8], np.int64), np.array([2, 3, 3, 2], np.int64)
    kw = {} if piece_rows is None else {"piece_rows": piece_rows}
    marks = Marks.build(member, root, **kw)
    assert marks.count == 4 and len(marks.pieces) == (1 if piece_rows is None else -(-4 // piece_rows))
    pieces = [ray_local.get(p) for p in marks.pieces]
    assert np.concatenate([m for m, _ in pieces]).tolist() == [4, 5, 8, 11]  # sorted by member
    ds = ray_local.data.from_items(_items(docs), override_num_blocks=2)
    got = {r["uid"]: (r["reason"], r["detail"]) for r in mark_documents(ds, marks, NEAR).take_all()}
    assert got == {3: ("", ""), 4: (NEAR, "duplicate of uid 3"), 5: ("filter:x", ""), 11: (NEAR, "duplicate of uid 2"),
                   2: ("", ""), 8: (NEAR, "duplicate of uid 2")}
    empty = Marks.build(np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert empty.count == 0 and mark_documents(ds, empty, NEAR) is ds


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
    originals = [d for d in prose.documents(160, seed=11) if len(d.split()) >= 120][:90]
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


def _run(ray_local, rows, *, blocks: int, monkeypatch=None, partitions: int | None = None,
         piece_rows: int | None = None):
    """Exact then near dedup as the stages chain them; ``partitions`` forces the shuffle width
    (by default it follows the number of documents: one partition for this corpus)."""
    import pipelines.dedup.components as components
    import pipelines.dedup.exact as dedup

    if partitions is not None:
        monkeypatch.setattr(dedup, "partitions_for", lambda n: partitions)
        monkeypatch.setattr(components, "partitions_for", lambda n: partitions)
    kw = {} if piece_rows is None else {"piece_rows": piece_rows}
    ds = ray_local.data.from_items(rows).repartition(blocks)
    ds, exact = exact_dedup(ds, num_docs=len(rows), **kw)
    ds, near = near_dedup(ds.materialize(), DedupConfig(), num_docs=len(rows), **kw)
    return sorted(ds.take_all(), key=lambda r: r["uid"]), {**exact, **near}


@pytest.fixture(scope="module")
def first_run(ray_local, planted):
    return _run(ray_local, planted["rows"], blocks=1)


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
    assert stats["exact_duplicates"] == sum(r["reason"] == EXACT for r in rows) >= 8
    assert stats["near_duplicates"] == sum(r["reason"] == NEAR for r in rows)
    assert stats["clusters"] >= 20 and stats["cc_iterations"] >= 1
    # The whole chain collapses onto its smallest uid, transitively, although its two ends are
    # far below the LSH threshold (they are never in one bucket).
    assert planted["chain_sim"] < 0.6
    chain = members[0]
    assert all(r["reason"] != "" for r in rows if r["uid"] in chain and r["uid"] != min(chain))
    # A row that arrived rejected passes through untouched.
    bad = next(r for r in rows if r["uid"] == 3)
    assert (bad["reason"], bad["detail"]) == ("filter:min_words", "kept out")
    assert len(rows) == len(planted["rows"])


def test_dedup_is_deterministic_across_blocks_partitions_and_pieces(ray_local, monkeypatch, planted, first_run):
    """Other blocks, three shuffle partitions and marks in pieces of two rows: the same result."""
    again, stats = _run(ray_local, planted["rows"][::-1], blocks=7, monkeypatch=monkeypatch, partitions=3,
                        piece_rows=2)
    assert again == first_run[0]
    assert stats == first_run[1]


def test_exact_and_near_dedup_keep_the_smallest_uid(ray_local):
    text = " ".join(prose.documents(3, seed=2))
    near = text.replace(" the ", " a ", 1)
    rows = [{"id": f"x:{u}", "uid": u, "text": t, "reason": "", "detail": ""}
            for u, t in ((70, text), (12, text), (40, text), (90, near), (25, near), (5, "unrelated words " * 9))]
    ds, stats = exact_dedup(ray_local.data.from_items(rows, override_num_blocks=3), num_docs=len(rows))
    got = {r["uid"]: (r["reason"], r["detail"]) for r in ds.take_all()}
    assert got == {70: (EXACT, "duplicate of uid 12"), 40: (EXACT, "duplicate of uid 12"), 12: ("", ""),
                   90: (EXACT, "duplicate of uid 25"), 25: ("", ""), 5: ("", "")}
    assert stats == {"exact_duplicates": 3}
    ds, stats = near_dedup(ds, DedupConfig(), num_docs=len(rows))
    got = {r["uid"]: (r["reason"], r["detail"]) for r in ds.take_all()}
    assert got[25] == (NEAR, "duplicate of uid 12") and got[12] == ("", "") and got[5] == ("", "")
    assert got[70][0] == got[90][0] == EXACT  # rows that arrive marked pass through
    assert stats["near_duplicates"] == 1 and stats["clusters"] == 1


def test_only_small_keys_go_through_the_shuffles(ray_local, monkeypatch):
    """Every ``group_apply`` of dedup and connected components sees integer keys, never text."""
    import pipelines.dedup.components as components
    import pipelines.dedup.exact as dedup

    seen = []

    def spy(real):
        def wrapped(ds, fn, **kw):
            schema = ds.schema()
            seen.append((fn.__name__, list(schema.names), [str(t) for t in schema.types]))
            return real(ds, fn, **kw)
        return wrapped

    monkeypatch.setattr(dedup, "group_apply", spy(dedup.group_apply))
    monkeypatch.setattr(components, "group_apply", spy(components.group_apply))
    text = " ".join(prose.documents(2, seed=8))
    rows = [{"id": f"y:{u}", "uid": u, "text": t, "reason": "", "detail": ""}
            for u, t in ((1, text), (2, text + " and more"), (3, text), (4, "other words " * 10))]
    ds, _ = exact_dedup(ray_local.data.from_items(rows), num_docs=4)
    ds, stats = near_dedup(ds, DedupConfig(), num_docs=4)
    assert sum(r["reason"] != "" for r in ds.take_all()) == 2
    by_fn = {name: (cols, types) for name, cols, types in seen}
    assert by_fn["exact_marks"] == (["h0", "h1", "uid"], ["int64"] * 3)
    assert by_fn["bucket_edges"] == (["bucket", "uid"], ["int64"] * 2)
    assert by_fn["large_star_partition"] == (["x", "y"], ["int64"] * 2)
    assert set(by_fn) <= {"exact_marks", "bucket_edges", "large_star_partition", "small_star_partition"}
    assert all(cols in (["x", "y"], ["h0", "h1", "uid"], ["bucket", "uid"]) for _, cols, _ in seen)


def test_documents_without_words_and_rejected_rows(ray_local):
    """No word means no shingle and no bucket: near dedup skips its shuffles, nothing breaks."""
    rows = [{"id": "a", "uid": 1, "text": "x y", "reason": "filter:short", "detail": "why"},
            {"id": "b", "uid": 5, "text": "...", "reason": "", "detail": ""},
            {"id": "c", "uid": 2, "text": "...", "reason": "", "detail": ""}]
    ds, exact = exact_dedup(ray_local.data.from_items(rows), num_docs=3)
    out, near = near_dedup(ds, DedupConfig(), num_docs=3)
    got = {r["uid"]: (r["reason"], r["detail"]) for r in out.take_all()}
    assert got == {1: ("filter:short", "why"), 2: ("", ""), 5: (EXACT, "duplicate of uid 2")}
    assert exact == {"exact_duplicates": 1}
    assert near == {"near_duplicates": 0, "clusters": 0, "cc_iterations": 0, "lsh_threshold": 0.719}


def test_a_text_that_is_not_a_string_is_a_clear_error():
    batch = _rows(["fine text", "also fine"], [1, 2])
    batch["text"][1] = None
    with pytest.raises(TypeError, match="'t:1'.*NoneType"):
        digest_rows(batch)
    with pytest.raises(TypeError, match="'t:1'"):
        signature_buckets(batch, cfg=DedupConfig())
