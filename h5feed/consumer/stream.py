"""One iteration over a dataset: local workers, the loop, and the batches as NumPy dicts.

Guarantees of a :class:`BatchStream`:

1. It yields the batches of its epochs exactly as the plan says (see
``h5feed.consumer.plan.epoch_plan``):
   every sample of each epoch once, in plan order when ``deterministic`` (else as completed).
2. It raises, from ``next()``, the first failure of the iteration (worker error with the
   worker's traceback, worker death with its exit code, timeout); it never blocks forever.
3. Its workers stop when it is exhausted, closed, garbage collected, or at interpreter exit —
   also while another thread is blocked in ``next()``, which then ends (StopIteration) at once.
   It always runs on a :class:`~h5feed.consumer.processes.worker_pool.WorkerPool`
   (``Lease``): its own (stopped with it), or its feed's kept workers, whose job ends instead
   and which are given back for the next iteration (stopped instead when the iteration failed
   or its loop did not stop).
4. It is safe to call ``next()`` from different threads one after another (as tf.data does),
   not from several at the same time.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
import uuid
import weakref
from collections.abc import Iterator
from typing import Any, cast

import numpy as np

from h5feed.common.errors import H5FeedError, ResumeError
from h5feed.common.system.allocator import keep_freed_memory
from h5feed.common.system.cpus import available_cpus
from h5feed.consumer.core.assembly import Batch
from h5feed.consumer.core.counters import Counters, RateMeter
from h5feed.consumer.core.credits import CreditGate
from h5feed.consumer.core.loop import END, FAILED, FeedLoop
from h5feed.consumer.core.session import PeerSession
from h5feed.consumer.iteration import IterationStart, Lesson, Position, make_scheduler
from h5feed.consumer.options import FeedConfig
from h5feed.consumer.plan.epoch_plan import Cursor
from h5feed.consumer.processes.autoscale import Autoscaler, AutoWorkers
from h5feed.consumer.processes.worker_pool import Lease, close_all_slots
from h5feed.consumer.telemetry.stats import WaitMeter, iteration_stats

_GET_POLL_S = 0.1

# Every stream still running, so the exit hook can end them (weak: a stream that is garbage
# collected is closed by its finalizer instead).
_live_streams: weakref.WeakSet[BatchStream] = weakref.WeakSet()


class BatchStream(Iterator[dict[str, np.ndarray]]):
    """One iteration of a :class:`~h5feed.consumer.feed.Feed`: ``iter(feed)`` or
    ``feed.stream()`` makes one (not made by hand); ``next()`` gives its batches, dicts of
    NumPy arrays, ``epochs`` epochs of them (None: forever) from :attr:`cursor`.

    1. :meth:`state` says exactly what ``next()`` has returned: ``h5feed.batches(...,
       resume=state)`` in a new process continues with the next batch.
    2. The stream ends (StopIteration) after its last batch, after :meth:`close`, or on
       leaving a ``with`` block; each of these stops the workers it started (a feed's kept
       workers wait for its next iteration). A stream garbage-collected while running is
       closed by its finalizer, and every stream still running is closed at exit.
    3. A failure reaches ``next()`` as an ``h5feed.H5FeedError`` (a subclass naming it: see
       docs/troubleshooting.md), after which the stream is closed.
    4. :meth:`stats` is cheap and callable from any thread, during and after the iteration.

    Inside: it iterates from ``start.cursor`` (see
    :class:`~h5feed.consumer.iteration.IterationStart` for the rest of what it starts from);
    :attr:`outcome` says what it found, read by its feed."""

    def __init__(
        self,
        config: FeedConfig,
        start: IterationStart,
        lease: Lease | None = None,
    ) -> None:
        """``lease``: the feed's kept workers and their socket to run on (None: a pool of
        this iteration's own workers, closed at its end)."""
        self.config = config
        self.job_id = uuid.uuid4().hex
        self._position = Position(config, start)
        self._input = kind = self._position.input
        self._lineage = start.lineage
        self.outcome = self._position.outcome  # what it found, read by its feed
        self._first_taken = False
        self._closed = threading.Event()
        self._waited = WaitMeter()
        self._taken = RateMeter()
        options = config.options
        if options.processes.tune_malloc:
            keep_freed_memory(os.environ, trainer=True)
        # One direction of wiring: the pool (socket, keys, workers), then the parts of the
        # loop, then the loop.
        lease = lease if lease is not None else Lease.own(options, kind.data_root)
        self._pool = lease.pool
        with contextlib.ExitStack() as undo:  # what is made so far goes if a step fails
            undo.callback(lease.abandon)
            self.address = self._pool.address
            self._router = router = self._pool.router  # read by stats(): refused CURVE keys
            self._keys_refused_before = router.refused_keys  # by earlier iterations
            self.counters = Counters()
            units_each = kind.units_each
            budget = options.processes.inflight_budget(units_each)
            self._gate = CreditGate(budget, self._pool.waker.wake, units_each)
            session = PeerSession(
                self.job_id,
                router,
                self._pool.workers,
                options.processes.unit_timeout_s,
                self.counters,
                curve=options.network.curve_key is not None,
            )
            # (the HDF5 one makes its shared-memory pool here)
            self.scheduler = make_scheduler(kind, start, self.job_id, self.counters, self._gate)
            undo.pop_all()  # from here the finalizer ends it all
        self._loop = FeedLoop(
            options,
            router,
            self._pool.waker,
            session,
            self._gate,
            self.scheduler,
            len(self._pool.workers.running),  # "auto": what the pool has grown to
            self.counters,
            self._pool.workers,
            # A kept pool's socket outlives this iteration; an own pool's is the loop's to
            # close, at the end of its thread (never under it).
            keep_socket=lease.kept,
            autoscale=self._autoscale(session) if options.processes.auto else None,
            fleet=self._pool.announcer,
        )
        self._loop.start()
        self._finalizer = weakref.finalize(self, _end, self._loop, lease, self._closed)
        _live_streams.add(self)

    def _autoscale(self, session: PeerSession) -> AutoWorkers:
        """``workers="auto"``: a controller capped at this process's cores, fed the
        trainer's recent wait share from its first batch on."""

        def wait_share() -> float | None:
            if not self._first_taken:
                return None
            return float(self._waited.snapshot()["wait_share_recent"])

        def can_grow() -> bool:  # a generator's shards live in its workers: no joiner
            learnt = self.scheduler.learnt
            if learnt is None:
                return False
            return not self._input.shards_in_workers(learnt)

        return AutoWorkers(
            Autoscaler(available_cpus()),
            self._pool.workers,
            wait_share,
            can_grow,
            session.log.info,
        )

    @property
    def worker_pids(self) -> list[int]:
        """The process ids of the local worker processes serving this iteration now."""
        return self._pool.workers.pids

    @property
    def learnt(self) -> Lesson | None:
        """What this iteration's handshake taught, once known (see ``Scheduler.learnt``)."""
        return self.scheduler.learnt

    def __next__(self) -> dict[str, np.ndarray]:
        began = time.monotonic()  # the wait for input: until a batch (or the end) is here
        try:
            while True:
                if self._closed.is_set():
                    raise StopIteration
                try:
                    item = self._loop.out.get(timeout=_GET_POLL_S)
                except queue.Empty:
                    continue
                if item is END:
                    self.close()
                    raise StopIteration
                if item is FAILED:
                    error = self._loop.error
                    self.close()
                    if isinstance(error, H5FeedError):
                        raise error
                    raise H5FeedError(f"the h5feed loop failed: {error!r}") from error
                batch: Batch = item
                self._gate.take()
                if not self._first_taken:
                    self._first_batch()
                if not self._position.take(batch.epoch, batch.index):
                    continue  # taken before the resume
                if self._lineage is not None:  # before the trainer has it: see lineage.py
                    kind = self._input.source_kind(self.scheduler.learnt)
                    self._lineage.record(self._position.last_step, batch, kind)
                if batch.element is not None:  # a user source's batch (source=)
                    self._taken.record(batch.rows, batch.nbytes)
                    return cast(dict[str, np.ndarray], batch.element)
                frames = batch.arrays["frames"]
                self._taken.record(len(frames), frames.nbytes)
                return batch.arrays
        finally:
            self._waited.record(time.monotonic() - began)

    def _first_batch(self) -> None:
        """The handshake is over: the last jobs' slots may go (the workers took this one),
        and what it taught is learnt (an HDF5 index is checked: ResumeError)."""
        self._first_taken = True
        self._pool.settle()
        try:
            self._position.learn(self.scheduler.learnt, self.scheduler.epoch_length)
        except ResumeError:
            self.close()
            raise

    @property
    def cursor(self) -> Cursor:
        """The next batch the trainer takes (deterministic order)."""
        return self._position.cursor

    def state(self) -> dict[str, Any]:
        """A small JSON-able dict of exactly what ``next()`` has returned (see
        docs/trainer/resume.md): ``h5feed.batches(..., resume=state)`` in a new process
        continues with the next batch (and, ``deterministic=False``, leaves out the batches
        listed as taken). Call it between ``next()`` calls (from the thread that calls it)."""
        return self._position.state()

    def close(self) -> None:
        """Stop the workers and release everything; idempotent, safe from any thread."""
        if self._finalizer.alive:
            self._finalizer()
            self._position.ended(self.scheduler.learnt, self.scheduler.epoch_length)
            self.outcome.stats = self.stats()  # the final figures outlive the stream

    def __enter__(self) -> BatchStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self) -> dict[str, Any]:
        """A plain dict describing this iteration now; cheap, callable from any thread (every
        key: docs/reference/stats.md)."""
        return iteration_stats(
            job=self.job_id,
            running=not self._closed.is_set(),
            taken=self._taken,
            waited=self._waited,
            peers=list(self._loop.session.peers.values()),
            workers_asked=len(self._pool.workers.running),
            gate=self._gate,
            queue_depth=self._loop.out.qsize(),
            figures=self.scheduler.figures(),
            slots_refused=self._pool.workers.counter("slots_refused"),
            counters=self.counters,
            refused_keys=self._router.refused_keys - self._keys_refused_before,
            cursor=(self.cursor.epoch, self.cursor.batch),
            shared_fleet=None if self._pool.announcer is None else self._pool.announcer.status(),
        )


