"""The bytes are the bytes: streams that resume mid-object, writes checked against what the store
holds, a HEAD that lies, ranged reads against plain slicing, local file modes.

S3 cases run against moto through the fault-injecting proxy (tests/_s3proxy.py), with the client
libraries' own retries off so that each fault reaches the layer under test.
"""
from __future__ import annotations

import logging
import os
import random
import re

import pytest

from common import retry, storage
from common.storage import StorageError, StoreUnavailableError
from tests._s3proxy import one_request_per_attempt, s3_proxy  # noqa: F401  (fixtures)

BIG = random.Random(11).randbytes(300_000)


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "common.storage" and r.levelno == logging.WARNING]


@pytest.fixture
def bucket(s3_server, one_request_per_attempt):
    return s3_server.bucket("integ")


def _read_all_the_ways(f, proxy_event) -> bytes:
    """Reads of every kind (read, read1, readinto, seeks back and forth) that add up to the object;
    ``proxy_event()`` runs once, after the first 100 KB."""
    out = bytearray()
    while len(out) < 100_000:
        out += f.read(7_000)
    proxy_event()
    assert f.tell() == len(out)
    f.seek(50_000)
    assert f.read(10_000) == BIG[50_000:60_000]  # backwards, then forwards again
    f.seek(len(out))
    out += f.read1(30_000)
    buf = bytearray(20_000)
    n = f.readinto(buf)
    out += buf[:n]
    out += f.read()
    assert f.read() == b"" and f.tell() == len(BIG)
    return bytes(out)


# ------------------------------------------------------------------------------ streams
def test_a_stream_resumes_through_a_503_window(bucket, one_request_per_attempt, caplog):
    proxy = one_request_per_attempt
    uri = f"{bucket}/big.bin"
    storage.write_bytes(uri, BIG)
    caplog.set_level(logging.WARNING, logger="common.storage")
    with storage.open_input(uri, block_size=64 * 1024) as f:
        got = _read_all_the_ways(f, lambda: proxy.slowdown(seconds=2))
    assert got == BIG
    refused = proxy.counts["slowdown"]
    assert refused >= 1 and len(_warnings(caplog)) == refused
    assert all(f" {uri}: 503 " in line for line in _warnings(caplog))


def test_a_stream_resumes_after_connections_cut_mid_body(bucket, one_request_per_attempt, caplog):
    proxy = one_request_per_attempt
    uri = f"{bucket}/big.bin"
    storage.write_bytes(uri, BIG)
    caplog.set_level(logging.WARNING, logger="common.storage")
    with storage.open_input(uri, block_size=64 * 1024) as f:
        got = _read_all_the_ways(f, lambda: proxy.cut(r"/big\.bin$", after=1000, times=3))
    assert got == BIG
    assert proxy.counts["cut"] == 3 and len(_warnings(caplog)) == 3
    assert all("ClientPayloadError" in line for line in _warnings(caplog))


def test_a_stream_refuses_an_object_replaced_under_it(bucket, one_request_per_attempt):
    proxy = one_request_per_attempt
    uri = f"{bucket}/big.bin"
    other = bytes(reversed(BIG))  # same size, other bytes
    for fault in ("none", "cut"):
        storage.write_bytes(uri, BIG)
        with storage.open_input(uri, block_size=64 * 1024) as f:
            assert f.read(1000) == BIG[:1000]
            storage.write_bytes(uri, other)
            if fault == "cut":  # the reopen after the cut finds another ETag
                proxy.cut(r"/big\.bin$", after=10, times=1)
            f.seek(200_000)
            with pytest.raises(StorageError, match=rf"^{re.escape(uri)}: changed while being read"):
                f.read(1000)


# ------------------------------------------------------------------------------ writes
def test_a_truncated_put_is_written_again(bucket, one_request_per_attempt, caplog):
    proxy = one_request_per_attempt
    caplog.set_level(logging.WARNING, logger="common.storage")
    uri = f"{bucket}/k.bin"
    proxy.truncate_puts(r"/k\.bin$", keep=3, times=1)
    storage.write_bytes(uri, b"0123456789")
    assert storage.read_bytes(uri) == b"0123456789"
    assert proxy.counts["truncate"] == 1
    assert [re.sub(r"[\d.]+ s$", "", w) for w in _warnings(caplog)] == [
        f"write_bytes {uri}: wrote 10 bytes but the store holds 3 (attempt 1); retrying in "]


class _Ticks:
    """The retry layer's clock (``retry.time``): each reading is 0.3 s after the last, sleeps
    take none, so the attempts a budget allows do not depend on how busy the machine is."""

    def __init__(self):
        self.now = -0.3

    def monotonic(self) -> float:
        self.now += 0.3
        return self.now

    def sleep(self, seconds: float) -> None:
        pass


