"""Google Cloud Storage through gcsfs (``gs://`` and ``gcs://``).

Credentials come from ``GOOGLE_APPLICATION_CREDENTIALS`` (or the machine's own identity);
listing caches are off for the reason given in ``s3``. gcsfs speaks HTTP through aiohttp, whose
connection errors can pass; its ``HttpError`` carries the status, which ``common.retry``
classifies like any other.
"""
import aiohttp

from common.storage_schemes import Scheme

SCHEME = Scheme(
    names=("gs", "gcs"),
    open_options={"use_listings_cache": False},
    env=("GOOGLE_APPLICATION_CREDENTIALS",),
    credentials=("GOOGLE_APPLICATION_CREDENTIALS",),
    transient_types=(aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, aiohttp.ServerTimeoutError),
)
