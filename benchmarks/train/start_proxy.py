"""The counting store of ``benchmarks/train/start.py``: ``tests._s3proxy.S3Proxy`` with its handler
extended to count the bytes each answer carries, read as differences between two moments.

    proxy = CountingProxy(endpoint); url = proxy.start()   # point AWS_ENDPOINT_URL at url
    mark = proxy.snapshot(); ...; proxy.since(mark)        # requests by kind, bytes received

Every request is taken from the base class's log (``since`` classifies it: a GET on the bucket
is a ``LIST``, any other GET a ``GET``, a ranged one included); the answers' body bytes are
counted as they go out, all of them (``bytes``) and those of successful answers only
(``data_bytes``: an S3 read probes one byte past the end and gets an error document back).

``benchmarks.shared.counting_s3.CountingProxy`` is not the same count: it tells ranged GETs and
other kinds apart, forwards without the log, and has no successful-answer bytes and no
``snapshot``/``since``, which the start-up and epoch-read figures are read with. Hence this copy.
"""
from __future__ import annotations

from collections import Counter

from tests._s3proxy import S3Proxy, _Handler


class _CountingHandler(_Handler):
    def _reply(self, status: int, body: bytes, headers=()) -> None:
        if self.command != "HEAD":
            with self.proxy._lock:
                self.proxy.bytes_out += len(body)
                if status < 300:  # data, not an error document (an S3 read probes one byte past the end)
                    self.proxy.data_out += len(body)
        super()._reply(status, body, headers)


class CountingProxy(S3Proxy):
    """``S3Proxy`` that also counts the bytes of the answers' bodies (``bytes_out``; ``data_out``:
    those of successful answers only)."""

    def __init__(self, upstream: str):
        super().__init__(upstream)
        self.bytes_out = self.data_out = 0
        self.handler_class = _CountingHandler

    def snapshot(self) -> tuple[int, int, int]:
        with self._lock:
            return len(self.log), self.bytes_out, self.data_out

    def since(self, mark: tuple[int, int, int]) -> dict[str, int]:
        """Requests by kind and bytes received since ``mark``."""
        with self._lock:
            entries, received, data = self.log[mark[0]:], self.bytes_out - mark[1], self.data_out - mark[2]
        kinds = Counter()
        for method, path, _ in entries:
            bucket_only = path.strip("/").count("/") == 0
            kinds["LIST" if method == "GET" and bucket_only else method] += 1
        return {"GET": kinds["GET"], "HEAD": kinds["HEAD"], "LIST": kinds["LIST"], "PUT": kinds["PUT"],
                "requests": sum(kinds.values()), "bytes": received, "data_bytes": data}
