"""Plain web servers (``http://``, ``https://``), for reading only: fsspec's HTTP filesystem over
aiohttp, whose connection errors can pass. A server's index page may not list sizes, so
``storage.list_sizes`` can come back without them (ask ``info`` by name)."""
import aiohttp

from common.storage_schemes import Scheme

SCHEME = Scheme(
    names=("http", "https"),
    writable=False,
    transient_types=(aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, aiohttp.ServerTimeoutError),
)
