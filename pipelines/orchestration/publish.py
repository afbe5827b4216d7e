"""Publishing a build: the manifest from the stage markers, written last, then garbage collection.

Everything the manifest lists is already in place when it is written: the tokenizer in
``tokenizer/<key>/``, the shards in ``shards/<generation>/``, the quarantine in
``rejected/<stage>-<key>/``, each folder named by a key and never rewritten with other content,
and each document stage's list of its quarantine parts in that folder (``_parts-<sha16>.arrow``, copied from
the stage's folder, where the stage wrote it; ``pipelines.schema.rejected``). Writing ``manifest.json``
(one atomic write on any store) is the commit: before it, readers see the previous corpus whole;
after it, the new one whole.

Then the folders (and format 3's rejected-part lists) that neither the new manifest nor the one
it replaced names are deleted (a kept quarantine folder loses only what no kept manifest lists,
found a bounded slice of names at a time: ``quarantine_listings``), so a reader that loaded the previous manifest a moment ago can still finish
reading its files, and stage caches of other keys (earlier configs) go too unless ``keep_cache``. A kill during the
clean-up leaves garbage that the next publish removes, never a corpus that is missing files.
"""
from __future__ import annotations

import itertools
import logging
from typing import Any, Iterator, Protocol

from common import storage
from pipelines import schema
from pipelines.config import CorpusConfig
from pipelines.ingest import Sources
from pipelines.pack import fill
from pipelines.orchestration.append import generation_of, merged
from pipelines.orchestration.stages import DOCUMENT_STAGES, StageResult, rejected_folder


class CorpusBuild(Protocol):
    """What publishing reads of the runner's build (``pipelines.orchestration.runner.CorpusBuild``),
    declared here so that the runner imports this module and not the other way round."""
    cfg: CorpusConfig
    sources: Sources
    out: str
    keys: dict[str, str]
    keep_cache: bool
    build_key: str

    @property
    def work(self) -> str: ...

log = logging.getLogger("pipelines.orchestration.publish")


def summary(results: dict[str, StageResult]) -> dict[str, Any]:
    dropped: dict[str, int] = {}
    for name in DOCUMENT_STAGES:
        for reason, n in results[name].stats.get("dropped", {}).items():
            dropped[reason] = dropped.get(reason, 0) + n
    return {"documents_in": results["ingest"].stats.get("documents_in", 0),
            "documents_kept": results["near_dedup"].stats.get("documents_out", 0),
            "dropped_by_reason": dict(sorted(dropped.items())),
            "exact_duplicates": dropped.get("dedup:exact", 0), "near_duplicates": dropped.get("dedup:near", 0),
            "tokens": results["pack"].stats.get("tokens", 0),
            "bytes_per_token": results["shard"].stats.get("bytes_per_token"),
            # The tokenizer's coverage (``pipelines.tokenizer_coverage``): the [UNK] share of the
            # tokenizer stage's sample and, exact, of each split's examples (their tokens but [CLS]
            # and [SEP]); the sample's UTF-8 bytes of text per token. None where older code ran.
            "unk_share": {"sample": results["tokenizer"].stats.get("unk_share"),
                          **{split: unk_share(s) for split, s in results["pack"].stats.get("splits", {}).items()}},
            "text_bytes_per_token": results["tokenizer"].stats.get("bytes_per_token")}


def unk_share(split: dict[str, Any]) -> float | None:
    """The [UNK] share of a split's text tokens (its tokens but [CLS] and [SEP]), as the pack
    stage counted them; None when it did not."""
    if "unk_tokens" not in split:
        return None
    return round(split["unk_tokens"] / split["text_tokens"], 6) if split.get("text_tokens") else 0.0


