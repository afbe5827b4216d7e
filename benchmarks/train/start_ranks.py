"""Part 1 of ``benchmarks/train/start.py``: start-up requests and bytes per rank, against a real S3
API (moto's server) behind the counting proxy (``start_proxy.CountingProxy``), on the corpora of
``start_corpora`` (the previous manifest format and the current one).

Each of ``W`` simulated ranks starts in turn, in this process, and the proxy's counters are read
before and after it:

* **before** (the previous start-up, emulated with the same functions): every rank opens the
  corpus (``open_corpora``: manifest, tokenizer) and checks each split on its own
  (``CorpusSet.shards("train")``, ``.shards("validation")``: one listing each, of the same
  folder); rank 0 also copies the tokenizer into the run directory;
* **manifest** (the start-up of 835e044): every rank runs ``electra.run.plan.resolve``
  with its ``RANK`` and ``W`` (manifest, tokenizer; the shard check deferred), then rank 0 runs
  ``RunPlan.check_shards`` (one listing for both splits), what ``distributed.on_rank0``
  broadcast, and copies the tokenizer; the other ranks adopt the answer and list nothing;
* **after** (this code): every rank runs ``electra.run.shared_plan.resolve_rank`` with its ``RANK``
  and ``W``: rank 0 resolves fully (manifest, tokenizer, the listing), the others only the
  corpus-free part; then ``share``, the broadcast emulated by pickling rank 0's plan (its size,
  the bytes each rank receives over the network, is printed) and unpickling it on the others;
  rank 0 copies the tokenizer. The other ranks read nothing from the store.

Ranks run one after another, so each one's requests are exactly the counter's difference; the
s3fs client is shared between them (it caches no listing: ``common.storage`` turns that off),
which is why a rank's requests do not depend on how many ran before it (rank 1 and rank W-1
are printed). Per ``W`` (``startup``): requests (GET, HEAD, LIST) and bytes received per rank,
rank 0 and the others apart, the totals, and after/before ratios.

**Per corpus size** (``per_size``: ``--shard-counts`` train shards, uploaded for real),
*manifest* against *after*, ranks 0, 1 and W-1 run (the ranks between start as rank 1 does; rank
W-1's requests and bytes are checked equal to rank 1's): per rank the requests and bytes from the
store, the broadcast's bytes, and all ranks' bytes with their ratio.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.train.start_corpora import STARTUP_BATCH, shard_examples

if TYPE_CHECKING:
    from benchmarks.train.start_proxy import CountingProxy

STARTUP_OVERRIDES = [f"train.global_batch_size={STARTUP_BATCH}", "train.micro_batch_size=4"]


# ------------------------------------------------------------------------------ one rank's start
def start_before(loc: str, rank: int, run_dir: Path) -> None:
    from electra.data.corpus_set import open_corpora

    corpora = open_corpora([loc])
    corpora.shards("train", skip_corrupt=False)
    corpora.shards("validation", skip_corrupt=False)
    if rank == 0:
        corpora.copy_tokenizer(str(run_dir / "tokenizer"))


def start_manifest(loc: str, rank: int, world: int, run_dir: Path, shared: dict) -> None:
    """The start-up of 835e044: every rank resolves with the corpus (manifest, tokenizer), rank 0
    alone lists the shards and every other rank adopts its answer."""
    from electra.run.job import PretrainJob
    from electra.run.plan import resolve

    os.environ["RANK"] = str(rank)
    plan = resolve(PretrainJob("tiny", loc, str(run_dir), list(STARTUP_OVERRIDES)), world_size=world,
                   precision="fp32")
    if rank == 0:  # what distributed.on_rank0 computed, then broadcast
        shared["check"] = plan.check_shards()
        plan.corpus.copy_tokenizer(str(run_dir / "tokenizer"))
    else:
        plan.adopt(shared["check"])
    assert len(plan.train_shards) == shared["expect_train"]


def start_after(loc: str, rank: int, world: int, run_dir: Path, shared: dict) -> None:
    """This code: ``electra.run.shared_plan.resolve_rank`` with the rank's ``RANK``, then ``share``, the
    broadcast emulated by pickling rank 0's plan (what ``broadcast_object_list`` sends: its size
    is ``shared["broadcast_bytes"]``) and unpickling it on the others; rank 0 copies the tokenizer."""
    import pickle

    from electra.run.job import PretrainJob
    from electra.run.shared_plan import resolve_rank, share

    os.environ["RANK"] = str(rank)
    resolved = resolve_rank(PretrainJob("tiny", loc, str(run_dir), list(STARTUP_OVERRIDES)), rank=rank,
                            world_size=world, precision="fp32")
    assert resolved.held is None, resolved.held
    if rank == 0:
        plan = share(resolved, broadcast=lambda rank0: rank0())
        shared["plan"] = pickle.dumps(plan)
        shared["broadcast_bytes"] = len(shared["plan"])
        plan.corpus.copy_tokenizer(str(run_dir / "tokenizer"))
    else:
        plan = share(resolved, broadcast=lambda rank0: pickle.loads(shared["plan"]))
        assert plan.rank == rank
    assert len(plan.train_shards) == shared["expect_train"]


STARTS = {"before": lambda loc, rank, world, run_dir, shared: start_before(loc, rank, run_dir),
          "manifest": start_manifest, "after": start_after}


# ------------------------------------------------------------------------------ the ranks of a world
def rank_row(world: int, mode: str, per_rank: dict[int, dict], seconds: float, shared: dict) -> dict:
    """One (world, mode)'s figures from the ranks that ran (all of them, or 0, 1 and W-1: then the
    ranks between are taken to be as rank 1, which ``per_size`` checks against rank W-1)."""
    ran = sorted(per_rank)
    others = [per_rank[r] for r in ran[1:]] or [per_rank[0]]
    between = world - len(ran)  # ranks not run, each counted as rank 1
    total = {k: per_rank[0][k] + sum(r[k] for r in others[:len(ran) - 1]) + between * others[0][k]
             for k in ("requests", "LIST", "bytes")}
    return {"world": world, "mode": mode, "seconds": round(seconds, 2), "rank0": per_rank[0],
            "rank1": others[0], "last": others[-1], "ranks_run": len(ran),
            "others_requests": sum(r["requests"] for r in others) / len(others),
            "others_bytes": sum(r["bytes"] for r in others) / len(others),
            "others_lists": sum(r["LIST"] for r in others) + between * others[0]["LIST"],
            "total_requests": total["requests"], "total_lists": total["LIST"], "total_bytes": total["bytes"],
            "broadcast_bytes": shared.get("broadcast_bytes", 0)}


def run_ranks(proxy: CountingProxy, loc: str, mode: str, world: int, ranks, run_dir: Path,
              expect_train: int) -> dict:
    per_rank, shared = {}, {"expect_train": expect_train}
    started = time.perf_counter()
    for rank in ranks:
        mark = proxy.snapshot()
        STARTS[mode](loc, rank, world, run_dir, shared)
        per_rank[rank] = proxy.since(mark)
    return rank_row(world, mode, per_rank, time.perf_counter() - started, shared)


def startup(proxy: CountingProxy, corpora: dict[str, str], worlds: list[int], work: Path,
            expect_train: int) -> list[dict]:
    rows = []
    for world in worlds:
        for mode in STARTS:
            rows.append(run_ranks(proxy, corpora[mode], mode, world, range(world), work / f"run-{mode}-{world}",
                                  expect_train))
    os.environ.pop("RANK", None)
    return rows


def per_size(proxy: CountingProxy, work: Path, bucket: str, shard_counts: list[int], worlds: list[int]) -> list[dict]:
    """Per corpus size (train shards) and ``W``: ranks 0, 1 and W-1 of the 835e044 start-up
    (``manifest``) and of this one (``after``); the ranks between start as rank 1 does (checked:
    rank W-1's requests and bytes are rank 1's)."""
    from common import storage
    from tests.electra._corpus import upload_corpus, write_tiny_corpus

    rows, first = [], None
    for shards in shard_counts:
        # one tokenizer for all sizes (training one is not bitwise reproducible): the sizes then
        # differ by their shards alone, and rank 1's bytes by the manifest's growth exactly
        local = write_tiny_corpus(work / f"size-{shards}", seq_len=32, tokenizer_from=first,
                                  train_shards=(shard_examples(shards),) * shards, validation_shards=(4, 4))
        first = first or local
        loc = upload_corpus(local, f"{bucket}/size-{shards}")
        manifest = storage.size(f"{loc}/manifest.json")
        for world in worlds:
            for mode in ("manifest", "after"):
                row = run_ranks(proxy, loc, mode, world, sorted({0, 1, world - 1}),
                                work / f"run-size-{shards}-{mode}-{world}", shards)
                for k in ("requests", "bytes"):
                    assert row["rank1"][k] == row["last"][k], (shards, world, mode, row["rank1"], row["last"])
                rows.append({**row, "shards": shards, "manifest_bytes": manifest})
    os.environ.pop("RANK", None)
    return rows
