"""benchmarks/train/mixture.py: one --smoke run in this process, its JSON checked for structure and
internal consistency (no speed assertion)."""
from __future__ import annotations

import json

import pytest

from benchmarks.train import mixture
from common import storage

# slow: a benchmark's smoke run: rerun when its benchmark changes, not on every change (make test-all)
pytestmark = pytest.mark.slow

OPS = ("build", "ordered_shards", "schedule")


@pytest.fixture(scope="module")
def result(tmp_path_factory) -> dict:
    originals = {name: getattr(storage, name) for name in mixture.COUNTED}
    path = tmp_path_factory.mktemp("mixture") / "out.json"
    assert mixture.main(["--smoke", "--json", str(path)]) == 0
    # the counting shim is gone: the corpus modules call the real functions again
    assert {name: getattr(storage, name) for name in mixture.COUNTED} == originals
    return json.loads(path.read_text())


def test_machine_and_arguments(result):
    for key in ("machine", "machine_after"):
        m = result[key]
        assert m["model"] and len(m["loadavg"]) == 3 and m["cores"] >= 1
        assert isinstance(m["amx_bf16"], bool) and isinstance(m["avx512_bf16"], bool)
    assert result["args"]["smoke"] is True


def test_sample_order_sizes(result):
    args, order = result["args"], result["order"]
    rows = order["sizes"]
    assert [r["sources"] for r in rows] == args["sources"] == mixture.parse_args(["--smoke"]).sources
    for r in rows:
        assert r["shards"] == r["sources"] * r["shards_per_source"] == r["sources"] * args["shards"]
        # the takes split the sources' examples exactly, and the plan's epoch and slices hold them
        assert len(r["takes"]) == r["sources"]
        assert sum(r["takes"]) == r["takes_sum"] == r["examples"] == r["num_examples"] == r["bounds_end"]
        if r["sources"] > 1:  # weights 1, 3, 1, ...: a weight-3 source gives more than a weight-1 one
            assert r["takes"][1] > r["takes"][0]
        assert r["slices"] >= r["shards"] // 2 and r["steps_per_epoch"] >= 1
        assert r["segments"] >= 1 and 1 <= r["schedule_shards"] <= r["slices"]
        for op in OPS:
            m = r[op]
            assert m["seconds"] > 0 and m["seconds_gc_off"] > 0 and m["peak_mb"] > 0, (r["sources"], op)
            assert m["us_per_shard"] == pytest.approx(1e6 * m["seconds"] / r["shards"])
            assert m["bytes_per_shard"] == pytest.approx(m["peak_mb"] * 2 ** 20 / r["shards"])
    g = order["growth"]
    assert g["shards_ratio"] == rows[-1]["shards"] / rows[0]["shards"]
    for op in OPS:
        for k in ("seconds", "seconds_gc_off", "peak_mb"):
            f = f"{op}.{k}"
            assert g[f] == pytest.approx(rows[-1][op][k] / rows[0][op][k])
            assert g[f + "_per_shards"] == pytest.approx(g[f] / g["shards_ratio"])


def test_startup_counts_grow_with_the_sources(result):
    args, rows = result["args"], result["startup"]["sizes"]
    assert [r["sources"] for r in rows] == args["startup_sources"]
    for r in rows:
        assert r["seconds"] > 0
        assert r["train_shards"] == r["sources"] * args["startup_shards"]
        assert r["validation_shards"] == r["sources"]
        assert r["takes_sum"] == r["examples"] == r["train_shards"] * args["startup_examples"]
        assert set(r["calls"]) == set(mixture.COUNTED) and r["total_calls"] == sum(r["calls"].values())
        # at least the manifest and the tokenizer read and one listing per split, per corpus
        assert r["calls"]["read_bytes"] >= 2 * r["sources"] and r["calls"]["list_sizes"] >= 2 * r["sources"]
        assert r["calls_per_source"] == pytest.approx(r["total_calls"] / r["sources"])
    totals = [r["total_calls"] for r in rows]
    assert totals == sorted(totals) and totals[-1] > totals[0]
    g = result["startup"]["growth"]
    assert g["total_calls"] == pytest.approx(totals[-1] / totals[0])
    assert g["sources_ratio"] == rows[-1]["sources"] / rows[0]["sources"]


def test_loader_two_sources_vs_one(result):
    args, res = result["args"], result["loader"]
    assert res["examples"]["one"] == res["examples"]["two"] == args["loader_shards"] * args["loader_examples"]
    assert res["shards"]["one"] == res["shards"]["two"] == args["loader_shards"]
    assert sum(res["takes"]) == res["examples"]["two"] and res["takes"][1] == 3 * res["takes"][0]
    assert len(res["rounds"]) == args["rounds"]
    for r in res["rounds"]:
        for side in ("one", "two"):
            e = r[side]
            assert e["samples"] == res["steps_per_epoch"][side] * args["loader_global_batch"]
            assert e["samples_per_sec"] == pytest.approx(e["samples"] / e["seconds"])
            assert e["samples_per_cpu_sec"] == pytest.approx(e["samples"] / e["cpu_seconds"])
            assert e["bytes_read"] > 0 and sum(e["per_source"]) == e["samples"]
        assert len(r["one"]["per_source"]) == 1 and len(r["two"]["per_source"]) == 2
    med = res["median_samples_per_sec"]
    assert med["one"] > 0 and med["two"] > 0
    assert res["ratio"] == pytest.approx(med["two"] / med["one"]) and res["ratio"] > 0
    assert res["met"] == (res["ratio"] >= res["goal"] == mixture.GOAL)
    assert res["cpu_ratio"] > 0
    assert res["share_of_b"] == pytest.approx(0.75, abs=0.1)  # weights 1, 3 (a few examples dropped)
