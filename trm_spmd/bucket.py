"""How the Cloud Storage clients fail, and what keeps that to one line per run.

trm_spmd reaches a gs:// bucket through three clients: gcsfs (the run's files, orbax's
directories, the analysis), google-cloud-storage (the workdir lease, TensorBoard's event
file) and tensorstore (orbax's arrays). Each retries a failing request on its own (gcsfs
about 30 s, google-cloud-storage up to 120 s, tensorstore up to 15 min) and then raises in its
own way; `unreachable` recognises all of them, so that fs turns any into one line naming the
bucket.
"""

import errno
import logging
import os

# gcsfs (2026.10) defaults to an experimental filesystem for zonal and hierarchical-namespace
# buckets that first asks Storage Control (gRPC) for every bucket's layout, and asks again on
# every call when that is refused (a service account with object roles only), logging a warning
# each time. A run's buckets are flat: the plain filesystem, which the tests run against a Cloud
# Storage server, is used unless the user chose otherwise. Read when gcsfs is imported.
os.environ.setdefault('GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT', 'false')

# A request that failed after the client's retries, as each client says so: a connection
# refused, reset or timed out (aiohttp under gcsfs, requests under google-cloud-storage),
# google-api-core's retry deadline, a 5xx or 429 reply, tensorstore's retries spent.
_ERRNOS = {errno.ECONNREFUSED, errno.ECONNRESET, errno.ECONNABORTED, errno.ETIMEDOUT, errno.EHOSTUNREACH,
           errno.ENETUNREACH, errno.EPIPE}
_TYPES = {'ClientConnectorError', 'ClientOSError', 'ServerDisconnectedError', 'ClientPayloadError',
          'ConnectionError', 'RetryError', 'TransportError', 'ServiceUnavailable', 'GatewayTimeout', 'BadGateway',
          'InternalServerError', 'TooManyRequests', 'FSTimeoutError'}
_HTTP_CODES = {429, 500, 502, 503, 504}
_STATUSES = ('UNAVAILABLE:', 'DEADLINE_EXCEEDED:', 'ABORTED: All ')   # tensorstore's


def name(path):
    """'gs://B/a/b' -> 'gs://B'."""
    scheme, _, rest = str(path).partition('://')
    return f'{scheme}://{rest.split("/", 1)[0]}'


def unreachable(error):
    """Whether `error`, or an error it was raised from, says the storage could not be reached."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if (isinstance(error, (ConnectionError, TimeoutError)) or type(error).__name__ in _TYPES
                or (isinstance(error, OSError) and error.errno in _ERRNOS)
                or (type(error).__name__ == 'HttpError' and getattr(error, 'code', None) in _HTTP_CODES)
                or str(error).startswith(_STATUSES)):
            return True
        error = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    return False


def first_line(error):
    lines = str(error).strip().splitlines()
    return f'{type(error).__name__}: {lines[0][:200]}' if lines else type(error).__name__


class _RaisedAnyway(logging.Filter):
    """gcsfs logs each request it gives up on, traceback and all, then raises the same error to
    its caller; fsspec's read-ahead (gcsfs's default for files it opens, orbax's reads among them)
    logs each failed read at ERROR, traceback and all, then hands the same error to the read that
    needs the data. That caller turns it into one line (fs, the checkpointer): the record adds
    nothing but a traceback."""

    def filter(self, record):
        if record.name == 'gcsfs':
            return not (record.funcName == 'retry_request' and record.exc_info)
        return record.levelno < logging.ERROR


for _logger in ('gcsfs', 'fsspec.prefetcher'):
    logging.getLogger(_logger).addFilter(_RaisedAnyway())
