"""One iteration over a dataset: local workers, the loop, and the batches as NumPy dicts.

Guarantees of a :class:`BatchStream`:

1. It yields the batches of its epochs exactly as the plan says (see ``h5feed.consumer.plan``):
   every sample of each epoch once, in plan order when ``deterministic`` (else as completed).
2. It raises, from ``next()``, the first failure of the iteration (worker error with the
   worker's traceback, worker death with its exit code, timeout); it never blocks forever.
3. Its workers stop when it is exhausted, closed, garbage collected, or at interpreter exit —
   also while another thread is blocked in ``next()``, which then ends (StopIteration) at once.
   It always runs on a :class:`~h5feed.consumer.processes.worker_pool.WorkerPool`: its own
   (stopped with it), or its feed's kept workers, whose job ends instead and which are given
   back for the next iteration (stopped instead when the iteration failed or its loop did not
   stop).
4. It is safe to call ``next()`` from different threads one after another (as tf.data does),
   not from several at the same time.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import queue
import threading
import time
import uuid
import weakref
from collections.abc import Iterator
from typing import Any, cast

import numpy as np

from h5feed.common.errors import H5FeedError, ResumeError
from h5feed.common.exposure import is_local_address
from h5feed.common.logs import with_ids
from h5feed.consumer import resume
from h5feed.consumer.core.assembly import Batch
from h5feed.consumer.core.credits import CreditGate
from h5feed.consumer.core.loop import END, FAILED, FeedLoop
from h5feed.consumer.core.scheduler import Scheduler
from h5feed.consumer.core.session import PeerSession
from h5feed.consumer.hdf5 import known_index
from h5feed.consumer.hdf5.scheduler import HdfScheduler
from h5feed.consumer.iteration import IterationStart, Outcome
from h5feed.consumer.memory import keep_freed_memory_mapped
from h5feed.consumer.options import FeedConfig, FeedOptions, HdfConfig
from h5feed.consumer.plan import Cursor, Index
from h5feed.consumer.processes.worker_pool import PoolSlot, WorkerPool, close_all_slots
from h5feed.consumer.sources.options import SourceConfig
from h5feed.consumer.sources.scheduler import SourceScheduler
from h5feed.consumer.stats import Counters, RateMeter, WaitMeter, iteration_stats

#: Keys of every tf.data element by default (NumPy batches also carry ``sample``, ``epoch``
#: and ``batch``: see ``keys=`` of ``h5feed.dataset``).
BATCH_KEYS = ("frames", "label", "file", "video", "start")
#: Keys a tf.data element may carry when asked (``keys=``): the defaults, and each row's
#: place in the plan (global sample id, epoch, batch index in the epoch), int64 [B].
POSITION_KEYS = ("sample", "epoch", "batch")
#: bool [B]: False where a bad frame was skipped (``on_error="skip"``; the row is zeros).
#: In every NumPy batch; in tf.data elements with ``on_error="skip"`` or when asked.
VALID_KEY = "valid"

_GET_POLL_S = 0.1
_log = with_ids(logging.getLogger("h5feed.consumer"), "consumer")  # ids in every line

# Every stream still running, so the exit hook can end them (weak: a stream that is garbage
# collected is closed by its finalizer instead).
_live_streams: weakref.WeakSet[BatchStream] = weakref.WeakSet()


class BatchStream(Iterator[dict[str, np.ndarray]]):
    """Iterates the batches of the config's ``epochs`` epochs (None: forever) from
    ``start.cursor`` (see :class:`~h5feed.consumer.iteration.IterationStart` for the rest of
    what it starts from); :attr:`outcome` says what it found. :meth:`state` says exactly what
    ``next()`` has returned."""

    def __init__(
        self,
        config: FeedConfig,
        start: IterationStart,
        pool: tuple[WorkerPool, PoolSlot] | None = None,
    ) -> None:
        """``pool``: the feed's kept workers and their socket to run on, and the slot to give
        them back to (None: a pool of this iteration's own workers, closed at its end)."""
        self.config = config
        self.job_id = uuid.uuid4().hex
        self.start = start
        self.cursor = start.cursor  # the next batch the trainer takes (deterministic order)
        self.outcome = Outcome()
        self._skip = set(start.skip)
        self._fingerprint = dict(start.fingerprint)  # its index part: this iteration's
        self._progress = resume.Progress(
            resume.ResumePoint(start.cursor, start.skip), config.options.deterministic
        )
        self._first_taken = False
        self._closed = threading.Event()
        self._waited = WaitMeter()
        self._taken = RateMeter()
        options = config.options
        first = start.cursor.epoch
        epoch_range: Iterator[int] = (
            itertools.count(first)
            if options.epochs is None
            else iter(range(first, first + options.epochs))
        )
        if options.tune_malloc:
            keep_freed_memory_mapped()
        if options.listen and options.curve_key is None and not is_local_address(options.listen):
            # Only insecure=True gets here (FeedOptions refuses the rest); the feed already
            # warned (InsecureWarning), and this line puts it in the logs with the job's id.
            _log.warning(
                "h5feed listens on %s without CURVE keys (insecure=True): any host that "
                "reaches it can join as a producer",
                options.listen,
            )
        # One direction of wiring: the pool (socket, keys, workers), then the parts of the
        # loop, then the loop.
        self._pool, slot = pool if pool is not None else (_own_pool(options), None)
        with contextlib.ExitStack() as undo:  # what is made so far goes if a step fails
            if slot is not None:
                undo.callback(slot.give_back, self._pool, reusable=False)
            else:
                undo.callback(self._pool.close)
            self.address = self._pool.address
            self._router = router = self._pool.router  # read by stats(): refused CURVE keys
            self._keys_refused_before = router.refused_keys  # by earlier iterations
            self.counters = Counters()
            self._gate = CreditGate(options.inflight_batches, self._pool.waker.wake)
            session = PeerSession(
                self.job_id,
                router,
                self._pool.workers,
                options.unit_timeout_s,
                self.counters,
                curve=options.curve_key is not None,
            )
            self.scheduler: Scheduler = (  # the HDF5 one makes its shared-memory pool here
                SourceScheduler(
                    config, self.job_id, epoch_range, start.cursor, self.counters, self._gate,
                    start.learnt,
                )
                if isinstance(config, SourceConfig)
                else HdfScheduler(
                    config, self.job_id, epoch_range, start.cursor, self.counters, start.known,
                    start.file_sizes,
                )
            )  # fmt: skip
            undo.pop_all()  # from here the finalizer ends it all
        self._loop = FeedLoop(
            options,
            router,
            self._pool.waker,
            session,
            self._gate,
            self.scheduler,
            options.workers,
            self.counters,
            self._pool.workers,
            # A kept pool's socket outlives this iteration; an own pool's is the loop's to
            # close, at the end of its thread (never under it).
            keep_socket=slot is not None,
        )
        self._loop.start()
        self._finalizer = weakref.finalize(self, _end, self._loop, self._pool, slot, self._closed)
        _live_streams.add(self)

    @property
    def worker_pids(self) -> list[int]:
        return self._pool.workers.pids

    @property
    def learnt(self) -> object | None:
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
                if (batch.epoch, batch.index) in self._skip:  # taken before the resume
                    self._skip.discard((batch.epoch, batch.index))
                    continue
                self.cursor = Cursor(batch.epoch, batch.index + 1)
                self._progress.take(batch.epoch, batch.index)
                if batch.element is not None:  # a user source's batch (source=)
                    self._taken.record(batch.rows, batch.nbytes)
                    return cast(dict[str, np.ndarray], batch.element)
                frames = batch.arrays["frames"]
                self._taken.record(len(frames), frames.nbytes)
                return batch.arrays
        finally:
            self._waited.record(time.monotonic() - began)

    def _first_batch(self) -> None:
        """The handshake is over: what it taught goes into :attr:`outcome`; an HDF5 index
        is checked against the resumed state's (ResumeError), joins the fingerprint, tells
        the epoch's length, and is remembered for the next dataset over these files."""
        self._first_taken = True
        self._pool.settle()  # the workers took this job: the last jobs' slots may go
        learnt, length = self.scheduler.learnt, self.scheduler.epoch_length
        config = self.config
        if isinstance(learnt, Index) and isinstance(config, HdfConfig):
            try:
                digest = self.start.check_index(learnt)
            except ResumeError:
                self.close()
                raise
            if digest != self._fingerprint.get("index"):  # new to this feed: remembered
                known_index.store(config, learnt)
            self._fingerprint["index"] = self.outcome.digest = digest
            if length is not None:
                self._progress.set_length(length)
        self._learnt(learnt, length)

    def _learnt(self, learnt: object | None, length: int | None) -> None:
        outcome = self.outcome
        if outcome.learnt is None and learnt is not None:
            outcome.epoch_length = length  # before learnt: a reader that sees learnt sees it
            outcome.learnt = learnt

    def state(self) -> dict[str, Any]:
        """A small JSON-able dict of exactly what ``next()`` has returned (see
        :mod:`h5feed.consumer.resume`): ``h5feed.batches(..., resume=state)`` in a new process
        continues with the next batch (and, ``deterministic=False``, leaves out the batches
        listed as taken). Call it between ``next()`` calls (from the thread that calls it)."""
        return self._progress.point(self._fingerprint).to_state()

    def close(self) -> None:
        """Stop the workers and release everything; idempotent, safe from any thread."""
        if self._finalizer.alive:
            self._finalizer()
            self._learnt(self.scheduler.learnt, self.scheduler.epoch_length)  # before a batch
            self.outcome.stats = self.stats()  # the final figures outlive the stream

    def __enter__(self) -> BatchStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self) -> dict[str, Any]:
        """A plain dict describing this iteration now; cheap, callable from any thread.

        ``batches``/``clips``/``bytes``: taken by the trainer, with ``per_s_recent`` (last
        10 s) and ``per_s_total`` rates; ``startup_s``: until the first batch;
        ``wait_share_recent``/``wait_share_total``: share of time since the first batch that
        ``next()`` waited for a batch not yet ready; ``inflight_batches`` of
        ``credit_budget``; ``queue_depth``: complete batches not yet taken;
        ``shared_memory_slots`` (made), ``parts_copied_into_slots`` (parts whose rows came
        over the socket because their worker could not map the slot), ``slots_refused`` (jobs
        whose slots a local worker could not map, summed over this iteration's workers since
        they started: kept workers count across iterations); ``workers`` and
        ``hosts``: what each delivered; ``malformed_messages``, ``dropped_parts``,
        ``reassigned_units`` (re-sent after their worker was lost), ``peers_lost``,
        ``workers_replaced`` (local processes started in place of dead ones),
        ``peers_joined`` (during the iteration), ``refused_reconnects`` (a lost process back
        without a new nonce, or under another CURVE key), ``refused_keys`` (connections
        refused for a CURVE key that is not listed), ``index_mismatches`` (a worker
        refused for a file whose copy differs), ``unreadable_files`` (a file moved from a worker
        that cannot read it); ``cursor``: the next
        batch (epoch, batch); and the verdict: ``input_bound``, ``suggested_extra_workers``,
        ``verdict`` (one line).

        Bad data: ``skipped``, ``skipped_per_epoch`` and ``skipped_samples`` (samples skipped
        for bad frames under ``on_error="skip"``, the first 100 listed with file, video,
        frame: see ``h5feed/consumer/hdf5/bad_data.py``).
        """
        return iteration_stats(
            job=self.job_id,
            running=not self._closed.is_set(),
            taken=self._taken,
            waited=self._waited,
            peers=list(self._loop.session.peers.values()),
            workers_asked=self.config.options.workers,
            gate=self._gate,
            queue_depth=self._loop.out.qsize(),
            figures=self.scheduler.figures(),
            slots_refused=self._pool.workers.counter("slots_refused"),
            counters=self.counters,
            refused_keys=self._router.refused_keys - self._keys_refused_before,
            cursor=(self.cursor.epoch, self.cursor.batch),
        )


def _own_pool(options: FeedOptions) -> WorkerPool:
    """An iteration's own workers (its feed's are lent to another iteration, or it has none
    to keep): a BYE ends them, and the pool is closed with the iteration."""
    return WorkerPool(options, persistent=False, prefix="w")


def _end(loop: FeedLoop, pool: WorkerPool, slot: PoolSlot | None, closed: threading.Event) -> None:
    """End the iteration: its loop (which says BYE), then its pool. Its scheduler is retired
    to the pool, which closes its shared-memory slots once no worker can still make a unit
    that names them (batches already handed out keep their memory; see
    ``WorkerPool.retire``). A kept pool goes back to its slot, reusable when the loop ended
    without an error and every worker still runs; an own pool is closed (its socket is the
    loop's, closed when the loop's thread ends)."""
    closed.set()
    loop.stop()
    pool.retire(loop.scheduler)
    if slot is None:
        pool.close(socket_in_use=True)
        return
    stopped = loop.stopped
    reusable = stopped and loop.error is None and not pool.workers.exited()
    slot.give_back(pool, reusable, socket_in_use=not stopped)


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
