"""Garbage collection on the worker's own thread, between units, while it reads files on
object storage.

Why: h5py frees an object (a dataset, a group) under its global lock. A file on object storage
is read through a Python file object: HDF5 calls back into Python while h5py holds that lock,
and the read waits for other threads (fsspec's IO thread runs the ranged GET; the read-ahead's
threads fetch what it may be waiting for). Python's automatic collection runs on whichever
thread allocates past a threshold: when it runs on one of those threads and frees h5py
objects caught in a reference cycle (an exception's traceback holding a frame that held one),
that thread waits for h5py's lock while the lock's holder waits for that thread. Neither
moves (h5py#2019; found by the soak over S3 with bodies cut short:
docs/bench/soak-s3-truncate-deadlock-stacks.txt).

So while a job reads URLs (:attr:`Hdf5Job.remote`), automatic collection is off in the worker
process, and :meth:`MainThreadCollection.between_units` collects on the worker's own thread,
between units, when it holds no h5py lock: the youngest generation after every unit, the
middle one every :data:`MIDDLE_EVERY` units, all of them every :data:`FULL_EVERY` (about 10
us, 40 us and 13 ms in a worker: a full collection every 100 units costs well under 1 %).

Guarantees:

1. While held, no collection runs on another thread of the worker (``gc.disable()`` is
   process-wide; only :meth:`between_units` and :meth:`release` collect, on the caller's
   thread).
2. Cycles are still freed: at most :data:`FULL_EVERY` units after they became garbage, and
   all of them when the job ends (:meth:`release`), which gives automatic collection back as
   it was.
3. A job of local files changes nothing: :meth:`hold` is never called for it.
"""

from __future__ import annotations

import gc

__all__ = ["FULL_EVERY", "MIDDLE_EVERY", "MainThreadCollection"]

#: Every this many units the middle generation is collected too, and every FULL_EVERY all.
MIDDLE_EVERY = 10
FULL_EVERY = 100


class MainThreadCollection:
    """Automatic collection off while held; collections between units instead."""

    def __init__(self) -> None:
        self._was_enabled: bool | None = None  # None: not held
        self._units = 0

    @property
    def held(self) -> bool:
        return self._was_enabled is not None

    def hold(self) -> None:
        """Turn automatic collection off (once; a second hold changes nothing)."""
        if self._was_enabled is None:
            self._was_enabled = gc.isenabled()
            gc.disable()

    def between_units(self) -> None:
        """A unit is done: collect on this thread (nothing when not held)."""
        if self._was_enabled is None:
            return
        self._units += 1
        if self._units % FULL_EVERY == 0:
            gc.collect()
        elif self._units % MIDDLE_EVERY == 0:
            gc.collect(1)
        else:
            gc.collect(0)

    def release(self) -> None:
        """The job ends: collect everything, then give automatic collection back."""
        if self._was_enabled is None:
            return
        gc.collect()
        if self._was_enabled:
            gc.enable()
        self._was_enabled = None
