"""Training start-up's store traffic at 8, 64 and 512 ranks, and the shard reads each node makes
in an epoch.

    .venv/bin/python benchmarks/train_start.py [--ranks 8,64,512] [--rejected 2000]
        [--shards 16] [--ranks-per-node 8] [--json OUT] [--smoke]

Two measurements, in one process:

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
   * **after** (this code): every rank runs the real ``electra.pretrain_plan.resolve`` with its
     ``RANK`` and ``W`` (manifest, tokenizer; the shard check deferred), then rank 0 runs
     ``RunPlan.check_shards`` (one listing for both splits), what ``distributed.on_rank0`` runs
     before broadcasting the answer, and copies the tokenizer; the other ranks adopt the answer
     and list nothing.

   Ranks run one after another, so each one's requests are exactly the counter's difference; the
   s3fs client is shared between them (it caches no listing: ``common.storage`` turns that off),
   which is why a rank's requests do not depend on how many ran before it (rank 1 and rank W-1
   are printed). Per ``W``: requests (GET, HEAD, LIST) and bytes received per rank, rank 0 and
   the others apart, the totals, and after/before ratios. The manifest's bytes grow with the
   quarantine in the previous format (about ``--rejected`` x 180 bytes here) and not in the
   current one; the figure per rejected part is printed, to scale to a real build.

2. **Shard reads per node in one epoch** (``electra.sample_order.StreamPlan.rank_share``; no
   I/O): ``--epoch-shards`` synthetic shards, a global batch of 2,048, the trainer's default 64
   streams, ``W`` ranks packed ``--ranks-per-node`` to a node. For each node, the bytes its ranks'
   loaders read (each rank reads the shards its streams touch) over the bytes of the distinct
   shards they touch: 1.0 means each shard is read once per node.

``--smoke`` shrinks it to seconds (the test's configuration). The CPU (``lscpu``'s model name)
and the load average are printed beside the figures.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests._s3proxy import S3Proxy, _Handler  # noqa: E402

STARTUP_OVERRIDES = ["train.global_batch_size=2048", "train.micro_batch_size=4"]


# ------------------------------------------------------------------------------ the counting store
class _CountingHandler(_Handler):
    def _reply(self, status: int, body: bytes, headers=()) -> None:
        if self.command != "HEAD":
            with self.proxy._lock:
                self.proxy.bytes_out += len(body)
        super()._reply(status, body, headers)


class CountingProxy(S3Proxy):
    """``S3Proxy`` that also counts the bytes of the answers' bodies (``bytes_out``)."""

    def __init__(self, upstream: str):
        super().__init__(upstream)
        self.bytes_out = 0
        self.handler_class = _CountingHandler

    def snapshot(self) -> tuple[int, int]:
        with self._lock:
            return len(self.log), self.bytes_out

    def since(self, mark: tuple[int, int]) -> dict[str, int]:
        """Requests by kind and bytes received since ``mark``."""
        with self._lock:
            entries, received = self.log[mark[0]:], self.bytes_out - mark[1]
        kinds = Counter()
        for method, path, _ in entries:
            bucket_only = path.strip("/").count("/") == 0
            kinds["LIST" if method == "GET" and bucket_only else method] += 1
        return {"GET": kinds["GET"], "HEAD": kinds["HEAD"], "LIST": kinds["LIST"], "PUT": kinds["PUT"],
                "requests": sum(kinds.values()), "bytes": received}


def start_moto() -> tuple[subprocess.Popen, str]:
    from electra.distributed import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:  # readiness of a server started here
        try:
            urllib.request.urlopen(endpoint, timeout=2)
            return proc, endpoint
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"moto server did not start on {endpoint}")
            time.sleep(0.2)


# ------------------------------------------------------------------------------ corpora
def rejected_parts(n: int):
    from pipelines import schema

    return [schema.RejectedInfo("near_dedup" if i % 3 else "filter", f"rejected/near_dedup-0123456789abcdef/"
                                f"part-{i:08d}-{i * 7919 % 10**6:06d}.jsonl.zst", 40 + i % 50, 9000 + i % 4000)
            for i in range(n)]


