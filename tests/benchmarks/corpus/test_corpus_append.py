"""benchmarks/corpus/append.py: one --smoke run (an old corpus of 0.4 MB of the shared books on
moto's S3 server, an append of 10%, a full rebuild), its JSON checked for internal consistency:
the append read only the old corpus's metadata (index, manifest, tokenizer, quarantine part
lists), never a shard, and the index bytes the proxy served are the manifest's
``index_bytes_read`` (no speed assertion: shared cores)."""
from __future__ import annotations

import importlib.util
import json

import pytest

from benchmarks.corpus import append as ca

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("moto") is None,
                                 reason="moto is not installed: no S3 server to count")]


@pytest.fixture(scope="module")
def result(tmp_path_factory) -> dict:
    if not ca.BOOKS.is_dir():
        pytest.skip(f"{ca.BOOKS} is absent (the shared Gutenberg books)")
    tmp = tmp_path_factory.mktemp("corpus_append")
    path = tmp / "out.json"
    assert ca.main(["--smoke", "--work", str(tmp / "work"), "--json", str(path)]) == 0
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def row(result) -> dict:
    assert [r["size_mb"] for r in result["sizes"]] == [float(ca.SMOKE["sizes"])]
    return result["sizes"][0]


def test_machine_and_arguments(result):
    m = result["machine"]
    assert m["model"] and m["kind"] and m["cores"] >= 1 and len(m["loadavg"]) == 3
    assert result["args"]["smoke"] is True and result["cpus"] == 2


def test_generations(row):
    old, app, full = row["old"], row["append"], row["rebuild"]
    assert len(old["generations"]) == 1 and len(full["generations"]) == 1
    # the append keeps the old generation first and adds one, with the corpus's tokenizer
    assert len(app["generations"]) == 2 and app["generations"][0] == old["generations"][0]
    assert app["generations"][1] == app["new_generation"]
    assert app["tokenizer"] == old["tokenizer"] == full["tokenizer"]
    # the old shards are listed unchanged, the new ones in the new generation's folder
    assert app["shard_bytes"] == old["shard_bytes"] + app["new_shard_bytes"] and app["new_shard_bytes"] > 0
    assert app["index"]["documents"] == app["documents_kept"]  # the new generation's own index


def test_the_append_reads_only_the_old_corpus_metadata(row):
    reads, stored = row["reads"], row["old_stored_by_folder"]
    assert reads["bytes"].get("shards", 0) == 0 and reads["gets"].get("shards", 0) == 0
    assert set(reads["bytes"]) <= {"index", "manifest.json", "tokenizer", "rejected"}
    assert reads["total_bytes"] == sum(reads["bytes"].values()) == sum(k["read"] for k in reads["keys"].values())
    for rel, k in reads["keys"].items():
        # whole objects, each read a few times at most (the manifest: the size it had before the append)
        if rel == "manifest.json":
            assert k["read"] <= 6 * k["size"]
        else:
            assert k["read"] % k["size"] == 0 and k["read"] // k["size"] <= 2, rel
        if rel.startswith("rejected/"):  # the quarantine's part lists, not its documents
            assert "/_parts-" in rel and rel.endswith(".arrow"), rel
    # the index parts the proxy served are what the manifest says dedup read (plus _index.json)
    meta = sum(k["read"] for rel, k in reads["keys"].items() if rel.endswith("/_index.json"))
    assert reads["bytes"]["index"] == row["index_bytes_read_stats"] + meta
    assert reads["bytes"]["index"] <= 2 * stored["index"]
    bound = 2 * stored["index"] + 2 * stored["tokenizer"] + 6 * stored["manifest.json"] + 2 * stored["rejected"]
    assert reads["total_bytes"] <= bound
    # the old generation's shards, index and tokenizer are never listed key by key (the corpus's
    # folders are, one level: the generations' names)
    for listing in reads["old_lists"]:
        if not listing.endswith(ca.DELIMITED):
            assert listing and not listing.startswith(("shards/", "index/", "tokenizer/")), listing
    # nothing of the old text is in the corpus; what was read is a share of it and the shards
    assert row["read_share"] == round(reads["total_bytes"] / (row["old_text_bytes"] + row["old"]["shard_bytes"]), 5)


def test_dedup_against_the_old_generation(row):
    app = row["append"]
    exact, near = app["earlier"]["exact_dedup"], app["earlier"]["near_dedup"]
    assert row["planted_exact"] >= 1 and exact["matches"] >= 1  # the planted exact copy of an old piece
    for e in (exact, near):
        # a candidate pair is verified or refused; a new document's verified pairs make one match
        assert e["candidates"] >= e["matches"] + e["refused"] and e["index_bytes_read"] > 0
    assert app["dropped"].get("dedup:exact", 0) >= exact["matches"]
    assert app["dropped"].get("dedup:near", 0) >= near["matches"]
    # appending deduplicates as a rebuild does: as many documents kept in all at this size (a
    # deterministic input; at larger ones the counts may differ by a few, where near dedup's
    # bucket anchoring and the survivors-only index decide differently)
    assert row["kept_check"]["old_plus_append"] == row["kept_check"]["rebuild"]
    assert row["old"]["documents_kept"] + app["documents_kept"] == row["rebuild"]["documents_kept"]


def test_figures(row):
    app, full, old = row["append"], row["rebuild"], row["old"]
    assert row["time_ratio"] == round(app["seconds"] / full["seconds"], 3) and app["seconds"] > 0
    # ingest's text bytes (the Gutenberg header cut off the pieces that hold one): the rebuild's are
    # the old build's and the append's
    assert full["text_bytes"] == old["text_bytes"] + app["text_bytes"] <= row["old_text_bytes"] + row["new_text_bytes"]
    assert old["index"]["bytes_per_document"] == round(old["index"]["bytes"] / old["index"]["documents"], 1)
    assert row["old_stored_bytes"] == sum(row["old_stored_by_folder"].values())
    assert row["old_stored_by_folder"]["shards"] == old["shard_bytes"]


def test_report_lines(result):
    lines = ca.report(result["sizes"], result["args"]["share"])
    size = f"| {float(ca.SMOKE['sizes']):g} MB "
    assert sum(line.startswith(size) for line in lines) == 3  # a row in each of the three tables
    assert any("append / rebuild" in line for line in lines)  # the stages' seconds
