"""Storage by URI: the same calls on a local disk and on a real S3 API server (moto, loopback)."""
from __future__ import annotations

import functools
import http.server
import os
import threading

import pytest

from common import storage
from common.storage import StorageError


@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path):
    """An empty folder: a local path, or a prefix in a fresh bucket."""
    if request.param == "local":
        return str(tmp_path / "root")
    return request.getfixturevalue("s3_server").bucket("st") + "/root"


# ------------------------------------------------------------------------------ locations
def test_protocols_and_joins():
    assert storage.protocol("/data/x") == storage.protocol("rel/x") == "file"
    assert storage.protocol("S3://b/k") == "s3" and storage.protocol("https://h/x") == "https"
    assert storage.is_local("file:///data") and not storage.is_local("gs://b")
    assert storage.join("/data", "a", "/b/", "", "c.txt") == os.path.join("/data", "a", "b", "c.txt")
    assert storage.join("s3://bucket/", "/corpus/", "manifest.json") == "s3://bucket/corpus/manifest.json"
    assert storage.join("s3://bucket/x") == "s3://bucket/x"
    assert storage.local_path("file:///data/x") == "/data/x" and storage.local_path("/data/x") == "/data/x"
    with pytest.raises(StorageError, match="s3://b/k: not a local path"):
        storage.local_path("s3://b/k")
    with pytest.raises(StorageError, match="nosuchproto://x/y: cannot open"):
        storage.url_to_fs("nosuchproto://x/y")


# ------------------------------------------------------------------------------ local commit
def test_atomic_local_write_leaves_no_temp_files(tmp_path):
    target = tmp_path / "sub" / "deeper" / "f.bin"
    storage.write_bytes(str(target), b"one")
    storage.write_bytes(f"file://{target}", b"two")
    assert target.read_bytes() == b"two"
    assert [p.name for p in target.parent.iterdir()] == ["f.bin"]


def test_a_failed_local_write_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "f.bin"
    storage.write_bytes(str(target), b"old")

    def crash(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        storage.write_bytes(str(target), b"new")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]  # the temporary file is gone


# ------------------------------------------------------------------------------ both stores
def test_write_read_list_and_remove(root):
    storage.write_bytes(storage.join(root, "a.bin"), b"alpha")
    storage.write_text(storage.join(root, "sub", "b.txt"), "béta")
    storage.write_json(storage.join(root, "sub", "deeper", "c.json"), {"k": [1, 2]})
    assert storage.read_bytes(storage.join(root, "a.bin")) == b"alpha"
    assert storage.read_text(storage.join(root, "sub", "b.txt")) == "béta"
    assert storage.read_json(storage.join(root, "sub", "deeper", "c.json")) == {"k": [1, 2]}
    assert storage.find(root) == ["a.bin", "sub/b.txt", "sub/deeper/c.json"]
    assert storage.listdir(root) == ["a.bin", "sub"]
    assert storage.listdir(storage.join(root, "sub")) == ["b.txt", "deeper"]
    assert storage.exists(storage.join(root, "a.bin"))
    assert storage.size(storage.join(root, "a.bin")) == 5 and storage.size(storage.join(root, "nope")) is None
    assert storage.info(storage.join(root, "a.bin"))["size"] == 5 and storage.info(storage.join(root, "nope")) is None
    assert storage.du(root) == 5 + len("béta".encode()) + len(storage.read_bytes(storage.join(root, "sub/deeper/c.json")))
    with storage.open_input(storage.join(root, "a.bin"), block_size=2) as f:
        assert f.read(2) == b"al" and f.read() == b"pha"
    storage.write_bytes(storage.join(root, "a.bin"), b"replaced")
    assert storage.read_bytes(storage.join(root, "a.bin")) == b"replaced"

    storage.remove(storage.join(root, "a.bin"))
    storage.remove(storage.join(root, "a.bin"))  # a missing location is fine
    assert storage.find(root) == ["sub/b.txt", "sub/deeper/c.json"]
    storage.remove(storage.join(root, "sub"), recursive=True)
    assert storage.find(root) == [] and storage.listdir(root) == [] and storage.du(root) == 0
    assert storage.find(storage.join(root, "never")) == [] and storage.listdir(storage.join(root, "never")) == []


