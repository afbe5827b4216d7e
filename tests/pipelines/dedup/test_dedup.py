"""Exact and near dedup: the partition functions without Ray, then the stages over written parts."""
from __future__ import annotations

import collections
import dataclasses
import random

import numpy as np
import pyarrow as pa
import pytest

from common import storage
from pipelines.config import DedupConfig
from pipelines.dedup import (EXACT, NEAR, bucket_edges, digest_rows, exact_dedup, exact_marks, near_dedup,
                             signature_rows)
from pipelines.dedup.near import estimated_jaccard
from pipelines.engine import parts
from synthetic import prose


def _rows(texts: list[str], uids: list[int], reasons: list[str] | None = None) -> dict:
    n = len(texts)
    return {"id": np.array([f"t:{i}" for i in range(n)], dtype=object),
            "uid": np.array(uids, dtype=np.int64),
            "text": np.array(texts, dtype=object),
            "reason": np.array(reasons or [""] * n, dtype=object),
            "detail": np.array([""] * n, dtype=object),
            "_file": np.arange(n, dtype=np.int64) % 3}


def test_exact_marks_keep_the_smallest_uid_and_skip_rejected_rows():
    batch = _rows(["same", "other", "same", "same", "same"], [50, 7, 9, 30, 1],
                  ["", "", "", "", "filter:min_words"])
    digests = digest_rows(batch)
    # Only small keys of the active rows go into the shuffle, never the text.
    assert set(digests) == {"h0", "h1", "uid", "file"} and all(v.dtype == np.int64 for v in digests.values())
    assert digests["uid"].tolist() == [50, 7, 9, 30] and digests["file"].tolist() == [0, 1, 2, 0]
    same = digests["uid"] != 7
    assert len({(a, b) for a, b in zip(digests["h0"][same], digests["h1"][same])}) == 1
    # Partition rows arrive in any order: the result is the same.
    rng = np.random.default_rng(0)
    for _ in range(3):
        order = rng.permutation(len(digests["uid"]))
        out = exact_marks({k: v[order] for k, v in digests.items()})
        assert sorted(zip(out["u"].tolist(), out["v"].tolist(), out["file"].tolist())) == [(30, 9, 0), (50, 9, 0)]
    empty = exact_marks({k: v[:0] for k, v in digests.items()})
    assert len(empty["u"]) == len(empty["v"]) == 0


def _bucket_table(bucket, uid, sketches) -> pa.Table:
    sk = np.asarray(sketches, dtype=np.uint8)
    return pa.table({"bucket": np.asarray(bucket, np.int64), "uid": np.asarray(uid, np.int64),
                     "file": np.asarray(uid, np.int64) % 5,
                     "sketch": pa.FixedSizeBinaryArray.from_buffers(pa.binary(sk.shape[1]), len(sk),
                                                                    [None, pa.py_buffer(sk.tobytes())])})


def _edges(out: dict) -> list[tuple[int, int]]:
    keep = out["u"] >= 0  # the marker row counts refused checks
    return sorted(zip(out["u"][keep].tolist(), out["v"][keep].tolist()))


def test_bucket_edges_verify_candidates_against_their_roots():
    rng = np.random.default_rng(3)
    a, b = rng.integers(0, 256, (2, 112))
    near_a = a.copy()
    near_a[:10] = rng.integers(0, 256, 10)  # ~0.91 of the values agree
    # bucket 5: 10 and 30 are alike, 20 is not, 40 is alike to 20; bucket 8: two alike
    table = _bucket_table([5, 5, 5, 5, 8, 8, 9, 5], [30, 10, 20, 40, 41, 42, 99, 10],
                          [near_a, a, b, b, a, a, b, a])
    out = bucket_edges(table, threshold=0.7)
    assert _edges(out) == [(30, 10), (40, 20), (42, 41)]
    # files ride along with both endpoints
    by_u = {int(u): (int(fu), int(fv)) for u, fu, fv in zip(out["u"], out["fu"], out["fv"]) if u >= 0}
    assert by_u == {30: (0, 0), 40: (0, 0), 42: (2, 1)}
    assert int(out["v"][out["u"] < 0].sum()) == 2  # 20 and 40 failed against 10; 40 then passed against 20
    # Without the check every member is linked to the bucket minimum (datatrove's behaviour).
    assert _edges(bucket_edges(table, threshold=None)) == [(20, 10), (30, 10), (40, 10), (42, 41)]


