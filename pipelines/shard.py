"""WebDataset shards: packed examples -> ``shards/<generation>/{split}-NNNNNN.tar`` on the store.

Shards are sized by bytes, not by a fixed count (ELECTRA wrote 1000 files whatever the corpus
size, which starves the input pipeline of small corpora). Per split

    num_shards = min(num_examples, max(cfg.min_shards_per_split, ceil(bytes / cfg.target_bytes)))

so a small corpus still gets several shards for every rank and data-loader worker, and a big one
gets ~``target_bytes`` files. ``bytes`` is estimated from the pack stage's token and example
counts at the compact format's cost (``schema``: 2 or 4 bytes per token plus 24 per example).

Each example goes to shard ``hash(uid, ordinal) mod num_shards``, so the assignment depends only
on the example, never on Ray's block order. The examples reach their shard's task through the
storage shuffle (``pipelines.engine.shuffle``: one partition per shard, map files of ~128 MB, so
the shuffle creates objects in proportion to the payload, not to blocks x shards; the payload
never sits in Ray's object store). One task per shard encodes its examples with
``schema.encode_shard`` (sorted by key, fixed tar headers: the same examples give byte-identical
files) and writes the tar straight to its final name with one atomic write, checked on the store. Nothing is renamed
afterwards (an object store has no rename), so the shard number is the file's number; a shard
number that received no example is written as an empty tar by the driver, which keeps the names
contiguous (``{000000..000015}`` brace patterns keep working). Every shard is in a folder named
by the stage's key: a new build never overwrites a shard that a published manifest lists.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa

from common import storage
from common.hashing import hash64, sha256_bytes
from pipelines import schema
from pipelines.config import ShardConfig, ShuffleConfig
from pipelines.engine.shuffle import PART, reduce, shuffle
from pipelines.engine.written import add as add_written

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


def shard_numbers(uid: np.ndarray, ordinal: np.ndarray, split: np.ndarray, counts: dict[str, int]) -> np.ndarray:
    """Each example's shard as one number: the shards of the splits in ``schema.SPLITS`` order,
    numbered one after another (train 0..n-1, then validation); a function of (uid, ordinal,
    split) only, never of the batch it arrives in."""
    uid, ordinal = np.asarray(uid).astype(np.int64), np.asarray(ordinal).astype(np.int64)
    h = hash64(_ASSIGN_SALT, uid) ^ hash64(_ASSIGN_SALT + 1, ordinal)
    splits = np.asarray(split, dtype=object)
    unknown = ~np.isin(splits, schema.SPLITS)
    if unknown.any():
        raise ValueError(f"example of uid {uid[unknown][0]}: unknown split {splits[unknown][0]!r}")
    group = np.empty(len(h), dtype=np.int64)
    first = 0
    for name in schema.SPLITS:
        here = splits == name
        if here.any():
            group[here] = first + (h[here] % np.uint64(counts[name])).astype(np.int64)
        first += counts[name]
    return group


def _assign(table: pa.Table, *, counts: dict[str, int]) -> pa.Table:
    """Example rows with their shard in ``_part`` (the shuffle's partition)."""
    cols = {c: table.column(c).to_numpy(zero_copy_only=False) for c in ("uid", "ordinal", "split")}
    return table.append_column(PART, pa.array(shard_numbers(cols["uid"], cols["ordinal"], cols["split"], counts)))


def shard_of(part: int, counts: dict[str, int]) -> tuple[str, int]:
    """(split, shard number) of shuffle partition ``part`` (``assign``'s numbering)."""
    for split in schema.SPLITS:
        if part < counts[split]:
            return split, part
        part -= counts[split]
    raise ValueError(f"partition {part} past the last shard")


def rows_to_examples(table: pa.Table) -> schema.Examples:
    """Example rows (a pyarrow table) as ``schema.Examples``, without a Python object per row."""
    ids = table.column("input_ids").combine_chunks()
    lengths = np.diff(ids.offsets.to_numpy()).astype(np.int64)
    tokens = ids.flatten().to_numpy(zero_copy_only=False)
    cols = {c: table.column(c).to_numpy(zero_copy_only=False) for c in ("b_start", "uid", "ordinal")}
    return schema.Examples(tokens, lengths, cols["b_start"], cols["uid"], cols["ordinal"])


def _write_group(table: pa.Table, *, partition: int, folder: str, generation: str, vocab_size: int,
                 chunk_tokens: int, counts: dict[str, int]) -> dict[str, np.ndarray]:
    split, index = shard_of(partition, counts)
    examples = rows_to_examples(table)
    rel = schema.shard_name(generation, split, index)
    data = schema.encode_shard(examples, vocab_size=vocab_size, chunk_tokens=chunk_tokens, where=rel)
    storage.write_bytes(storage.join(folder, rel), data)
    return {"path": np.array([rel], dtype=object), "split": np.array([split], dtype=object),
            "num_examples": np.array([len(examples)]), "num_tokens": np.array([examples.num_tokens]),
            "bytes": np.array([len(data)]), "sha256": np.array([sha256_bytes(data)], dtype=object)}


def write_shards(examples: Any, corpus: str, cfg: ShardConfig, *, generation: str, vocab_size: int,
                 sizes: dict[str, tuple[int, int]], work: str,
                 shuffle_cfg: ShuffleConfig | None = None) -> tuple[list[schema.ShardInfo], dict[str, Any]]:
    """Write the example rows of ``examples`` (a Ray Dataset with ``uid``, ``ordinal``,
    ``split``, ``input_ids``, ``b_start``) as shards of ``corpus``.

    ``sizes`` = per split (examples, tokens), as the pack stage counted them; the shuffle's files
    go under ``work`` (deleted here). Returns one :class:`schema.ShardInfo` per shard, train
    shards first, in name order, and the shuffle's statistics ({} when nothing was shuffled).
    """
    unknown = sorted(set(sizes) - set(schema.SPLITS))
    if unknown:
        raise ValueError(f"examples with unknown split(s) {unknown}; expected {schema.SPLITS}")
    counts = {s: shard_count(n, estimated_bytes(n, t, vocab_size), cfg)
              for s, (n, t) in ((s, sizes.get(s, (0, 0))) for s in schema.SPLITS)}
    written, stats = [], {}
    opts = (shuffle_cfg or ShuffleConfig()).options()
    if sum(counts.values()):
        keyed = (examples.select_columns(["uid", "ordinal", "split", "input_ids", "b_start"])
                 .map_batches(_assign, fn_kwargs={"counts": counts}, batch_format="pyarrow"))
        shuffled = shuffle(keyed, partitions=sum(counts.values()), folder=storage.join(work, "shards"),
                           name="shard_examples", file_bytes=opts["file_bytes"], ranges=opts["ranges"],
                           slice_bytes=opts["slice_bytes"])
        results = reduce(shuffled, _write_group, batch_format="pyarrow", with_partition=True,
                         memory_bytes=opts["memory_bytes"],
                         fn_kwargs={"folder": corpus, "generation": generation, "vocab_size": vocab_size,
                                    "chunk_tokens": cfg.chunk_tokens, "counts": counts})
        for row in results.iter_rows():  # one per shard written, counted as it arrives
            written.append(row)
            add_written(files=1, nbytes=int(row["bytes"]))
        shuffled.remove()
        stats = shuffled.stats
    infos = {r["path"]: schema.ShardInfo(path=str(r["path"]), split=str(r["split"]),
                                         num_examples=int(r["num_examples"]), num_tokens=int(r["num_tokens"]),
                                         bytes=int(r["bytes"]), sha256=str(r["sha256"])) for r in written}
    empty = schema.encode_shard(schema.Examples.concat([]), vocab_size=vocab_size)
    for split in schema.SPLITS:
        for index in range(counts[split]):
            rel = schema.shard_name(generation, split, index)
            if rel not in infos:  # no example hashed here: an empty tar keeps the numbering
                storage.write_bytes(storage.join(corpus, rel), empty)
                add_written(files=1, nbytes=len(empty))
                infos[rel] = schema.ShardInfo(rel, split, 0, 0, len(empty), sha256_bytes(empty))
    return [infos[k] for k in sorted(infos, key=lambda p: (schema.SPLITS.index(infos[p].split), p))], stats


def example_summary(table: Any, *, unk_id: int | None = None) -> dict[str, dict[str, int]]:
    """Per split of a pyarrow block of examples: examples, tokens and documents (a document is
    counted by its first example, ordinal 0); with ``unk_id``, also the tokens of that id
    (``unk_tokens``) and the text tokens, all but [CLS] and [SEP] (``text_tokens``: 2 a one-segment
    example, 3 a two-segment one)."""
    import pyarrow.compute as pc

    if table.num_rows == 0:
        return {}
    ids = table.column("input_ids")
    lengths = pc.list_value_length(ids).to_numpy(zero_copy_only=False)
    splits = np.asarray(table.column("split").to_pylist(), dtype=object)
    first = table.column("ordinal").to_numpy(zero_copy_only=False) == 0
    out = {s: {"examples": int(np.count_nonzero(splits == s)), "tokens": int(lengths[splits == s].sum()),
               "documents": int(np.count_nonzero(first & (splits == s)))} for s in sorted(set(splits))}
    if unk_id is not None:
        specials = 2 + (table.column("b_start").to_numpy(zero_copy_only=False) < lengths)
        example = np.repeat(np.arange(len(lengths)), lengths)  # each token's example
        unknown = pc.list_flatten(ids).to_numpy(zero_copy_only=False) == unk_id
        unk_per_example = np.bincount(example[unknown], minlength=len(lengths))
        for s, row in out.items():
            here = splits == s
            row["unk_tokens"] = int(unk_per_example[here].sum())
            row["text_tokens"] = int((lengths[here] - specials[here]).sum())
    return out
