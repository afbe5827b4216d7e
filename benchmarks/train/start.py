"""Training start-up's store traffic at 8, 64 and 512 ranks, and the shard reads each node makes
in an epoch.

    .venv/bin/python benchmarks/train/start.py [--ranks 8,64,512] [--rejected 2000]
        [--shards 16] [--shard-counts 16,256,1024,4096] [--ranks-per-node 8] [--node-shards 128] [--shard-examples 32]
        [--loader-workers 2] [--run-nodes 2] [--json OUT] [--smoke]

Three measurements, in one process:

1. **Start-up requests and bytes per rank**, against a real S3 API (moto's server, started here)
   behind a counting proxy (``tests._s3proxy.S3Proxy``, its handler extended to count the bytes
   each answer carries). A tiny corpus (``--shards`` train shards, two validation shards, the
   tests' writer) is uploaded twice: as the previous format (manifest format 2, ``--rejected``
   quarantined parts listed inline) and as the current one (format 3: the list in
   ``rejected-<sha>.json``, which a trainer never reads). Each of ``W`` simulated ranks then
   starts in turn, in this process, and the proxy's counters are read before and after it:

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
   are printed). Per ``W``: requests (GET, HEAD, LIST) and bytes received per rank, rank 0 and
   the others apart, the totals, and after/before ratios. The manifest's bytes grow with the
   quarantine in the previous format (about ``--rejected`` x 180 bytes here) and not in the
   current one; the figure per rejected part is printed, to scale to a real build. Every corpus
   has enough examples for one global batch of ``STARTUP_BATCH``, which rank 0 now checks.

   **Per corpus size** (``--shard-counts`` train shards, uploaded for real), *manifest* against
   *after*, ranks 0, 1 and W-1 run (the ranks between start as rank 1 does; rank W-1's requests
   and bytes are checked equal to rank 1's): per rank the requests and bytes from the store, the
   broadcast's bytes, and all ranks' bytes with their ratio.

2. **Shard reads per node in one epoch**, ``W`` ranks packed ``--ranks-per-node`` to a node.

   * **before** (``electra.data.sample_order.StreamPlan.rank_share``; no I/O): ``--epoch-shards``
     synthetic shards, a global batch of 2,048, the trainer's default 64 streams. For each node,
     the bytes its ranks' loaders would read with no node cache (each rank the shards its streams
     touch, once) over the bytes of the distinct shards they touch: 1.0 means once per node.
   * **measured**: the real loader (``electra.data.stream.TrainStream``) on a real corpus in moto behind
     the counting proxy, ``--node-shards`` shards of ``--shard-examples`` examples, the same
     geometry. A node's ranks run at once as processes (forked from a preloaded server, each
     forking ``--loader-workers`` DataLoader workers) and read one epoch, with
     ``data.node_cache=null`` and then through the node cache (a folder per simulated node); the
     shard bytes the proxy sent meanwhile over those of the distinct shards the node touches are
     its store reads per shard. Nodes run in turn, so each count is one node's; of a world with
     more than ``--run-nodes`` (2) nodes the first and last run (smoke: the first), as printed:
     a node's reads depend only on its own ranks' plans.

3. **Checkpoint bytes per rank at resume**, from the run directory, with and without the node's
   checkpoint mirror, for both layouts a resume loads (``benchmarks/train/resume_reads.py``, which says
   how; ELECTRA-Large's sizes divided by 64).

4. **At the shape of a real cluster**, simulated (``benchmarks/train/start_scale.py``, no I/O): per
   corpus size (``--sizes``: 1 GB, 100 GB, 1 TB, 10 TB) and ``W``, the store bytes each rank
   read at start-up before (the manifest, whose size grows with the shards, and the tokenizer),
   those after (rank 0's alone) and the plan's broadcast bytes per rank, and the
   node cache's count pass each rank makes at every epoch start, the previous per-example walk
   beside the per-block schedule (``electra.data.shard_schedule``), with their ratio.

``--smoke`` shrinks it to seconds (the test's configuration). The CPU (``lscpu``'s model name)
and the load average are printed beside the figures.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.train import resume_reads, start_scale  # noqa: E402
from benchmarks.shared.counting_s3 import CREDENTIALS, pointed_at, start_moto, stop  # noqa: E402
from benchmarks.shared.machine import cpu_line  # noqa: E402
from tests._s3proxy import S3Proxy, _Handler  # noqa: E402

STARTUP_BATCH = 2048
STARTUP_OVERRIDES = [f"train.global_batch_size={STARTUP_BATCH}", "train.micro_batch_size=4"]


# ------------------------------------------------------------------------------ the counting store
class _CountingHandler(_Handler):
    def _reply(self, status: int, body: bytes, headers=()) -> None:
        if self.command != "HEAD":
            with self.proxy._lock:
                self.proxy.bytes_out += len(body)
                if status < 300:  # data, not an error document (an S3 read probes one byte past the end)
                    self.proxy.data_out += len(body)
        super()._reply(status, body, headers)


class CountingProxy(S3Proxy):
    """``S3Proxy`` that also counts the bytes of the answers' bodies (``bytes_out``; ``data_out``:
    those of successful answers only)."""

    def __init__(self, upstream: str):
        super().__init__(upstream)
        self.bytes_out = self.data_out = 0
        self.handler_class = _CountingHandler

    def snapshot(self) -> tuple[int, int, int]:
        with self._lock:
            return len(self.log), self.bytes_out, self.data_out

    def since(self, mark: tuple[int, int, int]) -> dict[str, int]:
        """Requests by kind and bytes received since ``mark``."""
        with self._lock:
            entries, received, data = self.log[mark[0]:], self.bytes_out - mark[1], self.data_out - mark[2]
        kinds = Counter()
        for method, path, _ in entries:
            bucket_only = path.strip("/").count("/") == 0
            kinds["LIST" if method == "GET" and bucket_only else method] += 1
        return {"GET": kinds["GET"], "HEAD": kinds["HEAD"], "LIST": kinds["LIST"], "PUT": kinds["PUT"],
                "requests": sum(kinds.values()), "bytes": received, "data_bytes": data}


# ------------------------------------------------------------------------------ corpora
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


# ------------------------------------------------------------------------------ shard reads per node
def node_reads(worlds: list[int], *, shards: int, per_node: int, examples: int = 4096) -> list[dict]:
    from electra.data.corpus import ShardRef
    from electra.data.sample_order import StreamPlan

    refs = tuple(ShardRef(f"s3://b/c/shards/g/train-{i:06d}.tar", examples, examples * 300, f"{i:064x}")
                 for i in range(shards))
    rows = []
    for world in worlds:
        shares = [StreamPlan(refs, 128, 2048, 2048 // world, rank=r, world_size=world).rank_share(0)
                  for r in range(world)]
        ratios, rank_bytes = [], [b for _, b in shares]
        for node in range(0, world, per_node):
            group = shares[node:node + per_node]
            read = sum(b for _, b in group)
            distinct = sum(s.bytes for s in {s for refs_, _ in group for s in refs_})
            ratios.append(read / distinct if distinct else 0.0)
        rows.append({"world": world, "nodes": (world + per_node - 1) // per_node,
                     "bytes_per_rank": sum(rank_bytes) / world,
                     "node_read_over_distinct_max": round(max(ratios), 3),
                     "node_read_over_distinct_mean": round(sum(ratios) / len(ratios), 3),
                     "corpus_bytes": sum(s.bytes for s in refs)})
    return rows


EPOCH_BATCH, EPOCH_STREAMS = 2048, 64  # the trainer's default geometry (a Base/Large global batch)


def _bench_rank(p, env: dict, cache: str | None, workers: int, results) -> None:
    """One simulated rank (a process): one epoch through the real loader."""
    import multiprocessing as mp

    from electra.data.stream import TrainStream

    mp.set_start_method("fork", force=True)  # a launched rank's DataLoader forks its workers
    os.environ.update(env)
    stream = TrainStream(p, num_workers=workers, prefetch=2, node_cache=cache)
    rows = sum(len(b.keys) for b in stream.loader(0))
    results.put((p.rank, rows, stream.bytes_read, stream.store_bytes))


def measured_reads(proxy: CountingProxy, loc: str, worlds: list[int], work: Path, *, per_node: int, workers: int,
                   batch: int, streams: int, block: int, run_nodes: int) -> list[dict]:
    """Per world, per node run: store bytes over distinct shard bytes without and with the node cache."""
    import multiprocessing as mp

    from electra.data.corpus import check_shards, open_corpus
    from electra.data.sample_order import StreamPlan

    refs = tuple(check_shards(open_corpus(loc), "train")[0])
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["electra.data.stream", "benchmarks.train.start"])
    from benchmarks.train.start import _bench_rank as target  # by module name, also when run as a script

    rows = []
    for world in worlds:
        plans = [StreamPlan(refs, 32, batch, batch // world, rank=r, world_size=world, seed=0, shuffle_block=block,
                            streams=streams) for r in range(world)]
        firsts = list(range(0, world, per_node))
        for first in firsts if len(firsts) <= run_nodes else [firsts[0], firsts[-1]][:run_nodes]:
            ranks = range(first, min(world, first + per_node))
            touched = {s.uri: s.bytes for r in ranks for w in range(max(1, workers))
                       for s in plans[r].rank_share(0, w, max(1, workers))[0]}
            row = {"world": world, "nodes": len(firsts), "nodes_run": min(run_nodes, len(firsts)),
                   "node": first // per_node, "ranks": len(ranks),
                   "distinct_bytes": sum(touched.values()),
                   "before_rank_share": sum(plans[r].rank_share(0)[1] for r in ranks) / sum(touched.values())}
            for mode in ("null", "cache"):
                cache = None if mode == "null" else str(work / f"node-cache-{world}-{first}")
                results, mark, started = ctx.Queue(), proxy.snapshot(), time.perf_counter()
                # the forkserver keeps the environment it started with (an earlier call's store)
                store_env = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
                procs = [ctx.Process(target=target, args=(plans[r], {
                    **store_env, "RANK": str(r), "WORLD_SIZE": str(world), "LOCAL_RANK": str(r - first),
                    "LOCAL_WORLD_SIZE": str(len(ranks)), "MASTER_ADDR": f"node{first // per_node}",
                    "MASTER_PORT": str(world)}, cache, workers, results)) for r in ranks]
                for proc in procs:
                    proc.start()
                got = sorted(results.get(timeout=600) for _ in procs)
                for proc in procs:
                    proc.join()
                if any(proc.exitcode for proc in procs):
                    raise RuntimeError(f"a simulated rank failed: exit codes {[proc.exitcode for proc in procs]}")
                store = proxy.since(mark)
                assert all(n == plans[0].steps_per_epoch * plans[0].per_rank for _, n, _, _ in got)
                row[mode] = {"store_bytes": store["data_bytes"], "body_bytes": store["bytes"], "GET": store["GET"],
                             "over_distinct": round(store["data_bytes"] / row["distinct_bytes"], 4),
                             "loader_store_bytes": sum(g[3] for g in got), "decoded_bytes": sum(g[2] for g in got),
                             "seconds": round(time.perf_counter() - started, 2)}
                if cache is not None:
                    row["cache_left"] = sorted(str(p.relative_to(work)) for p in Path(cache).rglob("*"))
            rows.append(row)
    return rows


# ------------------------------------------------------------------------------ report
def report(rows: list[dict], reads: list[dict], measured: list[dict], *, rejected: int,
           manifest_bytes: dict[str, int], geometry: str) -> list[str]:
    lines = [f"manifest.json: before {manifest_bytes['before']:,} B ({rejected:,} rejected parts inline: "
             f"{(manifest_bytes['before'] - manifest_bytes['after']) / max(rejected, 1):.0f} B per part), "
             f"after {manifest_bytes['after']:,} B",
             "ranks | mode     | rank 0 req (LIST) | rank 0 bytes | other rank req (LIST) | other rank bytes | "
             "all ranks req | all LIST | all bytes",
             "------+----------+-------------------+--------------+-----------------------+------------------+"
             "---------------+----------+----------"]
    for r in rows:
        r0 = r["rank0"]
        lines.append(f"{r['world']:>5} | {r['mode']:<8} | {r0['requests']:>10} ({r0['LIST']}) | {r0['bytes']:>12,} | "
                     f"{r['others_requests']:>14.1f} ({r['rank1']['LIST']}) | {r['others_bytes']:>16,.0f} | "
                     f"{r['total_requests']:>13,} | {r['total_lists']:>8} | {r['total_bytes']:>9,}")
    for base in ("before", "manifest"):
        lines.append(f"after / {base}, all ranks: " + "; ".join(
            f"{w} ranks: requests {a['total_requests'] / b['total_requests']:.2f}x, LIST {a['total_lists']}/"
            f"{b['total_lists']}, bytes {a['total_bytes'] / b['total_bytes']:.3f}x"
            for w in sorted({r['world'] for r in rows})
            for b, a in [[next(r for r in rows if r['world'] == w and r['mode'] == m) for m in (base, "after")]]))
    if not (reads or measured):  # --startup-only
        return lines
    lines.append("epoch shard reads (trainer defaults: 64 streams, global batch 2048): ranks | nodes | "
                 "bytes per rank / corpus | per node: read / distinct (max, mean)")
    for r in reads:
        lines.append(f"  {r['world']:>5} | {r['nodes']:>4} | {r['bytes_per_rank'] / r['corpus_bytes']:.4f} | "
                     f"{r['node_read_over_distinct_max']:.2f}, {r['node_read_over_distinct_mean']:.2f}")
    lines.append(f"measured epoch reads per node ({geometry}): ranks | node (of) | shard bytes the store sent / "
                 "distinct shard bytes: data.node_cache=null, through the node cache | rank_share estimate | GETs "
                 "(each read probes one byte past the end: a second, failing GET) null, cache | seconds null, cache")
    for r in measured:
        null, cache = r["null"], r["cache"]
        lines.append(f"  {r['world']:>5} | {r['node']:>3} ({r['nodes']}) | {null['over_distinct']:.3f}, "
                     f"{cache['over_distinct']:.3f} | {r['before_rank_share']:.2f} | {null['GET']}, {cache['GET']} | "
                     f"{null['seconds']:.1f}, {cache['seconds']:.1f}")
    partial = sorted({(r["world"], r["nodes"], r["nodes_run"]) for r in measured if r["nodes"] > r["nodes_run"]})
    if partial:
        lines.append("  (" + "; ".join(f"{w} ranks: node{'s 0 and ' + str(n - 1) if k == 2 else ' 0'} of {n} run"
                                       for w, n, k in partial)
                     + "; a node's reads depend only on its own ranks' plans)")
    return lines


def size_report(rows: list[dict]) -> list[str]:
    lines = ["start-up per corpus size (train shards), per rank, manifest (835e044: every rank reads the manifest "
             "and the tokenizer) -> after (rank 0 reads the corpus and broadcasts its plan): requests and bytes "
             "from the store; the broadcast's bytes come over the ranks' network, not from the store",
             "shards | manifest B | ranks | rank 0 req, bytes    | other rank req, bytes     | broadcast B | "
             "all ranks bytes             | all ranks ratio",
             "-------+------------+-------+----------------------+---------------------------+-------------+"
             "-----------------------------+----------------"]
    for shards, world in sorted({(r["shards"], r["world"]) for r in rows}):
        before, after = (next(r for r in rows if (r["shards"], r["world"], r["mode"]) == (shards, world, m))
                         for m in ("manifest", "after"))
        b0, a0, b1, a1 = before["rank0"], after["rank0"], before["rank1"], after["rank1"]
        ratio = before["total_bytes"] / after["total_bytes"] if after["total_bytes"] else float("inf")
        lines.append(f"{shards:>6} | {before['manifest_bytes']:>10,} | {world:>5} | {b0['requests']:>2} -> {a0['requests']:>2}, "
                     f"{b0['bytes'] / 1e3:>6.1f} -> {a0['bytes'] / 1e3:>6.1f} kB | {b1['requests']:>2} -> "
                     f"{a1['requests']}, {b1['bytes']:>9,} -> {a1['bytes']} B | {after['broadcast_bytes']:>11,} | "
                     f"{before['total_bytes'] / 1e6:>9.2f} -> {after['total_bytes'] / 1e6:>6.2f} MB | {ratio:>6.1f}x")
    return lines


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", default="8,64,512")
    p.add_argument("--rejected", type=int, default=2000)
    p.add_argument("--shards", type=int, default=16)
    p.add_argument("--epoch-shards", type=int, default=1024)
    p.add_argument("--ranks-per-node", type=int, default=8)
    p.add_argument("--node-shards", type=int, default=128)
    p.add_argument("--shard-examples", type=int, default=32)
    p.add_argument("--loader-workers", type=int, default=2)
    p.add_argument("--run-nodes", type=int, default=2, choices=(1, 2))
    p.add_argument("--shard-counts", default="16,256,1024,4096", help="part 1's corpus sizes, in train shards")
    p.add_argument("--sizes", default=",".join(start_scale.SIZES), help="part 4's simulated corpus sizes")
    p.add_argument("--startup-only", action="store_true",
                   help="part 1 and part 4's start-up figures only (no epoch reads, resume or count pass)")
    p.add_argument("--json")
    p.add_argument("--smoke", action="store_true")
    args = p.parse_args(argv)
    worlds = [int(x) for x in args.ranks.split(",")]
    # measured reads: the trainer's geometry, a shuffle block of one shard; the smoke shrinks the
    # batch to 16 over 2 streams, so its 4 ranks share streams two by two as 512 ranks share 64
    batch, streams, block = EPOCH_BATCH, EPOCH_STREAMS, args.shard_examples
    if args.smoke:
        worlds, args.shards, args.epoch_shards = [w for w in worlds if w <= 8] or [2], 4, 64
        args.rejected = min(args.rejected, 300)
        args.sizes, args.shard_counts = "1 GB,100 GB", "4,64"
        args.node_shards, args.shard_examples, args.ranks_per_node = 16, 8, 2
        batch, streams, block, args.run_nodes = 16, 2, 8, 1
    geometry = (f"{args.node_shards} shards of {args.shard_examples} examples, global batch {batch}, {streams} "
                f"streams, shuffle block {block}, {args.ranks_per_node} ranks per node, {args.loader_workers} "
                "loader workers per rank")
    import logging

    # main() also runs inside a test process: the logging switch and the store variables set here
    # are put back on the way out, or every later test in that process would log nothing below
    # ERROR and reach a stopped proxy
    saved_disable = logging.root.manager.disable
    logging.disable(logging.WARNING)  # resolve's per-rank info lines, 584 times
    print(cpu_line(), flush=True)
    moto, endpoint = start_moto()
    proxy = CountingProxy(endpoint)
    env = contextlib.ExitStack()
    try:
        env.enter_context(pointed_at({"AWS_ENDPOINT_URL": proxy.start(), **CREDENTIALS}))
        import fsspec

        fsspec.filesystem("s3", use_listings_cache=False).mkdir("train-start")
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            corpora = write_corpora(work, "s3://train-start", shards=args.shards, rejected=args.rejected)
            from common import storage

            manifest_bytes = {k: storage.size(f"{v}/manifest.json") for k, v in corpora.items()}
            rows = startup(proxy, corpora, worlds, work, args.shards)
            sized = per_size(proxy, work, "s3://train-start", [int(x) for x in args.shard_counts.split(",")], worlds)
            from tests.electra._corpus import upload_corpus, write_tiny_corpus

            measured, reads, resume = [], [], []
            if not args.startup_only:
                sizes = (args.shard_examples,) * args.node_shards
                local = write_tiny_corpus(work / "epoch", seq_len=32, train_shards=sizes, validation_shards=(2,))
                loc = upload_corpus(local, "s3://train-start/epoch")
                measured = measured_reads(proxy, loc, worlds, work, per_node=args.ranks_per_node,
                                          workers=args.loader_workers, batch=batch, streams=streams, block=block,
                                          run_nodes=args.run_nodes)
        scale, tensors = (4096.0, 6) if args.smoke else (64.0, 96)
        if not args.startup_only:
            reads = node_reads(worlds, shards=args.epoch_shards, per_node=args.ranks_per_node)
            resume = resume_reads.measure(worlds, per_node=args.ranks_per_node, scale=scale, tensors=tensors)
        sizes = {k.strip(): start_scale.SIZES[k.strip()] for k in args.sizes.split(",")}
        scaled = start_scale.measure(sizes, worlds, per_node=args.ranks_per_node,
                                     walk_steps=200 if args.smoke else 4000, passes=not args.startup_only)
    finally:
        proxy.stop()
        stop(moto)
        logging.disable(saved_disable)
        env.close()
    lines = report(rows, reads, measured, rejected=args.rejected, manifest_bytes=manifest_bytes, geometry=geometry)
    lines += ["", *size_report(sized)]
    lines += ["", *resume_reads.report(resume, scale=scale)] if resume else []
    lines += ["", *start_scale.report(scaled, per_node=args.ranks_per_node)]
    print("\n".join(lines), flush=True)
    result = {"cpu": cpu_line(), "startup": rows, "startup_sizes": sized, "node_reads": reads, "measured_reads": measured,
              "resume_reads": resume, "manifest_bytes": manifest_bytes, "scale": scaled, "args": vars(args)}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