def test_estimated_jaccard_is_unbiased_for_b_bit_sketches():
    rng = np.random.default_rng(0)
    for true in (0.2, 0.5, 0.8):
        n = 200_000  # values, as if many signatures were compared at once
        a = rng.integers(0, 256, n, dtype=np.uint8)
        b = np.where(rng.random(n) < true, a, rng.integers(0, 256, n, dtype=np.uint8))
        assert abs(estimated_jaccard(a[None, :], b[None, :])[0] - true) < 0.01


def test_signature_rows_carry_ids_in_band_rows_and_the_sketch_once():
    from pipelines.dedup.minhash import band_hashes, minhash_signatures

    cfg = DedupConfig()
    batch = _rows(["the same five words here now", "...", "other words in this one text", "x y z w v"],
                  [4, 5, 6, 7], ["", "", "", "filter:x"])
    out = signature_rows(batch, cfg=cfg, partitions=5)
    assert out.column_names == ["key", "uid", "file", "sketch", "_part"]
    assert [str(t) for t in out.schema.types] == ["int64", "int64", "int64", "binary", "int64"]
    # No word means no row; a rejected document has none either: documents 4 and 6 only.
    lengths = np.array([len(x) for x in out.column("sketch").to_pylist()])
    part, key, uid = (out.column(c).to_numpy() for c in ("_part", "key", "uid"))
    band, sketch = lengths == 0, lengths == 112
    assert band.sum() == 2 * cfg.num_bands and sketch.sum() == 2 and (band | sketch).all()
    assert ((part[band] >= 0) & (part[band] < 5)).all() and ((part[sketch] >= 5) & (part[sketch] < 10)).all()
    assert sorted(uid[sketch].tolist()) == [4, 6] and (key[sketch] == uid[sketch]).all()
    assert out.column("file").to_numpy()[sketch].tolist() == [0, 2] and (out.column("file").to_numpy()[band] == 0).all()
    sigs = minhash_signatures(["the same five words here now", "other words in this one text"], cfg)
    assert sorted(key[band].tolist()) == sorted(band_hashes(sigs, cfg).ravel().tolist())
    got = {u: s for u, s in zip(uid.tolist(), out.column("sketch").to_pylist()) if s}
    assert got == {4: (sigs[0] & 255).astype(np.uint8).tobytes(), 6: (sigs[1] & 255).astype(np.uint8).tobytes()}


