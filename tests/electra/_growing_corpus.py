"""Test helper: a tiny corpus that grows by generations, as ``build-corpus --append`` grows one.

``write_growing_corpus(root, generations)`` writes generation ``g0`` with ``write_tiny_corpus``
and every later generation with the same tokenizer into ``shards/<name>/``, then keeps one
manifest per stage of growth beside the corpus (``stage_manifest(root, k)``: the manifest listing
the first ``k + 1`` generations, ``generations`` oldest first), and installs the first as
``manifest.json``. Growing the corpus is then installing a later stage (``install``), one atomic
replace of the commit point, as an append commits: a test grows a corpus at an exact step, with
no build and no race. Every shard file of every stage is written up front: what a manifest does
not list does not exist for a reader.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

from common import storage
from pipelines import schema
from tests.electra._corpus import GENERATION, write_tiny_corpus

STAGES = ".stages"  # beside the corpus's files: stage_<k>.json


def stage_manifest(root: str | Path, k: int) -> Path:
    return Path(root) / STAGES / f"stage_{k}.json"


def install(root: str | Path, k: int) -> None:
    """Make stage ``k`` the corpus's manifest (an atomic replace, as a commit)."""
    tmp = Path(root) / f".{schema.MANIFEST_NAME}.tmp-{os.getpid()}"
    shutil.copyfile(stage_manifest(root, k), tmp)
    os.replace(tmp, Path(root) / schema.MANIFEST_NAME)


def _splits(manifest: schema.Manifest) -> dict[str, dict[str, int]]:
    return {s: {"num_examples": v.num_examples, "num_tokens": v.num_tokens, "num_documents": v.num_documents}
            for s, v in manifest.splits.items()}


def write_growing_corpus(root: str | Path, generations: list[dict]) -> Path:
    """``generations``: ``write_tiny_corpus`` arguments of each (``train_shards``,
    ``validation_shards``, ``seed``), the first named ``g0``, the others ``g1``, ``g2``, ..."""
    root = Path(root)
    write_tiny_corpus(root, **generations[0])
    first = schema.Manifest.parse((root / schema.MANIFEST_NAME).read_bytes(), "g0")
    infos = [schema.GenerationInfo(name=GENERATION, splits=_splits(first))]
    shards, splits = list(first.shards), dict(first.splits)
    stages = [first]
    for k, args in enumerate(generations[1:], start=1):
        name = f"g{k}"
        scratch = root.parent / f".{root.name}-{name}"
        write_tiny_corpus(scratch, tokenizer_from=root, **args)
        made = schema.Manifest.parse((scratch / schema.MANIFEST_NAME).read_bytes(), name)
        shutil.copytree(scratch / schema.SHARDS_DIR / GENERATION, root / schema.SHARDS_DIR / name)
        shutil.rmtree(scratch)
        shards += [dataclasses.replace(s, path=s.path.replace(f"/{GENERATION}/", f"/{name}/")) for s in made.shards]
        infos.append(schema.GenerationInfo(name=name, splits=_splits(made)))
        splits = {s: schema.SplitInfo(num_examples=splits[s].num_examples + made.splits[s].num_examples,
                                      num_tokens=splits[s].num_tokens + made.splits[s].num_tokens,
                                      num_documents=splits[s].num_documents + made.splits[s].num_documents)
                  for s in splits}
        stages.append(dataclasses.replace(first, shards=list(shards), splits=dict(splits), generations=list(infos),
                                          generation=name))
    for k, manifest in enumerate(stages):
        storage.write_bytes(str(stage_manifest(root, k)), manifest.encode())
    install(root, 0)
    return root
