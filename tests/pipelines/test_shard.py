"""WebDataset sharding: round trip through plain webdataset and tarfile, determinism, atomicity."""
from __future__ import annotations

import hashlib
import io
import math
import tarfile
from pathlib import Path

import numpy as np
import pytest

from pipelines import schema
from pipelines.config import ShardConfig
from pipelines.shard import example_tar_bytes, shard_count, write_shards, write_tar


def _examples(n: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        length = int(rng.integers(3, 60))
        cut = int(rng.integers(2, length))
        segs = np.array([0] * cut + [1] * (length - cut), dtype=np.uint8)
        rows.append({"key": f"{int(rng.integers(0, 2**62)):016x}-{i % 7:05d}",
                     "split": "validation" if i % 10 == 0 else "train",
                     "input_ids": rng.integers(5, 30000, size=length).astype(np.int32),
                     "segment_ids": segs})
    return rows


def _read_tarfile(path: Path) -> list[tuple[tarfile.TarInfo, bytes]]:
    with tarfile.open(path) as tar:
        return [(m, tar.extractfile(m).read()) for m in tar.getmembers()]


def test_shard_count_rule():
    cfg = ShardConfig(target_bytes=1000, min_shards_per_split=4)
    assert shard_count(0, 0, cfg) == 0
    assert shard_count(2, 10, cfg) == 2  # capped at the number of examples
    assert shard_count(100, 10, cfg) == 4  # small corpus: the minimum, so every worker has some
    assert shard_count(100, 10_500, cfg) == 11  # big corpus: ~target_bytes per shard
    assert shard_count(5, 10_500, cfg) == 5


def test_write_tar_layout_size_and_rejections(tmp_path):
    rows = _examples(25)
    path = tmp_path / "one.tar"
    tokens = write_tar(path, np.array([r["key"] for r in rows], dtype=object),
                       [r["input_ids"] for r in rows], [r["segment_ids"] for r in rows])
    assert tokens == sum(len(r["input_ids"]) for r in rows)
    members = _read_tarfile(path)
    names = [m.name for m, _ in members]
    expected = [f"{k}.{ext}" for k in sorted(r["key"] for r in rows) for ext in schema.SAMPLE_KEYS]
    assert names == expected
    for m, _ in members:
        assert (m.mtime, m.uid, m.gid, m.uname, m.gname, m.mode) == (0, 0, 0, "", "", 0o644)
        assert m.isfile()
    # The byte estimate used for the shard count is the tar's member size (plus end padding).
    est = int(example_tar_bytes(np.array([len(r["input_ids"]) for r in rows])).sum())
    assert path.stat().st_size == math.ceil((est + 1024) / 10240) * 10240
    bad = np.array(["../../evil", "ok"], dtype=object)
    arrays = [np.array([2, 3], np.int32)] * 2
    with pytest.raises(ValueError, match="invalid sample key"):
        write_tar(tmp_path / "bad.tar", bad, arrays, [np.zeros(2, np.uint8)] * 2)
    dup = np.array(["a", "a"], dtype=object)
    with pytest.raises(ValueError, match="duplicate example key 'a'"):
        write_tar(tmp_path / "dup.tar", dup, arrays, [np.zeros(2, np.uint8)] * 2)
    assert not list(tmp_path.parent.glob("evil*")) and not list(tmp_path.glob("evil*"))


def test_write_shards_round_trip_determinism_and_atomicity(ray_local, tmp_path):
    import webdataset as wds

    rows = _examples(300)
    by_key = {r["key"]: r for r in rows}
    cfg = ShardConfig(target_bytes=20_000, min_shards_per_split=3)
    infos = write_shards(ray_local.data.from_items(rows, override_num_blocks=4), tmp_path / "a", cfg)

    # The shard count rule, per split; names contiguous from 0.
    for split in schema.SPLITS:
        mine = [r for r in rows if r["split"] == split]
        est = int(example_tar_bytes(np.array([len(r["input_ids"]) for r in mine])).sum())
        wanted = shard_count(len(mine), est, cfg)
        paths = [i.path for i in infos if i.split == split]
        assert 0 < len(paths) <= wanted and len(paths) >= wanted - 1
        assert paths == [schema.shard_name(split, k) for k in range(len(paths))]
    assert sum(i.num_examples for i in infos) == len(rows)

    seen = {}
    for info in infos:
        path = tmp_path / "a" / info.path
        assert info.bytes == path.stat().st_size
        assert info.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
        members = _read_tarfile(path)
        keys = [m.name.split(".")[0] for m, _ in members[::2]]
        assert keys == sorted(keys) and len(keys) == info.num_examples
        tokens = 0
        for (m_ids, ids_b), (m_seg, seg_b) in zip(members[::2], members[1::2]):
            key = m_ids.name.split(".")[0]
            ids, segs = np.load(io.BytesIO(ids_b)), np.load(io.BytesIO(seg_b))
            assert ids.dtype == np.int32 and segs.dtype == np.uint8
            assert by_key[key]["split"] == info.split
            np.testing.assert_array_equal(ids, by_key[key]["input_ids"])
            np.testing.assert_array_equal(segs, by_key[key]["segment_ids"])
            tokens += len(ids)
        assert tokens == info.num_tokens
        # Plain webdataset reads the same samples.
        for sample in wds.WebDataset(str(path), shardshuffle=False).decode():
            seen[sample["__key__"]] = sample
    assert set(seen) == set(by_key)
    for key, sample in seen.items():
        np.testing.assert_array_equal(sample["input_ids.npy"], by_key[key]["input_ids"])
        np.testing.assert_array_equal(sample["segment_ids.npy"], by_key[key]["segment_ids"])

    # Rerun with other blocks and row order into a folder with leftovers of a killed run and of
    # an earlier build: byte-identical shards, and nothing else left behind.
    shards_b = tmp_path / "b" / schema.SHARDS_DIR
    shards_b.mkdir(parents=True)
    (shards_b / ".train-g000001.tar.tmp").write_bytes(b"partial")
    (shards_b / "train-000099.tar").write_bytes(b"old")
    again = write_shards(ray_local.data.from_items(rows[::-1], override_num_blocks=7), tmp_path / "b", cfg)
    assert again == infos
    for info in infos:
        assert (tmp_path / "b" / info.path).read_bytes() == (tmp_path / "a" / info.path).read_bytes()
    for folder in (tmp_path / "a", tmp_path / "b"):
        left = sorted(p.name for p in (folder / schema.SHARDS_DIR).iterdir())
        assert left == sorted(Path(i.path).name for i in infos)


def test_write_shards_rejects_a_malicious_key(ray_local, tmp_path):
    rows = _examples(5)
    rows[2]["key"] = "../../escaped"
    with pytest.raises(Exception, match="invalid sample key"):
        write_shards(ray_local.data.from_items(rows), tmp_path / "c", ShardConfig(min_shards_per_split=1))
    assert not list(tmp_path.rglob("escaped*"))
    assert list((tmp_path / "c" / schema.SHARDS_DIR).iterdir()) == []  # no shard, no temp file


def test_write_shards_of_nothing(ray_local, tmp_path):
    assert write_shards(ray_local.data.from_items([]), tmp_path / "d", ShardConfig()) == []
    assert list((tmp_path / "d" / schema.SHARDS_DIR).iterdir()) == []


def test_sizes_summarised_while_writing_match_the_measuring_pass(ray_local, tmp_path):
    """The pack stage hands ``write_shards`` the sizes it summed while writing its parts."""
    from pipelines import parts
    from pipelines.shard import example_summary, split_sizes

    rows = _examples(200, seed=3)
    ds = ray_local.data.from_items(rows, override_num_blocks=3)
    summary = parts.sum_by(parts.write_parts(ds, tmp_path / "ex", key="key", summarise=example_summary), "split")
    measured = split_sizes(ds)
    lengths = {s: np.array([len(r["input_ids"]) for r in rows if r["split"] == s]) for s in schema.SPLITS}
    expected = {s: (len(n), int(example_tar_bytes(n).sum())) for s, n in lengths.items()}
    assert {s: (v["examples"], v["tar_bytes"]) for s, v in summary.items()} == measured == expected
    assert sum(v["tokens"] for v in summary.values()) == sum(len(r["input_ids"]) for r in rows)
    cfg = ShardConfig(target_bytes=20_000, min_shards_per_split=3)
    given = write_shards(parts.read_parts(tmp_path / "ex", kept=None), tmp_path / "a", cfg, sizes=measured)
    assert given == write_shards(ds, tmp_path / "b", cfg)
    assert write_shards(ds, tmp_path / "c", cfg, sizes={}) == []