def manifest_of(build: CorpusBuild, results: dict[str, StageResult]) -> schema.Manifest:
    from pipelines.orchestration.drop_report import check_kept
    from pipelines.tokenizer_coverage import check_recorded

    # The tokenizer stage applied tokenizer.max_unk_share when it ran, and the stage after filter
    # filter.min_kept_share; stages cached from a build with other thresholds are checked against
    # this build's too (neither threshold is in a stage's key).
    check_recorded(results["tokenizer"].stats, build.cfg.tokenizer)
    check_kept(results["filter"].stats, build.cfg,
               rejected=storage.join(build.out, rejected_folder("filter", results["filter"].key)),
               files=results["filter"].rejected_parts())
    shards = [schema.ShardInfo(**s) for s in results["shard"].product["shards"]]
    documents = {s: v.get("documents", 0) for s, v in results["pack"].stats.get("splits", {}).items()}
    splits = {}
    for split in schema.SPLITS:
        mine = [s for s in shards if s.split == split]
        examples, tokens = sum(s.num_examples for s in mine), sum(s.num_tokens for s in mine)
        splits[split] = schema.SplitInfo(num_examples=examples, num_tokens=tokens,
                                         num_documents=documents.get(split, 0),
                                         fill=fill(tokens, examples, build.cfg.pack.seq_len))
    rejected = [quarantine_list(build, name, results[name]) for name in DOCUMENT_STAGES
                if results[name].rejected.parts]
    stats: dict[str, Any] = {name: r.stats for name, r in results.items()}
    stats["summary"] = summary(results)
    stats["sources"] = {"names": list(build.sources.names[:20]), "files": len(build.sources.files),
                        "fingerprint": build.sources.fingerprint}
    manifest = schema.Manifest(seq_len=build.cfg.pack.seq_len,
                           tokenizer=schema.TokenizerInfo(**results["tokenizer"].product["tokenizer"]),
                           splits=splits, shards=shards, stats=stats, config=build.cfg.to_dict(),
                           rejected_lists=rejected, generation=results["shard"].key, build_key=build.build_key,
                           languages=results["filter"].stats.get("languages", {}),
                           warnings=[w for name in ("ingest", "filter", "tokenizer", "pack")
                                     for w in results[name].stats.get("warnings", [])],
                           decontamination=results["filter"].stats.get("decontamination", {}))
    manifest.generations = [generation_of(build, manifest, results["index"].product.get("index", ""))]
    prior = getattr(build, "prior", None)
    return manifest if prior is None else merged(prior, manifest)


def quarantine_list(build: CorpusBuild, name: str, result: StageResult) -> schema.RejectedList:
    """Stage ``name``'s quarantine-part list, copied as it is (checked against its marker) from
    the stage's folder into its quarantine folder, where the manifest names it: the driver never
    holds more than one stage's list, as bytes."""
    data = result.rejected.read_checked(result.folder)
    ref = schema.rejected_list(name, rejected_folder(name, result.key), data)
    storage.write_bytes(storage.join(build.out, ref.path), data)
    return ref


def publish(build: CorpusBuild, results: dict[str, StageResult]) -> schema.Manifest:
    manifest = manifest_of(build, results)
    for warning in manifest.warnings:  # the command line prints them last, not also here
        log.warning("%s", warning, extra={"cli_says": True})
    where = storage.join(build.out, schema.MANIFEST_NAME)
    try:  # the manifest it replaces, without its parts (the sweep reads one folder's at a time)
        previous = schema.Manifest.parse(schema.read_manifest_bytes(build.out), where)
        if previous.rejected_index is not None:  # format 3: its one list names its folders
            previous.rejected = schema.read_rejected(build.out, previous)
    except (FileNotFoundError, ValueError) as exc:
        previous = None
        if not isinstance(exc, FileNotFoundError):
            log.warning("replacing an unreadable or older manifest: %s", exc)
    manifest.save(build.out)
    collect_garbage(build, keep=[m for m in (manifest, previous) if m is not None])
    return manifest


def _stage_of(top: str, name: str) -> str:
    """The ``.work`` folder of the stage that wrote ``top/name`` (``<stage>-<key>``)."""
    return {schema.TOKENIZER_DIR: f"tokenizer-{name}", schema.SHARDS_DIR: f"shard-{name}",
            schema.INDEX_DIR: f"index-{name}"}.get(top, name)


