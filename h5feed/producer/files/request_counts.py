"""What a worker's reads of object storage cost, counted where they are made and handed to
the trainer with each DATA part (its ``storage``:
:class:`~h5feed.common.protocol.messages.StorageReads`).

:mod:`~h5feed.producer.files.remote_files` counts one request for each HEAD it makes (an
object's metadata, an open), one request and its body's bytes for each ranged GET
(:func:`counted`: the open file's own fetch, so a range fetched ahead by
:mod:`~h5feed.producer.files.read_ahead` counts once, on the thread that fetched it), each of
its own retries of a read, and each read refused because the object changed (HTTP 412, or an
ETag other than the one indexed). The client library's own retries of a request (botocore's)
are inside one request here: they are not seen from fsspec.

Guarantees:

1. Thread-safe: the worker's thread and its read-ahead threads add, one lock.
2. :func:`take` returns what was counted since the previous take and starts again from 0, so
   the parts' counts add up to the worker's (nothing counted twice, nothing lost between two
   takes); an HDF5 job takes once when it starts (what a previous job left, a fetch ahead
   still in flight when it ended, is not this job's trainer's) and once per DATA part.
3. Cheap, and imports nothing: a worker of local files counts nothing and never imports fsspec.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from h5feed.common.protocol.messages import StorageReads

__all__ = ["count_refused", "count_request", "count_retry", "counted", "take"]

_lock = threading.Lock()
_counts = [0, 0, 0, 0]  # requests, bytes, retries, refused (StorageReads' order)


def _add(index: int, amount: int = 1) -> None:
    with _lock:
        _counts[index] += amount


def count_request(nbytes: int = 0) -> None:
    """One request made, whose body held ``nbytes`` (0 for a HEAD)."""
    with _lock:
        _counts[0] += 1
        _counts[1] += nbytes


def count_retry() -> None:
    """One ranged GET or read retried by the worker itself."""
    _add(2)


def count_refused() -> None:
    """One read or open refused: the object changed since it was indexed or opened."""
    _add(3)


def counted(fetch: Callable[[int, int], bytes]) -> Callable[[int, int], bytes]:
    """``fetch`` (an fsspec cache's fetch of the bytes from ``start`` to ``end``: one ranged
    GET), each call counted as a request with its body's bytes (a failed one as a request)."""

    def fetch_counted(start: int, end: int) -> bytes:
        try:
            data = fetch(start, end)
        except BaseException:
            count_request()
            raise
        count_request(len(data))
        return data

    return fetch_counted


def take() -> StorageReads:
    """What was counted since the previous take (guarantee 2)."""
    with _lock:
        reads = StorageReads(*_counts)
        _counts[:] = [0, 0, 0, 0]
    return reads
