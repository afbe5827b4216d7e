"""The raw files of a generated corpus in a bucket of the session's S3 server, its config beside
them, and a local build of the same files: the reference the S3 builds of the flow tests compare with."""
from __future__ import annotations

from pathlib import Path

from common import storage
from pipelines.config import CorpusConfig
from pipelines.orchestration.runner import CorpusBuild
from pipelines.corpus_job import CorpusJob
from synthetic import prose

CFG = {"tokenizer": {"vocab_size": 900, "min_frequency": 1}, "shard": {"min_shards_per_split": 3},
       "pack": {"seq_len": 64, "validation_fraction": 0.1, "seed": 7}}


def bucket_corpus(tmp: Path, s3_server, prefix: str) -> dict:
    """``{tmp, raw, bucket, local, names}``: ``bucket``/raw/ holds the files of ``raw`` (named
    ``names``), ``bucket``/corpus.json the config, ``local`` their build on this machine."""
    raw = prose.write_corpus(tmp / "raw", num_docs=200, seed=11)
    bucket = s3_server.bucket(prefix)
    names = sorted(storage.find(str(raw)))
    for rel in names:
        storage.write_bytes(f"{bucket}/raw/{rel}", (raw / rel).read_bytes())
    storage.write_json(f"{bucket}/corpus.json", CFG)
    local = tmp / "local"
    CorpusBuild(CorpusJob([str(raw)], str(local), CorpusConfig.from_dict(CFG))).run()
    return {"tmp": tmp, "raw": raw, "bucket": bucket, "local": str(local), "names": names}
