"""Cyclic garbage collection while HDF5 files are read from URLs: only under h5py's lock.

Why. h5py frees an HDF5 object (``ObjectID.__dealloc__``) under its process-wide lock, and
holds that lock for the whole of each call, reads included. A read of a file opened from a
URL waits inside that call for other threads: fsspec's event-loop thread that makes the
request, a read-ahead thread whose fetch it needs (:mod:`~h5feed.producer.files.read_ahead`),
an S3 server in the same process (the tests'). Python runs its cyclic collector in whichever
thread allocates past the threshold. When that is one of those threads and the garbage holds
an h5py object (a traceback's frames, a user's cycle), the thread waits for the lock the reader
holds while the reader waits for the thread: both hang for ever (h5py#2019, dask#7547; h5py's
docs on file-like objects advise turning collection off). The soak over S3 with bodies cut
short met it in workers (docs/bench/soak-s3-truncate-deadlock-stacks.txt), and CI in a test
process that opened a URL itself (an open hung 120 s waiting on fsspec's loop): so the guard
is held by the open file, in whatever process opens it (a worker, ``h5feed inspect``), not
by a worker's job.

What. While a file opened from a URL is open in this process (:func:`hold`), automatic
collection is off and one collector thread does its work instead, holding h5py's lock for
each collection, so it runs only while no thread is inside h5py and no reader waits on it.

1. While held, no cyclic collection starts by itself in any thread; :func:`hold` returns once a
   collection already running in another thread has ended (within :data:`AWAIT_S`).
2. Garbage is still collected: every :data:`POLL_S` the generation Python's own thresholds
   (``gc.get_threshold()``) make due is collected, the oldest at most every
   :data:`FULL_EVERY_S`. A threshold of 0 (collection turned off by the user) is kept.
3. When the last holder is released or collected, collection is as it was before the first
   (enabled if it was); a ``gc.enable()`` by other code while held is undone, and honoured then.
4. After ``os.fork()`` the child starts unheld, collection as it was before the first hold.
"""

from __future__ import annotations

import gc
import os
import threading
import time
import weakref
from typing import Any

from h5py import _objects as h5py_objects

__all__ = ["AWAIT_S", "FULL_EVERY_S", "POLL_S", "held", "hold"]

#: How often the collector looks at the counts, and the least time between two collections of
#: the oldest generation (Python's own rule for it needs counts it does not expose).
POLL_S = 0.02
FULL_EVERY_S = 5.0
#: The longest :func:`hold` waits for a collection already running in another thread.
AWAIT_S = 5.0

_LOCK = threading.RLock()  # reentrant: a holder's finalizer may run inside a hold()
_holders = 0
_era = 0  # bumped by a fork: the finalizers of holders from before it do nothing
_was_enabled = True
_collector: threading.Thread | None = None
_collecting = False  # a collection is running now, in some thread (gc.callbacks)


def _track(phase: str, _info: dict[str, Any]) -> None:
    global _collecting
    _collecting = phase == "start"  # collections never overlap: start and stop alternate


gc.callbacks.append(_track)


def hold(owner: object) -> None:
    """Automatic collection off (as the module docstring says) until ``owner`` is collected
    or its :func:`weakref.finalize` is called; call before h5py reads through ``owner``."""
    global _holders, _was_enabled, _collector
    with _LOCK:
        if _holders == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _holders += 1
        if _collector is None or not _collector.is_alive():
            _collector = threading.Thread(target=_collect, name="h5feed-gc", daemon=True)
            _collector.start()
        era = _era
    weakref.finalize(owner, _release, era)
    deadline = time.monotonic() + AWAIT_S
    while _collecting and time.monotonic() < deadline:
        time.sleep(0.001)


def held() -> bool:
    """Whether a holder is alive (automatic collection is then off)."""
    return _holders > 0


def _release(era: int) -> None:
    global _holders
    with _LOCK:
        if era != _era or _holders == 0:
            return
        _holders -= 1
        if _holders == 0 and _was_enabled:
            gc.enable()


def _due(last_full: float) -> int | None:
    """The generation Python would collect now with collection enabled, if any."""
    threshold, count = gc.get_threshold(), gc.get_count()
    if threshold[0] == 0 or count[0] <= threshold[0]:
        return None
    if count[1] < threshold[1]:
        return 0
    if count[2] < threshold[2] or time.monotonic() - last_full < FULL_EVERY_S:
        return 1
    return 2


def _collect() -> None:
    global _was_enabled
    last_full = time.monotonic()
    while True:
        time.sleep(POLL_S)
        with _LOCK:
            if not _holders:
                continue
            if gc.isenabled():  # enabled by other code while held: ours again, theirs after
                _was_enabled = True
                gc.disable()
        generation = _due(last_full)
        if generation is None:
            continue
        with h5py_objects.phil:  # no thread is inside h5py: none waits on this one
            gc.collect(generation)
        if generation == 2:
            last_full = time.monotonic()


def _after_fork_in_child() -> None:
    global _LOCK, _holders, _era, _collector, _collecting
    if _holders and _was_enabled:
        gc.enable()
    _LOCK = threading.RLock()  # another thread may have held it at the fork
    _holders, _collector, _collecting = 0, None, False
    _era += 1


os.register_at_fork(after_in_child=_after_fork_in_child)
