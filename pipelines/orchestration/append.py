"""``build-corpus --append``: a new generation of an existing corpus, deduplicated against it.

The corpus's own settings decide an append: its config (``manifest.config``) is the base, and
what the user passes on top of it (a config file, ``--set``, flags) must not change anything
but ``shuffle.*`` (requests and memory, never the corpus): another tokenizer, ``pack.seq_len``
or profile is refused in one line naming the key (``check_unchanged``). The new sources go
through ingest and the filters with that config; the dedup stages drop, beside duplicates
within the new text, those of any earlier generation, found in the generations' indexes
(``pipelines.dedup.prior``); the tokenizer stage takes the corpus's tokenizer as it is; pack and
shard use the same tokenizer, sequence length and split rule, into ``shards/<key>/`` of their
own. Publishing (``merged``) lists the earlier generations' shards, quarantine and indexes
unchanged after them and writes the manifest last: until then the corpus is the previous one,
and a killed append rerun with the same command finishes it (its stages are cached by keys that
name the generations it deduplicates against).

A corpus whose generation has no index (built before indexes were written) cannot be appended
to until its build is run once more with this version (``index_missing``): that run rebuilds the
document stages, writes the index and keeps the shards byte-identical (their stages' keys do not
change). The source documents are not in the corpus, so the index cannot be made from it alone.
"""
from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, replace
from typing import Any, Mapping

from common import storage
from common.config import ConfigError
from pipelines import schema
from pipelines.config import CorpusConfig

log = logging.getLogger("pipelines.orchestration.append")


@dataclass(frozen=True)
class Prior:
    """The corpus an append grows: its manifest and generations, oldest first."""
    corpus: str
    manifest: schema.Manifest
    generations: tuple[schema.GenerationInfo, ...]

    @property
    def names(self) -> list[str]:
        return [g.name for g in self.generations]

    def fingerprint(self) -> dict[str, Any]:
        """What an append's dedup and tokenizer stages depend on: the generations it deduplicates
        against and the corpus's tokenizer."""
        return {"generations": self.names, "indexes": [g.index for g in self.generations],
                "tokenizer": self.manifest.tokenizer.sha256}

    def indexes(self, cfg: CorpusConfig) -> list:
        from pipelines.dedup.corpus_index import open_index

        return [open_index(self.corpus, n, g.name, g.index, cfg.dedup) for n, g in enumerate(self.generations)]

    def holding(self, fingerprint: str) -> int | None:
        """The generation whose sources had this fingerprint (an append already done), if any."""
        for n, g in enumerate(self.generations):
            if g.sources.get("fingerprint") == fingerprint:
                return n
        return None


def load_prior(corpus: str) -> Prior:
    """The corpus at ``corpus`` as an append reads it (one line when there is none)."""
    where = storage.join(corpus, schema.MANIFEST_NAME)
    try:
        manifest = schema.Manifest.parse(schema.read_manifest_bytes(corpus), where)
    except FileNotFoundError:
        raise ConfigError(f"--append: {corpus} has no manifest.json; build the corpus first "
                          "(the same command without --append)") from None
    except ValueError as exc:  # damaged, malformed or of another format: its one line, as the CLI shows it
        raise ConfigError(f"--append: {exc}") from None
    return Prior(corpus=corpus, manifest=manifest, generations=tuple(schema.generations_of(manifest)))


def index_missing(prior: Prior) -> str | None:
    """The one line saying that a generation has no index and how to give it one, or None."""
    for n, g in enumerate(prior.generations):
        if not g.index:
            return (f"--append: {prior.corpus} generation {n} ({g.name}) has no dedup index (built by an "
                    "earlier version); run its build once more with this version (the same --source and "
                    "settings, without --append): it writes the index and keeps the shards as they are")
    return None


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, Mapping) and v:
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def settings(prior: Prior) -> dict[str, Any]:
    """The corpus's config, complete (its profile's preset applied), as a mapping to edit."""
    return CorpusConfig.from_dict(copy.deepcopy(prior.manifest.config),
                                  where=f"{prior.corpus} manifest config").to_dict()


def merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """``top``'s values over ``base`` (nested sections merged key by key)."""
    for k, v in top.items():
        if isinstance(v, Mapping) and isinstance(base.get(k), dict):
            merge(base[k], v)
        else:
            base[k] = copy.deepcopy(v)
    return base


def check_unchanged(prior: Prior, cfg: CorpusConfig) -> CorpusConfig:
    """``cfg`` (the corpus's config with the user's settings on top) when it changes nothing but
    ``shuffle.*``; else a ``ConfigError`` naming the first key that differs and both values."""
    before, after = _flatten(settings(prior)), _flatten(cfg.to_dict())
    for key in sorted(set(before) | set(after)):
        if key.startswith("shuffle.") or before.get(key) == after.get(key):
            continue
        raise ConfigError(f"--append: {key}={after.get(key)!r} but {prior.corpus} was built with "
                          f"{before.get(key)!r}; an append uses the corpus's own settings (leave it out, or build "
                          "a new corpus)")
    return cfg


def generation_of(build: Any, manifest: schema.Manifest, index: str) -> schema.GenerationInfo:
    """The generation a build's (or an append's) published results make."""
    return schema.GenerationInfo(
        name=manifest.generation, build_key=build.build_key,
        documents=int(manifest.stats.get("summary", {}).get("documents_kept", 0)),
        splits={s: {"num_examples": v.num_examples, "num_tokens": v.num_tokens, "num_documents": v.num_documents}
                for s, v in manifest.splits.items()},
        sources=dict(manifest.stats.get("sources", {})), index=index)


def merged(prior: Prior, new: schema.Manifest) -> schema.Manifest:
    """The manifest after an append: the earlier generations as they were, then the new one."""
    from pipelines.pack import fill

    shards = list(prior.manifest.shards) + list(new.shards)
    splits = {}
    for split in schema.SPLITS:
        a, b = prior.manifest.splits.get(split, schema.SplitInfo()), new.splits.get(split, schema.SplitInfo())
        examples, tokens = a.num_examples + b.num_examples, a.num_tokens + b.num_tokens
        splits[split] = schema.SplitInfo(num_examples=examples, num_tokens=tokens,
                                         num_documents=a.num_documents + b.num_documents,
                                         fill=fill(tokens, examples, new.seq_len))
    return replace(new, shards=shards, splits=splits, tokenizer=prior.manifest.tokenizer,
                   rejected_lists=list(prior.manifest.rejected_lists) + list(new.rejected_lists),
                   generations=list(prior.generations) + list(new.generations),
                   languages=new.languages, decontamination=new.decontamination or prior.manifest.decontamination)
