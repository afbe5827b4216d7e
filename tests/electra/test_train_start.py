"""Training start-up's store traffic (electra/pretrain_plan.py, electra/corpus_set.py): the
shard check lists each shard folder once for both splits, runs on rank 0 only when there are
several ranks, and every other rank takes rank 0's answer; the requests are counted by a proxy
in front of a real S3 server (moto)."""
from __future__ import annotations

import re

import pytest

from electra.corpus_set import open_corpora
from electra.pretrain_job import PretrainJob
from electra.pretrain_plan import resolve
from tests._s3proxy import s3_proxy  # noqa: F401  (fixture)
from tests.electra._corpus import upload_corpus, write_tiny_corpus

SEQ = 32


@pytest.fixture(scope="module")
def local_corpus(tmp_path_factory):
    return write_tiny_corpus(tmp_path_factory.mktemp("c"), seq_len=SEQ, train_shards=(9, 7, 5),
                             validation_shards=(6, 5))


@pytest.fixture
def remote(local_corpus, s3_server, s3_proxy):
    """The corpus in a fresh bucket behind the counting proxy, and that proxy with its log cleared."""
    loc = upload_corpus(local_corpus, s3_server.bucket() + "/corpus")
    s3_proxy.log.clear()
    return loc, s3_proxy


def listings(proxy) -> list[str]:
    """The LIST requests the proxy saw (S3 ListObjectsV2: a GET on the bucket with ``list-type``)."""
    return [path for method, path, _ in proxy.log if method == "GET" and re.fullmatch(r"/[^/]+/?", path)]


def test_both_splits_share_one_listing_and_match_the_per_split_check(remote):
    loc, proxy = remote
    corpora = open_corpora([loc])
    proxy.log.clear()
    check = corpora.check(skip_corrupt=False)
    assert len(listings(proxy)) == 1, proxy.log
    # the same answer as checking each split on its own (which lists once per split)
    train, skipped, _ = corpora.shards("train", skip_corrupt=False)
    validation, skipped_val, _ = corpora.shards("validation", skip_corrupt=False)
    assert (check.train, check.validation, check.skipped) == (train, validation, skipped + skipped_val)
    assert [s.num_examples for s in check.train] == [9, 7, 5] and [s.num_examples for s in check.validation] == [6, 5]


def test_only_rank0_lists_and_the_others_adopt_its_answer(remote, tmp_path, monkeypatch):
    loc, proxy = remote
    plans = {}
    for rank in (1, 0):
        monkeypatch.setenv("RANK", str(rank))
        proxy.log.clear()
        plans[rank] = resolve(PretrainJob("tiny", loc, str(tmp_path / f"run{rank}")), world_size=2, precision="fp32")
        assert listings(proxy) == [], f"rank {rank} listed the store in resolve"
    assert plans[1].skipped_shards == ()  # never lists for a report rank 0 writes
    assert listings(proxy) == []
    answer = plans[0].check_shards()  # what distributed.on_rank0 runs on rank 0, then broadcasts
    assert len(listings(proxy)) == 1
    plans[1].adopt(answer)
    assert plans[1].train_shards == plans[0].train_shards and plans[1].validation_shards == plans[0].validation_shards
    assert len(listings(proxy)) == 1


def test_a_single_process_checks_in_resolve_once(remote, tmp_path, monkeypatch):
    loc, proxy = remote
    monkeypatch.delenv("RANK", raising=False)
    plan = resolve(PretrainJob("tiny", loc, str(tmp_path / "run")), world_size=1, precision="fp32")
    assert len(listings(proxy)) == 1
    assert len(plan.train_shards) == 3 and len(plan.validation_shards) == 2 and plan.skipped_shards == ()
    assert len(listings(proxy)) == 1


RANK_SCRIPT = """
import json, os, sys
import torch.distributed as dist
from electra import distributed as D
from electra.pretrain_job import PretrainJob
from electra.pretrain_plan import resolve
plan = resolve(PretrainJob("tiny", sys.argv[1], sys.argv[2]), world_size=2, precision="fp32")
dist.init_process_group("gloo", rank=int(os.environ["RANK"]), world_size=2)
try:
    check = D.on_rank0(plan.check_shards)
    out = {"train": [s.uri for s in check.train], "validation": [s.uri for s in check.validation]}
except Exception as exc:
    out = {"error": type(exc).__name__, "message": str(exc)}
print("RESULT " + json.dumps(out), flush=True)
dist.destroy_process_group()
"""


def two_ranks(loc: str, run_dir, proxy) -> list[dict]:
    """Two processes in a gloo group run resolve, then the shard check through on_rank0."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from electra.distributed import free_port

    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port()), "AWS_ENDPOINT_URL": proxy.endpoint}
    procs = [subprocess.Popen([sys.executable, "-c", RANK_SCRIPT, loc, str(run_dir)], cwd=str(repo),
                              env={**env, "RANK": str(rank)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for rank in range(2)]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    return [json.loads(next(ln for ln in out.splitlines() if ln.startswith("RESULT "))[7:]) for out in outputs]


def test_two_ranks_list_once_and_share_the_answer_or_the_error(remote, tmp_path):
    from common import storage

    loc, proxy = remote
    first, second = two_ranks(loc, tmp_path / "run", proxy)
    assert "error" not in first and first == second and len(first["train"]) == 3
    assert len(listings(proxy)) == 1
    storage.remove(first["train"][1])  # a shard deleted after the build: named alike on both ranks
    proxy.log.clear()
    results = two_ranks(loc, tmp_path / "run", proxy)
    assert [r.get("error") for r in results] == ["CorruptShardError"] * 2
    assert results[0]["message"] == results[1]["message"] and first["train"][1] in results[0]["message"]
    seen = len(listings(proxy))
    proxy.log.clear()  # what one process's check lists (a missing shard is also asked for by name)
    with pytest.raises(Exception, match="missing"):
        open_corpora([loc]).check(skip_corrupt=False)
    assert seen == len(listings(proxy)) >= 1