def test_remove_files_deletes_only_the_named_ones(root):
    names = [f"d{i % 3}/f{i}.bin" for i in range(7)]
    for n in names:
        storage.write_bytes(storage.join(root, n), n.encode())
    asked = [storage.join(root, n) for n in names[:5]] + [storage.join(root, "d0", "never.bin")]
    assert storage.remove_files(iter(asked), per_request=2) == 6  # three requests, one name missing
    assert storage.find(root) == sorted(names[5:])
    assert storage.remove_files([]) == 0


def test_missing_files_are_named(root):
    missing = storage.join(root, "no", "such.bin")
    for call in (storage.read_bytes, storage.read_text):
        with pytest.raises(StorageError, match=f"^{missing}: no such file"):
            call(missing)
    with pytest.raises(StorageError, match=f"^{missing}: no such file"):
        with storage.open_input(missing):
            pass
    assert not storage.exists(missing)


def test_invalid_json_names_file_and_line(root):
    uri = storage.join(root, "bad.json")
    storage.write_text(uri, '{\n  "a": 1,\n  oops\n}\n')
    with pytest.raises(StorageError, match=f"^{uri}:3: invalid JSON"):
        storage.read_json(uri)


# ------------------------------------------------------------------------------ S3 specifics
def test_listings_see_objects_written_by_another_client(s3_server):
    """No listing cache: a part a worker just wrote is visible to the driver's next listing."""
    import boto3

    bucket = s3_server.bucket("cache")
    storage.write_bytes(f"{bucket}/parts/a", b"1")
    assert storage.listdir(f"{bucket}/parts") == ["a"]
    boto3.client("s3").put_object(Bucket=bucket.removeprefix("s3://"), Key="parts/b", Body=b"2")
    assert storage.listdir(f"{bucket}/parts") == ["a", "b"] and storage.find(f"{bucket}/parts") == ["a", "b"]


def test_check_output_names_a_missing_bucket(s3_server, tmp_path):
    storage.check_output(s3_server.bucket("ok") + "/corpus")  # an existing bucket: fine
    with pytest.raises(StorageError, match=r"s3://no-such-bucket-x/corpus: bucket 'no-such-bucket-x' does not exist"
                                           f" at {s3_server.endpoint}"):
        storage.check_output("s3://no-such-bucket-x/corpus")
    # Every call that can tell a missing bucket from a missing key says so, at once (no retries);
    # exists() answers the question and remove() has nothing to remove.
    missing = rf"'no-such-bucket-x' does not exist at {s3_server.endpoint}; create it or correct the URI"
    for call in (lambda u: storage.write_bytes(u, b"x"), storage.read_bytes, storage.listdir, storage.find):
        with pytest.raises(StorageError, match=rf"^s3://no-such-bucket-x/k: bucket {missing} \(or AWS_ENDPOINT_URL\)$"):
            call("s3://no-such-bucket-x/k")
    assert not storage.exists("s3://no-such-bucket-x/k")
    storage.remove("s3://no-such-bucket-x/k")
    storage.check_output(str(tmp_path / "new" / "folder"))  # a local folder is made when written
    (tmp_path / "file").write_text("x")
    with pytest.raises(StorageError, match="exists and is not a folder"):
        storage.check_output(str(tmp_path / "file"))


def test_https_is_read_only(tmp_path):
    for call in (lambda u: storage.write_bytes(u, b"x"), storage.check_output):
        with pytest.raises(StorageError, match=r"https://example\.org/out/x: https:// is read-only"):
            call("https://example.org/out/x")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def test_reading_over_http(tmp_path):
    """A corpus or tokenizer published on a web server reads like any other location."""
    pytest.importorskip("aiohttp")
    (tmp_path / "vocab.txt").write_bytes(b"[PAD]\n[UNK]\n")
    handler = functools.partial(_QuietHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        assert storage.read_bytes(f"{base}/vocab.txt") == b"[PAD]\n[UNK]\n"
        with pytest.raises(StorageError, match=f"{base}/missing.txt: no such file"):
            storage.read_bytes(f"{base}/missing.txt")
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
