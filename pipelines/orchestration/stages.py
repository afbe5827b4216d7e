"""The stages of build-corpus, as one table: name, inputs, config sections, function.

=============  ======================  ==========================  ===========================
stage          inputs                  config sections in the key  writes
=============  ======================  ==========================  ===========================
ingest         (the sources)           ingest, rejected            documents + rejected
filter         ingest                  filter, decontaminate,      documents + rejected
                                       rejected
exact_dedup    filter                  dedup, rejected             documents + rejected
near_dedup     exact_dedup             dedup, rejected             documents + rejected
index          near_dedup              dedup                       ``index/<key>/``
tokenizer      near_dedup              tokenizer                   ``tokenizer/<key>/``
pack           near_dedup, tokenizer   pack                        examples
shard          pack, tokenizer         shard                       ``shards/<key>/``
=============  ======================  ==========================  ===========================

An append (``pipelines.orchestration.append``) runs the same table: its dedup stages also drop
duplicates of the earlier generations (``StageRun.prior``; ``pipelines.dedup.prior``), its
tokenizer stage takes the corpus's tokenizer, and the generations it deduplicates against are in
those stages' keys.

A stage's cache key hashes the code version, its config sections, the keys of its inputs and the
files the config names: for ingest, the sources' fingerprint; for filter, the protected
evaluation files' and a named language-model reference's sha256; for a pretrained tokenizer,
the sha256 of the files it is made from (``pipelines.tokenizer_pretrained``). Every
input that decides a stage's output is in its key, so a rerun with anything changed reruns that
stage and everything after it, and nothing before. A stage function gets a ``StageRun`` (its
key, config, locations and its inputs' results) and returns a record of what it wrote; the
runner (``pipelines.orchestration.runner``) times it, adds the rates and writes the completion marker, so
timing and statistics are computed in one place.

Document stages share one shape: read the kept documents of the input stage, transform them
lazily (rows get a ``reason`` when dropped), and let ``parts.write_documents`` write kept rows to
the stage's cache and dropped rows to ``rejected/<stage>-<key>/`` in the same pass. Stages that
shuffle (the two dedups, shard) or sample (tokenizer) keep their scratch files under ``work/`` of
their cache folder (``StageRun.work``), which the runner deletes once they return; their statistics list every
shuffle they ran (``shuffles``: partitions, blocks in, map files, rows, bytes, seconds).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from common import storage
from common.config import ConfigError
from common.hashing import sha256_bytes
from pipelines import schema
from pipelines.engine import parts
from pipelines.engine.part_list import PartList, StoredParts
from pipelines.config import CorpusConfig
from pipelines.ingest import Sources
from pipelines.ingest.boilerplate import REASONS as BOILERPLATE_REASONS
from pipelines.ingest.shape import wrapped_paragraphs_hint
from pipelines.orchestration.drop_report import NothingKept, check_kept, ingest_report, report

log = logging.getLogger("pipelines.orchestration.stages")
CODE_VERSION = "8"  # bump when a stage's output format or algorithm changes


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    return {lib: version(lib) for lib in ("tokenizers", "pyarrow", "numpy", "numba")}


# Libraries whose upgrade can change a stage's bytes (a retrained tokenizer, a re-encoded part):
# they are in every key, so an upgrade never rewrites a key-named folder with other content.
LIBRARIES = _versions()
# Documents per call of the packer: its Python lists of token ids stay small (measured on the
# books: 9% less CPU than whole blocks of up to 11k documents); one tokenizer call per batch.
PACK_BATCH_DOCS = 256
# ... and about this much text, so a batch of whole books is not one task's work.
PACK_BATCH_BYTES = 4 << 20


# The part lists' files in a stage's folder, beside its marker (``part_list.StoredParts``).
FILES_LIST, REJECTED_LIST = "_files.arrow", "_rejected.arrow"


@dataclass
class StageResult:
    """A finished stage, as its completion marker records it. Its part lists are files beside
    the marker (the marker holds their names, sizes, sha256 and totals): ``data_parts`` and
    ``rejected_parts`` load them, from ``folder`` (the stage's cache folder, not recorded)."""
    name: str
    key: str
    stats: dict[str, Any] = field(default_factory=dict)
    files: StoredParts = field(default_factory=StoredParts)  # data parts in the cache folder
    rejected: StoredParts = field(default_factory=StoredParts)  # parts in rejected/<stage>-<key>/
    product: dict[str, Any] = field(default_factory=dict)  # tokenizer info, shard list
    pruned: bool = False  # the data parts were deleted once every consumer had finished
    folder: str = field(default="", compare=False)

    def data_parts(self) -> PartList:
        return self.files.load(self.folder)

    def rejected_parts(self) -> PartList:
        return self.rejected.load(self.folder)

    def marker(self) -> dict[str, Any]:
        """The marker's JSON object."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "folder"}
        return {**d, "files": self.files.to_dict(), "rejected": self.rejected.to_dict()}

    @classmethod
    def from_marker(cls, d: dict[str, Any], folder: str) -> StageResult:
        """A marker's object (``TypeError`` or ``KeyError`` when it is of another format)."""
        return cls(**{**d, "files": StoredParts(**d["files"]), "rejected": StoredParts(**d["rejected"]),
                      "folder": folder})


@dataclass
class StageRun:
    """What a stage function sees."""
    stage: Stage
    key: str
    cfg: CorpusConfig
    corpus: str  # the output location
    cache: str  # .work/<stage>-<key>: this stage's private folder
    sources: Sources
    inputs: dict[str, StageResult]
    cache_of: Callable[[str], str]  # cache folder of another stage
    prior: Any = None  # an append: the corpus it grows (``append.Prior``); None for a build
    # Input part lists loaded by this run (each read from the store once, dropped with the run).
    _loaded: dict[str, parts.Parts] = field(default_factory=dict, repr=False)

    @property
    def data(self) -> str:
        return storage.join(self.cache, "data")

    @property
    def rejected(self) -> str:
        return storage.join(self.corpus, rejected_folder(self.stage.name, self.key))

    @property
    def work(self) -> str:
        """Scratch space of this attempt (shuffle files, the tokenizer's sample); the runner deletes
    it once the stage function returns, and with the whole cache folder before every attempt."""
        return storage.join(self.cache, "work")

    def parts(self, name: str) -> parts.Parts:
        """The data parts of input stage ``name``, as its part list names them."""
        if name not in self._loaded:
            self._loaded[name] = parts.Parts(storage.join(self.cache_of(name), "data"),
                                             self.inputs[name].data_parts())
        return self._loaded[name]

    def read(self, name: str) -> Any:
        """The kept rows (documents or examples) of input stage ``name`` as a Dataset."""
        return self.parts(name).read()


@dataclass(frozen=True)
class Stage:
    name: str
    inputs: tuple[str, ...]
    sections: tuple[str, ...]
    run: Callable[[StageRun], dict[str, Any]]
    cached_data: bool = True  # writes data parts into its cache folder (pruned once consumed)


def rejected_folder(stage: str, key: str) -> str:
    return f"{schema.REJECTED_DIR}/{stage}-{key}"


# ----------------------------------------------------------------------------- documents
def _documents(run: StageRun, ds: Any, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    rc = run.cfg.rejected
    out = parts.write_documents(ds, data=run.data, rejected=run.rejected,
                                prefix_chars=rc.text_prefix_chars, full_text=rc.full_text)
    return {"stats": {**parts.document_stats(out["reasons"]), **(extra or {})},
            "files": out["files"], "rejected": out["rejected"]}


def _ingest(run: StageRun) -> dict[str, Any]:
    from pipelines.ingest import ingest_dataset, plan_reads

    rc = run.cfg.rejected
    tasks = plan_reads(run.sources, run.cfg.ingest)  # once: a dump's index is read to plan it
    out = parts.write_documents(ingest_dataset(run.sources, run.cfg.ingest, tasks=tasks), data=run.data,
                                rejected=run.rejected, prefix_chars=rc.text_prefix_chars,
                                full_text=rc.full_text)
    # Kept documents per encoding they were decoded with: a charset fallback is never silent.
    encodings = {enc: c["kept"] for enc, c in sorted(out.get("encodings", {}).items())}
    # Licence boilerplate cut from kept documents is quarantined as rows of its own: counted
    # apart, as it is part of a document, not one (``pipelines.ingest.boilerplate``).
    cut = {r: out["reasons"].pop(r) for r in BOILERPLATE_REASONS if r in out["reasons"]}
    stats = {**parts.document_stats(out["reasons"]), "files": len(run.sources.files), "encodings": encodings,
             "read_tasks": len(tasks)}
    if run.cfg.ingest.strip_boilerplate:
        stats["boilerplate"] = {"headers": cut.get(BOILERPLATE_REASONS[0], [0, 0])[0],
                                "footers": cut.get(BOILERPLATE_REASONS[1], [0, 0])[0],
                                "bytes_removed": sum(b for _, b in cut.values())}
    line = ingest_report(stats, rejected=run.rejected, files=len(run.sources.files))
    if line is not None:  # nothing for the later stages: say so here, with the reasons
        raise NothingKept(line)
    # Plain text of one long hard-wrapped text cut into paragraphs the filters will drop: said
    # here, before filtering, for every way a build runs (the CLI says it before it starts, too).
    shape = wrapped_paragraphs_hint(run.sources.files, run.cfg, names=run.sources.names)
    if shape is not None:
        log.warning("ingest: %s", shape, extra={"cli_says": True})  # the CLI said it before starting
        stats["warnings"] = [shape]
    return {"stats": stats, "files": out["files"], "rejected": out["rejected"]}


def _filter(run: StageRun) -> dict[str, Any]:
    from pipelines.filters import filter_batch

    # The stage key names the blocks' inputs (a named reference's sha256 among them): a worker
    # process that outlives a build rebuilds its blocks when it changes.
    kwargs: dict[str, Any] = {"cfg": run.cfg.filter, "version": run.key}
    protected = None
    if run.cfg.decontaminate.paths:
        import ray

        from pipelines.decontaminate import protected as protect

        # Built once, here on the driver; the workers get it through the object store.
        protected = protect.build(run.cfg.decontaminate.paths, run.cfg.decontaminate.ngram)
        kwargs["protected"] = ray.put(protected)
    ds = run.read("ingest").map_batches(filter_batch, fn_kwargs=kwargs, batch_format="numpy")
    rc = run.cfg.rejected
    out = parts.write_documents(ds, data=run.data, rejected=run.rejected,
                                prefix_chars=rc.text_prefix_chars, full_text=rc.full_text)
    # Documents the language block looked at, kept and dropped per detected language.
    stats = {**parts.document_stats(out["reasons"]), "languages": dict(sorted(out.get("languages", {}).items()))}
    if protected is not None:
        # out["reasons"]: reason -> [documents, bytes]
        removed = {r.split(":", 1)[1]: n[0] for r, n in out["reasons"].items() if r.startswith("decontaminate:")}
        tasks = dict.fromkeys(f["task"] for f in protected.files)
        stats["decontamination"] = {**protected.record(), "removed": {t: removed.get(t, 0) for t in tasks}}
        stats["warnings"] = protected.warnings()
    stats["warnings"] = stats.get("warnings", []) + _language_report(run, stats, out["rejected"])
    return {"stats": stats, "files": out["files"], "rejected": out["rejected"]}


def _language_report(run: StageRun, stats: dict[str, Any], rejected: PartList) -> list[str]:
    """Warnings for the languages met whose profile skipped blocks, and the one-line explanation
    of a stage that kept (nearly) nothing: an error when it kept nothing at all."""
    from pipelines.filters.base import references
    from pipelines.language.profiles import language_warnings

    cfg = run.cfg.filter
    configured = {code: frozenset(sections) for code, sections in cfg.by_language.items()}
    warnings = language_warnings(list(cfg.blocks), stats["languages"], references(cfg), configured)
    line = report(stats, rejected=run.rejected, files=rejected, languages=cfg.language.languages,
                  text_mode=run.cfg.ingest.text_mode)
    if line is not None and stats["documents_out"] == 0:
        raise NothingKept(line)
    # A few kept is recorded, not raised: filter.min_kept_share is applied where the record is
    # used (``filter_kept``), so a build it stopped reruns with a lower one from this stage's cache.
    return warnings + ([line] if line else [])


def filter_kept(run: StageRun) -> None:
    """``drop_report.check_kept`` on the filter stage this run reads (its record and quarantine)."""
    result = run.inputs["filter"]
    check_kept(result.stats, run.cfg, rejected=storage.join(run.corpus, rejected_folder("filter", result.key)),
               files=result.rejected_parts())


def _against_prior(run: StageRun, name: str, ds: Any, kind: str, reason: str) -> tuple[Any, dict[str, Any]]:
    """An append: ``ds`` (the stage's documents, lazy) with those duplicating a document of an
    earlier generation dropped as ``reason``, found by probing their indexes with input ``name``."""
    from pipelines.dedup.prior import apply_matches, prior_matches

    indexes = run.prior.indexes(run.cfg)
    matches = prior_matches(run.parts(name), indexes, run.cfg.dedup, kind=kind, work=run.work,
                            shuffle_cfg=run.cfg.shuffle)
    stats = matches.pop("stats")
    names = {i.number: i.name for i in indexes}
    return ds.map_batches(apply_matches, batch_format="pyarrow",
                          fn_kwargs={"matches": matches, "names": names, "reason": reason}), stats


def _exact_dedup(run: StageRun) -> dict[str, Any]:
    from pipelines.dedup import EXACT, exact_dedup

    filter_kept(run)  # the first stage after filter: a build that kept too little stops here
    if not run.cfg.dedup.exact:
        return _documents(run, run.read("filter"))
    ds, stats = exact_dedup(run.parts("filter"), work=run.work, shuffle=run.cfg.shuffle)
    if run.prior is not None:
        ds, stats["earlier_generations"] = _against_prior(run, "filter", ds, "exact", EXACT)
    return _documents(run, ds, stats)


def _near_dedup(run: StageRun) -> dict[str, Any]:
    from pipelines.dedup import NEAR, near_dedup

    if not run.cfg.dedup.near:
        return _documents(run, run.read("exact_dedup"))
    ds, stats = near_dedup(run.parts("exact_dedup"), run.cfg.dedup, work=run.work, shuffle=run.cfg.shuffle)
    if run.prior is not None:
        ds, stats["earlier_generations"] = _against_prior(run, "exact_dedup", ds, "bands", NEAR)
    return _documents(run, ds, stats)


def _index(run: StageRun) -> dict[str, Any]:
    """The dedup index of the kept documents, ``index/<key>/`` (``pipelines.dedup.corpus_index``)."""
    from pipelines.dedup.corpus_index import write_index

    rel = f"{schema.INDEX_DIR}/{run.key}"
    record = write_index(run.parts("near_dedup"), run.cfg.dedup, folder=storage.join(run.corpus, rel),
                         work=run.work, shuffle_cfg=run.cfg.shuffle)
    record["bytes_per_document"] = round(record["bytes"] / max(record["documents"], 1), 1)
    return {"stats": record, "product": {"index": rel}}


# ----------------------------------------------------------------------------- tokenizer
def tokenizer_folder(key: str) -> str:
    return f"{schema.TOKENIZER_DIR}/{key}"


def _tokenizer(run: StageRun) -> dict[str, Any]:
    """Train or load the tokenizer, and measure its [UNK] share and bytes per token on the first
    4 MB of the sample (``pipelines.tokenizer_coverage``): a warning above 1%, an error above
    ``tokenizer.max_unk_share``, before pack encodes the corpus with it."""
    from pipelines.tokenizer_accents import trained_warnings
    from pipelines.tokenizer_coverage import MEASURE_BYTES, review
    from pipelines.tokenizer_sample import measure_sample, train_and_measure, write_sample

    cfg = run.cfg.tokenizer
    if run.prior is not None:  # an append: the corpus's tokenizer, as it is
        kept = run.inputs["near_dedup"].stats
        if kept["documents_out"] == 0:
            raise NothingKept(f"--append: none of the {kept['documents_in']} new documents that passed the "
                              f"filters is new to {run.corpus} (each duplicates a document of it; the reasons are "
                              f"in {run.corpus}/{schema.REJECTED_DIR}/); the corpus is unchanged")
        tok = run.prior.manifest.tokenizer
        recorded = dict(run.prior.manifest.stats.get("tokenizer", {}))
        return {"stats": {**recorded, "vocab_size": tok.vocab_size, "sha256": tok.sha256, "sample_bytes": 0,
                          "from_corpus": True, "warnings": []},
                "product": {"tokenizer": dataclasses.asdict(tok)}}
    if run.inputs["near_dedup"].stats["documents_out"] == 0:  # ingest and filter say why first
        raise NothingKept(f"no documents reached the tokenizer; the reasons are in {run.corpus}/"
                          f"{schema.REJECTED_DIR}/")
    rel = tokenizer_folder(run.key)
    out = storage.join(run.corpus, rel)
    total = run.inputs["near_dedup"].stats["bytes_out"]
    # The sample is chosen by a hash of (sample_seed, uid): a pretrained tokenizer is measured on
    # the documents a trained one would be.
    sample = write_sample(run.parts("near_dedup"), max_bytes=MEASURE_BYTES if cfg.pretrained else cfg.sample_bytes,
                          seed=cfg.sample_seed, total_bytes=total, folder=storage.join(run.work, "sample"))
    warnings: list[str] = []
    if cfg.pretrained:
        from pipelines.tokenizer_pretrained import open_pretrained, write_pretrained

        pre = open_pretrained(cfg.pretrained, cfg)
        info, sample_bytes, warnings = write_pretrained(pre, out), 0, pre.warnings
        coverage = measure_sample(sample, out, MEASURE_BYTES)
    else:
        # Training is one Ray task with no progress of its own: say what it starts on.
        log.info("tokenizer: training a %s vocabulary of %d on a sample of up to %.1f MB of the corpus's "
                 "%.1f MB (%d parts)", cfg.kind, cfg.vocab_size, min(cfg.sample_bytes, total) / 1e6, total / 1e6,
                 len(sample.files))
        info, sample_bytes, coverage = train_and_measure(sample, cfg, out, measure_bytes=MEASURE_BYTES)
        warnings = trained_warnings(storage.read_text(storage.join(out, schema.TOKENIZER_JSON)))
    info.path = rel
    log.info("tokenizer: %.2f%% [UNK], %.2f bytes per token on a %.1f MB sample of %d documents (%.1f s)",
             100 * coverage.unk_share, coverage.bytes_per_token or 0, coverage.bytes / 1e6, coverage.texts,
             coverage.seconds)
    return {"stats": {"vocab_size": info.vocab_size, "sha256": info.sha256, "sample_bytes": sample_bytes,
                      **coverage.record(), "warnings": warnings + review(coverage, cfg, info.vocab_size)},
            "product": {"tokenizer": dataclasses.asdict(info)}}


def tokenizer_fingerprint(cfg: CorpusConfig) -> Any:
    """A pretrained tokenizer, not the corpus, decides the tokenizer: the sha256 of the files it
    is made from (a model folder's tokenizer_config.json among them) go into the key. It is read
    and checked in full here, at planning: a missing or unusable one fails before any stage runs."""
    if not cfg.tokenizer.pretrained:
        return ""
    from pipelines.tokenizer_pretrained import open_pretrained

    try:
        return open_pretrained(cfg.tokenizer.pretrained, cfg.tokenizer).fingerprint
    except ConfigError:  # a flag that contradicts the tokenizer: the message names the key
        raise
    except (FileNotFoundError, ValueError) as exc:  # their messages name the file already
        raise ConfigError(f"tokenizer.pretrained: {exc}") from None


def filter_fingerprint(cfg: CorpusConfig) -> Any:
    """Files outside the config that decide the filtering: the protected evaluation files and a
    named reference of the language-model block, by sha256 (an edited dev set reruns filtering)."""
    from pipelines.decontaminate.protected import fingerprint

    from pipelines.filters.lm_quality import reference_text

    out: dict[str, Any] = {}
    if cfg.decontaminate.paths:
        out["decontaminate"] = fingerprint(cfg.decontaminate.paths)
    if "lm_quality" in cfg.filter.blocks:
        named = {"": cfg.filter.lm_quality.reference}  # "": English (None = the shipped reference)
        named.update({code: (s.get("lm_quality") or {}).get("reference")
                      for code, s in sorted(cfg.filter.by_language.items())})
        for code, uri in named.items():
            if not uri:
                continue
            key = "filter.lm_quality.reference" if not code else f"filter.by_language.{code}.lm_quality.reference"
            try:  # read and decoded here, at planning: a bad reference fails before any stage runs
                digest = sha256_bytes(reference_text(uri).encode())
            except ValueError as exc:  # not gzip / not UTF-8: its message names the file
                raise ConfigError(str(exc).replace("filter.lm_quality.reference", key)) from None
            except OSError as exc:  # missing, denied, store down
                raise ConfigError(f"{key}: {exc}") from None
            out["lm_reference" if not code else f"lm_reference_{code}"] = digest
    return out or ""


# ----------------------------------------------------------------------------- pack, shard
def _tokenizer_text(uri: str, sha256: str) -> str:
    """``tokenizer.json`` as the tokenizer stage recorded it: bytes of another sha256 (damaged
    since it was written) are one line naming it, never used to encode the corpus."""
    data = storage.read_bytes(uri)
    got = sha256_bytes(data)
    if sha256 and got != sha256:
        raise storage.StorageError(f"{uri}: sha256 {got[:12]} differs from the {sha256[:12]} the tokenizer stage "
                                   "recorded (damaged after it was written); remove the tokenizer stage's "
                                   "_SUCCESS in .work/ to build it again")
    return data.decode("utf-8")


@functools.lru_cache(maxsize=2)
def _packer(tokenizer_uri: str, cfg_json: str, tokenizer_sha256: str = ""):
    from tokenizers import Tokenizer

    from pipelines.config import PackConfig
    from pipelines.pack import ExamplePacker

    tok = Tokenizer.from_str(_tokenizer_text(tokenizer_uri, tokenizer_sha256))
    return ExamplePacker(tok, PackConfig(**json.loads(cfg_json)))


def _pack_rows(table: Any, index: int, *, tokenizer_uri: str, cfg_json: str, batch_docs: int,
               tokenizer_sha256: str = "") -> Any:
    """One read task's documents -> examples, ``batch_docs`` documents per packer call, in the
    task that read them (a transform of ``Parts.read``). Not a ``map_batches`` with a batch size
    after the read: Ray Data bundles input blocks up to that many rows before it starts a task,
    and read tasks are a few rows each, so a whole stage went to ONE task (one CPU busy on any
    cluster). The tokenizer is read from the store once per worker process."""
    import pyarrow as pa

    packer = _packer(tokenizer_uri, cfg_json, tokenizer_sha256)
    out = []
    for start in range(0, max(1, table.num_rows), batch_docs):  # an empty task: an empty table
        rows = table.slice(start, batch_docs)
        out.append(packer({"uid": rows.column("uid").to_numpy(zero_copy_only=False),
                           "text": rows.column("text").to_numpy(zero_copy_only=False)}))
    return pa.concat_tables(out) if len(out) > 1 else out[0]


def _unk_id(tokenizer_uri: str, tokenizer_sha256: str = "") -> int | None:
    from tokenizers import Tokenizer

    from pipelines.tokenizer_coverage import unk_id

    return unk_id(Tokenizer.from_str(_tokenizer_text(tokenizer_uri, tokenizer_sha256)))


def _pack(run: StageRun) -> dict[str, Any]:
    from pipelines.pack import empty_split_warnings, fill, fill_warnings
    from pipelines.shard import example_summary

    tok = run.inputs["tokenizer"].product["tokenizer"]
    near = run.inputs["near_dedup"].stats
    mean_doc = near["bytes_out"] / max(near["documents_out"], 1)
    batch_docs = int(max(1, min(PACK_BATCH_DOCS, PACK_BATCH_BYTES // max(mean_doc, 1))))
    # In the read tasks (plain tasks), not an actor pool: an actor pool holding every CPU starves
    # the read tasks feeding it on a 1-CPU cluster and deadlocks.
    tokenizer_uri = schema.tokenizer_json(run.corpus, tok["path"])
    # Checked on the driver first (_unk_id), so damaged bytes fail before any task starts.
    unk = _unk_id(tokenizer_uri, tok.get("sha256", ""))
    examples = run.parts("near_dedup").read(transform=_pack_rows, transform_kwargs={
        "tokenizer_uri": tokenizer_uri, "batch_docs": batch_docs, "tokenizer_sha256": tok.get("sha256", ""),
        "cfg_json": json.dumps(dataclasses.asdict(run.cfg.pack), sort_keys=True)})
    # Every split's [UNK] tokens are counted as its examples are written (the exact share).
    out = parts.write_examples(examples, data=run.data,
                               summarise=functools.partial(example_summary, unk_id=unk))
    splits = out["splits"]
    documents_in = run.inputs["near_dedup"].stats["documents_out"]
    stats = {"splits": splits, "examples": sum(s["examples"] for s in splits.values()),
             "tokens": sum(s["tokens"] for s in splits.values()), "documents_in": documents_in,
             "documents_without_examples": documents_in - sum(s.get("documents", 0) for s in splits.values()),
             "bytes_in": run.inputs["near_dedup"].stats["bytes_out"]}
    seq_len = run.cfg.pack.seq_len
    for s in splits.values():
        s["fill"] = fill(s["tokens"], s["examples"], seq_len)
    # Recorded here (publish logs them and puts them in the manifest, also when this is cached).
    stats["warnings"] = (fill_warnings(splits, seq_len, run.cfg.ingest.text_mode)
                         + empty_split_warnings(splits, run.cfg.pack.validation_fraction, documents_in))
    return {"stats": stats, "files": out["files"]}


def _shard(run: StageRun) -> dict[str, Any]:
    from pipelines.shard import write_shards

    pack = run.inputs["pack"].stats
    vocab = run.inputs["tokenizer"].product["tokenizer"]["vocab_size"]
    sizes = {s: (v["examples"], v["tokens"]) for s, v in pack["splits"].items()}
    infos, shuffled = write_shards(run.read("pack"), run.corpus, run.cfg.shard, generation=run.key,
                                   vocab_size=vocab, sizes=sizes, work=run.work,
                                   shuffle_cfg=run.cfg.shuffle)
    total = sum(i.bytes for i in infos)
    tokens = sum(i.num_tokens for i in infos)
    return {"stats": {"shards": len(infos), "bytes": total, "tokens": tokens,
                      "bytes_per_token": round(total / max(tokens, 1), 3),
                      "shuffles": [shuffled] if shuffled else []},
            "product": {"shards": [dataclasses.asdict(i) for i in infos]}}


STAGES: tuple[Stage, ...] = (
    Stage("ingest", (), ("ingest", "rejected"), _ingest),
    Stage("filter", ("ingest",), ("filter", "decontaminate", "rejected"), _filter),
    Stage("exact_dedup", ("filter",), ("dedup", "rejected"), _exact_dedup),
    Stage("near_dedup", ("exact_dedup",), ("dedup", "rejected"), _near_dedup),
    Stage("index", ("near_dedup",), ("dedup",), _index, cached_data=False),
    Stage("tokenizer", ("near_dedup",), ("tokenizer",), _tokenizer, cached_data=False),
    Stage("pack", ("near_dedup", "tokenizer"), ("pack",), _pack),
    Stage("shard", ("pack", "tokenizer"), ("shard",), _shard, cached_data=False),
)
DOCUMENT_STAGES = ("ingest", "filter", "exact_dedup", "near_dedup")
