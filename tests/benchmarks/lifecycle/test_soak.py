"""benchmarks/lifecycle/soak.py: one --smoke round of the chain under faults together (a store failing a
share of all requests, a Ray worker node lost mid-build, the trainer SIGKILLed four times at
seeded points, damaged bytes), its JSON checked: every kind of fault was injected, every one was
survived (the build's shards and tokenizer, and the run's per-step losses, identical to the clean
reference's), every damaged file was named by the trainer's one error line or skip."""
from __future__ import annotations

import importlib.util
import json

import pytest

from benchmarks.lifecycle import soak

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("moto") is None, reason="moto is not installed")]


@pytest.fixture(scope="module")
def result(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("soak")
    code = soak.main(["--smoke", "--seed", "3", "--work", str(tmp / "work"), "--json", str(tmp / "out.json")])
    out = json.loads((tmp / "out.json").read_text())
    assert code == 0, out
    return out


def test_every_fault_kind_was_injected_and_survived(result):
    faults = result["faults"]
    expected = {f"store_{k}" for k in ("slowdown", "reset", "cut")} | {"node_loss"} | \
        {f"trainer_{k}" for k in soak.KILL_KINDS} | {"damaged_shard", "damaged_truncated_shard",
                                                      "skipped_shard", "damaged_checkpoint"}
    assert expected <= set(faults), sorted(faults)
    for kind in expected:
        assert faults[kind]["injected"] > 0 and faults[kind]["survived"] == faults[kind]["injected"], (kind, faults)
    assert faults["store_stall"]["survived"] == faults["store_stall"]["injected"]
    assert result["mismatches"] == [] and result["rounds"] == 1


def test_every_damaged_file_was_named(result):
    damaged = {k: v for k, v in result["faults"].items() if k.startswith(("damaged_", "skipped_"))}
    assert {"damaged_manifest", "damaged_tokenizer"} & set(damaged)
    assert all(v["named"] == v["injected"] > 0 for v in damaged.values()), damaged


def test_the_store_refused_about_the_share_it_was_set_to(result):
    store = result["store"]
    share = sum(result["chaos"][k] for k in ("slowdown", "drop", "cut", "stall"))
    assert store["requests"] > 200 and store["refused"] == sum(store["by_outcome"].get(k, 0) for k in soak.STORE_FAULTS)
    # the reference phases are counted too (no faults then), so the share is below the rule's
    assert 0.03 < store["refused_share"] < share + 0.05, store