def _end(loop: FeedLoop, lease: Lease, closed: threading.Event) -> None:
    """End the iteration: its loop (which says BYE), then its hold on the pool
    (:meth:`Lease.end`: the shared-memory slots close once no worker can still make a unit
    that names them; batches already handed out keep their memory)."""
    closed.set()
    loop.stop()
    lease.end(loop.scheduler, stopped=loop.stopped, clean=loop.error is None)


def close_all_streams() -> None:
    """End every stream, then stop every kept worker. Run at interpreter exit (first, so a
    tf.data thread blocked in ``next()`` returns, and TensorFlow's own shutdown does not wait
    on it forever) and by the tests between tests (a tf.data dataset that was never iterated
    can hold the stream that learnt its length in TensorFlow's function registry)."""
    for stream in list(_live_streams):
        with contextlib.suppress(Exception):  # exit must go on whatever one stream does
            stream.close()
    close_all_slots()  # then the workers kept across iterations


# threading's exit hooks run before non-daemon threads are joined and before atexit handlers,
# so streams end before anything at exit can wait on them. (atexit as a fallback.)
_register = getattr(threading, "_register_atexit", None)
if _register is not None:
    _register(close_all_streams)
else:  # pragma: no cover - CPython always has it
    import atexit

    atexit.register(close_all_streams)
