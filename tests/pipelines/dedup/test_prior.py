"""Dedup of an append against earlier generations' indexes (``pipelines.dedup.prior``): the
matches checked against the documents planted, the near verdicts against a brute-force Jaccard of
word 5-gram shingles computed here with Python sets."""
from __future__ import annotations

import hashlib
import random
import re
import string
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from pipelines.config import DedupConfig, ShuffleConfig
from pipelines.dedup import corpus_index
from pipelines.dedup.corpus_index import open_index, write_index
from pipelines.dedup.prior import apply_matches, prior_matches
from pipelines.engine import parts
from synthetic import prose

THRESHOLD = DedupConfig().jaccard_threshold  # 0.7


# ----------------------------------------------------------------------------- references
def uid_of(doc_id: str) -> int:
    d = hashlib.blake2b(doc_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(d, "little") & ((1 << 63) - 1)


_SEP = re.compile(r"[\s" + re.escape(string.punctuation) + r"]+")


def shingles(text: str, n: int = 5) -> set[tuple[str, ...]]:
    """Word n-grams, words = runs of anything but ASCII whitespace and punctuation, lower-cased."""
    words = [w for w in _SEP.split(text.lower()) if w]
    return {tuple(words[i:i + n]) for i in range(max(1, len(words) - n + 1))} if words else set()


def jaccard(a: str, b: str) -> float:
    sa, sb = shingles(a), shingles(b)
    return len(sa & sb) / len(sa | sb) if sa | sb else 0.0


# ----------------------------------------------------------------------------- documents
def doc(doc_id: str, text: str) -> dict:
    return {"id": doc_id, "uid": uid_of(doc_id), "text": text, "reason": "", "detail": ""}


def long_text(seed: int, words: int = 400) -> str:
    """About ``words`` words of prose (whole documents joined, then cut)."""
    out: list[str] = []
    for d in prose.documents(20, seed=seed):
        out += d.split()
        if len(out) >= words:
            break
    return " ".join(out[:words])


def near_copy(text: str, changes: int = 4) -> str:
    """``changes`` words replaced, evenly spaced: 1% of a 400-word text."""
    words = text.split(" ")
    step = len(words) // changes
    for k in range(changes):
        words[step // 2 + k * step] = ["zebra", "quartz", "nimbus", "fjord"][k % 4]
    return " ".join(words)


VOCAB = sorted({w.strip(".,;:!?\"'").lower() for d in prose.documents(300, seed=3) for w in d.split()} - {""})


def random_words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(n))


def write_parts(ray, rows: list[dict], folder: Path, *, blocks: int = 2) -> parts.Parts:
    ds = ray.data.from_items(rows).repartition(blocks)
    out = parts.write_documents(ds, data=str(folder / "data"), rejected=str(folder / "rejected"),
                                prefix_chars=10, full_text=False)
    return parts.Parts(str(folder / "data"), tuple(out["files"]))


def write_generation(ray, rows: list[dict], corpus: Path, name: str, *, partitions: int | None = None,
                     cfg: DedupConfig = DedupConfig()) -> dict:
    """Generation ``name``'s index under ``corpus/index/name``; ``partitions`` forced through a
    PART_BYTES that gives exactly that many parts for these documents."""
    folder = corpus / "index" / name
    with pytest.MonkeyPatch.context() as mp:
        if partitions is not None:
            mp.setattr(corpus_index, "PART_BYTES", -(-len(rows) * corpus_index.bytes_per_document(cfg) // partitions))
        record = write_index(write_parts(ray, rows, corpus / "in" / name), cfg, folder=str(folder),
                             work=str(corpus / "work" / name), shuffle_cfg=ShuffleConfig())
    assert record["partitions"] == (partitions or 1)
    return record


def matches_of(ray, rows: list[dict], priors, tmp: Path, kind: str, cfg: DedupConfig = DedupConfig()) -> dict:
    return prior_matches(write_parts(ray, rows, tmp / f"new-{kind}"), priors, cfg, kind=kind,
                         work=str(tmp / f"work-{kind}"), shuffle_cfg=ShuffleConfig())


def by_new_id(found: dict, new_rows: list[dict]) -> dict[str, tuple[str, int, int]]:
    """new id -> (old id, old uid, generation), from prior_matches' arrays."""
    id_of = {r["uid"]: r["id"] for r in new_rows}
    u = found["u"].tolist()
    assert u == sorted(u) and len(set(u)) == len(u)  # sorted, one match per new document
    assert len(found["v"]) == len(found["g"]) == len(found["id"]) == len(u) == found["stats"]["matches"]
    return {id_of[a]: (i, int(v), int(g)) for a, v, g, i in zip(u, found["v"], found["g"], found["id"])}


# ----------------------------------------------------------------------------- 4. one prior generation
@pytest.fixture(scope="module")
def one_prior(ray_local, tmp_path_factory):
    root = tmp_path_factory.mktemp("prior")
    rng = random.Random(4)
    header = random_words(rng, 300)
    old = [doc(f"old:{i}", t) for i, t in enumerate(prose.documents(30, seed=21))]
    old.append(doc("old:long", long_text(seed=8)))
    old.append(doc("old:header", f"{header} {random_words(rng, 100)}"))
    old.append(doc("old:nowords", "..."))
    record = write_generation(ray_local, old, root / "corpus", "g0")
    assert record["documents"] == len(old)
    old_by_id = {r["id"]: r for r in old}
    new = [doc("new:exact", old_by_id["old:3"]["text"]),
           doc("new:near", near_copy(old_by_id["old:long"]["text"])),
           doc("new:unrelated", prose.documents(1, seed=99)[0]),
           doc("new:nowords", "?!"),
           *(doc(f"new:header{i}", f"{header} {random_words(rng, 100)}") for i in range(8))]
    index = open_index(str(root / "corpus"), 0, "g0", "index/g0", DedupConfig())
    found = {kind: matches_of(ray_local, new, [index], root, kind) for kind in ("exact", "bands")}
    return {"old": old, "new": new, "found": found, "index": index}


def test_exact_probe_finds_only_the_exact_copy(one_prior):
    old = {r["id"]: r for r in one_prior["old"]}
    found = one_prior["found"]["exact"]
    assert by_new_id(found, one_prior["new"]) == {"new:exact": ("old:3", old["old:3"]["uid"], 0)}
    assert found["stats"]["refused"] == 0 and found["stats"]["index_bytes_read"] > 0


def test_band_probe_finds_the_exact_and_the_near_copy_but_not_a_shared_header(one_prior):
    old = {r["id"]: r for r in one_prior["old"]}
    found = one_prior["found"]["bands"]
    print(f"\nbands probe against one generation: {found['stats']}")
    assert by_new_id(found, one_prior["new"]) == {"new:exact": ("old:3", old["old:3"]["uid"], 0),
                                                  "new:near": ("old:long", old["old:long"]["uid"], 0)}
    assert found["stats"]["index_bytes_read"] > 0
    # The header pages share 300 of 400 words with old:header: candidates of some LSH band
    # (found and refused by the sketch check), never matches.
    assert found["stats"]["refused"] >= 1
    assert found["stats"]["candidates"] == found["stats"]["matches"] + found["stats"]["refused"]


def test_near_verdicts_agree_with_brute_force_jaccard(one_prior):
    """The reference: true Jaccard of word 5-gram shingles over every (new, old) pair."""
    assert THRESHOLD == 0.7
    old, new = one_prior["old"], one_prior["new"]
    matched = by_new_id(one_prior["found"]["bands"], new)
    for r in new:
        best = max(old, key=lambda o: jaccard(r["text"], o["text"]))
        true = jaccard(r["text"], best["text"])
        if r["id"] in matched:
            assert matched[r["id"]][0] == best["id"]  # the most similar old document
            assert true >= 0.85, (r["id"], true)  # well above the 0.7 threshold
        else:
            assert true <= 0.62, (r["id"], true)  # well below it
    old_text = {r["id"]: r["text"] for r in old}
    assert 0.85 <= jaccard(new[1]["text"], old_text["old:long"]) < 1.0  # the near copy: ~0.9
    headers = [jaccard(r["text"], old_text["old:header"]) for r in new if r["id"].startswith("new:header")]
    assert all(0.5 <= j <= 0.62 for j in headers), headers  # high, but below the threshold


def test_verification_threshold_decides_the_near_verdicts(one_prior, ray_local, tmp_path):
    """Unverified (threshold None) every LSH candidate is a match: the header pages that
    collided in a band, refused at 0.7, come back, each naming old:header."""
    new = one_prior["new"]
    loose = DedupConfig(jaccard_threshold=None)
    got = by_new_id(matches_of(ray_local, new, [one_prior["index"]], tmp_path, "bands", loose), new)
    extra = {k: v for k, v in got.items() if k not in ("new:exact", "new:near")}
    assert len(extra) == one_prior["found"]["bands"]["stats"]["refused"] >= 1
    assert all(k.startswith("new:header") and v[0] == "old:header" for k, v in extra.items())


# ----------------------------------------------------------------------------- 5. two prior generations
@pytest.mark.parametrize("p0,p1", [(1, 4), (2, 8)])
def test_matches_across_generations_of_different_partition_counts(ray_local, tmp_path, p0, p1):
    corpus = tmp_path / "corpus"
    shared = prose.documents(1, seed=50)[0]
    twice = prose.documents(1, seed=51)[0]
    g0 = [doc(f"a:{i}", t) for i, t in enumerate(prose.documents(12, seed=52))]
    g0 += [doc("a:shared", shared), doc("a:twice-1", twice), doc("a:twice-2", twice), doc("a:long", long_text(60))]
    g1 = [doc(f"b:{i}", t) for i, t in enumerate(prose.documents(12, seed=53))]
    # The later generation's copy of ``shared`` has the smaller uid: the earliest generation must
    # win by its number, not by a smaller uid.
    later = next(f"b:shared-{k}" for k in range(100) if uid_of(f"b:shared-{k}") < uid_of("a:shared"))
    g1 += [doc(later, shared), doc("b:long", long_text(61))]
    write_generation(ray_local, g0, corpus, "first", partitions=p0)
    write_generation(ray_local, g1, corpus, "second", partitions=p1)
    cfg = DedupConfig()
    # Listed latest first: the earliest generation is chosen by its number, not the order.
    priors = [open_index(str(corpus), 1, "second", "index/second", cfg),
              open_index(str(corpus), 0, "first", "index/first", cfg)]
    assert [p.partitions for p in priors] == [p1, p0]
    uid = {r["id"]: r["uid"] for r in g0 + g1}
    text = {r["id"]: r["text"] for r in g0 + g1}
    new = [doc(f"n:a{i}", text[f"a:{i}"]) for i in range(12)] + [doc(f"n:b{i}", text[f"b:{i}"]) for i in range(12)]
    new += [doc("n:shared", shared), doc("n:twice", twice), doc("n:near-a", near_copy(text["a:long"])),
            doc("n:near-b", near_copy(text["b:long"])), doc("n:other", prose.documents(1, seed=54)[0])]
    smaller = min(("a:twice-1", "a:twice-2"), key=uid.get)
    expect = {f"n:a{i}": (f"a:{i}", uid[f"a:{i}"], 0) for i in range(12)}
    expect.update({f"n:b{i}": (f"b:{i}", uid[f"b:{i}"], 1) for i in range(12)})
    expect.update({"n:shared": ("a:shared", uid["a:shared"], 0),  # in both: the earliest generation
                   "n:twice": (smaller, uid[smaller], 0)})  # twice in one: the smallest uid
    assert by_new_id(matches_of(ray_local, new, priors, tmp_path, "exact"), new) == expect
    expect.update({"n:near-a": ("a:long", uid["a:long"], 0), "n:near-b": ("b:long", uid["b:long"], 1)})
    assert by_new_id(matches_of(ray_local, new, priors, tmp_path, "bands"), new) == expect
    # one generation alone still finds its own copies (P_join = its own P)
    alone = by_new_id(matches_of(ray_local, new, priors[:1], tmp_path / "alone", "exact"), new)
    assert alone == {**{f"n:b{i}": (f"b:{i}", uid[f"b:{i}"], 1) for i in range(12)},
                     "n:shared": (later, uid[later], 1)}


def test_no_priors_or_no_documents_match_nothing(ray_local, tmp_path):
    new = [doc("x", "some words that are here")]
    got = prior_matches(write_parts(ray_local, new, tmp_path / "n"), [], DedupConfig(), kind="exact",
                        work=str(tmp_path / "w"), shuffle_cfg=ShuffleConfig())
    assert got["u"].tolist() == got["v"].tolist() == got["g"].tolist() == got["id"] == []
    assert got["stats"]["matches"] == 0


# ----------------------------------------------------------------------------- 6. apply_matches
def _table(rows: list[tuple[str, int, str]]) -> pa.Table:
    return pa.table({"id": [r[0] for r in rows], "uid": pa.array([r[1] for r in rows], pa.int64()),
                     "text": ["t"] * len(rows), "reason": [r[2] for r in rows], "detail": [""] * len(rows)})


def test_apply_matches_marks_only_active_matched_rows():
    table = _table([("d1", 10, ""), ("d2", 20, "filter:min_words"), ("d3", 30, ""), ("d4", 40, ""),
                    ("d5", 5, "")])
    matches = {"u": np.array([10, 20, 40], np.int64), "v": np.array([777, 888, 999], np.int64),
               "g": np.array([0, 0, 2], np.int64), "id": ["old-a", "old-b", "old/c"]}
    out = apply_matches(table, matches=matches, names={0: "2024-01-first", 2: "2024-06-third"}, reason="dedup:near")
    assert out.column_names == table.column_names and out.num_rows == 5
    got = {r["id"]: (r["reason"], r["detail"]) for r in out.to_pylist()}
    assert got["d2"] == ("filter:min_words", "")  # already dropped: untouched
    assert got["d3"] == got["d5"] == ("", "")  # no match
    for new, old, uid, g, name in (("d1", "old-a", 777, 0, "2024-01-first"), ("d4", "old/c", 999, 2, "2024-06-third")):
        reason, detail = got[new]
        assert reason == "dedup:near"
        assert repr(old) in detail and f"uid {uid}" in detail and f"generation {g}" in detail and name in detail
    assert [r["text"] for r in out.to_pylist()] == ["t"] * 5 and out.column("uid").to_pylist() == [10, 20, 30, 40, 5]
    empty = {"u": np.zeros(0, np.int64), "v": np.zeros(0, np.int64), "g": np.zeros(0, np.int64), "id": []}
    assert apply_matches(table, matches=empty, names={}, reason="dedup:exact").equals(table)
    assert apply_matches(table.slice(0, 0), matches=matches, names={}, reason="x").num_rows == 0


def test_apply_matches_with_found_matches(one_prior):
    new = one_prior["new"]
    table = _table([(r["id"], r["uid"], "") for r in new])
    out = apply_matches(table, matches=one_prior["found"]["bands"], names={0: "g0"}, reason="dedup:near")
    marked = {r["id"]: r["detail"] for r in out.to_pylist() if r["reason"] == "dedup:near"}
    assert set(marked) == {"new:exact", "new:near"}
    assert "'old:long'" in marked["new:near"] and "(g0)" in marked["new:near"]