def test_candidate_steps_give_the_edges_of_every_band_row_with_its_sketch():
    """Steps 1-3 run by hand partition by partition (the shuffles' grouping done with dicts)
    give bucket_edges the same edges and refusals as the single table the previous design
    shuffled: every band row of every document with its sketch."""
    from pipelines.dedup.candidates import shared_buckets, with_sketches
    from pipelines.dedup.minhash import band_hashes, minhash_signatures

    cfg = DedupConfig()
    rng = random.Random(4)
    base = [" ".join(prose.documents(2, seed=s)) for s in range(6)]
    texts = (base + [_near_copy(rng, t, 0.9, 1.0) for t in base for _ in range(2)] + ["one two three four five"] * 3
             + [" ".join(prose.documents(2, seed=100 + s)) for s in range(20)])  # and 20 without a copy
    uids = rng.sample(range(1, 1 << 40), len(texts))
    batch = _rows(texts, uids)
    half = 4
    out = signature_rows(batch, cfg=cfg, partitions=half)
    by_part: dict[int, list[int]] = {}
    for i, p in enumerate(out.column("_part").to_pylist()):
        by_part.setdefault(p, []).append(i)
    members = [shared_buckets(out.take(by_part[p]).drop_columns(["_part"]), partitions=half)
               for p in range(half) if p in by_part]
    members = {k: np.concatenate([m[k] for m in members if m is not None]) for k in ("uid", "bucket", "_part")}
    candidates = []
    for p in range(half, 2 * half):
        mine = members["_part"] == p
        sketches = out.take(by_part[p]).drop_columns(["_part"]) if p in by_part else None
        got = with_sketches(pa.table({"uid": members["uid"][mine], "bucket": members["bucket"][mine]})
                            if mine.any() else None, sketches)
        if got is not None:
            candidates.append(got)
    joined = pa.concat_tables(candidates)

    sigs = minhash_signatures(texts, cfg)  # the previous design's rows, built directly
    whole = _bucket_table(band_hashes(sigs, cfg).ravel(), np.repeat(uids, cfg.num_bands),
                          np.repeat((sigs & 255).astype(np.uint8), cfg.num_bands, axis=0))
    whole = whole.set_column(2, "file", pa.array(np.repeat(np.arange(len(texts)) % 3, cfg.num_bands)))
    for threshold in (0.7, None):
        a, b = bucket_edges(joined, threshold=threshold), bucket_edges(whole, threshold=threshold)
        assert _edges(a) == _edges(b) and len(_edges(a)) >= 12
        assert int(a["v"][a["u"] < 0].sum()) == int(b["v"][b["u"] < 0].sum())
        assert sorted(zip(a["u"], a["fu"], a["fv"])) == sorted(zip(b["u"], b["fu"], b["fv"]))
    # only the memberships of shared buckets travel with a sketch
    pairs = {(int(k), int(u)) for k, u in zip(whole.column("bucket").to_numpy(), whole.column("uid").to_numpy())}
    size = collections.Counter(k for k, _ in pairs)
    assert joined.num_rows == sum(size[k] >= 2 for k, _ in pairs) < whole.num_rows / 2


def test_a_shared_bucket_member_without_a_sketch_is_named():
    from pipelines.dedup.candidates import fixed_binary, with_sketches

    sketches = pa.table({"key": [3, 9], "uid": [3, 9], "file": [0, 1],
                         "sketch": fixed_binary(np.zeros((2, 112), np.uint8)).cast(pa.binary())})
    ok = with_sketches(pa.table({"uid": [9, 3, 9], "bucket": [1, 1, 2]}), sketches)
    assert ok.column("uid").to_pylist() == [9, 3, 9] and ok.column("file").to_pylist() == [1, 0, 1]
    assert with_sketches(None, sketches) is None
    with pytest.raises(RuntimeError, match="uid 7 is in a shared bucket but has no sketch"):
        with_sketches(pa.table({"uid": [3, 7], "bucket": [1, 1]}), sketches)
    with pytest.raises(RuntimeError, match="uid 3 "):
        with_sketches(pa.table({"uid": [3], "bucket": [1]}), None)


# ----------------------------------------------------------------------------- over parts
def _parts(ray, rows: list[dict], folder, *, blocks: int = 1) -> parts.Parts:
    ds = ray.data.from_items(rows).repartition(blocks)
    out = parts.write_documents(ds, data=str(folder / "data"), rejected=str(folder / "rejected"),
                                prefix_chars=10, full_text=False)
    return parts.Parts(str(folder / "data"), tuple(out["files"]))


def _written(ray, ds, folder) -> parts.Parts:
    out = parts.write_documents(ds, data=str(folder / "data"), rejected=str(folder / "rejected"),
                                prefix_chars=10, full_text=False)
    return parts.Parts(str(folder / "data"), tuple(out["files"]))


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
    return {"rows": rows, "group": dict(zip(uids, group_of)), "chain_sim": _jaccard(chain[0], chain[-1])}


