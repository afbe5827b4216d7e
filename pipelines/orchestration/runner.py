"""The one runner of build-corpus: plans, runs, caches and prunes the stage table, then publishes.

``CorpusBuild(job)`` (a ``pipelines.corpus_job.CorpusJob``) resolves the sources and checks the output location before any
work (a missing bucket or path is an error naming it), then computes every stage's cache key up
front: keys depend on config, inputs, the code version and the versions of the libraries that
shape the output, never on outputs (``pipelines.orchestration.stages``).

Completion markers. Stage ``s`` with key ``k`` keeps its private files in ``.work/s-k/`` of the
output location; ``.work/s-k/_SUCCESS`` is written last and records the stage's statistics and
names the lists of the exact files it produced (``StageResult``), after every one of them was
found on the store with the size the stage wrote (``checks.check_outputs``: one listing per
folder). The lists are files beside the marker (``_files.arrow``, ``_rejected.arrow``;
``pipelines.engine.part_list``), written just before it: the runner keeps every stage's marker
loaded, and a marker stays a few hundred bytes at any number of parts; a list is loaded by the
stage that reads those parts, for as long as it runs, and by the publish. A stage whose
marker is missing is run from scratch: its folder is emptied first, so the leftovers of a killed
attempt are never read. On an object store nothing is renamed; the marker, one atomic write, is
the commit.

Retries. An attempt that fails for a reason that can pass (the store unavailable past the
storage layer's own retries, a lost Ray node or worker: ``checks.transient``) is followed by
another, up to ``attempts`` attempts counted from the last one that made progress: an attempt
that failed after journalling blocks no attempt before it had finished is the first of a new
count (``common.retry``'s rule for counts), so outages now and then over a long stage cannot use
up its attempts while its blocks keep getting done, and the retries end once the stage's blocks
(finite) are done or ``attempts`` attempts in a row finished nothing new. Any other failure (a
config error, a permanent store error such as a 403) is raised at once. The retry keeps what the
failed attempt finished: every writer block it completed is journalled in ``.work/s-k/journal/``
(``pipelines.engine.block_journal``) and is not read or written again, so a late failure costs the unfinished blocks, not the stage;
its scratch (``work/``: shuffle files) is emptied and a shuffle inside the stage is redone. Parts
are named by their rows, so the blocks run again rewrite the same objects, and the record lists
each part once. The journal is removed with the scratch once the stage's outputs are written; a
run that starts a stage afresh (no marker) empties its folder, journal included.

Planning. A stage runs when it has no marker, or when a stage that must run needs its data and
that data was pruned. Pruning: once every consumer of a stage has finished, its data parts are
deleted with their list and its marker says so (``pruned``) and no longer names them; the
statistics and the quarantine stay. The output's footprint is then the product (tokenizer, shards, compressed
quarantine) plus markers.
``keep_cache`` keeps every stage's data, so a rerun with, say, another ``pack`` config starts
at ``pack``; without it such a rerun starts at ingest. A rerun of a finished build with the same
config and sources is a no-op (the manifest's ``build_key`` matches).

Pruning writes the marker's ``pruned`` flag before it deletes anything, so a kill in between
leaves garbage, never a marker that promises data that is gone; ``publish`` sweeps what such a
kill left behind.

Publish (``pipelines.orchestration.publish``): the manifest is assembled from the markers and written last.

Generations. With ``job.append`` the build is an append to the corpus at ``out``
(``pipelines.orchestration.append``): the generations it deduplicates against are in its dedup
and tokenizer stages' keys and it publishes them with its own after them; an append of sources
already appended (the same fingerprint) does nothing. A build without ``append`` on a corpus that
has grown is a no-op when one of its generations is that build, and refused otherwise: its
manifest would drop the later generations.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import time
from typing import Any

from common import storage
from common.config import ConfigError
from common.hashing import digest
from common.sealed import DamagedJSON
from pipelines import schema
from pipelines.corpus_job import CorpusJob
from pipelines.engine import block_journal
from pipelines.engine.part_list import PartList, StoredParts
from pipelines.ingest import Sources, resolve_sources
from pipelines.orchestration.checks import check_outputs, expected_outputs, transient, unwrapped
from pipelines.orchestration.progress import Progress
from pipelines.orchestration.stages import (CODE_VERSION, FILES_LIST, LIBRARIES, REJECTED_LIST, STAGES, Stage,
                                            StageResult, StageRun, filter_fingerprint, tokenizer_fingerprint)

log = logging.getLogger("pipelines.orchestration.runner")
SUCCESS = "_SUCCESS"
JOURNAL = "journal"  # a stage attempt's finished writer blocks (pipelines.engine.block_journal)
# Attempts per stage, counted from the last that made progress, when an attempt fails for a reason
# that can pass (engine.checks.transient); one that journalled new blocks starts the count again.
STAGE_ATTEMPTS = 3


class CorpusBuild:
    """One build of a corpus: ``job`` (``pipelines.corpus_job.CorpusJob``) says the sources, the
    output location (a path or URI), the config and whether to keep the cache; ``sources``: the
    job's sources already resolved (a caller that resolved them once)."""

    def __init__(self, job: CorpusJob, *, sources: Sources | None = None, attempts: int = STAGE_ATTEMPTS):
        self.job = job
        self.sources = sources if sources is not None else resolve_sources(list(job.sources))
        self.out = str(job.out)
        storage.check_output(self.out)
        cfg = job.config
        self.cfg, self.keep_cache, self.stages = cfg, job.keep_cache, {s.name: s for s in STAGES}
        self.attempts = max(1, int(attempts))
        self.order = [s.name for s in STAGES]
        self.keys: dict[str, str] = {}
        self.prior = self._prior() if job.append else None
        # What decides a stage's output beside its config and inputs: files named by the config
        # (and for an append, the generations it deduplicates against and the corpus's tokenizer).
        fingerprints = {"ingest": lambda: self.sources.fingerprint, "filter": lambda: filter_fingerprint(cfg),
                        "tokenizer": lambda: tokenizer_fingerprint(cfg)}
        if self.prior is not None:
            fingerprints.update({name: self.prior.fingerprint for name in ("exact_dedup", "near_dedup", "tokenizer")})
        for s in STAGES:
            extra = fingerprints[s.name]() if s.name in fingerprints else ""
            self.keys[s.name] = digest({"code": CODE_VERSION, "libraries": LIBRARIES, "stage": s.name,
                                        "config": cfg.sections(s.sections),
                                        "inputs": [self.keys[i] for i in s.inputs], "extra": extra})
        # shuffle.* changes requests and memory, never the corpus: not part of the build's identity
        self.build_key = digest({"stages": self.keys,
                                 "config": {k: v for k, v in cfg.to_dict().items() if k != "shuffle"}})
        self._results: dict[str, StageResult | None] = {}

    def _prior(self):
        from pipelines.orchestration.append import index_missing, load_prior

        prior = load_prior(self.out)
        missing = index_missing(prior)
        if missing:
            raise ConfigError(missing)
        return prior

    # ------------------------------------------------------------------ locations and markers
    @property
    def work(self) -> str:
        return storage.join(self.out, schema.WORK_DIR)

    def cache(self, name: str) -> str:
        return storage.join(self.work, f"{name}-{self.keys[name]}")

    def result(self, name: str) -> StageResult | None:
        """The stage's completion marker, or None when it has not finished for this key."""
        if name not in self._results:
            uri = storage.join(self.cache(name), SUCCESS)
            try:
                marker = json.loads(storage.read_bytes(uri))
            except (storage.MissingObject, json.JSONDecodeError, UnicodeDecodeError):
                # No marker, or a torn one: the stage has not finished. Any other error (access
                # denied, the store unavailable) is raised: it says nothing about the stage.
                marker = None
            try:
                self._results[name] = None if marker is None else StageResult.from_marker(marker, self.cache(name))
            except (TypeError, KeyError):  # a marker of another format (older code): not finished
                self._results[name] = None
        return self._results[name]

    def _save(self, result: StageResult) -> None:
        storage.write_json(storage.join(self.cache(result.name), SUCCESS), result.marker())
        self._results[result.name] = result

    def published(self) -> schema.Manifest | None:
        """The published manifest when it holds this build (without its rejected parts, which
        ``schema.Manifest.load`` reads): its last build, one of its generations, or for an
        append, sources already appended. A grown corpus that does not hold it is refused
        (module docstring)."""
        try:
            manifest = schema.Manifest.parse(schema.read_manifest_bytes(self.out),
                                             storage.join(self.out, schema.MANIFEST_NAME))
        except DamagedJSON as exc:  # never replaced unseen: it may list generations this build would drop
            raise ConfigError(str(exc)) from None
        except (FileNotFoundError, ValueError):
            return None
        if manifest.build_key == self.build_key:
            return manifest
        generations = schema.generations_of(manifest)
        if self.prior is not None:
            held = self.prior.holding(self.sources.fingerprint)
            if held is not None:
                log.info("append: these sources are generation %d (%s) of %s already; nothing to do", held,
                         generations[held].name, self.out)
                return manifest
            return None
        if any(g.build_key == self.build_key for g in generations):
            return manifest
        if len(generations) > 1:
            raise ConfigError(f"{self.out} has grown to {len(generations)} generations by appends; this build "
                              "would replace them all: build into another --out, or add sources with --append")
        if generations[0].name == self.keys["shard"] and not generations[0].index:
            log.info("%s has no dedup index (built by an earlier version): building it once from its documents "
                     "(the document stages run again; the shards stay as they are)", self.out)
        return None

    # ------------------------------------------------------------------ planning
    def consumers(self, name: str) -> list[str]:
        return [s for s in self.order if name in self.stages[s].inputs]

    def plan(self) -> list[str]:
        """The stages that must run, in table order (empty when the build is published)."""
        if self.published() is not None:
            return []
        todo: set[str] = set()

        def need_data(name: str) -> None:
            r = self.result(name)
            if r is not None and not r.pruned:
                return
            require(name)

        def require(name: str) -> None:
            if name in todo:
                return
            todo.add(name)
            for i in self.stages[name].inputs:
                need_data(i)

        for name in self.order:
            if self.result(name) is None:
                require(name)
        tokenizer = None if "tokenizer" in todo else self.result("tokenizer")
        if todo and tokenizer is not None:  # tokenizer.max_unk_share is not in the key: apply it before pack
            from pipelines.tokenizer_coverage import check_recorded
            check_recorded(tokenizer.stats, self.cfg.tokenizer)
        return [n for n in self.order if n in todo]

    # ------------------------------------------------------------------ running
    def run_stage(self, name: str) -> StageResult:
        """Run one stage now (its inputs must be complete with their data)."""
        stage, key = self.stages[name], self.keys[name]
        inputs = {}
        for i in stage.inputs:
            r = self.result(i)
            if r is None or r.pruned:
                raise RuntimeError(f"stage {name}: input stage {i} has no data (run the plan in order)")
            inputs[i] = r
        run = StageRun(stage=stage, key=key, cfg=self.cfg, corpus=self.out, cache=self.cache(name),
                       sources=self.sources, inputs=inputs, cache_of=self.cache, prior=self.prior)
        start = time.perf_counter()
        journal = storage.join(self.cache(name), JOURNAL)
        # attempts in all; of them since (and including) the last that made progress; blocks journalled
        attempt = stalled = journalled = 0
        while True:
            attempt += 1
            self._results.pop(name, None)
            try:
                if attempt == 1:  # a killed run's leftovers: its journal is not trusted across runs
                    storage.remove(self.cache(name), recursive=True)
                else:  # a failed attempt's finished blocks stay (journalled); its scratch goes
                    storage.remove(run.work, recursive=True)
                with Progress(run, attempt=attempt), block_journal.stage(journal, key, resume=attempt > 1):
                    record = stage.run(run)
                storage.remove(run.work, recursive=True)  # the attempt's scratch (shuffles, samples)
                check_outputs(expected_outputs(self.out, run.cache, run.rejected, record))
                storage.remove(journal, recursive=True)  # checked: nothing left for a retry to skip
                break
            except Exception as exc:
                if transient(exc):
                    finished = _journalled(journal)
                    stalled = 1 if finished > journalled else stalled + 1
                    journalled = max(journalled, finished)
                if stalled >= self.attempts or not transient(exc):
                    original = unwrapped(exc)
                    if original is exc:
                        raise
                    raise original from None
                original = unwrapped(exc)
                # "attempt k of n": k counts from the last attempt that journalled new blocks
                log.warning("stage %s failed (attempt %d of %d): %s: %s; it runs again, keeping the %d blocks "
                            "it finished", name, stalled, self.attempts, type(original).__name__,
                            (str(original).splitlines() or [""])[0], journalled)
        seconds = time.perf_counter() - start
        stats = with_rates(record.get("stats", {}), seconds)
        stats["attempts"] = attempt
        stats.setdefault("read_tasks", sum(len(run.parts(i).tasks()) for i in stage.inputs
                                           if self.stages[i].cached_data))
        del run  # its inputs' part lists: the driver holds none between stages
        # The part lists beside the marker, which names them (with their sha256): written after
        # the outputs were checked, before the marker that commits them.
        folder = self.cache(name)
        files = StoredParts.save(folder, FILES_LIST, PartList.of(record.get("files", [])))
        rejected = StoredParts.save(folder, REJECTED_LIST, PartList.of(record.get("rejected", [])))
        record.pop("files", None), record.pop("rejected", None)
        result = StageResult(name=name, key=key, stats=stats, files=files, rejected=rejected,
                             product=record.get("product", {}), folder=folder)
        self._save(result)
        _log(result)
        self._prune_consumed(stage)
        return result

    def _prune_consumed(self, stage: Stage) -> None:
        """Delete the data of inputs whose every consumer has finished (unless keep_cache)."""
        if self.keep_cache:
            return
        for i in stage.inputs:
            r = self.result(i)
            if r is None or not self.stages[i].cached_data:
                continue
            if all(self.result(c) is not None for c in self.consumers(i)):
                if not r.pruned:  # the flag first: a kill now leaves garbage, not a false promise
                    self._save(dataclasses.replace(r, pruned=True, files=StoredParts()))
                storage.remove(storage.join(self.cache(i), "data"), recursive=True)
                storage.remove(storage.join(self.cache(i), FILES_LIST))

    def publish(self) -> schema.Manifest:
        from pipelines.orchestration.publish import publish

        for name in self.order:  # what a kill between a marker and its pruning left behind
            self._prune_consumed(self.stages[name])
        done = self.published()
        if done is not None:
            return done
        results = {}
        for name in self.order:
            r = self.result(name)
            if r is None:
                raise RuntimeError(f"publish: stage {name} has not finished")
            results[name] = r
        return publish(self, results)

    def run(self) -> schema.Manifest:
        """The whole build without an orchestrator."""
        for name in self.plan():
            self.run_stage(name)
        return self.publish()


