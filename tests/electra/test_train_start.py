"""Training start-up's store traffic (electra/run/plan.py, electra/data/corpus_set.py,
electra/run/shared_plan.py): the shard check lists each shard folder once for both splits; with
several ranks only rank 0 reads the corpus (manifest, tokenizer, listing) and every other rank
takes rank 0's plan, or its error, without a request of its own; the requests are counted by
proxies in front of a real S3 server (moto)."""
from __future__ import annotations

import re

import pytest

from electra.data.corpus_set import open_corpora
from electra.run.job import PretrainJob
from electra.run.plan import resolve
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
from electra.run.job import PretrainJob
from electra.run.shared_plan import resolve_rank, share
rank = int(os.environ["RANK"])
resolved = resolve_rank(PretrainJob("tiny", sys.argv[1], sys.argv[2]), rank=rank, world_size=2, precision="fp32")
dist.init_process_group("gloo", rank=rank, world_size=2)
try:
    plan = share(resolved)
    out = {"rank": plan.rank, "train": [s.uri for s in plan.train_shards],
           "validation": [s.uri for s in plan.validation_shards], "seq_len": plan.cfg.seq_len,
           "vocab_size": plan.cfg.model.vocab_size, "manifest_sha256": plan.corpus.manifest_sha256,
           "global_batch": plan.geometry.global_batch}
except Exception as exc:
    out = {"error": type(exc).__name__, "message": str(exc)}
print("RESULT " + json.dumps(out), flush=True)
dist.destroy_process_group()
"""


def two_ranks(loc: str, run_dir, proxies) -> list[dict]:
    """Two processes in a gloo group resolve as the runner does (``resolve_rank``), then take rank
    0's plan (``share``); rank r talks to the store through ``proxies[r]``, so each rank's requests
    are counted apart."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from common.ports import free_port

    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port())}
    procs = [subprocess.Popen([sys.executable, "-c", RANK_SCRIPT, loc, str(run_dir)], cwd=str(repo),
                              env={**env, "RANK": str(rank), "AWS_ENDPOINT_URL": proxies[rank].endpoint},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for rank in range(2)]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    return [json.loads(next(ln for ln in out.splitlines() if ln.startswith("RESULT "))[7:]) for out in outputs]


@pytest.fixture
def rank1_proxy(s3_server):
    """A second counting proxy in front of the same server, for rank 1's requests alone."""
    from tests._s3proxy import S3Proxy

    proxy = S3Proxy(s3_server.endpoint)
    proxy.start()
    yield proxy
    proxy.stop()


def test_two_ranks_read_the_corpus_once_and_share_rank0s_plan_or_its_error(remote, rank1_proxy, tmp_path):
    from common import storage

    loc, proxy = remote
    first, second = two_ranks(loc, tmp_path / "run", [proxy, rank1_proxy])
    # rank 1 made no store request at all: no manifest, no tokenizer, no listing
    assert rank1_proxy.log == []
    gets = [path for method, path, _ in proxy.log if method == "GET"]  # rank 0's: manifest, tokenizer, listing
    assert len(listings(proxy)) == 1 and sum(p.endswith("/manifest.json") for p in gets) == 1, proxy.log
    # the same plan on both ranks, each with its own rank, as one process finds it on its own
    proxy.log.clear()
    corpora = open_corpora([loc])
    check = corpora.check(skip_corrupt=False)
    expect = {"train": [s.uri for s in check.train], "validation": [s.uri for s in check.validation],
              "seq_len": corpora.manifest.seq_len, "vocab_size": corpora.vocab_size,
              "manifest_sha256": corpora.manifest_sha256, "global_batch": 16}
    assert first == {**expect, "rank": 0} and second == {**expect, "rank": 1}
    assert len(first["train"]) == 3
    # rank 0's resolve fails (a shard deleted after the build): it still joins the group, and both
    # ranks stop with the same error, rank 1 still without a request
    storage.remove(first["train"][1])
    proxy.log.clear()
    results = two_ranks(loc, tmp_path / "run", [proxy, rank1_proxy])
    assert [r.get("error") for r in results] == ["CorruptShardError"] * 2
    assert results[0]["message"] == results[1]["message"] and first["train"][1] in results[0]["message"]
    assert rank1_proxy.log == []
    seen = len(listings(proxy))
    proxy.log.clear()  # what one process's check lists (a missing shard is also asked for by name)
    with pytest.raises(Exception, match="missing"):
        open_corpora([loc]).check(skip_corrupt=False)
    assert seen == len(listings(proxy)) >= 1


def test_a_rank_other_than_0_resolves_without_the_corpus_but_finds_the_config_errors(remote, tmp_path):
    """Before the process group a rank other than 0 reads nothing of the corpus (rank 0 reads it,
    and its errors, such as a missing corpus, reach the others through ``share``); the errors of
    the run directory and the config it finds itself, as rank 0 does."""
    from common.config import ConfigError
    from electra.run.shared_plan import resolve_rank

    loc, proxy = remote
    resolved = resolve_rank(PretrainJob("tiny", loc + "-nowhere", str(tmp_path / "run")), rank=1, world_size=2,
                            precision="fp32")
    assert proxy.log == [] and resolved.plan is None and resolved.held is None
    assert (resolved.settled.geometry.global_batch, resolved.settled.geometry.world_size) == (16, 2)
    held = resolve_rank(PretrainJob("tiny", loc + "-nowhere", str(tmp_path / "run")), rank=0, world_size=2,
                        precision="fp32").held  # rank 0's, held for the broadcast: not raised
    assert isinstance(held, FileNotFoundError) and "-nowhere/manifest.json" in str(held)
    for rank in (0, 1):
        proxy.log.clear()
        with pytest.raises(ConfigError, match="cannot be split over 3 ranks"):
            resolve_rank(PretrainJob("tiny", loc, str(tmp_path / "run")), rank=rank, world_size=3, precision="fp32")
        with pytest.raises(ConfigError, match="unknown key 'max_step'"):
            resolve_rank(PretrainJob("tiny", loc, str(tmp_path / "run"), ["train.max_step=3"]), rank=rank,
                         world_size=2, precision="fp32")
        assert proxy.log == []  # found before the corpus, on either rank
