"""Training start-up's store traffic at 8, 64 and 512 ranks, and the shard reads each node makes
in an epoch.

    .venv/bin/python benchmarks/train/start.py [--ranks 8,64,512] [--rejected 2000]
        [--shards 16] [--shard-counts 16,256,1024,4096] [--ranks-per-node 8] [--node-shards 128] [--shard-examples 32]
        [--loader-workers 2] [--run-nodes 2] [--json OUT] [--smoke]

Four measurements, in one process, each in a module of its own that says how:

1. **Start-up requests and bytes per rank** (``benchmarks/train/start_ranks.py``), against a real
   S3 API (moto's server, started here) behind a counting proxy (``start_proxy.py``): a tiny
   corpus uploaded in the previous manifest format and the current one (``start_corpora.py``),
   ``W`` simulated ranks started in turn as before, at 835e044 (``manifest``) and after, and
   **per corpus size** (``--shard-counts`` train shards), *manifest* against *after*.

2. **Shard reads per node in one epoch** (``benchmarks/train/epoch_reads.py``), ``W`` ranks packed
   ``--ranks-per-node`` to a node: estimated from the streams' plans, and measured by real rank
   processes through the real loader, without and with the node cache.

3. **Checkpoint bytes per rank at resume**, from the run directory, with and without the node's
   checkpoint mirror, for both layouts a resume loads (``benchmarks/train/resume_reads.py``, which says
   how; ELECTRA-Large's sizes divided by 64).

4. **At the shape of a real cluster**, simulated (``benchmarks/train/start_scale.py``, no I/O): per
   corpus size (``--sizes``: 1 GB, 100 GB, 1 TB, 10 TB) and ``W``, the store bytes each rank
   read at start-up before (the manifest, whose size grows with the shards, and the tokenizer),
   those after (rank 0's alone) and the plan's broadcast bytes per rank, and the
   node cache's count pass each rank makes at every epoch start, the previous per-example walk
   beside the per-block schedule (``electra.data.shard_schedule``), with their ratio.

Parts 1 and 2 print their tables through ``start_report.py``. ``--smoke`` shrinks it to seconds
(the test's configuration). The CPU (``lscpu``'s model name) and the load average are printed
beside the figures.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.train import resume_reads, start_scale  # noqa: E402
from benchmarks.train.epoch_reads import EPOCH_BATCH, EPOCH_STREAMS, measured_reads, node_reads  # noqa: E402
from benchmarks.train.start_corpora import write_corpora  # noqa: E402
from benchmarks.train.start_proxy import CountingProxy  # noqa: E402
from benchmarks.train.start_ranks import per_size, startup  # noqa: E402
from benchmarks.train.start_report import report, size_report  # noqa: E402
from benchmarks.shared.counting_s3 import CREDENTIALS, pointed_at, start_moto, stop  # noqa: E402
from benchmarks.shared.machine import cpu_line  # noqa: E402


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
