"""WebDataset shards: packed examples -> ``shards/{split}-NNNNNN.tar``, deterministic and atomic.

Shards are sized by bytes, not by a fixed count (ELECTRA wrote 1000 files whatever the corpus
size, which starves the input pipeline of small corpora): per split

    num_shards = min(num_examples, max(cfg.min_shards_per_split, ceil(bytes / cfg.target_bytes)))

so a small corpus still gets several shards for every rank and data-loader worker, and a big one
gets ~``target_bytes`` files. ``bytes`` is the exact tar size of the split's members (the sum of
the 512-byte-aligned member sizes), computed in a first pass over the examples.

Each example goes to shard ``blake2b(key) mod num_shards``, so the assignment depends only on the
key, never on Ray's block order. Shards are written in parallel (Ray Data ``groupby`` on the shard
id + ``map_groups``: one task per shard), members in key order, with fixed tar headers (mtime 0,
uid/gid 0, mode 0644, empty owner names): the same examples always give byte-identical files.
Every shard is written to a dot-prefixed ``.tmp`` file in ``shards/`` and moved into place with
``os.replace`` only after all shards are done; shard ids that received no example are dropped
and the rest numbered contiguously. Member names come from ``schema.encode_sample``, which
rejects keys containing ``/`` or ``.``: nothing can be written outside the shard folder.
"""
from __future__ import annotations

import hashlib
import io
import math
import os
import re
import tarfile
from pathlib import Path
from typing import Any

import numpy as np

from pipelines import parts, schema
from pipelines.config import ShardConfig

_TAR_BLOCK = 512
_TAR_RECORD = 20 * _TAR_BLOCK
_NPY_HEADER = 128  # np.save header of a 1-D array: magic + version + dict, padded to 64 bytes
_SHARD_FILE = re.compile(r"^(train|validation)-\d{6}\.tar$")