def _journalled(journal: str) -> int:
    """How many blocks the attempts of a stage finished so far (``block_journal``'s entries, one
    listing), as a failed attempt's measure of progress; 0 when the store cannot list it now."""
    try:
        return sum(1 for rel in storage.list_sizes(journal) if rel.endswith(".json"))
    except Exception:  # noqa: BLE001 (the store failing again: count no progress, the attempt is retried)
        return 0


def with_rates(stats: dict[str, Any], seconds: float) -> dict[str, Any]:
    """A stage's statistics plus its time and throughput (documents and MB per second)."""
    out = dict(stats)
    out["seconds"] = round(seconds, 3)
    if "documents_in" in out:
        out["docs_per_sec"] = round(out["documents_in"] / max(seconds, 1e-9), 1)
    if "bytes_in" in out:
        out["mb_per_sec"] = round(out["bytes_in"] / 1e6 / max(seconds, 1e-9), 3)
    if "tokens" in out:
        out["tokens_per_sec"] = round(out["tokens"] / max(seconds, 1e-9), 1)
    return out


def _log(result: StageResult) -> None:
    """The stage's end line: its counts (documents for the document stages, the vocabulary,
    examples and tokens, shards), time and rate."""
    s = result.stats
    if "documents_out" in s and result.name != "pack":
        counts = f"{s['documents_in']} documents in, {s['documents_out']} kept, dropped {s.get('dropped', {})}"
        if s.get("boilerplate"):
            counts += f", licence boilerplate cut {s['boilerplate']}"
    elif result.name == "tokenizer":
        counts = f"vocabulary {s.get('vocab_size')}, trained on {s.get('sample_bytes', 0) / 1e6:.1f} MB"
    elif result.name == "index":
        counts = (f"dedup index of {s.get('documents', 0)} documents, {s.get('bytes', 0) / 1e6:.1f} MB "
                  f"({s.get('bytes_per_document', 0):.0f} bytes each)")
    elif result.name == "pack":
        splits = ", ".join(f"{k} {v['examples']} examples from {v.get('documents', 0)} documents"
                           for k, v in sorted(s.get("splits", {}).items()))
        counts = f"{s.get('examples', 0)} examples, {s.get('tokens', 0)} tokens ({splits or 'no split'})"
    else:
        counts = f"{s.get('shards', '-')} shards, {s.get('bytes', 0) / 1e6:.1f} MB"
    # a rate only where the stage reads its input's bytes (the tokenizer reads a sample, shard
    # reads examples whose input size it does not record)
    rate = f" ({s['mb_per_sec']:.2f} MB/s)" if s.get("mb_per_sec") else ""
    log.info("%s: done in %.1f s%s: %s", result.name, s.get("seconds", 0.0), rate, counts)
