"""How a streamed file's reads are retried (guarantee 4 of
:mod:`~h5feed.producer.files.remote_files`): a read that fails (a body cut short, a
connection reset, a request that failed all its botocore attempts) is tried again from the
same position, at most :data:`~h5feed.common.storage_config.READ_ATTEMPTS` times within
:data:`~h5feed.common.storage_config.READ_BUDGET_S`, with exponential backoff and jitter; a
missing, unreadable or replaced object is not retried. Each retry, and each refusal of a
replaced object, is counted (:mod:`~h5feed.producer.files.request_counts`)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from h5feed.common import storage_config
from h5feed.producer.files import request_counts
from h5feed.producer.files.range_cache import RangeCache

__all__ = ["expired", "range_reader", "retried"]

#: Failures a retry cannot mend: the object is gone, not readable, or replaced (412).
_PERMANENT: tuple[type[BaseException], ...] = (
    FileNotFoundError, PermissionError, ValueError, TypeError, NotImplementedError,
)  # fmt: skip
#: The first backoff, and the longest, of h5feed's own retries of a read.
_BACKOFF_S = 0.2
_MAX_BACKOFF_S = 5.0


def retried(call: Callable[[], Any], again: Callable[[], None]) -> Any:
    """``call()``, retried as the module docstring says; ``again()`` before each retry."""
    deadline = time.monotonic() + storage_config.READ_BUDGET_S
    for attempt in range(storage_config.READ_ATTEMPTS):
        try:
            return call()
        except _PERMANENT:
            raise
        except Exception as exc:
            if expired(exc):
                request_counts.count_refused()
                raise
            if attempt + 1 == storage_config.READ_ATTEMPTS:
                raise
            if time.monotonic() >= deadline:
                raise
            request_counts.count_retry()
            backoff = min(_MAX_BACKOFF_S, _BACKOFF_S * 2**attempt)
            time.sleep(backoff * random.uniform(0.5, 1.0))  # jitter: workers spread out
            again()
    raise AssertionError("unreachable: the last attempt returns or raises")


def range_reader(cache: RangeCache, url: str) -> Callable[[int, int], bytes]:
    """The object's bytes ``[start, stop)`` from ``cache`` (fetching what it misses), retried
    as h5py's reads are (guarantee 4); a read that still fails is an OSError naming ``url``."""

    def read(start: int, stop: int) -> bytes:
        try:
            data: bytes = retried(lambda: cache.read(start, stop), lambda: None)
        except OSError:
            raise
        except Exception as exc:  # a client's own error type: the reader's callers take OSError
            raise OSError(f"{url}: cannot read bytes {start}..{stop}: {exc}") from exc
        return data

    return read


def expired(exc: BaseException) -> bool:
    """fsspec's FileExpired: the object's ETag changed under an open file (412)."""
    return type(exc).__name__ == "FileExpired"