def write_corpora(work: Path, bucket: str, *, shards: int, rejected: int) -> dict[str, str]:
    """The same tiny corpus at ``bucket/before`` (format 2, the list inline) and ``bucket/after``."""
    from pipelines import schema
    from tests.electra._corpus import upload_corpus, write_tiny_corpus

    local = write_tiny_corpus(work / "corpus", seq_len=32, train_shards=(6,) * shards, validation_shards=(4, 4))
    out = {}
    for name in ("before", "after"):
        loc = upload_corpus(local, f"{bucket}/{name}")
        manifest = schema.Manifest.load(loc)
        manifest.rejected = rejected_parts(rejected)
        if name == "after":
            manifest.save(loc)
        else:  # the previous format: written as format 2 wrote it
            d = manifest.to_dict()
            d.pop("rejected_index")
            d["format_version"], d["rejected"] = 2, [asdict(r) for r in manifest.rejected]
            from common import storage

            storage.write_bytes(f"{loc}/{schema.MANIFEST_NAME}",
                                (json.dumps(d, indent=2, sort_keys=True) + "\n").encode())
        out[name] = loc
    return out


# ------------------------------------------------------------------------------ one rank's start
def start_before(loc: str, rank: int, run_dir: Path) -> None:
    from electra.corpus_set import open_corpora

    corpora = open_corpora([loc])
    corpora.shards("train", skip_corrupt=False)
    corpora.shards("validation", skip_corrupt=False)
    if rank == 0:
        corpora.copy_tokenizer(str(run_dir / "tokenizer"))


def start_after(loc: str, rank: int, world: int, run_dir: Path, shared: dict) -> None:
    from electra.pretrain_job import PretrainJob
    from electra.pretrain_plan import resolve

    os.environ["RANK"] = str(rank)
    plan = resolve(PretrainJob("tiny", loc, str(run_dir), list(STARTUP_OVERRIDES)), world_size=world,
                   precision="fp32")
    if rank == 0:  # what distributed.on_rank0 computes, then broadcasts
        shared["check"] = plan.check_shards()
        plan.corpus.copy_tokenizer(str(run_dir / "tokenizer"))
    else:
        plan.adopt(shared["check"])
    assert len(plan.train_shards) == shared["expect_train"]


def startup(proxy: CountingProxy, corpora: dict[str, str], worlds: list[int], work: Path,
            expect_train: int) -> list[dict]:
    rows = []
    for world in worlds:
        for mode in ("before", "after"):
            run_dir = work / f"run-{mode}-{world}"
            per_rank, shared = [], {"expect_train": expect_train}
            started = time.perf_counter()
            for rank in range(world):
                mark = proxy.snapshot()
                if mode == "before":
                    start_before(corpora[mode], rank, run_dir)
                else:
                    start_after(corpora[mode], rank, world, run_dir, shared)
                per_rank.append(proxy.since(mark))
            seconds = time.perf_counter() - started
            others = per_rank[1:] or [per_rank[0]]
            rows.append({"world": world, "mode": mode, "seconds": round(seconds, 2), "rank0": per_rank[0],
                         "rank1": others[0], "last": others[-1],
                         "others_requests": sum(r["requests"] for r in others) / len(others),
                         "others_bytes": sum(r["bytes"] for r in others) / len(others),
                         "others_lists": sum(r["LIST"] for r in others),
                         "total_requests": sum(r["requests"] for r in per_rank),
                         "total_lists": sum(r["LIST"] for r in per_rank),
                         "total_bytes": sum(r["bytes"] for r in per_rank)})
    os.environ.pop("RANK", None)
    return rows


# ------------------------------------------------------------------------------ shard reads per node
def node_reads(worlds: list[int], *, shards: int, per_node: int, examples: int = 4096) -> list[dict]:
    from electra.corpus import ShardRef
    from electra.sample_order import StreamPlan

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


