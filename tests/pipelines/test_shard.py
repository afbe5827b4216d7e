"""WebDataset sharding: round trip through plain tarfile, numpy and webdataset, the shard count
rule, empty shards, and byte-identical output whatever the block layout."""
from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from common import storage
from pipelines import schema
from pipelines.engine import parts
from pipelines.config import ShardConfig
from pipelines.shard import (estimated_bytes, example_summary, rows_to_examples, shard_count, shard_numbers,
                             write_shards)

VOCAB = 30522
GEN = "k123"


def _examples(n: int, seed: int = 0) -> list[dict]:
    """Example rows as the pack stage writes them: several examples per document, ~10% validation."""
    rng = np.random.default_rng(seed)
    rows, uid = [], 0
    while len(rows) < n:
        uid = int(rng.integers(0, 2**63))
        split = "validation" if rng.random() < 0.1 else "train"
        for ordinal in range(min(int(rng.integers(1, 4)), n - len(rows))):
            length = int(rng.integers(3, 60))
            ids = [2] + rng.integers(5, VOCAB, size=length - 2).tolist() + [3]
            rows.append({"uid": uid, "ordinal": ordinal, "split": split, "input_ids": ids,
                         "b_start": int(rng.integers(2, length + 1))})
    return rows


def _sizes(rows: list[dict]) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for r in rows:
        n, t = out.get(r["split"], (0, 0))
        out[r["split"]] = (n + 1, t + len(r["input_ids"]))
    return out


def _segments(length: int, b_start: int) -> list[int]:
    return [0] * b_start + [1] * (length - b_start)


def _read_tarfile(data: bytes) -> list[tuple[int, int, list[int], list[int]]]:
    """(uid, ordinal, input ids, segment ids) of every example, with tarfile and numpy.load only."""
    out = []
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: np.load(io.BytesIO(tar.extractfile(m).read())) for m in tar.getmembers()}
    for name in sorted(n for n in members if n.endswith(".tokens.npy")):
        key = name.split(".")[0]
        tokens, layout, keys = (members[f"{key}.{m}"] for m in schema.MEMBERS)
        assert tokens.dtype == np.uint16
        pos = 0
        for (length, b), (uid, ordinal) in zip(layout.tolist(), keys.tolist()):
            out.append((uid, ordinal, tokens[pos:pos + length].tolist(), _segments(length, b)))
            pos += length
    return out


def test_shard_count_rule():
    cfg = ShardConfig(target_bytes=1000, min_shards_per_split=4)
    assert shard_count(0, 0, cfg) == 0
    assert shard_count(2, 10, cfg) == 2  # capped at the number of examples
    assert shard_count(100, 10, cfg) == 4  # small corpus: the minimum, so every worker has some
    assert shard_count(100, 10_500, cfg) == 11  # big corpus: ~target_bytes per shard
    assert shard_count(5, 10_500, cfg) == 5


def test_estimated_bytes_is_the_compact_formats_payload():
    assert estimated_bytes(10, 1000, 30522) == 2 * 1000 + 24 * 10
    assert estimated_bytes(10, 1000, 70000) == 4 * 1000 + 24 * 10
    rows = _examples(400, seed=8)
    ex = rows_to_examples(pa.Table.from_pylist(rows))
    data = schema.encode_shard(ex, vocab_size=VOCAB)
    est = estimated_bytes(len(ex), ex.num_tokens, VOCAB)
    assert est < len(data) < est + 3 * (512 + 128 + 512) + 10240  # one chunk: headers and the end record


def test_shard_numbers_depend_only_on_the_example():
    rows = _examples(500, seed=1)
    batch = {k: np.array([r[k] for r in rows], dtype=object) for k in ("uid", "ordinal", "split")}
    counts = {"train": 7, "validation": 3}
    group = shard_numbers(batch["uid"], batch["ordinal"], batch["split"], counts)
    train = np.array([r["split"] == "train" for r in rows])
    # train shards first (0..6), then validation (7..9)
    assert set(group[train].tolist()) == set(range(7)) and set(group[~train].tolist()) <= {7, 8, 9}
    order = np.random.default_rng(0).permutation(len(rows))
    again = shard_numbers(batch["uid"][order], batch["ordinal"][order], batch["split"][order], counts)
    assert (again == group[order]).all()  # a function of (uid, ordinal) only, not of the batch
    bad = batch["split"][:3].copy()
    bad[1] = "test"
    with pytest.raises(ValueError, match="unknown split 'test'"):
        shard_numbers(batch["uid"][:3], batch["ordinal"][:3], bad, counts)