def _run(ray, rows, folder, *, blocks: int, cfg: DedupConfig = DedupConfig(), monkeypatch=None,
         partitions: int | None = None):
    """Exact then near dedup as the stages chain them; ``partitions`` forces the shuffle width
    (by default it follows the number of documents: the minimum for this corpus)."""
    import pipelines.dedup.candidates as candidates
    import pipelines.dedup.components as components
    import pipelines.dedup.exact as exact
    import pipelines.dedup.near as near

    if partitions is not None:
        for module in (exact, candidates, near, components):
            monkeypatch.setattr(module, "partitions_for", lambda n, **_: partitions)
    first = _parts(ray, rows, folder / "in", blocks=blocks)
    ds, s1 = exact_dedup(first, work=str(folder / "w1"))
    second = _written(ray, ds, folder / "exact")
    storage.remove(str(folder / "w1"), recursive=True)
    ds, s2 = near_dedup(second, cfg, work=str(folder / "w2"))
    out = sorted(ds.take_all(), key=lambda r: r["uid"])
    exact_rows = [r for r in _rejected(folder / "exact" / "rejected")]
    return out, exact_rows, {**s1, **s2, "shuffles": s1["shuffles"] + s2["shuffles"]}


def _rejected(folder) -> list[dict]:
    import json

    import zstandard

    out = []
    for p in sorted(folder.glob("*.zst")) if folder.exists() else []:
        text = zstandard.ZstdDecompressor().decompressobj().decompress(p.read_bytes()).decode()
        out += [json.loads(line) for line in text.splitlines()]
    return out


def _keep_counts(stats: dict) -> dict:
    return {k: v for k, v in stats.items() if k != "shuffles"}


@pytest.fixture(scope="module")
def first_run(ray_local, planted, tmp_path_factory):
    return _run(ray_local, planted["rows"], tmp_path_factory.mktemp("dedup"), blocks=1)


def test_dedup_precision_recall_on_planted_duplicates(first_run, planted):
    near_rows, exact_rows, stats = first_run
    group = planted["group"]
    uid_of = {r["id"]: r["uid"] for r in planted["rows"]}
    removed = {uid_of[r["id"]]: int(r["detail"].rsplit(" ", 1)[1]) for r in exact_rows}
    removed.update({r["uid"]: int(r["detail"].rsplit(" ", 1)[1]) for r in near_rows if r["reason"] == NEAR})
    kept = {r["uid"] for r in near_rows if r["reason"] == ""}
    assert kept | set(removed) == set(group) and not kept & set(removed)
    members: dict[int, list[int]] = {}
    for uid, g in group.items():
        members.setdefault(g, []).append(uid)
    expected = sum(len(m) - 1 for m in members.values())
    correct = 0
    for uid, keeper in removed.items():
        while keeper in removed:  # an exact keeper may itself be a near-duplicate
            keeper = removed[keeper]
        if group[uid] == group[keeper] and keeper in kept:
            correct += 1
            assert keeper == min(members[group[keeper]])  # the smallest uid is kept
    precision, recall = correct / max(len(removed), 1), correct / expected
    print(f"\ndedup on planted corpus: {len(removed)} removed, {expected} planted, "
          f"precision {precision:.3f}, recall {recall:.3f}, chain ends at Jaccard "
          f"{planted['chain_sim']:.2f}, {_keep_counts(stats)}")
    assert precision == 1.0 and recall == 1.0
    assert stats["exact_duplicates"] == len(exact_rows) >= 8
    assert stats["near_duplicates"] == sum(r["reason"] == NEAR for r in near_rows)
    assert stats["clusters"] >= 20 and stats["cc_iterations"] >= 1
    # The whole chain collapses onto its smallest uid, transitively, although its two ends are
    # far below the LSH threshold (they are never in one bucket): every link is verified.
    assert planted["chain_sim"] < 0.6
    chain = members[0]
    assert all(u in removed for u in chain if u != min(chain))
    names = [s["name"] for s in stats["shuffles"]]
    print(names)
    assert names[:5] == ["exact_digests", "exact_marks", "lsh_signatures", "lsh_members", "lsh_buckets"]
    assert names[-1] == "near_marks"


