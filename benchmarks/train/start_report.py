"""The printed tables of ``benchmarks/train/start.py``'s parts 1 and 2: start-up requests and bytes
per rank (``report``, with the epoch reads per node after them) and per corpus size
(``size_report``). Parts 3 and 4 print their own (``resume_reads.report``, ``start_scale.report``).
"""
from __future__ import annotations


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
