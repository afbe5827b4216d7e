"""A Ray worker node lost in the middle of exact_dedup costs only its own tasks.

``benchmarks.corpus.node_loss.measure`` builds the same corpus on fresh two-node loopback clusters
through a counting S3 proxy: once clean, then with the worker node SIGKILLed at a chosen call
(``tests/flows/test_build_corpus_node_loss.KILL_POINTS``: a finished block lost with the node's
object store; a marking task that dies while writing the stage's parts). The tasks and store
requests the killed build's stage ran beyond the clean build's must stay within twice the lost
node's share (the tasks it had started in the stage, and their requests pro rata), the runner
must not have rerun the stage (one attempt), and the shards must be byte-identical.

``measure_surfaced``: when a transient failure does surface late in a stage's writer pass, the
retry redoes the blocks that had not finished (the block journal), where the old wipe (emulated)
redid them all; the shards are byte-identical either way.
"""
from __future__ import annotations

import pytest

from benchmarks.corpus.node_loss import measure, measure_surfaced

pytestmark = pytest.mark.slow
KILLS = ["digest_block_lost", "mark"]


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    return measure(KILLS, tmp=tmp_path_factory.mktemp("node_loss"))


@pytest.mark.parametrize("kill", KILLS)
def test_a_lost_node_costs_only_its_unfinished_tasks(measured, kill):
    r = measured["redone"][kill]
    assert measured["runs"][kill]["killed"]["at"], "the worker node never died"
    assert r["stage"] == "exact_dedup" and r["lost_share_tasks"] >= 1, r
    assert r["attempts"] == 1, f"the stage ran again from scratch: {r}"
    assert r["tasks_redone"] <= 2 * r["lost_share_tasks"], r
    assert r["requests_redone"] <= 2 * r["lost_share_requests"], r
    assert r["identical_shards"], r


def test_a_surfaced_transient_failure_redoes_only_the_unfinished_blocks(tmp_path):
    r = measure_surfaced(["pack"], tmp=tmp_path)
    after, before = r["pack/journal"], r["pack/wipe"]
    assert after["attempts"] == before["attempts"] == 2, r
    assert after["writes_redone"] <= 2 * after["unfinished"] < before["writes_redone"], r
    assert after["reads_redone"] < before["reads_redone"], r
    assert after["identical_shards"] and before["identical_shards"], r
