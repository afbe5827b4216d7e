"""An append on object storage: a corpus on the S3 API server (moto) grows by a generation whose
copy of an earlier document is dropped, the index read from the store, the first generation's
shard objects unchanged (their bytes and ETags)."""
from __future__ import annotations

import json
import random

import pytest

from common import storage
from pipelines import schema
from pipelines.corpus_job import CorpusJob
from pipelines.orchestration.runner import CorpusBuild
from synthetic import prose
from tests.flows._bucket_corpus import CFG

pytestmark = pytest.mark.slow


def _upload(bucket: str, folder: str, texts: list[str]) -> str:
    lines = "".join(json.dumps({"text": t}) + "\n" for t in texts)
    storage.write_bytes(f"{bucket}/{folder}/docs.jsonl", lines.encode())
    return f"{bucket}/{folder}"


def test_an_append_on_s3(s3_server, ray_local):
    import fsspec

    rng = random.Random(2)
    first = [prose.document(rng, paragraphs=(6, 8)) for _ in range(30)]
    more = [prose.document(rng, paragraphs=(6, 8)) for _ in range(15)]
    bucket = s3_server.bucket("append")
    out = f"{bucket}/corpus"
    gen0 = CorpusBuild(CorpusJob.load(sources=[_upload(bucket, "a", first)], out=out, config=CFG)).run()
    fs = fsspec.filesystem("s3", use_listings_cache=False)
    etags = {s.path: fs.info(f"{out}/{s.path}")["ETag"] for s in gen0.shards}
    got = CorpusBuild(CorpusJob.load(sources=[_upload(bucket, "b", more + [first[4]])], out=out,
                                     append=True)).run()
    assert len(got.generations) == 2 and got.generations[0] == gen0.generations[0]
    assert {s.path: fs.info(f"{out}/{s.path}")["ETag"] for s in gen0.shards} == etags
    assert got.stats["exact_dedup"]["earlier_generations"]["matches"] == 1
    assert got.stats["exact_dedup"]["earlier_generations"]["index_bytes_read"] > 0
    assert schema.Manifest.load(out).generations == got.generations
    assert storage.exists(f"{out}/{got.generations[1].index}/_index.json")