def test_dedup_is_deterministic_across_blocks_and_partitions(ray_local, monkeypatch, planted, first_run, tmp_path):
    """Other parts (7 blocks, reversed order) and three shuffle partitions: the same result."""
    again, exact_rows, stats = _run(ray_local, planted["rows"][::-1], tmp_path, blocks=7,
                                    monkeypatch=monkeypatch, partitions=3)
    strip = lambda rows: sorted((r["id"], r["reason"], r["detail"]) for r in rows)  # noqa: E731
    assert strip(again) == strip(first_run[0]) and strip(exact_rows) == strip(first_run[1])
    assert _keep_counts(stats) == _keep_counts(first_run[2])
    by_name = {s["name"]: s["partitions"] for s in stats["shuffles"]}
    assert by_name.pop("lsh_signatures") == by_name.pop("lsh_members") == 6  # two halves of 3
    assert {p for name, p in by_name.items() if name not in ("exact_marks", "near_marks")} == {3}


def test_exact_and_near_dedup_keep_the_smallest_uid(ray_local, tmp_path):
    text = " ".join(prose.documents(3, seed=2))
    near = text.replace(" the ", " a ", 1)
    rows = [{"id": f"x:{u}", "uid": u, "text": t, "reason": "", "detail": ""}
            for u, t in ((70, text), (12, text), (40, text), (90, near), (25, near), (5, "unrelated words " * 9))]
    ds, stats = exact_dedup(_parts(ray_local, rows, tmp_path / "a", blocks=3), work=str(tmp_path / "w"))
    got = {r["uid"]: (r["reason"], r["detail"]) for r in ds.take_all()}
    assert got == {70: (EXACT, "duplicate of uid 12"), 40: (EXACT, "duplicate of uid 12"), 12: ("", ""),
                   90: (EXACT, "duplicate of uid 25"), 25: ("", ""), 5: ("", "")}
    assert stats["exact_duplicates"] == 3
    ds, stats = near_dedup(_written(ray_local, ds, tmp_path / "b"), DedupConfig(), work=str(tmp_path / "w2"))
    got = {r["uid"]: (r["reason"], r["detail"]) for r in ds.take_all()}
    assert got == {25: (NEAR, "duplicate of uid 12"), 12: ("", ""), 5: ("", "")}
    assert stats["near_duplicates"] == 1 and stats["clusters"] == 1


@pytest.mark.slow  # request counts of the shuffles at several sizes (a scale property: make test-all)
def test_only_small_keys_go_through_the_shuffles(ray_local, monkeypatch, tmp_path):
    """Every shuffle of dedup and connected components sees integer keys and sketches, never text;
    the band rows carry no sketch (an empty one), and only a shared bucket's rows get one."""
    import pipelines.dedup.candidates as candidates
    import pipelines.dedup.marks as marks
    import pipelines.engine.shuffle as shuffle

    seen = []

    def spy(real):
        def wrapped(ds, **kw):
            schema = ds.schema()
            seen.append((kw["name"], list(schema.names), [str(t) for t in schema.types]))
            return real(ds, **kw)
        return wrapped

    monkeypatch.setattr(shuffle, "shuffle", spy(shuffle.shuffle))
    monkeypatch.setattr(marks, "shuffle", spy(marks.shuffle))
    monkeypatch.setattr(candidates, "shuffle", spy(candidates.shuffle))
    text = " ".join(prose.documents(2, seed=8))
    rows = [{"id": f"y:{u}", "uid": u, "text": t, "reason": "", "detail": ""}
            for u, t in ((1, text), (2, text + " and more"), (3, text), (4, "other words " * 10))]
    ds, _ = exact_dedup(_parts(ray_local, rows, tmp_path / "a"), work=str(tmp_path / "w"))
    ds, stats = near_dedup(_written(ray_local, ds, tmp_path / "b"), DedupConfig(), work=str(tmp_path / "w2"))
    assert sum(r["reason"] != "" for r in ds.take_all()) == 1 and stats["near_duplicates"] == 1
    by_name = {name: (cols, types) for name, cols, types in seen}
    assert by_name["exact_digests"] == (["h0", "h1", "uid", "file", "_part"], ["int64"] * 5)
    assert by_name["lsh_signatures"] == (["key", "uid", "file", "sketch", "_part"],
                                         ["int64"] * 3 + ["binary", "int64"])
    assert by_name["lsh_members"] == (["uid", "bucket", "_part"], ["int64"] * 3)
    assert by_name["lsh_buckets"] == (["bucket", "uid", "file", "sketch", "_part"],
                                      ["int64"] * 3 + ["fixed_size_binary[112]", "int64"])
    assert by_name["cc1_large"][0] == ["x", "y", "fx", "fy", "_part"]
    for name, (cols, types) in by_name.items():
        assert "text" not in cols and "id" not in cols, name
        assert all(t in ("int64", "binary", "fixed_size_binary[112]") for t in types), (name, types)


