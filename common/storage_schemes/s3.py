"""Amazon S3 and S3-compatible servers (MinIO, Ceph, an on-premises gateway) through s3fs.

s3fs, hence aiobotocore, botocore and aiohttp, is a dependency. How its errors look (found by
experiment) is in ``common.retry``'s docstring: S3 error codes come with the botocore
``ClientError`` in the cause chain; connection failures come as botocore's and aiohttp's own
types. ``AWS_ENDPOINT_URL`` points every client library (botocore, s3fs, pyarrow) at a
non-AWS server, so an on-premises S3 needs no flag. Listing caches are off: s3fs caches
directory listings per process, and a driver with a stale cache would not see a part a worker
just wrote. A HEAD's size is checked by a one-byte read past the end of every stream read
to its end (a proxy that cuts bodies and lies in Content-Length is caught).
"""
import aiohttp
from botocore import exceptions as bx
from botocore.parsers import ResponseParserError

from common.storage_schemes import Scheme

SCHEME = Scheme(
    names=("s3", "s3a"),
    open_options={"use_listings_cache": False},
    env=("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
         "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_MAX_ATTEMPTS", "AWS_RETRY_MODE"),
    credentials=("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"),
    endpoint_env=("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
    transient_codes=frozenset({"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout",
                               "RequestTimeoutException", "InternalError", "ServiceUnavailable",
                               "TooManyRequestsException", "RequestLimitExceeded", "BandwidthLimitExceeded",
                               "OperationAborted"}),
    # botocore's ConnectionError: EndpointConnectionError, ConnectTimeoutError; its HTTPClientError:
    # ConnectionClosedError, ReadTimeoutError; ResponseParserError: throttles answering broken XML.
    transient_types=(bx.ConnectionError, bx.HTTPClientError, bx.IncompleteReadError, bx.ResponseStreamingError,
                     ResponseParserError, aiohttp.ClientPayloadError, aiohttp.ClientConnectionError,
                     aiohttp.ServerTimeoutError),
    denied_codes=frozenset({"AccessDenied", "AllAccessDisabled", "InvalidAccessKeyId", "SignatureDoesNotMatch",
                            "ExpiredToken", "InvalidToken", "AccountProblem", "403"}),
    probe_end=True,
)
