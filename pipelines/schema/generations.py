"""Generations: a corpus that grows by appends, and the view of it a reader asks for.

A corpus is built once (generation 0) and may grow: ``build-corpus --append`` deduplicates new
text against the index the corpus keeps (``index/<generation>/``) and writes its shards into a
folder of their own (``shards/<generation>/``), named by the shard stage's key like every other
key-named folder. The manifest lists the generations in the order they were added
(``Manifest.generations``) and every shard of all of them; a generation's shards are the ones in
its folder. Earlier generations are never rewritten, so a reader that pinned some generations
(a training run replaying an epoch) finds their shards byte-identical in every later manifest.

A manifest written before generations existed has one, implicitly: the one its ``generation``
field names (``generations_of``). ``restricted`` gives the manifest a reader would have seen with
only some generations: their shards, and splits summed from their records.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Iterable

from pipelines.schema.layout import SHARDS_DIR, SPLITS
from pipelines.schema.manifest import GenerationInfo, Manifest, ShardInfo, SplitInfo


def shard_generation(shard: ShardInfo) -> str:
    """The generation a shard belongs to: the folder it lies in (``shards/<generation>/x.tar``)."""
    parts = shard.path.split("/")
    return parts[1] if len(parts) == 3 and parts[0] == SHARDS_DIR else ""


def generations_of(manifest: Manifest) -> list[GenerationInfo]:
    """The manifest's generations, oldest first; one (its ``generation``) when it predates them."""
    if manifest.generations:
        return list(manifest.generations)
    splits = {s: {"num_examples": v.num_examples, "num_tokens": v.num_tokens, "num_documents": v.num_documents}
              for s, v in manifest.splits.items()}
    return [GenerationInfo(name=manifest.generation, build_key=manifest.build_key,
                           documents=int(manifest.stats.get("summary", {}).get("documents_kept", 0)), splits=splits,
                           sources=dict(manifest.stats.get("sources", {})))]


def generation_names(manifest: Manifest) -> list[str]:
    return [g.name for g in generations_of(manifest)]


def restricted(manifest: Manifest, names: Iterable[str]) -> Manifest:
    """``manifest`` as a reader that knows only generations ``names`` sees it: their shards, and
    the splits summed from their records. Every name must be one of the manifest's (``KeyError``
    naming it otherwise): a generation is never removed from a corpus."""
    names = list(names)
    known = {g.name: g for g in generations_of(manifest)}
    for n in names:
        if n not in known:
            raise KeyError(f"generation {n!r} is not in this corpus (it lists {sorted(known)})")
    if set(names) == set(known):
        return manifest
    keep = set(names)
    shards = [s for s in manifest.shards if shard_generation(s) in keep]
    splits = {}
    for split in SPLITS:
        got = [known[n].splits.get(split, {}) for n in names]
        examples = sum(int(g.get("num_examples", 0)) for g in got)
        tokens = sum(int(g.get("num_tokens", 0)) for g in got)
        splits[split] = SplitInfo(num_examples=examples, num_tokens=tokens,
                                  num_documents=sum(int(g.get("num_documents", 0)) for g in got),
                                  fill=round(tokens / (examples * manifest.seq_len), 4) if examples else 0.0)
    return replace(manifest, shards=shards, splits=splits, generations=[known[n] for n in names],
                   generation=names[-1] if names else "")
