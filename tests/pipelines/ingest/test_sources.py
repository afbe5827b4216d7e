"""Sources: resolving files, globs and URIs, the fingerprint, and ids that do not depend on where
the corpus is mounted (a local folder, another folder, a bucket)."""
from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from common import storage
from common.hashing import stable_uid
from pipelines.ingest import SourceError, ingest_dataset, plan_reads, read_documents, resolve_sources
from tests.pipelines.ingest.test_ingest import CFG, COMPRESS, jsonl_payload, kept, make_docs, rows, text_payload


def test_resolve_missing_and_empty_sources(tmp_path):
    with pytest.raises(SourceError, match="nowhere.txt"):
        resolve_sources([str(tmp_path / "nowhere.txt")])
    with pytest.raises(SourceError, match=r"\*\.jsonl"):
        resolve_sources([str(tmp_path / "*.jsonl")])
    (tmp_path / "empty_dir").mkdir()
    (tmp_path / "empty_dir" / ".hidden").write_text("x")
    with pytest.raises(SourceError, match="empty_dir"):
        resolve_sources([str(tmp_path / "empty_dir")])
    with pytest.raises(FileNotFoundError):  # SourceError is a FileNotFoundError
        resolve_sources([])
    with pytest.raises(SourceError, match="nosuchproto://x"):
        resolve_sources(["nosuchproto://x/y.txt"])


