"""A corpus seen as some of its generations (``electra.data.corpus_growth`` explains the reading).

``generation_view`` is the manifest a reader of only some generations sees; ``restrict`` the same
for an opened corpus (``electra.data.corpus.CorpusInfo``, duck-typed: this module sits below
``electra.data.corpus``, which restricts a resumed corpus to its checkpoint's generations).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from pipelines import schema


class CorpusGrowthError(ValueError):
    """A corpus that did not only grow: a generation the run reads vanished, moved or changed."""


def generation_view(manifest: schema.Manifest, names: Sequence[str]) -> schema.Manifest:
    """``manifest`` as a reader of only generations ``names`` sees it (``schema.restricted``), its
    shards grouped by generation in the order of ``names`` (manifest order within one), so the
    list is the same whichever manifest of the corpus it is taken from. A manifest of one
    generation is itself (its shards as listed, as before generations existed). ``KeyError``
    naming a generation the manifest does not have."""
    view = schema.restricted(manifest, names)
    if len(schema.generations_of(manifest)) == 1:
        return view
    order = {n: i for i, n in enumerate(names)}
    shards = sorted(view.shards, key=lambda s: order.get(schema.shard_generation(s), len(order)))
    return dataclasses.replace(view, shards=shards)


def names_of(info) -> tuple[str, ...]:
    return tuple(schema.generation_names(info.manifest))


def restrict(info, names: Sequence[str]):
    """``info`` seeing only generations ``names``; a one-line ``CorpusGrowthError`` when one is gone."""
    try:
        return dataclasses.replace(info, manifest=generation_view(info.manifest, names))
    except KeyError as exc:
        raise CorpusGrowthError(f"--data {info.root}: {exc.args[0]}, which this run trained on; a corpus only "
                                "grows: restore it, or start a new run directory") from None
