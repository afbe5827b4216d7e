"""benchmarks/corpus/scale: dedup scoring by hand, ids as the pipeline reads them, memory probes,
the reports' goals, and one tiny shuffle comparison in child processes (sort vs storage)."""
from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.corpus import scale as cs
from benchmarks.corpus import scale_shuffles as css
from common.hashing import stable_uid
from synthetic import web_corpus

# slow: a benchmark's smoke run: rerun when its benchmark changes, not on every change (make test-all)
pytestmark = pytest.mark.slow


def _t(kind: str, me: int, of: int | None = None, **extra) -> dict:
    rec = {"id": f"d{me}", "kind": kind, "file": "f", "offset": me, **extra}
    if of is not None:
        rec.update(of=f"d{of}", of_file="f", of_offset=of)
    return rec


def _dup(of: int, reason: str) -> tuple[str, str]:
    return reason, f"duplicate of uid {stable_uid(f'data/f:{of}')}"


def test_dedup_scores_by_hand():
    truth = [_t("exact", 11, 10), _t("exact", 12, 10), _t("near", 13, 10, jaccard=0.9),  # group of 10
             _t("near", 21, 20, jaccard=0.85), _t("near", 22, 20, jaccard=0.85),  # group of 20
             _t("exact", 31, 30),  # group of 30: the filter dropped both copies
             _t("boilerplate", 40, site=1), _t("boilerplate", 41, site=1)]
    rejected = {
        "data/f:10": _dup(11, "dedup:exact"),  # the copy kept (smaller uid): still right
        "data/f:12": _dup(11, "dedup:exact"),
        "data/f:13": _dup(11, "dedup:near"),
        "data/f:21": _dup(20, "dedup:near"),  # 22 missed
        "data/f:30": ("filter:c4:min_num_sentences", "x"), "data/f:31": ("filter:c4:min_num_sentences", "x"),
        "data/f:41": _dup(40, "dedup:near"),  # a page dropped for its boilerplate
        "data/f:50": _dup(10, "dedup:exact"),  # an unrelated document
    }
    got = cs.dedup_scores(truth, rejected)
    # exact: expected 2 (group 10 has 3 identical texts; group 30 none reached dedup); 2 right of 3
    assert got["exact"] == {"expected": 2, "dropped": 3, "true": 2, "precision": round(2 / 3, 4), "recall": 1.0,
                            "false_on_boilerplate": 0}
    # near: expected 1 (group 10) + 2 (group 20); right: 13, 21; wrong: 41 (boilerplate)
    assert got["near"] == {"expected": 3, "dropped": 3, "true": 2, "precision": round(2 / 3, 4),
                           "recall": round(2 / 3, 4), "false_on_boilerplate": 1}


def test_truth_offsets_are_the_pipelines_ids(tmp_path):
    from pipelines.config import IngestConfig
    from pipelines.ingest import resolve_sources
    from pipelines.ingest.documents import read_documents

    summary = web_corpus.write_web_corpus(tmp_path, 400_000, seed=4, books=None)
    sources = resolve_sources([str(tmp_path / "data")])
    assert list(sources.names) == [f"data/{f}" for f in summary["files"]]
    texts = {}
    for path, name in zip(sources.files, sources.names):
        for batch in read_documents(path, IngestConfig(), name=name):
            assert not any(batch["reason"])
            texts.update(zip(batch["id"], batch["text"]))
    assert len(texts) == summary["documents"]
    docs = {d["id"]: d["text"] for d in web_corpus.read_documents(tmp_path)}
    truth = web_corpus.read_truth(tmp_path)
    assert truth
    for t in truth:
        assert texts[f"data/{t['file']}:{t['offset']}"] == docs[t["id"]]
        if "of" in t:
            assert texts[f"data/{t['of_file']}:{t['of_offset']}"] == docs[t["of"]]


PEAK_RSS = """
from benchmarks.shared import memory as cs
cs.reset_peak_rss()
before = cs.peak_rss_mb()
block = bytearray(200 << 20)
block[::4096] = b"x" * len(block[::4096])  # touch every page
high = cs.peak_rss_mb()
del block
cs.reset_peak_rss()
print(before, high, cs.peak_rss_mb(), cs.current_rss_mb())
"""