def test_resolve_directories_globs_and_dedup(tmp_path):
    root = tmp_path / "corpus"
    for rel in ("b.txt", "a.jsonl", "sub/c.txt.gz", "sub/deeper/d.parquet", ".hidden.txt",
                ".git/config", "sub/.cache/e.txt"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x")
    expected = sorted(str(root / p) for p in ("a.jsonl", "b.txt", "sub/c.txt.gz", "sub/deeper/d.parquet"))
    everything = resolve_sources([str(root)])
    assert everything.files == tuple(expected)
    # Names start with the source folder's own name.
    assert list(everything.names) == ["corpus/a.jsonl", "corpus/b.txt", "corpus/sub/c.txt.gz",
                                      "corpus/sub/deeper/d.parquet"]
    # A glob and a single file name their files from the same folder, so they agree with it.
    one = resolve_sources([str(root / "*.txt"), str(root / "b.txt")])
    assert one.files == (str(root / "b.txt"),) and one.names == ("corpus/b.txt",)
    sub = resolve_sources([str(root / "sub"), str(root / "sub/c.txt.gz")])
    assert sub.files == tuple(expected[2:]) and sub.names == ("sub/c.txt.gz", "sub/deeper/d.parquet")
    assert resolve_sources([f"file://{root}/a.jsonl"]).names == ("corpus/a.jsonl",)
    assert resolve_sources(str(root)) == everything  # one source as a plain string


def test_names_do_not_change_when_inputs_are_added(tmp_path):
    (tmp_path / "books").mkdir()
    (tmp_path / "books" / "a.txt").write_text("x")
    before = resolve_sources([str(tmp_path / "books")])
    (tmp_path / "books" / "z" / "b.txt").parent.mkdir()
    (tmp_path / "books" / "z" / "b.txt").write_text("y")
    (tmp_path / "web").mkdir()
    (tmp_path / "web" / "c.txt").write_text("z")
    after = resolve_sources([str(tmp_path / "books"), str(tmp_path / "web")])
    assert before.name(str(tmp_path / "books" / "a.txt")) == after.name(str(tmp_path / "books" / "a.txt")) \
        == "books/a.txt"
    assert after.name(str(tmp_path / "web" / "c.txt")) == "web/c.txt"


def test_two_files_with_one_name_are_an_error(tmp_path):
    for side in ("x", "y"):
        (tmp_path / side / "data").mkdir(parents=True)
        (tmp_path / side / "data" / "a.txt").write_text(side)
    with pytest.raises(SourceError, match=r"would both be named 'data/a.txt'"):
        resolve_sources([str(tmp_path / "x" / "data"), str(tmp_path / "y" / "data")])


def test_fingerprint_follows_content_not_location(tmp_path):
    """Relative names, sizes and modification times decide it; the mount point does not."""
    for rel, text in (("a.txt", "one doc\n"), ("nested/b.jsonl", '{"text": "two"}\n')):
        (tmp_path / "x" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "x" / rel).write_text(text)
    shutil.copytree(tmp_path / "x", tmp_path / "elsewhere" / "x")  # copy2 keeps mtimes
    here, there = resolve_sources([str(tmp_path / "x")]), resolve_sources([str(tmp_path / "elsewhere" / "x")])
    assert here.files != there.files and here.fingerprint == there.fingerprint
    assert resolve_sources([str(tmp_path / "x")]).fingerprint == here.fingerprint
    (tmp_path / "x" / "a.txt").write_text("one longer doc\n")
    assert resolve_sources([str(tmp_path / "x")]).fingerprint != here.fingerprint
    st = os.stat(tmp_path / "elsewhere" / "x" / "a.txt")
    os.utime(tmp_path / "elsewhere" / "x" / "a.txt", (st.st_atime, st.st_mtime + 10))
    assert resolve_sources([str(tmp_path / "elsewhere" / "x")]).fingerprint != there.fingerprint


def test_memory_url_sources_and_reading():
    fs = fsspec.filesystem("memory")
    fs.pipe("/ingest-test/one.txt", b"memory doc one\n\nmemory doc two\n")
    fs.pipe("/ingest-test/nested/two.jsonl.gz", gzip.compress(b'{"text": "from jsonl"}\n'))
    try:
        sources = resolve_sources(["memory://ingest-test"])
        assert sources.files == ("memory:///ingest-test/nested/two.jsonl.gz", "memory:///ingest-test/one.txt")
        rs = [r for p in sources.files for r in rows(p, name=sources.name(p))]
        assert kept(rs) == ["from jsonl", "memory doc one", "memory doc two"]
        assert [r["id"] for r in rs] == ["ingest-test/nested/two.jsonl.gz:0", "ingest-test/one.txt:0",
                                         "ingest-test/one.txt:16"]
        with pytest.raises(SourceError, match="memory://nothing-here"):
            resolve_sources(["memory://nothing-here/*.txt"])
    finally:
        fs.rm("/ingest-test", recursive=True)



# ---------------------------------------------------------------------------------------------
# The same corpus in another place keeps its ids
# ---------------------------------------------------------------------------------------------
def _tree(root: Path) -> None:
    """A small corpus: text, compressed JSONL and Parquet, in nested folders."""
    docs = make_docs(30, seed=31)
    (root / "web" / "2024").mkdir(parents=True)
    (root / "web" / "a.txt").write_bytes(text_payload(docs[:10])[0])
    (root / "web" / "2024" / "b.jsonl.zst").write_bytes(COMPRESS["zst"](jsonl_payload(docs[10:20])[0]))
    pq.write_table(pa.table({"text": docs[20:]}), root / "web" / "2024" / "c.parquet", row_group_size=3)


def _id_uid_text(out) -> list[tuple]:
    return sorted((r["id"], r["uid"], r["text"], r["reason"]) for r in out)


def test_same_files_under_two_folders_give_the_same_ids_and_uids(tmp_path, ray_local):
    _tree(tmp_path / "mnt1")
    _tree(tmp_path / "other" / "mount" / "point")
    a = resolve_sources([str(tmp_path / "mnt1" / "web")])
    b = resolve_sources([str(tmp_path / "other" / "mount" / "point" / "web")])
    assert a.files != b.files
    first = _id_uid_text(ingest_dataset(a, CFG).take_all())
    second = _id_uid_text(ingest_dataset(b, CFG, split_bytes=200).take_all())
    assert first == second and len(first) == 30
    assert {i.rsplit(":", 1)[0] for i, *_ in first} == {"web/a.txt", "web/2024/b.jsonl.zst", "web/2024/c.parquet"}
    assert all(uid == stable_uid(i) for i, uid, *_ in first)


def test_the_same_corpus_on_s3_keeps_its_ids(tmp_path, s3_server):
    """Local and in a bucket: the same ids and uids, hence the same dedup survivors and split."""
    _tree(tmp_path / "local")
    bucket = s3_server.bucket("corpus")
    for rel in storage.find(str(tmp_path / "local")):
        storage.write_bytes(f"{bucket}/crawl/{rel}", (tmp_path / "local" / rel).read_bytes())
    local, remote = resolve_sources([str(tmp_path / "local" / "web")]), resolve_sources([f"{bucket}/crawl/web"])
    assert all(f.startswith("s3://") for f in remote.files) and remote.names[0].startswith("web/")
    assert [local.name(f) for f in local.files] == [remote.name(f) for f in remote.files]

    def read(sources):  # what the ingest tasks do, in this process
        out = []
        for t in plan_reads(sources, CFG, split_bytes=150):
            end = None if t.end < 0 else t.end
            for batch in read_documents(t.path, CFG, start=t.start, end=end, name=t.name):
                out += [{k: batch[k][i] for k in batch} for i in range(len(batch["id"]))]
        return _id_uid_text(out)

    assert read(local) == read(remote) and len(read(remote)) == 30