# Names per listing of a quarantine folder on a store that lists by prefix: a listing's entries
# are held at once (~1.3 KB each in s3fs), so a folder of 300,000 parts is swept in slices.
SWEEP_GROUP = 10_000
HEX = "0123456789abcdef"


def quarantine_listings(folder: str, parts: int, limit: int = SWEEP_GROUP) -> Iterator[list[str]]:
    """The names in quarantine ``folder`` (of about ``parts`` parts), a slice at a time: where the
    store lists by key prefix, one listing per prefix ``part-<h>`` over every ``h`` of ``d`` hex
    digits (part names are ``part-<hex>``, ``parts.part_name``; ``d`` the fewest giving slices of
    about ``limit``) and one for the stage lists (``_parts-``); names of another shape, which no
    writer gives, are not seen there. Elsewhere (a local folder: names from the kernel, no
    per-entry store record) one listing."""
    if not storage.lists_by_prefix(folder):
        yield storage.listdir(folder)
        return
    digits = 0
    while parts > limit * len(HEX) ** digits:
        digits += 1
    yield list(storage.list_sizes(folder, "_parts-"))
    for h in itertools.product(HEX, repeat=digits):
        yield list(storage.list_sizes(folder, "part-" + "".join(h)))


def collect_garbage(build: CorpusBuild, keep: list[schema.Manifest]) -> list[str]:
    """Delete what no manifest in ``keep`` references; returns the deleted locations."""
    folders = set().union(*(m.referenced_folders() for m in keep))
    lists = {m.rejected_index.path for m in keep if m.rejected_index is not None}
    stage_lists = {r.path for m in keep for r in m.rejected_lists}
    prior = getattr(build, "prior", None)  # an append: the corpus it grows
    settled = prior.manifest.referenced_folders() if prior is not None else set()
    removed = []
    for name in storage.listdir(build.out):  # rejected-part lists of superseded builds
        if name.startswith("rejected-") and name.endswith(".json") and name not in lists:
            storage.remove(storage.join(build.out, name))
            removed.append(name)
    for top in (schema.TOKENIZER_DIR, schema.SHARDS_DIR, schema.INDEX_DIR, schema.REJECTED_DIR):
        for name in storage.listdir(storage.join(build.out, top)):
            rel = f"{top}/{name}"
            if rel not in folders:
                # The marker of the stage that wrote it goes first: a later build with that key
                # (kept caches, or a killed build rerun) must write it again, not trust a marker.
                stage = _stage_of(top, name)
                storage.remove(storage.join(build.work, stage, "_SUCCESS"))
                storage.remove(storage.join(build.out, rel), recursive=True)
                removed.append(rel)
            elif top == schema.REJECTED_DIR and rel in settled:
                continue  # an earlier generation's, swept when the manifest that added it was published
            elif top == schema.REJECTED_DIR:  # what a killed attempt left beside the listed parts
                try:
                    listed = {r.path for m in keep for r in schema.read_rejected(build.out, m, folder=rel)}  # this folder's only
                except ValueError as exc:  # the corpus is committed: keep the folder whole, say why
                    log.warning("not sweeping %s: %s", rel, exc)
                    continue
                for names in quarantine_listings(storage.join(build.out, rel), len(listed)):
                    for part in sorted(names):
                        path = f"{rel}/{part}"
                        if path not in listed and (not schema.is_list_name(part) or path not in stage_lists):
                            storage.remove(storage.join(build.out, rel, part))
                            removed.append(path)
    if not build.keep_cache:
        current = {f"{name}-{key}" for name, key in build.keys.items()}
        for name in storage.listdir(build.work):
            if name not in current:
                storage.remove(storage.join(build.work, name), recursive=True)
                removed.append(f"{schema.WORK_DIR}/{name}")
    if removed:
        log.info("removed %d superseded location(s): %s", len(removed), ", ".join(removed[:8]))
    return removed
