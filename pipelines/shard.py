"""WebDataset shards: packed examples -> ``shards/<generation>/{split}-NNNNNN.tar`` on the store.

Shards are sized by bytes, not by a fixed count (ELECTRA wrote 1000 files whatever the corpus
size, which starves the input pipeline of small corpora). Per split

    num_shards = min(num_examples, max(cfg.min_shards_per_split, ceil(bytes / cfg.target_bytes)))

so a small corpus still gets several shards for every rank and data-loader worker, and a big one
gets ~``target_bytes`` files. ``bytes`` is estimated from the pack stage's token and example
counts at the compact format's cost (``schema``: 2 or 4 bytes per token plus 24 per example).

Each example goes to shard ``hash(uid, ordinal) mod num_shards``, so the assignment depends only
on the example, never on Ray's block order. Shards are written in parallel (Ray Data ``groupby``
on the shard number + ``map_groups``: one task per shard), each task encoding its examples with
``schema.encode_shard`` (sorted by key, fixed tar headers: the same examples give byte-identical
files) and writing the tar straight to its final name with one atomic write. Nothing is renamed
afterwards (an object store has no rename), so the shard number is the file's number; a shard
number that received no example is written as an empty tar by the driver, which keeps the names
contiguous (``{000000..000015}`` brace patterns keep working). Every shard is in a folder named
by the stage's key: a new build never overwrites a shard that a published manifest lists.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from common import storage
from common.hashing import hash64, sha256_bytes
from pipelines import schema
from pipelines.config import ShardConfig

_ASSIGN_SALT = 0x5A4D_0F_5AD5
_EXAMPLE_BYTES = 24  # layout (2 x uint32) + keys (2 x uint64) per example


def estimated_bytes(examples: int, tokens: int, vocab_size: int) -> int:
    return tokens * schema.token_dtype(vocab_size).itemsize + examples * _EXAMPLE_BYTES


def shard_count(num_examples: int, num_bytes: int, cfg: ShardConfig) -> int:
    """The shard count rule (see the module docstring); 0 for an empty split."""
    if num_examples <= 0:
        return 0
    wanted = max(cfg.min_shards_per_split, math.ceil(num_bytes / max(1, cfg.target_bytes)))
    return max(1, min(num_examples, wanted))


def assign(batch: dict[str, np.ndarray], *, counts: dict[str, int]) -> dict[str, np.ndarray]:
    """Column ``group`` = split index << 32 | shard number of every example row."""
    uid = np.asarray(batch["uid"]).astype(np.int64)
    ordinal = np.asarray(batch["ordinal"]).astype(np.int64)
    h = hash64(_ASSIGN_SALT, uid) ^ hash64(_ASSIGN_SALT + 1, ordinal)
    splits = np.asarray(batch["split"], dtype=object)
    unknown = ~np.isin(splits, schema.SPLITS)
    if unknown.any():
        raise ValueError(f"example of uid {uid[unknown][0]}: unknown split {splits[unknown][0]!r}")
    group = np.empty(len(h), dtype=np.int64)
    for i, split in enumerate(schema.SPLITS):
        here = splits == split
        if here.any():
            group[here] = (i << 32) + (h[here] % np.uint64(counts[split])).astype(np.int64)
    return {**batch, "group": group}


def rows_to_examples(batch: dict[str, np.ndarray]) -> schema.Examples:
    ids = [np.asarray(x) for x in batch["input_ids"]]
    lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
    tokens = np.concatenate(ids) if ids else np.zeros(0, np.int64)
    return schema.Examples(tokens, lengths, batch["b_start"], batch["uid"], batch["ordinal"])


def _write_group(batch: dict[str, np.ndarray], *, folder: str, generation: str, vocab_size: int,
                 chunk_tokens: int) -> dict[str, np.ndarray]:
    group = int(batch["group"][0])
    split, index = schema.SPLITS[group >> 32], group & 0xFFFFFFFF
    examples = rows_to_examples(batch)
    rel = schema.shard_name(generation, split, index)
    data = schema.encode_shard(examples, vocab_size=vocab_size, chunk_tokens=chunk_tokens, where=rel)
    storage.write_bytes(storage.join(folder, rel), data)
    return {"path": np.array([rel], dtype=object), "split": np.array([split], dtype=object),
            "num_examples": np.array([len(examples)]), "num_tokens": np.array([examples.num_tokens]),
            "bytes": np.array([len(data)]), "sha256": np.array([sha256_bytes(data)], dtype=object)}


def write_shards(examples: Any, corpus: str, cfg: ShardConfig, *, generation: str, vocab_size: int,
                 sizes: dict[str, tuple[int, int]]) -> list[schema.ShardInfo]:
    """Write the example rows of ``examples`` (a Ray Dataset with ``uid``, ``ordinal``,
    ``split``, ``input_ids``, ``b_start``) as shards of ``corpus``.

    ``sizes`` = per split (examples, tokens), as the pack stage counted them. Returns one
    :class:`schema.ShardInfo` per shard, train shards first, in name order.
    """
    unknown = sorted(set(sizes) - set(schema.SPLITS))
    if unknown:
        raise ValueError(f"examples with unknown split(s) {unknown}; expected {schema.SPLITS}")
    counts = {s: shard_count(n, estimated_bytes(n, t, vocab_size), cfg)
              for s, (n, t) in ((s, sizes.get(s, (0, 0))) for s in schema.SPLITS)}
    written = []
    if sum(counts.values()):
        written = (examples.select_columns(["uid", "ordinal", "split", "input_ids", "b_start"])
                   .map_batches(assign, fn_kwargs={"counts": counts}, batch_format="numpy")
                   .groupby("group")
                   .map_groups(_write_group, batch_format="numpy",
                               fn_kwargs={"folder": corpus, "generation": generation, "vocab_size": vocab_size,
                                          "chunk_tokens": cfg.chunk_tokens})
                   .take_all())
    infos = {r["path"]: schema.ShardInfo(path=str(r["path"]), split=str(r["split"]),
                                         num_examples=int(r["num_examples"]), num_tokens=int(r["num_tokens"]),
                                         bytes=int(r["bytes"]), sha256=str(r["sha256"])) for r in written}
    empty = schema.encode_shard(schema.Examples.concat([]), vocab_size=vocab_size)
    for split in schema.SPLITS:
        for index in range(counts[split]):
            rel = schema.shard_name(generation, split, index)
            if rel not in infos:  # no example hashed here: an empty tar keeps the numbering
                storage.write_bytes(storage.join(corpus, rel), empty)
                infos[rel] = schema.ShardInfo(rel, split, 0, 0, len(empty), sha256_bytes(empty))
    return [infos[k] for k in sorted(infos, key=lambda p: (schema.SPLITS.index(infos[p].split), p))]


def example_summary(table: Any) -> dict[str, dict[str, int]]:
    """Per split of a pyarrow block of examples: examples, tokens and documents (a document is
    counted by its first example, ordinal 0)."""
    import pyarrow.compute as pc

    if table.num_rows == 0:
        return {}
    lengths = pc.list_value_length(table.column("input_ids")).to_numpy(zero_copy_only=False)
    splits = np.asarray(table.column("split").to_pylist(), dtype=object)
    first = table.column("ordinal").to_numpy(zero_copy_only=False) == 0
    return {s: {"examples": int(np.count_nonzero(splits == s)), "tokens": int(lengths[splits == s].sum()),
                "documents": int(np.count_nonzero(first & (splits == s)))} for s in sorted(set(splits))}
