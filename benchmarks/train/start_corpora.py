"""The corpora part 1 of ``benchmarks/train/start.py`` starts from, in the store.

A tiny corpus (``--shards`` train shards, two validation shards, the tests' writer) is uploaded
twice: as the previous format (manifest format 2, ``--rejected`` quarantined parts listed
inline) and as the current one (format 3: the list in ``rejected-<sha>.json``, which a trainer
never reads). The manifest's bytes grow with the quarantine in the previous format (about
``--rejected`` x 180 bytes here) and not in the current one; the figure per rejected part is
printed, to scale to a real build. Every corpus has enough examples for one global batch of
``STARTUP_BATCH``, which rank 0 now checks.
"""
from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

STARTUP_BATCH = 2048


def rejected_parts(n: int):
    from pipelines import schema

    return [schema.RejectedInfo("near_dedup", f"rejected/near_dedup-0123456789abcdef/"
                                f"part-{i:08d}-{i * 7919 % 10**6:06d}.jsonl.zst", 40 + i % 50, 9000 + i % 4000)
            for i in range(n)]


def shard_examples(shards: int) -> int:
    """Examples per train shard: enough for one global batch of ``STARTUP_BATCH`` (rank 0 checks it)."""
    return max(6, -(-STARTUP_BATCH // shards))


def write_corpora(work: Path, bucket: str, *, shards: int, rejected: int) -> dict[str, str]:
    """The same tiny corpus at ``bucket/before`` (format 2, the list inline) and ``bucket/after``
    (also read as ``manifest``)."""
    from pipelines import schema
    from tests.electra._corpus import upload_corpus, write_tiny_corpus

    local = write_tiny_corpus(work / "corpus", seq_len=32, train_shards=(shard_examples(shards),) * shards,
                              validation_shards=(4, 4))
    out = {}
    for name in ("before", "after"):
        loc = upload_corpus(local, f"{bucket}/{name}")
        manifest = schema.Manifest.load(loc)
        manifest.rejected = rejected_parts(rejected)
        if name == "after":
            manifest.save(loc)
        else:  # the previous format: written as format 2 wrote it
            d = manifest.to_dict()
            d.pop("rejected_index"), d.pop("rejected_lists")
            d["format_version"], d["rejected"] = 2, [asdict(r) for r in manifest.rejected]
            from common import storage

            storage.write_bytes(f"{loc}/{schema.MANIFEST_NAME}",
                                (json.dumps(d, indent=2, sort_keys=True) + "\n").encode())
        out[name] = loc
    out["manifest"] = out["after"]
    return out