def test_a_store_that_keeps_truncating_is_an_error(bucket, one_request_per_attempt, monkeypatch):
    proxy = one_request_per_attempt
    monkeypatch.setenv(retry.ENV, "1")
    monkeypatch.setattr(retry, "time", _Ticks())  # readings at 0, 0.3, 0.6, 0.9, 1.2: 4 attempts
    uri = f"{bucket}/k.bin"
    proxy.truncate_puts(r"/k\.bin$", keep=3)
    with pytest.raises(StorageError) as err:
        storage.write_bytes(uri, b"0123456789")
    assert re.fullmatch(rf"{re.escape(uri)}: wrote 10 bytes but the store holds 3 \(\d+ attempts in \d+ s\)",
                        str(err.value)), str(err.value)
    assert not isinstance(err.value, StoreUnavailableError) and proxy.counts["truncate"] == 4
    assert str(err.value).endswith("(4 attempts in 1 s)")


def test_local_files_get_their_mode_from_the_umask(tmp_path):
    for umask, mode in ((0o022, 0o644), (0o027, 0o640), (0o002, 0o664)):
        old = os.umask(umask)
        try:
            target = tmp_path / f"f{umask:o}.bin"
            storage.write_bytes(str(target), b"x")
            reference = tmp_path / f"ref{umask:o}"
            reference.write_bytes(b"x")  # what open() makes under the same umask
        finally:
            os.umask(old)
        assert target.stat().st_mode & 0o777 == reference.stat().st_mode & 0o777 == mode


# ------------------------------------------------------------------------------ a HEAD that lies
def test_a_head_with_a_wrong_content_length(bucket, one_request_per_attempt, monkeypatch):
    """``size``/``info`` report what the HEAD says (they are the HEAD); listings carry their own
    sizes; every read delivers all the bytes or fails naming the object."""
    proxy = one_request_per_attempt
    uri = f"{bucket}/lie.bin"
    data = BIG[:10_000]
    storage.write_bytes(uri, data)
    monkeypatch.setenv(retry.ENV, "1")
    for told in (0, 5_000, 20_000):
        proxy.clear()
        proxy.misreport_length(r"/lie\.bin$", told)
        assert storage.size(uri) == told and storage.info(uri)["size"] == told
        assert storage.du(bucket) == 10_000 and storage.find(bucket) == ["lie.bin"]
        assert storage.read_bytes(uri) == data  # one GET, which carries its own length
        assert storage.read_range(uri, 100, 9_000) == data[100:9_000]  # no HEAD involved
        with pytest.raises(StorageError, match=rf"^{re.escape(uri)}: the store reported {told} bytes"):
            with storage.open_input(uri, block_size=4096) as f:
                while f.read(3000):
                    pass
        if told > 10_000:  # a short range answer checked against the (lying) size
            with pytest.raises(StorageError, match=rf"^{re.escape(uri)}: read 1000 bytes of \[9000, 11000\) "
                                                   r"but the store holds 2000 there \(\d+ attempts"):
                storage.read_range(uri, 9_000, 11_000)


# ------------------------------------------------------------------------------ ranges
@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "root")
    return request.getfixturevalue("bucket") + "/root"


def test_ranges_read_as_slicing_does(root):
    objects = {f"{root}/a.bin": BIG[:5_000], f"{root}/b.bin": BIG[5_000:5_001], f"{root}/c.bin": b""}
    for uri, data in objects.items():
        storage.write_bytes(uri, data)
    rng = random.Random(3)
    wanted = [(uri, s, e) for uri, data in objects.items()
              for s, e in [(0, len(data)), (0, 0), (len(data), len(data) + 5), (len(data) + 10, len(data) + 20)]
              + [tuple(sorted((rng.randrange(6_000), rng.randrange(6_000)))) for _ in range(12)]]
    got = storage.read_ranges(wanted)
    assert got == [objects[uri][s:e] for uri, s, e in wanted]
    assert storage.read_range(f"{root}/a.bin", 4_990, 6_000) == BIG[4_990:5_000]
    assert storage.read_ranges([]) == []
    with pytest.raises(ValueError, match=r"a\.bin: byte range \[5, 2\) is not 0 <= start <= end"):
        storage.read_range(f"{root}/a.bin", 5, 2)
    with pytest.raises(StorageError, match=rf"^{re.escape(root)}/none\.bin: no such file$"):
        storage.read_ranges([(f"{root}/a.bin", 0, 10), (f"{root}/none.bin", 0, 10)])


def test_concurrent_ranges_ride_out_a_503_window(bucket, one_request_per_attempt):
    proxy = one_request_per_attempt
    uris = [f"{bucket}/r{i}.bin" for i in range(4)]
    for i, uri in enumerate(uris):
        storage.write_bytes(uri, BIG[i * 1000:(i + 1) * 5000])
    wanted = [(uri, s, s + 700) for uri in uris for s in (0, 900, 3000)]
    proxy.slowdown(requests=5)
    assert storage.read_ranges(wanted) == [BIG[i * 1000:(i + 1) * 5000][s:e]
                                           for i, uri in enumerate(uris) for _, s, e in wanted if _ == uri]
    assert proxy.counts["slowdown"] == 5