def _shards(ds, corpus: str, cfg, **kw):
    """``write_shards`` with its shuffle files beside the corpus; they are gone afterwards."""
    work = str(corpus).rstrip("/") + "-work"
    infos, _ = write_shards(ds, str(corpus), cfg, work=work, **kw)
    assert not storage.find(work)
    return infos


def _read_back(corpus: str, infos) -> dict[tuple[int, int], tuple]:
    import webdataset as wds

    seen: dict[tuple[int, int], tuple] = {}
    for info in infos:
        data = storage.read_bytes(storage.join(corpus, info.path))
        assert info.bytes == len(data) and info.sha256 == hashlib.sha256(data).hexdigest()
        examples = _read_tarfile(data)
        assert len(examples) == info.num_examples and sum(len(e[2]) for e in examples) == info.num_tokens
        assert [e[:2] for e in examples] == sorted(e[:2] for e in examples)  # key order
        assert schema.read_shard(io.BytesIO(data), info.path).keys() == [schema.example_key(*e[:2]) for e in examples]
        for uid, ordinal, ids, segs in examples:
            assert (uid, ordinal) not in seen
            seen[(uid, ordinal)] = (info.split, ids, segs)
        if storage.is_local(corpus):  # plain webdataset reads the same chunks
            shard = wds.WebDataset(storage.join(corpus, info.path), shardshuffle=False, empty_check=False)
            decoded = list(shard.decode())
            got = schema.Examples.concat([schema.decode_sample(s, s["__key__"]) for s in decoded])
            assert got.keys() == [schema.example_key(*e[:2]) for e in examples]
    return seen


def test_write_shards_round_trip_and_layout(ray_local, tmp_path):
    rows = _examples(300)
    cfg = ShardConfig(target_bytes=4_000, min_shards_per_split=3)
    infos = _shards(ray_local.data.from_items(rows, override_num_blocks=4), str(tmp_path), cfg,
                         generation=GEN, vocab_size=VOCAB, sizes=_sizes(rows))
    # The shard count rule per split; names contiguous from 0, train first; nothing else written.
    for split in schema.SPLITS:
        n, t = _sizes(rows)[split]
        wanted = shard_count(n, estimated_bytes(n, t, VOCAB), cfg)
        assert [i.path for i in infos if i.split == split] == [schema.shard_name(GEN, split, k) for k in range(wanted)]
    assert [i.split for i in infos] == sorted((i.split for i in infos), key=schema.SPLITS.index)
    assert len([i for i in infos if i.split == "train"]) > 3  # sized by bytes, above the minimum
    assert sorted(storage.find(str(tmp_path))) == sorted(i.path for i in infos)
    seen = _read_back(str(tmp_path), infos)
    expected = {(r["uid"], r["ordinal"]): (r["split"], r["input_ids"], _segments(len(r["input_ids"]), r["b_start"]))
                for r in rows}
    assert seen == expected
    assert sum(i.num_examples for i in infos) == len(rows)


def test_write_shards_is_byte_identical_for_any_block_layout(ray_local, tmp_path):
    rows = _examples(250, seed=2)
    cfg = ShardConfig(target_bytes=3_000, min_shards_per_split=2, chunk_tokens=500)

    def write(ds, folder):
        return _shards(ds, str(tmp_path / folder), cfg, generation=GEN, vocab_size=VOCAB, sizes=_sizes(rows))

    one = write(ray_local.data.from_items(rows).repartition(1), "one")
    # Another block layout and row order, into a folder holding a half-written shard of a killed
    # attempt: the same files, the half-written one replaced.
    stale = tmp_path / "seven" / one[1].path
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"partial")
    seven = write(ray_local.data.from_items(rows[::-1]).repartition(7), "seven")
    assert seven == one
    for info in one:
        assert (tmp_path / "seven" / info.path).read_bytes() == (tmp_path / "one" / info.path).read_bytes()
    assert sorted(storage.find(str(tmp_path / "seven"))) == sorted(i.path for i in one)