def _member_bytes(payload: Any) -> Any:
    """A tar member: a 512-byte header plus the payload padded to 512 bytes (ints or arrays)."""
    return _TAR_BLOCK + -(-payload // _TAR_BLOCK) * _TAR_BLOCK


def example_tar_bytes(num_tokens: np.ndarray) -> np.ndarray:
    """Tar bytes of examples with ``num_tokens`` tokens (two .npy members each)."""
    n = np.asarray(num_tokens, dtype=np.int64)
    ids = _NPY_HEADER + n * np.dtype(schema.ID_DTYPE).itemsize
    seg = _NPY_HEADER + n * np.dtype(schema.SEGMENT_DTYPE).itemsize
    return _member_bytes(ids) + _member_bytes(seg)


def shard_count(num_examples: int, num_bytes: int, cfg: ShardConfig) -> int:
    """The shard count rule (see the module docstring); 0 for an empty split."""
    if num_examples <= 0:
        return 0
    wanted = max(cfg.min_shards_per_split, math.ceil(num_bytes / max(1, cfg.target_bytes)))
    return max(1, min(num_examples, wanted))


def _key_hash(keys: np.ndarray) -> np.ndarray:
    return np.fromiter((int.from_bytes(hashlib.blake2b(str(k).encode(), digest_size=8).digest(), "little")
                        for k in keys), dtype=np.uint64, count=len(keys))


def _assign(batch: dict[str, np.ndarray], *, counts: dict[str, int]) -> dict[str, np.ndarray]:
    h = _key_hash(batch["key"])
    splits = np.asarray(batch["split"], dtype=object)
    group = np.empty(len(h), dtype=np.int64)
    for i, split in enumerate(schema.SPLITS):
        here = splits == split
        if here.any():
            group[here] = (i << 32) + (h[here] % np.uint64(counts[split])).astype(np.int64)
    unknown = ~np.isin(splits, schema.SPLITS)
    if unknown.any():
        raise ValueError(f"example {batch['key'][unknown][0]!r}: unknown split {splits[unknown][0]!r}")
    return {**batch, "group": group}


def _tar_info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, 0, 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    return info


def write_tar(path: Path, keys: np.ndarray, input_ids: np.ndarray, segment_ids: np.ndarray) -> int:
    """Write one shard (members in key order) to ``path``; returns the number of tokens."""
    order = sorted(range(len(keys)), key=lambda i: str(keys[i]))
    tokens = 0
    prev = None
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for i in order:
            key = str(keys[i])
            if key == prev:
                raise ValueError(f"duplicate example key {key!r}: WebDataset would merge the two samples")
            prev = key
            sample = schema.encode_sample(key, input_ids[i], segment_ids[i])
            for ext in schema.SAMPLE_KEYS:
                payload = sample[ext]
                tar.addfile(_tar_info(f"{key}.{ext}", len(payload)), io.BytesIO(payload))
            tokens += len(input_ids[i])
    return tokens


def _write_group(batch: dict[str, np.ndarray], *, shard_dir: str) -> dict[str, np.ndarray]:
    group = int(batch["group"][0])
    split = schema.SPLITS[group >> 32]
    tmp = Path(shard_dir) / f".{split}-g{group & 0xFFFFFFFF:06d}.tar.tmp"
    try:
        tokens = write_tar(tmp, batch["key"], batch["input_ids"], batch["segment_ids"])
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return {"group": np.array([group]), "tmp": np.array([tmp.name], dtype=object),
            "num_examples": np.array([len(batch["key"])]), "num_tokens": np.array([tokens]),
            "bytes": np.array([tmp.stat().st_size]), "sha256": np.array([schema.sha256_file(tmp)], dtype=object)}


def _clean(shard_dir: Path, keep: set[str] | None = None) -> None:
    """Remove temp files of an interrupted run and, unless ``keep`` is None, every shard file
    not in ``keep`` (shards of an earlier build with other settings)."""
    for p in shard_dir.iterdir():
        stale_tmp = p.name.startswith(".") and p.name.endswith(".tmp")
        stale_shard = keep is not None and _SHARD_FILE.match(p.name) and p.name not in keep
        if stale_tmp or stale_shard:
            p.unlink()


def _list_lengths(column: Any) -> np.ndarray:
    """Row lengths of a pyarrow list column, or of Ray's variable-shaped tensor extension column."""
    import pyarrow as pa
    import pyarrow.compute as pc

    out = []
    for chunk in column.chunks:
        if isinstance(chunk.type, pa.ExtensionType):  # Ray's to_numpy gives one array per row
            out.append(np.fromiter((len(x) for x in chunk.to_numpy(zero_copy_only=False)),
                                   dtype=np.int64, count=len(chunk)))
        else:
            out.append(pc.list_value_length(chunk).to_numpy(zero_copy_only=False).astype(np.int64))
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def example_summary(table: Any) -> dict[str, np.ndarray]:
    """Per split of a pyarrow block of examples: examples, tokens and tar bytes (``parts`` summary)."""
    if table.num_rows == 0:
        return {"split": np.array([], dtype=object), "examples": np.array([], np.int64),
                "tokens": np.array([], np.int64), "tar_bytes": np.array([], np.int64)}
    n = _list_lengths(table.column("input_ids"))
    splits = np.asarray(table.column("split").to_pylist(), dtype=object)
    names = sorted(set(splits))
    return {"split": np.array(names, dtype=object),
            "examples": np.array([np.count_nonzero(splits == s) for s in names], np.int64),
            "tokens": np.array([n[splits == s].sum() for s in names], np.int64),
            "tar_bytes": np.array([example_tar_bytes(n[splits == s]).sum() for s in names], np.int64)}


def split_sizes(examples: Any) -> dict[str, tuple[int, int]]:
    """Per split: (number of examples, tar bytes), from ``example_summary`` of every block."""
    rows = examples.select_columns(["split", "input_ids"]).map_batches(
        example_summary, batch_format="pyarrow", batch_size=None).take_all()
    return {split: (v["examples"], v["tar_bytes"]) for split, v in parts.sum_by(rows, "split").items()}


def write_shards(examples: Any, corpus_dir: str | Path, cfg: ShardConfig, *,
                 sizes: dict[str, tuple[int, int]] | None = None) -> list[schema.ShardInfo]:
    """Write the example rows of ``examples`` (a Ray Dataset) as WebDataset shards.

    ``sizes`` (per split: examples, tar bytes, as ``example_summary`` adds them up) saves the
    measuring pass when the caller already knows them. Returns one :class:`schema.ShardInfo` per
    written shard, train shards first, in name order.
    """
    shard_dir = Path(corpus_dir) / schema.SHARDS_DIR
    shard_dir.mkdir(parents=True, exist_ok=True)
    _clean(shard_dir)
    if sizes is None:
        sizes = split_sizes(examples)
    if sum(n for n, _ in sizes.values()) == 0:
        _clean(shard_dir, keep=set())
        return []
    unknown = sorted(set(sizes) - set(schema.SPLITS))
    if unknown:
        raise ValueError(f"examples with unknown split(s) {unknown}; expected {schema.SPLITS}")
    counts = {s: shard_count(*sizes.get(s, (0, 0)), cfg) for s in schema.SPLITS}
    try:
        written = (examples.select_columns(["key", "split", "input_ids", "segment_ids"])
                   .map_batches(_assign, fn_kwargs={"counts": counts}, batch_format="numpy")
                   .groupby("group")
                   .map_groups(_write_group, fn_kwargs={"shard_dir": str(shard_dir)}, batch_format="numpy")
                   .take_all())
    except BaseException:
        _clean(shard_dir)  # the temp files of the shards that did get written
        raise
    return _publish(shard_dir, sorted(written, key=lambda r: int(r["group"])))


def _publish(shard_dir: Path, written: list[dict[str, Any]]) -> list[schema.ShardInfo]:
    """Number the non-empty shards contiguously per split and move them into place."""
    infos: list[schema.ShardInfo] = []
    index = {s: 0 for s in schema.SPLITS}
    for r in written:
        split = schema.SPLITS[int(r["group"]) >> 32]
        rel = schema.shard_name(split, index[split])
        index[split] += 1
        os.replace(shard_dir / str(r["tmp"]), shard_dir.parent / rel)
        infos.append(schema.ShardInfo(path=rel, split=split, num_examples=int(r["num_examples"]),
                                      num_tokens=int(r["num_tokens"]), bytes=int(r["bytes"]),
                                      sha256=str(r["sha256"])))
    _clean(shard_dir, keep={Path(i.path).name for i in infos})
    return infos
