"""How a streamed file's reads are retried (guarantee 4 of
:mod:`~h5feed.producer.files.remote_files`), at two levels within one budget:

1. Each ranged GET (:func:`each_request`) that fails (a body cut short or of the wrong
   length, a connection reset, a request that failed all its botocore attempts) is made
   again, at most :data:`~h5feed.common.storage_config.READ_ATTEMPTS` times. One read may
   need several GETs (a small cache, HDF5's scattered metadata): each is retried on its own,
   and the pieces already fetched are kept, so a read meets a fault in one of its GETs
   without starting over.
2. A read that still fails (:func:`retried`: h5py's, or a heap read's) is tried again from
   the same position, at most ``READ_ATTEMPTS`` times.

No attempt of a read, at either level, starts later than
:data:`~h5feed.common.storage_config.READ_BUDGET_S` after the read's first: the deadline is
the read's (a thread-local), shared by the GETs made for it. A GET made for no read (the
read-ahead's) has a budget of its own. So one read ends within ``READ_BUDGET_S`` plus one
request's bound. Backoff is exponential with jitter. A missing, unreadable or replaced object
is not retried. Each retry, and each refusal of a replaced object, is counted
(:mod:`~h5feed.producer.files.request_counts`)."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

from h5feed.common import storage_config
from h5feed.producer.files import request_counts
from h5feed.producer.files.range_cache import RangeCache

__all__ = ["ShortBody", "each_request", "expired", "range_reader", "retried"]

#: Failures a retry cannot mend: the object is gone, not readable, or replaced (412).
_PERMANENT: tuple[type[BaseException], ...] = (
    FileNotFoundError, PermissionError, ValueError, TypeError, NotImplementedError,
)  # fmt: skip
#: The first backoff, and the longest, of h5feed's own retries of a read.
_BACKOFF_S = 0.2
_MAX_BACKOFF_S = 5.0
#: ``deadline``: when the read this thread is making stops starting attempts (level 2 sets
#: it, the GETs made for the read honour it).
_read = threading.local()
#: Set on a refusal (a replaced object) once it is counted.
_COUNTED = "_h5feed_refusal_counted"


class ShortBody(ConnectionError):
    """A ranged GET's body held other than the bytes asked for (a body cut short)."""


def retried(call: Callable[[], Any], again: Callable[[], None]) -> Any:
    """``call()``, retried as the module docstring says; ``again()`` before each retry.
    Inside another call's retries (a GET made for a read), the outer call's deadline holds."""
    outer: float | None = getattr(_read, "deadline", None)
    deadline = outer if outer is not None else time.monotonic() + storage_config.READ_BUDGET_S
    _read.deadline = deadline
    try:
        return _attempts(call, again, deadline)
    finally:
        _read.deadline = outer


def _attempts(call: Callable[[], Any], again: Callable[[], None], deadline: float) -> Any:
    for attempt in range(storage_config.READ_ATTEMPTS):
        try:
            return call()
        except _PERMANENT:
            raise
        except Exception as exc:
            if expired(exc):
                if not getattr(exc, _COUNTED, False):  # once, by the GET, not again by its read
                    request_counts.count_refused()
                    setattr(exc, _COUNTED, True)
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


def each_request(fetch: Callable[[int, int], bytes], size: int) -> Callable[[int, int], bytes]:
    """``fetch`` (one ranged GET of the bytes ``[start, end)`` of an object of ``size``
    bytes), each call retried as level 1 of the module docstring says; a body of another
    length than the range's is a :class:`ShortBody`, retried."""

    def fetch_retried(start: int, end: int) -> bytes:
        wanted = max(0, min(end, size) - start)

        def attempt() -> bytes:
            data = fetch(start, end)
            if len(data) != wanted:
                raise ShortBody(f"bytes {start}..{end}: {len(data)} of {wanted} received")
            return data

        data: bytes = retried(attempt, lambda: None)
        return data

    return fetch_retried


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