def test_documents_without_words(ray_local, tmp_path):
    """No word means no shingle and no bucket: near dedup skips its shuffles, nothing breaks."""
    rows = [{"id": "b", "uid": 5, "text": "...", "reason": "", "detail": ""},
            {"id": "c", "uid": 2, "text": "...", "reason": "", "detail": ""}]
    ds, exact = exact_dedup(_parts(ray_local, rows, tmp_path / "a"), work=str(tmp_path / "w"))
    out, near = near_dedup(_written(ray_local, ds, tmp_path / "b"), DedupConfig(), work=str(tmp_path / "w2"))
    got = {r["uid"]: (r["reason"], r["detail"]) for r in out.take_all()}
    assert got == {2: ("", "")}
    assert exact["exact_duplicates"] == 1
    assert _keep_counts(near) == {"near_duplicates": 0, "clusters": 0, "cc_iterations": 0, "refused_checks": 0,
                                  "lsh_threshold": 0.719, "jaccard_threshold": 0.7}


def _header_pages(n: int, header_words: int, body_words: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    vocab = sorted({w.strip(".,;:!?\"'").lower() for d in prose.documents(300, seed=3) for w in d.split()} - {""})
    header = " ".join(rng.choice(vocab) for _ in range(header_words))
    rows = []
    for i in range(n):
        body = " ".join(rng.choice(vocab) for _ in range(body_words))
        rows.append({"id": f"h:{i}", "uid": rng.randrange(1, 1 << 62), "text": f"{header} {body}",
                     "reason": "", "detail": ""})
    return rows


@pytest.mark.slow
def test_pages_sharing_a_long_header_all_survive(ray_local, tmp_path):
    """1,000 pages with one 200-word header and different 500-word bodies: nothing removed."""
    rows = _header_pages(1000, 200, 500, seed=1)
    assert max(_jaccard(rows[0]["text"], r["text"]) for r in rows[1:50]) < 0.25
    out, stats = near_dedup(_parts(ray_local, rows, tmp_path / "a", blocks=4), DedupConfig(),
                            work=str(tmp_path / "w"))
    assert all(r["reason"] == "" for r in out.take_all())
    assert stats["near_duplicates"] == 0


def test_verification_keeps_pages_that_unverified_lsh_would_collapse(ray_local, tmp_path):
    """Shorter bodies (Jaccard ~0.4 through the shared header) collide in LSH buckets: unverified,
    dozens of pages are removed; verified, all are kept."""
    rows = _header_pages(300, 200, 150, seed=2)
    docs = _parts(ray_local, rows, tmp_path / "a", blocks=2)
    out, stats = near_dedup(docs, DedupConfig(), work=str(tmp_path / "w"))
    assert stats["near_duplicates"] == 0 and stats["refused_checks"] > 0
    assert all(r["reason"] == "" for r in out.take_all())
    loose = dataclasses.replace(DedupConfig(), jaccard_threshold=None)
    out, stats = near_dedup(docs, loose, work=str(tmp_path / "w2"))
    removed = sum(r["reason"] == NEAR for r in out.take_all())
    print(f"\nunverified LSH removed {removed} of {len(rows)} header-sharing pages")
    assert removed == stats["near_duplicates"] >= len(rows) // 10


def test_a_text_that_is_not_a_string_is_a_clear_error():
    batch = _rows(["fine text", "also fine"], [1, 2])
    batch["text"][1] = None
    with pytest.raises(TypeError, match="'t:1'.*NoneType"):
        digest_rows(batch)
    with pytest.raises(TypeError, match="'t:1'"):
        signature_rows(batch, cfg=DedupConfig(), partitions=4)