# ------------------------------------------------------------------------------ report
def cpu_line() -> str:
    model = ""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        model = next((ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name")), "")
    except OSError:
        pass
    return f"CPU: {model or 'unknown'}, {os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f}"


def report(rows: list[dict], reads: list[dict], *, rejected: int, manifest_bytes: dict[str, int]) -> list[str]:
    lines = [f"manifest.json: before {manifest_bytes['before']:,} B ({rejected:,} rejected parts inline: "
             f"{(manifest_bytes['before'] - manifest_bytes['after']) / max(rejected, 1):.0f} B per part), "
             f"after {manifest_bytes['after']:,} B",
             "ranks | mode   | rank 0 req (LIST) | rank 0 bytes | other rank req (LIST) | other rank bytes | "
             "all ranks req | all LIST | all bytes",
             "------+--------+-------------------+--------------+-----------------------+------------------+"
             "---------------+----------+----------"]
    for r in rows:
        r0 = r["rank0"]
        lines.append(f"{r['world']:>5} | {r['mode']:<6} | {r0['requests']:>10} ({r0['LIST']}) | {r0['bytes']:>12,} | "
                     f"{r['others_requests']:>14.1f} ({r['rank1']['LIST']}) | {r['others_bytes']:>16,.0f} | "
                     f"{r['total_requests']:>13,} | {r['total_lists']:>8} | {r['total_bytes']:>9,}")
    lines.append("after / before, all ranks: " + "; ".join(
        f"{w} ranks: requests {a['total_requests'] / b['total_requests']:.2f}x, LIST {a['total_lists']}/"
        f"{b['total_lists']}, bytes {a['total_bytes'] / b['total_bytes']:.3f}x"
        for w in sorted({r['world'] for r in rows})
        for b, a in [[next(r for r in rows if r['world'] == w and r['mode'] == m) for m in ("before", "after")]]))
    lines.append("epoch shard reads (trainer defaults: 64 streams, global batch 2048): ranks | nodes | "
                 "bytes per rank / corpus | per node: read / distinct (max, mean)")
    for r in reads:
        lines.append(f"  {r['world']:>5} | {r['nodes']:>4} | {r['bytes_per_rank'] / r['corpus_bytes']:.4f} | "
                     f"{r['node_read_over_distinct_max']:.2f}, {r['node_read_over_distinct_mean']:.2f}")
    return lines


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", default="8,64,512")
    p.add_argument("--rejected", type=int, default=2000)
    p.add_argument("--shards", type=int, default=16)
    p.add_argument("--epoch-shards", type=int, default=1024)
    p.add_argument("--ranks-per-node", type=int, default=8)
    p.add_argument("--json")
    p.add_argument("--smoke", action="store_true")
    args = p.parse_args(argv)
    worlds = [int(x) for x in args.ranks.split(",")]
    if args.smoke:
        worlds, args.shards, args.epoch_shards = [w for w in worlds if w <= 8] or [2], 4, 64
        args.rejected = min(args.rejected, 300)
    import logging

    logging.disable(logging.WARNING)  # resolve's per-rank info lines, 584 times
    print(cpu_line(), flush=True)
    moto, endpoint = start_moto()
    proxy = CountingProxy(endpoint)
    try:
        os.environ.update({"AWS_ENDPOINT_URL": proxy.start(), "AWS_ACCESS_KEY_ID": "testing",
                           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"})
        import fsspec
        import s3fs

        s3fs.S3FileSystem.clear_instance_cache()
        fsspec.filesystem("s3", use_listings_cache=False).mkdir("train-start")
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            corpora = write_corpora(work, "s3://train-start", shards=args.shards, rejected=args.rejected)
            from common import storage

            manifest_bytes = {k: storage.size(f"{v}/manifest.json") for k, v in corpora.items()}
            rows = startup(proxy, corpora, worlds, work, args.shards)
        reads = node_reads(worlds, shards=args.epoch_shards, per_node=args.ranks_per_node)
    finally:
        proxy.stop()
        moto.terminate()
        moto.wait()
    lines = report(rows, reads, rejected=args.rejected, manifest_bytes=manifest_bytes)
    print("\n".join(lines), flush=True)
    result = {"cpu": cpu_line(), "startup": rows, "node_reads": reads, "manifest_bytes": manifest_bytes,
              "args": vars(args)}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
