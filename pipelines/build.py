"""The corpus build as a sequence of cached stages over Ray Data.

Each function below is one stage: it takes the previous stage's :class:`StageResult`, runs the
stage's batch functions (``ingest``, ``filters``, ``dedup``, ``tokenizer``, ``pack``, ``shard``)
over a Ray Data dataset, writes the output under ``<out>/.work/<stage>-<key>/`` through
:func:`stage_cache.run_cached`, and returns statistics (documents in/out, bytes, documents and MB
per second, drop counts by reason). The Prefect flow ``flows/build_corpus.py`` only orders these
calls; they run the same without Prefect (tests call them directly).

Intermediate data is Parquet: columnar, compressed, and read back by Ray Data in parallel. Rows
carry their own ``reason`` column, so a stage's output keeps what it dropped beside what it
kept and ``publish`` can quarantine every dropped document under ``rejected/<stage>/``.
Determinism never depends on Ray's block order: dedup keeps the smallest uid, packing seeds its
RNG per document, and shards are assigned by key hash and written in key order.
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

from pipelines import parts, schema
from pipelines.config import CorpusConfig
from pipelines.stage_cache import StageResult, run_cached

log = logging.getLogger("pipelines.build")
KEPT, REJECTED = "kept", "rejected"
CODE_VERSION = "2"  # bump when a stage's output format or algorithm changes


def init_ray(address: str | None = None, num_cpus: int | None = None) -> None:
    """Local Ray by default; a cluster (``ray://host:10001`` or ``auto``) when an address is given."""
    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    if address:
        import pipelines

        # Ship this package to the cluster's workers; the code path is the same as locally.
        ray.init(address=address, runtime_env={"py_modules": [pipelines]}, log_to_driver=False)
    else:
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    configure_data_context()


def configure_data_context() -> None:
    """Ray Data settings sized to the cluster rather than Ray's defaults.

    Shuffles (groupby, aggregates) use Ray's task-based sort shuffle instead of the default
    actor-based hash shuffle: the latter starts a pool of aggregator actors for every shuffle,
    which costs 4-7 s per shuffle on a small cluster (measured here on 100k rows, 4 partitions,
    against ~0.5 s for the sort shuffle) and grew with every call. Our shuffles are few and keyed
    by a small partition number, so sorting costs nothing. Ray's hash shuffles would also default
    to 200 partitions whatever the cluster; two per CPU keeps every core busy.

    Parquet is read through Ray's V1 datasource: the V2 reader (the 2.60 default) bin-packs small
    files into one read task and ignores ``override_num_blocks``, so a stage whose input is under
    ~100 MB ran as ONE task whatever the cluster (8 files of 1 MB -> 1 block, measured). V1 reads
    one task per file or row-group range, so every stage is as parallel as its input. Reads aim
    at 16 blocks (four per CPU on bigger clusters), not Ray's default 200: below that many row
    groups Ray splits each read task's output further, and a split read can no longer fuse with
    the map after it, which leaves read and map as two operators sharing the CPUs (1.3 of 2 cores
    busy, measured). The floor of 16 keeps blocks small on small clusters too: packing 80 MB in
    4 blocks on one CPU cost 26% more CPU time than in 16 (bigger Python heaps per task).
    """
    import ray
    from ray.data.context import ShuffleStrategy

    ctx = ray.data.DataContext.get_current()
    ctx.shuffle_strategy = ShuffleStrategy.SORT_SHUFFLE_PULL_BASED
    ctx.use_datasource_v2 = False
    cpus = max(1, int(ray.cluster_resources().get("CPU", 2)))
    ctx.read_op_min_num_blocks = max(16, 4 * cpus)
    ctx.default_hash_shuffle_parallelism = max(4, 2 * cpus)
    ctx.enable_progress_bars = bool(os.environ.get("ELECTRA_PROGRESS", ""))


def _write_documents(ds, tmp: Path, start: float) -> dict[str, Any]:
    """Write a stage's document rows and return its statistics, from the same pass."""
    rows = parts.write_parts(ds, tmp / "docs", key="uid", summarise=parts.document_summary)
    return parts.document_stats(rows, time.perf_counter() - start)


def _log_stage(result: StageResult) -> StageResult:
    s = result.stats
    if result.cached:
        log.info("%-11s cached  %s", result.name, result.path.name)
    else:
        log.info("%-11s %8s docs in, %8s out, %6.1f s, %9.1f docs/s, %7.2f MB/s, dropped %s",
                 result.name, s.get("documents_in", "-"), s.get("documents_out", "-"),
                 s.get("seconds", 0.0), s.get("docs_per_sec", 0.0), s.get("mb_per_sec", 0.0),
                 s.get("dropped", {}))
    return result


def source_fingerprint(files: list[str]) -> str:
    """Identity of the inputs: path, size and modification time of every file."""
    import fsspec

    h = hashlib.sha256(CODE_VERSION.encode())
    for f in files:
        fs, p = fsspec.core.url_to_fs(f)
        info = fs.info(p)
        h.update(json.dumps([f, info.get("size"), str(info.get("mtime", info.get("LastModified", "")))]).encode())
    return h.hexdigest()[:16]


def ingest_stage(files: list[str], cfg: CorpusConfig, work: Path) -> StageResult:
    from pipelines.ingest import ingest_dataset

    key = cfg.stage_key("ingest", upstream=source_fingerprint(files))

    def produce(tmp: Path) -> dict[str, Any]:
        stats = _write_documents(ingest_dataset(files, cfg.ingest), tmp, time.perf_counter())
        stats["files"] = len(files)
        return stats

    return _log_stage(run_cached(work, "ingest", key, produce))


def filter_stage(prev: StageResult, cfg: CorpusConfig, work: Path) -> StageResult:
    from pipelines.filters import filter_batch

    key = cfg.stage_key("filter", upstream=prev.key)

    def produce(tmp: Path) -> dict[str, Any]:
        start = time.perf_counter()
        ds = parts.read_parts(prev.path, kept=True).map_batches(
            filter_batch, fn_kwargs={"cfg": cfg.filter}, batch_format="numpy")
        return _write_documents(ds, tmp, start)

    return _log_stage(run_cached(work, "filter", key, produce))


def exact_dedup_stage(prev: StageResult, cfg: CorpusConfig, work: Path) -> StageResult:
    from pipelines.dedup import exact_dedup

    key = cfg.stage_key("dedup", upstream=prev.key + ":exact")

    def produce(tmp: Path) -> dict[str, Any]:
        start = time.perf_counter()
        ds = parts.read_parts(prev.path, kept=True)
        return _write_documents(exact_dedup(ds) if cfg.dedup.exact else ds, tmp, start)

    return _log_stage(run_cached(work, "exact_dedup", key, produce))


def near_dedup_stage(prev: StageResult, cfg: CorpusConfig, work: Path) -> StageResult:
    from pipelines.dedup import near_dedup

    key = cfg.stage_key("dedup", upstream=prev.key + ":near")

    def produce(tmp: Path) -> dict[str, Any]:
        start = time.perf_counter()
        ds = parts.read_parts(prev.path, kept=True)
        return _write_documents(near_dedup(ds, cfg.dedup) if cfg.dedup.near else ds, tmp, start)

    return _log_stage(run_cached(work, "near_dedup", key, produce))


def tokenizer_stage(prev: StageResult, cfg: CorpusConfig, work: Path) -> StageResult:
    from pipelines import tokenizer as tok

    upstream = prev.key
    if cfg.tokenizer.pretrained:  # the given file, not the corpus, decides the tokenizer
        upstream = schema.sha256_file(cfg.tokenizer.pretrained)
    key = cfg.stage_key("tokenizer", upstream=upstream)

    def produce(tmp: Path) -> dict[str, Any]:
        start = time.perf_counter()
        if cfg.tokenizer.pretrained:
            info = tok.load_pretrained(cfg.tokenizer.pretrained, cfg.tokenizer, tmp)
            sample_bytes = 0
        else:
            texts = tok.sample_texts(parts.read_parts(prev.path, kept=True), cfg.tokenizer.sample_bytes, cfg.pack.seed)
            sample_bytes = sum(len(t.encode()) for t in texts)
            info = tok.train_tokenizer(texts, cfg.tokenizer, tmp)
        (tmp / "info.json").write_text(json.dumps(info.__dict__, sort_keys=True))
        return {"vocab_size": info.vocab_size, "sha256": info.sha256, "sample_bytes": sample_bytes,
                "seconds": round(time.perf_counter() - start, 3)}

    return _log_stage(run_cached(work, "tokenizer", key, produce))


def tokenizer_info(result: StageResult) -> schema.TokenizerInfo:
    return schema.TokenizerInfo(**json.loads((result.path / "info.json").read_text()))


def pack_stage(docs: StageResult, tok: StageResult, cfg: CorpusConfig, work: Path) -> StageResult:
    from pipelines.shard import example_summary

    key = cfg.stage_key("pack", upstream=docs.key + tok.key)

    def produce(tmp: Path) -> dict[str, Any]:
        start = time.perf_counter()
        # Plain tasks (fused with the Parquet read), not an actor pool: an actor pool holding
        # every CPU starves the read tasks feeding it on a 1-CPU cluster and deadlocks.
        examples = parts.read_parts(docs.path, kept=True).map_batches(
            _pack_batch, fn_kwargs={"tokenizer_json": str(tok.path / "tokenizer.json"), "cfg": cfg.pack},
            batch_format="numpy")
        rows = parts.write_parts(examples, tmp / "examples", key="key", summarise=example_summary)
        seconds = time.perf_counter() - start
        splits = parts.sum_by(rows, "split")
        tokens = sum(s["tokens"] for s in splits.values())
        return {"splits": splits, "tokens": tokens, "seconds": round(seconds, 3),
                "tokens_per_sec": round(tokens / max(seconds, 1e-9), 1), "documents_in": docs.stats.get("documents_out")}

    return _log_stage(run_cached(work, "pack", key, produce))


@functools.lru_cache(maxsize=2)
def _packer(tokenizer_json: str, cfg_json: str):
    from pipelines.config import PackConfig
    from pipelines.pack import ExamplePacker

    return ExamplePacker(tokenizer_json, PackConfig(**json.loads(cfg_json)))


def _pack_batch(batch: dict[str, Any], *, tokenizer_json: str, cfg) -> dict[str, Any]:
    """One Ray batch of documents → examples; the tokenizer is loaded once per worker process."""
    import dataclasses

    return _packer(tokenizer_json, json.dumps(dataclasses.asdict(cfg), sort_keys=True))(batch)


def shard_stage(packed: StageResult, cfg: CorpusConfig, work: Path) -> StageResult:
    from pipelines.shard import write_shards

    key = cfg.stage_key("shard", upstream=packed.key)

    def produce(tmp: Path) -> dict[str, Any]:
        start = time.perf_counter()
        sizes = {split: (v["examples"], v["tar_bytes"]) for split, v in packed.stats["splits"].items()}
        infos = write_shards(parts.read_parts(packed.path, kept=None), tmp, cfg.shard, sizes=sizes)
        (tmp / "shards.json").write_text(json.dumps([i.__dict__ for i in infos], indent=1))
        total = sum(i.bytes for i in infos)
        seconds = time.perf_counter() - start
        return {"shards": len(infos), "bytes": total, "seconds": round(seconds, 3),
                "mb_per_sec": round(total / 1e6 / max(seconds, 1e-9), 3)}

    return _log_stage(run_cached(work, "shard", key, produce))


def _link_or_copy(src: Path, dst: Path) -> None:
    """Place ``src`` at ``dst`` atomically (hard link when possible: no extra disk)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.tmp")
    if tmp.exists():
        tmp.unlink()
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def publish(out: Path, *, stages: list[StageResult], tok: StageResult, packed: StageResult,
            sharded: StageResult, cfg: CorpusConfig) -> schema.Manifest:
    """Move the finished outputs into the corpus layout; ``manifest.json`` is written last."""
    shards = [schema.ShardInfo(**d) for d in json.loads((sharded.path / "shards.json").read_text())]
    for s in shards:
        _link_or_copy(sharded.path / s.path, out / s.path)
    wanted = {out / s.path for s in shards}
    for stale in (out / schema.SHARDS_DIR).glob("*.tar"):
        if stale not in wanted:  # shards of an earlier build with another config
            stale.unlink()
    for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json"):
        if (tok.path / name).exists():
            _link_or_copy(tok.path / name, out / schema.TOKENIZER_DIR / name)
    quarantined = {}
    for st in stages:
        quarantined[st.name] = _quarantine(st, out / schema.REJECTED_DIR / st.name)
    splits = {}
    for split in schema.SPLITS:
        mine = [s for s in shards if s.split == split]
        splits[split] = schema.SplitInfo(num_examples=sum(s.num_examples for s in mine),
                                         num_tokens=sum(s.num_tokens for s in mine))
    stats: dict[str, Any] = {st.name: st.stats for st in stages}
    stats.update(tokenizer=tok.stats, pack=packed.stats, shard=sharded.stats, quarantined=quarantined)
    dropped: dict[str, int] = {}
    for st in stages:
        for reason, n in st.stats.get("dropped", {}).items():
            dropped[reason] = dropped.get(reason, 0) + n
    stats["summary"] = {"documents_in": stages[0].stats.get("documents_in", 0),
                        "documents_kept": stages[-1].stats.get("documents_out", 0),
                        "dropped_by_reason": dropped,
                        "exact_duplicates": dropped.get("dedup:exact", 0),
                        "near_duplicates": dropped.get("dedup:near", 0),
                        "tokens": packed.stats.get("tokens", 0)}
    manifest = schema.Manifest(seq_len=cfg.pack.seq_len, tokenizer=tokenizer_info(tok), splits=splits,
                               shards=shards, stats=stats, config=cfg.to_dict())
    manifest.save(out)
    return manifest


def _quarantine(stage: StageResult, dest: Path) -> int:
    """Write the documents a stage dropped as JSON Lines (id, reason, detail, text)."""
    marker = dest / f"_FROM_{stage.key}"
    n = sum(stage.stats.get("dropped", {}).values())
    if marker.exists() or n == 0:
        return n
    if dest.exists():
        shutil.rmtree(dest)
    tmp = dest.with_name(f".{dest.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    parts.read_parts(stage.path, kept=False).select_columns(["id", "reason", "detail", "text"]).write_json(str(tmp))
    (tmp / marker.name).write_text(json.dumps(stage.stats.get("dropped", {})))
    os.rename(tmp, dest)
    return n