def test_peak_rss_resets_and_machine_line():
    # in a fresh interpreter: a long-lived test process may serve the block from memory it
    # already holds (its RSS then does not move), which is not what is measured here
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", PEAK_RSS], capture_output=True, text=True, timeout=120,
                       cwd=Path(__file__).resolve().parents[3])
    assert p.returncode == 0, p.stderr[-2000:]
    before, high, after, current = map(float, p.stdout.split())
    assert high >= before + 150  # the block raised the peak
    assert after < high - 150 and current <= after  # and the reset brought it back down
    m = cs.cpu_kind()
    assert m["kind"] in ("amx_bf16", "avx512_bf16", "AVX2-only", "no AVX2") and len(m["loadavg"]) == 3
    assert m["kind"] in cs.machine_line(m) and "load average" in cs.machine_line(m)


def _size(gb: float, mbps: float, rss: float) -> dict:
    stage = {"wall": 1.0, "peak_rss_mb": rss, "peak_driver_objects": 3, "peak_objects": 5}
    return {"size_gb": gb, "seconds": 10.0, "mb_per_sec": mbps, "peak_rss_mb": rss, "baseline_rss_mb": 200,
            "corpus": {"text_bytes": int(gb * 1e9), "documents": 10, "planted": {}},
            "stages": {"ingest": stage, "near_dedup": stage},
            "stats": {"ingest": {"seconds": 1.0, "mb_per_sec": mbps, "read_tasks": 7},
                      "near_dedup": {"seconds": 2.0, "shuffles": [{"name": "buckets", "map_files": 2}]}},
            "dedup": {k: {"precision": 1.0, "recall": 0.5, "true": 1, "dropped": 1, "expected": 2,
                          "false_on_boilerplate": 0} for k in ("exact", "near")}}


def test_size_report_goals():
    lines, goals = cs.size_report([_size(0.25, 10.0, 400), _size(2, 8.4, 610)])
    assert goals == {"throughput": False, "driver_rss": False}
    text = "\n".join(lines)
    assert "✗ throughput 2 GB / 0.25 GB: 8.40 / 10.00 MB/s = 0.84x" in text
    assert "✗ driver peak RSS 2 GB / 0.25 GB: 610 / 400 MB = 1.52x" in text
    assert "shuffle name=buckets, map_files=2" in text and "dedup near: precision 1.0000, recall 0.5000" in text
    _, goals = cs.size_report([_size(0.25, 10.0, 400), _size(2, 8.5, 600)])
    assert goals == {"throughput": True, "driver_rss": True}


def _run(method: str, m: int, s: float, rss: float, objects: int) -> dict:
    return {"method": method, "blocks": m, "rows": 100, "seconds": s, "peak_rss_mb": rss, "rss_before_mb": 100,
            "peak_driver_objects": objects, "peak_objects": objects, "plasma_objects_created": 0, "tasks": {},
            "check": [[100, 4950]]}


def test_blocks_report_growth():
    runs = [_run("sort", 64, 1.0, 200, 4000), _run("sort", 128, 4.0, 300, 16000), _run("sort", 256, 16.0, 700, 64000),
            _run("storage", 64, 1.0, 200, 100), _run("storage", 128, 1.5, 201, 200), _run("storage", 256, 2.0, 202, 400)]
    lines, goals = css.blocks_report(runs)
    assert goals == {"sort": False, "storage": True}
    text = "\n".join(lines)
    assert "time x[4.0, 4.0]" in text and "driver objects x[4.0, 4.0]" in text and "time x[1.5, 1.33]" in text
    assert "✓ every method reduced the same rows per partition" in text


@pytest.mark.timeout(300)
def test_sort_and_storage_shuffles_agree(tmp_path):
    runs = [cs.run_child(["--child-shuffle", method, "8", "4000", "4", str(tmp_path / method)])
            for method in ("sort", "storage")]
    sort, storage = runs
    assert sort["check"] == storage["check"] and sum(r for r, _ in sort["check"]) == 4000
    assert sum(u for _, u in sort["check"]) == 4000 * 3999 // 2 and len(sort["check"]) == 4
    assert sort["blocks"] == storage["blocks"] == 8
    assert sort["tasks"]["map"] == sort["tasks"]["reduce"] == 8  # one reducer per block: 8 x 8 pieces
    assert storage["map_files"] == 1 and storage["tasks"]["write_map_files"] == 1
    assert not (tmp_path / "storage").exists()  # the map files are removed
