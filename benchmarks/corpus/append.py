"""Appending to a corpus (``build-corpus --append``) beside a full rebuild: time, the bytes the
append reads from the old corpus, and the dedup index's size per document, at four sizes.

    .venv/bin/python benchmarks/corpus/append.py [--sizes 1,2,4,8] [--share 0.1] [--copies 0.05]
        [--exact 0.02] [--cpus 2] [--work DIR] [--json OUT] [--smoke]

Text: the public-domain books of ``../shared/data/corpus`` cut at paragraph ends into pieces of
about 3,000 characters (``benchmarks.corpus.near_dedup_bytes.documents``, which also replaces a share
``--copies`` of them by near copies of others: 3% of the words replaced). Per size K (MB of text):
the old text is the first pieces up to K MB, the new text the next pieces up to ``--share`` x K
MB, of which a share ``--exact`` (at least one) is replaced by exact copies of old pieces, so the
append has duplicates of the old corpus to find, exact and near. Each is written as JSONL files
(about 1 MB each) in ``--work``; the config is the ``books`` profile (its filters and Gutenberg
header cut; a JSONL record is a document) with a tokenizer trained once beforehand
(``tokenizer.pretrained``), so that no build spends time training one.

The corpora are on a real S3 API: moto's server behind the counting proxy of
``benchmarks/shared/counting_s3.py``, extended here to count each object key's GET bytes
(``KeyCountingProxy``). Per size, a child process confined to ``--cpus`` cores (local Ray,
``num_cpus`` the same) builds the old corpus into ``s3://corpus/K/old``, lists its objects, then
times (1) the append of the new text to it (``CorpusJob.load(..., append=True)`` and its
``CorpusBuild.run()``) and (2) the baseline, a full build of old + new text into
``s3://corpus/K/rebuild``; it marks the proxy between phases. Bytes read from the old corpus: the
GET bytes the proxy served during the append on keys the listing held before it (the old
corpus's objects, whatever reads them), by folder (``index/``, ``manifest.json``,
``tokenizer/``, ``shards/``, ``rejected/``, ``.work/``); the append's reads of its own writes are
counted apart. The manifest's ``index_bytes_read`` (``stats[exact_dedup|near_dedup]
["earlier_generations"]``) is printed beside the index bytes the proxy counted.

Printed per size: the old corpus (documents kept, text MB, stored MB, shard MB, index KB and bytes
per document), the append vs the rebuild (seconds and their ratio), bytes read from the old
corpus and their share of its text + shards, the matches the append found against the old
generation, and documents kept (old + append vs rebuild). The CPU (``lscpu`` model, amx_bf16 /
avx512_bf16 / AVX2-only) and the load average are printed before and after: on shared cores,
compare the ratios of one run, never absolute times across runs. The last line is the JSON
report. ``--smoke``: one size of 0.4 MB (the test's run: about 1.5 minutes on two idle cores).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
import urllib.parse
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.shared import counting_s3 as cs3  # noqa: E402
from benchmarks.shared.machine import cpu_kind, cpu_kind_line as machine_line  # noqa: E402
from benchmarks.corpus.near_dedup_bytes import CORPUS as BOOKS  # noqa: E402
from benchmarks.corpus.near_dedup_bytes import documents  # noqa: E402

BUCKET = "corpus"
SMOKE = {"sizes": "0.4"}
FOLDERS = ("index", "manifest.json", "tokenizer", "shards", "rejected", ".work")
FILE_BYTES = 1_000_000  # JSONL file size the texts are written in
DELIMITED = "?delimiter"  # after a listing's prefix: a listing of one level (folder names), not every key


# ------------------------------------------------------------------------------ the proxy
class _KeyCountingHandler(cs3._CountingHandler):
    """``_CountingHandler`` that also counts, per object key, requests by kind and answer bytes."""

    def _key(self) -> str:
        """The object's key (``bucket/key``); for a listing, ``bucket/prefix`` (the prefix listed),
        with ``DELIMITED`` after it when it names one level (a ``delimiter``)."""
        split = urllib.parse.urlsplit(self.path)
        key = urllib.parse.unquote(split.path).lstrip("/")
        if self._kind == "LIST":
            query = urllib.parse.parse_qs(split.query)
            return f"{key.rstrip('/')}/{query.get('prefix', [''])[0]}" + (DELIMITED if query.get("delimiter") else "")
        return key

    def _body(self) -> bytes:
        body = super()._body()
        self.proxy.count_key(self._key(), self._kind, requests=1)
        return body

    def _reply(self, status: int, body: bytes, headers=()) -> None:
        if self.command != "HEAD":
            self.proxy.count_key(self._key(), self._kind, nbytes=len(body))
        super()._reply(status, body, headers)


class KeyCountingProxy(cs3.CountingProxy):
    """``CountingProxy`` with per-key counts, snapshotted at every mark (``keys_between``)."""

    def __init__(self, upstream: str):
        super().__init__(upstream)
        self.handler_class = _KeyCountingHandler
        self._key_counts: dict[str, Counter] = {"requests": Counter(), "bytes_out": Counter()}
        self._key_marks: dict[str, dict[str, Counter]] = {}

    def count_key(self, key: str, kind: str, *, requests: int = 0, nbytes: int = 0) -> None:
        with self._lock:
            if requests:
                self._key_counts["requests"][(key, kind)] += requests
            if nbytes:
                self._key_counts["bytes_out"][(key, kind)] += nbytes

    def mark(self, name: str) -> None:
        super().mark(name)
        with self._lock:
            self._key_marks[name] = {k: Counter(v) for k, v in self._key_counts.items()}

    def keys_between(self, start: str, end: str) -> dict[str, Counter]:
        """Per (key, kind): requests and answer bytes between marks ``start`` and ``end``."""
        a, b = self._key_marks[start], self._key_marks[end]
        return {k: b[k] - a[k] for k in b}


class KeyCountingS3(cs3.CountingS3):
    def __enter__(self) -> "KeyCountingS3":
        self.moto, upstream = cs3.start_moto(self.log)
        self.proxy = KeyCountingProxy(upstream)
        self.endpoint = self.proxy.start()
        return self


def folder_of(rel: str) -> str:
    top = rel.split("/", 1)[0]
    return top if top in FOLDERS else "other"


def old_corpus_reads(counts: dict[str, Counter], prefix: str, listed: dict[str, int]) -> dict[str, Any]:
    """The GET bytes and requests of keys under ``prefix``: the old corpus's (in ``listed``, by
    folder) and the rest (the append's own writes read back); HEADs under it; and the listings
    whose prefix could name old objects (``old_lists``: prefix -> requests, answer bytes, the old
    names it could give: every key under it, or one level's names with a delimiter), apart from
    the others under ``prefix`` (``lists``)."""
    out: dict[str, Any] = {"bytes": Counter(), "gets": Counter(), "own_bytes": 0, "own_gets": 0, "lists": 0,
                           "heads": 0, "keys_read": 0, "keys": Counter(), "old_lists": {}}
    seen = set()
    for (key, kind), n in counts["requests"].items():
        if not key.startswith(prefix.rstrip("/")):
            continue
        rel = key[len(prefix):]
        if kind == "LIST":
            level = rel.endswith(DELIMITED)
            base = rel[:-len(DELIMITED)] if level else rel
            under = len({k[len(base):].split("/", 1)[0] if level else k for k in listed if k.startswith(base)})
            if under:
                got = out["old_lists"].setdefault(rel, {"requests": 0, "bytes": 0, "old_objects": under})
                got["requests"] += n
                got["bytes"] += counts["bytes_out"].get((key, kind), 0)
            else:
                out["lists"] += n
        elif kind == "HEAD":
            out["heads"] += n
        elif kind in ("GET", "GET_RANGE"):
            if rel in listed:
                out["gets"][folder_of(rel)] += n
                seen.add(rel)
            else:
                out["own_gets"] += n
    for (key, kind), n in counts["bytes_out"].items():
        if kind not in ("GET", "GET_RANGE") or not key.startswith(prefix):
            continue
        rel = key[len(prefix):]
        if rel in listed:
            out["bytes"][folder_of(rel)] += n
            out["keys"][rel] += n
        else:
            out["own_bytes"] += n
    out["keys_read"] = len(seen)
    out["bytes"], out["gets"] = dict(out["bytes"]), dict(out["gets"])
    # per old object read: the bytes served and its stored size (read whole n times: n x size)
    out["keys"] = {rel: {"read": n, "size": listed[rel]} for rel, n in sorted(out["keys"].items())}
    out["total_bytes"] = sum(out["bytes"].values())
    return out


# ------------------------------------------------------------------------------ the texts
def texts_for(sizes: list[float], share: float, copies: float, exact: float, seed: int = 0
              ) -> dict[float, tuple[list[str], list[str], int]]:
    """Per size K: (old pieces up to K MB, new pieces up to share x K MB after them, exact copies
    planted in the new)."""
    top = max(sizes) * (1 + share) * 1e6
    n = int(top / 2500) + 50  # pieces are ~3.4 KB of UTF-8: enough of them to reach the largest size
    lengths = [len(t.encode()) for t in documents(n, 0.0)]
    out = {}
    for size in sizes:
        n_old = n_new = 0
        total = 0
        while total < size * 1e6:
            total += lengths[n_old]
            n_old += 1
        total = 0
        while total < share * size * 1e6:
            total += lengths[n_old + n_new]
            n_new += 1
        pieces = documents(n_old + n_new, copies, seed=seed)
        old, new = pieces[:n_old], pieces[n_old:]
        rng = random.Random(seed + 1)
        planted = max(1, round(exact * n_new))
        for i in rng.sample(range(n_new), planted):
            new[i] = old[rng.randrange(n_old)]
        out[size] = (old, new, planted)
    return out


def write_jsonl(folder: Path, texts: list[str]) -> int:
    """``texts`` as JSONL files of about ``FILE_BYTES`` each in ``folder``; their text bytes."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    files = max(1, round(sum(len(t.encode()) for t in texts) / FILE_BYTES))
    for f in range(files):
        with open(folder / f"part-{f:03d}.jsonl", "w", encoding="utf-8") as fh:
            for t in texts[f::files]:
                fh.write(json.dumps({"text": t}) + "\n")
    return sum(len(t.encode()) for t in texts)


# ------------------------------------------------------------------------------ the child
def _timed_build(job) -> tuple[Any, float]:
    from pipelines.orchestration.runner import CorpusBuild

    start = time.perf_counter()
    manifest = CorpusBuild(job()).run()
    return manifest, round(time.perf_counter() - start, 3)


def child(old_src: str, new_src: str, tokenizer: str, prefix: str, cpus: int) -> dict[str, Any]:
    """Old build, listing, append, rebuild (module docstring), in this process."""
    import ray

    from common import storage
    from pipelines.corpus_job import CorpusJob
    from pipelines.engine import raydata

    cfg = {"profile": "books", "tokenizer": {"pretrained": tokenizer}}
    old, rebuild = f"{prefix}/old", f"{prefix}/rebuild"
    raydata.init_ray(num_cpus=cpus)
    first, first_s = _timed_build(lambda: CorpusJob.load(sources=[old_src], out=old, config=cfg))
    listed = storage.list_sizes(old)
    cs3.mark(f"{prefix}:append_start")
    grown, append_s = _timed_build(lambda: CorpusJob.load(sources=[new_src], out=old, append=True))
    cs3.mark(f"{prefix}:append_end")
    full, rebuild_s = _timed_build(lambda: CorpusJob.load(sources=[old_src, new_src], out=rebuild, config=cfg))
    cs3.mark(f"{prefix}:rebuild_end")
    ray.shutdown()

    def summary(m) -> dict[str, Any]:
        s = m.stats
        return {"documents_kept": s["summary"]["documents_kept"], "documents_in": s["summary"]["documents_in"],
                "text_bytes": s["ingest"]["bytes_in"], "shard_bytes": sum(x.bytes for x in m.shards),
                "shards": len(m.shards), "tokens": s["summary"]["tokens"],
                "generations": [g.name for g in m.generations], "index": s.get("index", {}),
                "tokenizer": m.tokenizer.sha256,
                "stage_seconds": {k: v["seconds"] for k, v in s.items() if isinstance(v, dict) and "seconds" in v}}

    own = f"shards/{grown.generation}/"
    return {"old": {**summary(first), "seconds": first_s}, "listed": listed,
            "append": {**summary(grown), "seconds": append_s, "new_generation": grown.generation,
                       "new_shard_bytes": sum(x.bytes for x in grown.shards if x.path.startswith(own)),
                       "earlier": {k: grown.stats[k]["earlier_generations"] for k in ("exact_dedup", "near_dedup")},
                       "dropped": grown.stats["summary"]["dropped_by_reason"]},
            "rebuild": {**summary(full), "seconds": rebuild_s,
                        "dropped": full.stats["summary"]["dropped_by_reason"]}}


def run_child(args: list[str], cpus: int, env: dict[str, str]) -> dict[str, Any]:
    """This script's child in a fresh process confined to ``cpus`` cores; its last stdout line."""
    cores = sorted(os.sched_getaffinity(0))[:cpus]
    env = dict(os.environ, **env, TOKENIZERS_PARALLELISM="false", RAY_ENABLE_UV_RUN_RUNTIME_ENV="0")
    proc = subprocess.run([sys.executable, __file__, *args], env=env, capture_output=True, text=True,
                          preexec_fn=lambda: os.sched_setaffinity(0, cores))
    if proc.returncode != 0:
        raise RuntimeError(f"child {args} failed:\n{proc.stderr[-6000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------ measuring
def measure(size: float, old: list[str], new: list[str], planted: int, *, work: Path, tokenizer: str,
            s3: KeyCountingS3, cpus: int) -> dict[str, Any]:
    folder = work / f"{size:g}mb"
    old_text = write_jsonl(folder / "old", old)
    new_text = write_jsonl(folder / "new", new)
    prefix = f"s3://{BUCKET}/{size:g}mb"
    r = run_child(["--child", str(folder / "old"), str(folder / "new"), tokenizer, prefix, str(cpus)], cpus, s3.env)
    listed = r.pop("listed")
    print(f"  {size:g} MB: old build {r['old']['seconds']:.1f} s, append {r['append']['seconds']:.1f} s, rebuild "
          f"{r['rebuild']['seconds']:.1f} s; load average {[round(x, 2) for x in os.getloadavg()]}", file=sys.stderr,
          flush=True)
    counts = s3.proxy.keys_between(f"{prefix}:append_start", f"{prefix}:append_end")
    reads = old_corpus_reads(counts, f"{BUCKET}/{size:g}mb/old/", listed)
    stored = {f: sum(b for k, b in listed.items() if folder_of(k) == f) for f in (*FOLDERS, "other")}
    o, a, b = r["old"], r["append"], r["rebuild"]
    earlier = a["earlier"]
    return {"size_mb": size, "old_pieces": len(old), "new_pieces": len(new), "planted_exact": planted,
            "old_text_bytes": old_text, "new_text_bytes": new_text, "old": o, "append": a, "rebuild": b,
            "old_stored_bytes": sum(listed.values()), "old_stored_by_folder": stored, "old_objects": len(listed),
            "reads": reads,
            "index_bytes_read_stats": sum(e["index_bytes_read"] for e in earlier.values()),
            "time_ratio": round(a["seconds"] / max(b["seconds"], 1e-9), 3),
            "read_share": round(reads["total_bytes"] / max(old_text + o["shard_bytes"], 1), 5),
            # the tokenizer's files are read whole whatever the corpus's size
            "read_share_without_tokenizer": round((reads["total_bytes"] - reads["bytes"].get("tokenizer", 0))
                                                  / max(old_text + o["shard_bytes"], 1), 5),
            "kept_check": {"old_plus_append": o["documents_kept"] + a["documents_kept"],
                           "rebuild": b["documents_kept"]}}


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A markdown table, its columns aligned (right but the first)."""
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w)
                                 for i, (c, w) in enumerate(zip(cells, widths))) + " |"
    return [line(header), "|" + "|".join(("-" * (w + 1) + ":") if i else "-" * (w + 2)
                                        for i, w in enumerate(widths)) + "|", *map(line, rows)]


def _label(listing: str) -> str:
    level = listing.endswith(DELIMITED)
    base = listing[:-len(DELIMITED)] if level else listing
    return (base or "(corpus)/") + (" (one level)" if level else " (every key)")


def report(rows: list[dict[str, Any]], share: float = 0.1) -> list[str]:
    kb, mb = 1e3, 1e6
    old_rows, app_rows, read_rows = [], [], []
    for r in rows:
        o, idx, a, b, rd = r["old"], r["old"]["index"], r["append"], r["rebuild"], r["reads"]
        by, e = rd["bytes"], a["earlier"]
        other = sum(v for k, v in by.items() if k not in ("index", "manifest.json", "tokenizer", "shards"))
        size = f"{r['size_mb']:g} MB"
        old_rows.append([size, f"{o['documents_kept']:,}", f"{r['old_text_bytes'] / mb:.2f}",
                         f"{r['old_stored_bytes'] / mb:.2f}", f"{o['shard_bytes'] / mb:.2f}",
                         f"{idx.get('bytes', 0) / kb:.1f}", f"{idx.get('bytes_per_document', 0):.1f}",
                         f"{idx.get('bytes', 0) / max(r['old_text_bytes'], 1):.3f}"])
        app_rows.append([size, f"{r['new_text_bytes'] / mb:.2f}", f"{a['seconds']:.1f}", f"{b['seconds']:.1f}",
                         f"{r['time_ratio']:.2f}", f"{e['exact_dedup']['matches']} / {e['near_dedup']['matches']}",
                         f"{r['kept_check']['old_plus_append']:,} / {r['kept_check']['rebuild']:,}"])
        read_rows.append([size, f"{rd['total_bytes'] / kb:.1f}", f"{by.get('index', 0) / kb:.1f}",
                          f"{by.get('manifest.json', 0) / kb:.1f}", f"{by.get('tokenizer', 0) / kb:.1f}",
                          f"{by.get('shards', 0)}", f"{other / kb:.1f}", f"{r['read_share']:.4f}",
                          f"{r['read_share_without_tokenizer']:.4f}"])
    lines = ["", "Old corpus (books profile, pieces of ~3,000 characters, on moto S3):", *table(
        ["old text", "docs kept", "text MB", "stored MB", "shards MB", "index KB", "index B/doc", "index/text"],
        old_rows)]
    lines += ["", f"Append of {share:.0%} vs full rebuild of old + new text (same cores, one after the other; "
              "ratio = append / rebuild):", *table(["old text", "new MB", "append s", "rebuild s", "ratio",
                                                    "matches exact / near", "kept: old + append / rebuild"], app_rows)]
    lines += ["", "Bytes the append read from the old corpus (GET bytes on its objects, by folder):", *table(
        ["old text", "read KB", "index KB", "manifest KB", "tokenizer KB", "shard bytes", "other KB",
         "read / (text + shards)", "same w/o tokenizer"], read_rows)]
    lines.append("")
    for r in rows:
        a, b = r["append"].get("stage_seconds", {}), r["rebuild"].get("stage_seconds", {})
        if a:
            lines.append(f"{r['size_mb']:g} MB, seconds per stage, append / rebuild: "
                         + ", ".join(f"{k} {a[k]:.1f}/{b.get(k, 0):.1f}" for k in a))
    for r in rows:
        rd = r["reads"]
        ol = rd.get("old_lists", {})
        lines.append(f"{r['size_mb']:g} MB: the append read {rd['keys_read']} of the old corpus's {r['old_objects']} "
                     f"objects ({sum(rd['gets'].values())} GETs: {rd['gets']}), {rd['heads']} HEADs under it; "
                     f"{sum(v['requests'] for v in ol.values())} listings of prefixes holding old objects "
                     f"({sum(v['bytes'] for v in ol.values()) / kb:.1f} KB of answers; prefix: old names it could "
                     f"give {({_label(k): v['old_objects'] for k, v in ol.items()})}), {rd['lists']} other "
                     "listings; "
                     f"its own writes read back: {rd['own_bytes'] / kb:.1f} KB in "
                     f"{rd['own_gets']} GETs; index_bytes_read (manifest) {r['index_bytes_read_stats']:,} vs "
                     f"index/ GET bytes {rd['bytes'].get('index', 0):,}; planted exact copies {r['planted_exact']}")
    return lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1,2,4,8", help="MB of old text per corpus, comma-separated")
    p.add_argument("--share", type=float, default=0.1, help="new text appended, as a share of the old")
    p.add_argument("--copies", type=float, default=0.05, help="share of pieces replaced by near copies of others")
    p.add_argument("--exact", type=float, default=0.02, help="share of new pieces replaced by exact copies of old ones")
    p.add_argument("--cpus", type=int, default=2)
    p.add_argument("--work", default=str(REPO / "bench_out" / "corpus_append"), help="texts, tokenizer, moto log")
    p.add_argument("--json", help="write every figure here")
    p.add_argument("--smoke", action="store_true", help=f"tiny run (the test's): {SMOKE}")
    p.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.smoke:
        for k, v in SMOKE.items():
            setattr(args, k, v)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        old_src, new_src, tok, prefix, cpus = args.child
        print(json.dumps(child(old_src, new_src, tok, prefix, int(cpus))))
        return 0
    if not BOOKS.is_dir():
        print(f"skipped: {BOOKS} is absent (the shared books)")
        return 0
    machine = cpu_kind()
    print(machine_line(machine) + f"; local Ray, {args.cpus} CPUs (child processes pinned to {args.cpus} cores)",
          flush=True)
    sizes = [float(s) for s in args.sizes.split(",")]
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    texts = texts_for(sizes, args.share, args.copies, args.exact)

    from pipelines.config import TokenizerConfig
    from pipelines.tokenizer import train_tokenizer

    tok_dir = work / "tokenizer"
    shutil.rmtree(tok_dir, ignore_errors=True)
    train_tokenizer(documents(1000, 0.0), TokenizerConfig(vocab_size=30522), tok_dir)
    rows = []
    started = time.perf_counter()
    with KeyCountingS3(work / "moto.log") as s3:
        s3.bucket(BUCKET)
        for size in sizes:
            print(f"size {size:g} MB: old build, append, rebuild ...", file=sys.stderr, flush=True)
            old, new, planted = texts[size]
            rows.append(measure(size, old, new, planted, work=work, tokenizer=str(tok_dir / "tokenizer.json"),
                                s3=s3, cpus=args.cpus))
    print("\n".join(report(rows, args.share)))
    after = cpu_kind()
    print(f"load average at the end: {after['loadavg']}; whole run {time.perf_counter() - started:.0f} s")
    result = {"machine": machine, "loadavg_end": after["loadavg"], "cpus": args.cpus, "storage": "moto S3 + proxy",
              "args": {k: v for k, v in vars(args).items() if k != "child"}, "sizes": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