def test_shard_numbers_without_examples_are_empty_tars(ray_local, tmp_path):
    import webdataset as wds

    rows = [r for r in _examples(400, seed=5) if r["split"] == "train"][:5]
    cfg = ShardConfig(min_shards_per_split=16)  # 5 examples: 5 shards, some get none
    infos = _shards(ray_local.data.from_items(rows), str(tmp_path), cfg, generation=GEN,
                         vocab_size=VOCAB, sizes=_sizes(rows))
    assert [i.path for i in infos] == [schema.shard_name(GEN, "train", k) for k in range(5)]
    empty = [i for i in infos if i.num_examples == 0]
    assert empty, "expected at least one shard number without examples"
    for info in empty:
        path = tmp_path / info.path
        assert (info.num_tokens, info.bytes) == (0, path.stat().st_size)
        assert info.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
        with tarfile.open(path) as tar:
            assert tar.getmembers() == []
        assert list(wds.WebDataset(str(path), shardshuffle=False, empty_check=False)) == []
        assert len(schema.read_shard(io.BytesIO(path.read_bytes()), info.path)) == 0
    assert sum(i.num_examples for i in infos) == 5
    assert {(r["uid"], r["ordinal"]) for r in rows} == set(_read_back(str(tmp_path), infos))


def test_write_shards_of_nothing_and_of_unknown_splits(ray_local, tmp_path):
    none = _shards(ray_local.data.from_items([]), str(tmp_path / "d"), ShardConfig(), generation=GEN,
                        vocab_size=VOCAB, sizes={})
    assert none == [] and not (tmp_path / "d").exists()
    rows = _examples(20, seed=3)
    with pytest.raises(ValueError, match=r"unknown split\(s\) \['test'\]"):
        _shards(ray_local.data.from_items(rows), str(tmp_path / "e"), ShardConfig(), generation=GEN,
                     vocab_size=VOCAB, sizes={**_sizes(rows), "test": (1, 5)})
    assert not (tmp_path / "e").exists()


def test_pack_summary_sizes_the_shards(ray_local, tmp_path):
    """The sizes ``write_examples`` summed while writing the pack parts give the same shards as
    an independent count, and the shards hold exactly what the summary counted."""
    rows = _examples(200, seed=3)
    ds = ray_local.data.from_items(rows, override_num_blocks=3)
    out = parts.write_examples(ds, data=str(tmp_path / "ex"), summarise=example_summary)
    summary = out["splits"]
    assert {s: (v["examples"], v["tokens"]) for s, v in summary.items()} == _sizes(rows)
    assert {s: v["documents"] for s, v in summary.items()} == \
        {s: len({r["uid"] for r in rows if r["split"] == s}) for s in summary}
    cfg = ShardConfig(target_bytes=3_000, min_shards_per_split=3)
    sizes = {s: (v["examples"], v["tokens"]) for s, v in summary.items()}
    given = _shards(parts.read_parts(str(tmp_path / "ex"), out["files"]), str(tmp_path / "a"), cfg,
                         generation=GEN, vocab_size=VOCAB, sizes=sizes)
    assert given == _shards(ds, str(tmp_path / "b"), cfg, generation=GEN, vocab_size=VOCAB, sizes=_sizes(rows))
    for split, v in summary.items():
        mine = [i for i in given if i.split == split]
        assert (sum(i.num_examples for i in mine), sum(i.num_tokens for i in mine)) == (v["examples"], v["tokens"])
    empty = pa.table({"uid": pa.array([], pa.int64()), "ordinal": pa.array([], pa.int32()),
                      "split": pa.array([], pa.string()), "input_ids": pa.array([], pa.list_(pa.int32()))})
    assert example_summary(empty) == {}


def test_shards_on_s3_equal_the_local_ones(ray_s3, tmp_path):
    ray, s3 = ray_s3
    corpus = s3.bucket("shards") + "/corpus"
    rows = _examples(120, seed=4)
    cfg = ShardConfig(target_bytes=3_000, min_shards_per_split=2)
    remote = _shards(ray.data.from_items(rows, override_num_blocks=3), corpus, cfg, generation=GEN,
                          vocab_size=VOCAB, sizes=_sizes(rows))
    local = _shards(ray.data.from_items(rows), str(tmp_path), cfg, generation=GEN, vocab_size=VOCAB,
                         sizes=_sizes(rows))
    assert remote == local
    assert storage.find(corpus) == sorted(i.path for i in local)
    for info in local:
        assert storage.read_bytes(f"{corpus}/{info.path}") == Path(tmp_path / info.path).read_bytes()
