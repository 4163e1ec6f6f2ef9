"""One iteration over a dataset: local workers, the loop, and the batches as NumPy dicts.

Guarantees of a :class:`BatchStream`:

1. It yields the batches of its epochs exactly as the plan says (see ``h5feed.consumer.plan``):
   every sample of each epoch once, in plan order when ``deterministic`` (else as completed).
2. It raises, from ``next()``, the first failure of the iteration (worker error with the
   worker's traceback, worker death with its exit code, timeout); it never blocks forever.
3. Its workers stop when it is exhausted, closed, garbage collected, or at interpreter exit —
   also while another thread is blocked in ``next()``, which then ends (StopIteration) at once.
   With a ``pool`` (:mod:`h5feed.consumer.processes.worker_pool`: the feed's persistent
   workers), its job ends instead and the workers are given back for the next iteration; they
   are stopped instead when the iteration failed or its loop did not stop.
4. It is safe to call ``next()`` from different threads one after another (as tf.data does),
   not from several at the same time.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import queue
import shutil
import tempfile
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast

import numpy as np

from h5feed.common.errors import H5FeedError, ResumeError
from h5feed.common.exposure import is_local_address
from h5feed.common.logs import with_ids
from h5feed.consumer import resume
from h5feed.consumer.core.assembly import Batch
from h5feed.consumer.core.credits import CreditGate
from h5feed.consumer.core.loop import END, FAILED, FeedLoop
from h5feed.consumer.core.router import Router
from h5feed.consumer.core.scheduler import Scheduler
from h5feed.consumer.core.session import PeerSession
from h5feed.consumer.core.waker import Waker
from h5feed.consumer.hdf5 import known_index
from h5feed.consumer.hdf5.scheduler import HdfScheduler
from h5feed.consumer.memory import keep_freed_memory_mapped
from h5feed.consumer.options import FeedConfig, HdfConfig
from h5feed.consumer.plan import Cursor, Index
from h5feed.consumer.processes.local_workers import LocalWorkers
from h5feed.consumer.processes.worker_pool import PoolSlot, WorkerPool, close_all_slots
from h5feed.consumer.sources.options import Learnt, SourceConfig
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
    """Iterates the batches of ``epochs`` epochs (None: forever) from ``start``; a source's
    workers are given ``learnt`` (kind and spec an earlier iteration was told), if any.

    ``skip``: batches (epoch, index) above ``start`` the trainer took already (a resumed
    ``deterministic=False`` run): made, but not yielded. ``fingerprint``: the feed's
    (:mod:`h5feed.consumer.resume`), its ``index`` part replaced by the index the workers
    build. ``resume_index``: the index part of the state this iteration resumes, checked
    against that index (ResumeError from ``next()`` when they differ; files that change
    between two iterations of one dataset are no error). :meth:`state` says exactly what
    ``next()`` has returned."""

    def __init__(
        self,
        config: FeedConfig,
        start: Cursor,
        epochs: int | None,
        on_close: Callable[[dict[str, Any]], None] | None = None,
        learnt: Learnt | None = None,
        skip: frozenset[tuple[int, int]] = frozenset(),
        fingerprint: Mapping[str, Any] | None = None,
        resume_index: str | None = None,
        on_index: Callable[[str, int], None] | None = None,  # (digest, epoch length)
        pool: tuple[WorkerPool, PoolSlot] | None = None,
        index_digest: Callable[[Index], str] = resume.index_digest,
        known: Index | None = None,
        file_sizes: list[int] | None = None,
    ) -> None:
        """``pool``: persistent workers and their socket to run on, and the slot to give them
        back to (None: start this iteration's own workers). ``known``: the index of the
        files, unchanged since local workers read it (see ``HdfScheduler.start``); ``file_sizes``:
        the files' sizes as just stat'ed (else the scheduler takes them)."""
        self.config = config
        # Weakly: a stream must not keep its feed alive (a feed that is gone stops its kept
        # workers when this stream ends, as `feed.stream()` on a temporary feed expects).
        self._on_close = _weakly(on_close)
        self.job_id = uuid.uuid4().hex
        self.cursor = start  # the next batch the trainer takes (deterministic order)
        self._skip = set(skip)
        self._fingerprint = dict(fingerprint or resume.fingerprint(config))
        self._resume_index = resume_index
        self._progress = resume.Progress(
            resume.ResumePoint(start, frozenset(skip)), config.options.deterministic
        )
        self._index_checked = False
        self._on_index = _weakly(on_index)  # the feed's: held weakly, as on_close
        self._index_digest = index_digest  # the feed's IndexDigests: one hash per dataset
        self._closed = threading.Event()
        # Kept workers: the pool is told once, at the first batch, that they took this job.
        self._pool: WorkerPool | None = pool[0] if pool is not None else None
        self._waited = WaitMeter()
        self._taken = RateMeter()
        options = config.options
        epoch_range: Iterator[int] = (
            itertools.count(start.epoch)
            if epochs is None
            else iter(range(start.epoch, start.epoch + epochs))
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
        # One direction of wiring: socket and keys, then the local workers that use them,
        # then the parts of the loop, then the loop.
        with contextlib.ExitStack() as undo:  # what is made so far goes if a step fails
            if pool is not None:  # all made already, and kept across iterations
                self._tmpdir = pool[0].tmpdir
                self.address = pool[0].address
                waker, router, self._workers = pool[0].waker, pool[0].router, pool[0].workers
                undo.callback(pool[1].give_back, pool[0], reusable=False)
            else:
                self._tmpdir = tempfile.mkdtemp(prefix="h5feed-")
                self.address = f"ipc://{self._tmpdir}/feed.sock"
                undo.callback(shutil.rmtree, self._tmpdir, ignore_errors=True)
                waker = Waker()
                undo.callback(waker.close)
                listen = [options.listen] if options.listen else []
                router = Router(options, [self.address, *listen], waker.fileno)
                undo.callback(router.close)
                self._workers = LocalWorkers(
                    options.workers,
                    self.address,
                    prefix=f"w{self.job_id[:6]}",
                    keys=router.local_keys,
                    server_public=router.server_public,
                    data_root=options.data_root,
                    max_message_bytes=options.max_message_bytes,
                    max_open_files=options.max_open_files,
                    max_restarts=options.max_restarts,
                )
                undo.callback(self._workers.stop, grace_s=0)
            self.counters = Counters()
            self._router = router  # read by stats(): its refused CURVE keys
            self._keys_refused_before = router.refused_keys  # by earlier iterations
            self._gate = CreditGate(options.inflight_batches, waker.wake)
            session = PeerSession(
                self.job_id,
                router,
                self._workers,
                options.unit_timeout_s,
                self.counters,
                curve=options.curve_key is not None,
            )
            self.scheduler: Scheduler = (  # the HDF5 one makes its shared-memory pool here
                SourceScheduler(
                    config, self.job_id, epoch_range, start, self.counters, self._gate, learnt
                )
                if isinstance(config, SourceConfig)
                else HdfScheduler(
                    config, self.job_id, epoch_range, start, self.counters, known, file_sizes
                )
            )
            undo.pop_all()  # from here the loop owns socket and waker, the finalizer the rest
        self._loop = FeedLoop(
            options,
            router,
            waker,
            session,
            self._gate,
            self.scheduler,
            options.workers,
            self.counters,
            self._workers,
            keep_socket=pool is not None,  # the pool's: it outlives this iteration
        )
        self._loop.start()
        self._finalizer: weakref.finalize[Any, Any] = (
            weakref.finalize(self, _give_back, self._loop, pool[0], pool[1], self._closed)
            if pool is not None
            else weakref.finalize(
                self, _shutdown, self._loop, self._workers, self._tmpdir, self._closed
            )
        )
        _live_streams.add(self)

    @property
    def worker_pids(self) -> list[int]:
        return self._workers.pids

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
                if self._pool is not None:  # the kept workers took this job: the last
                    self._pool.settle()  # jobs' units are behind them, their slots may go
                    self._pool = None
                if not self._index_checked:
                    self._check_index()
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

    def _check_index(self) -> None:
        """Once the HDF5 index is built: compare it with the resumed state's, learn the
        epoch's length, and remember the index for the next dataset over these files."""
        self._index_checked = True
        config, index = self.config, self.scheduler.learnt
        if not isinstance(index, Index) or not isinstance(config, HdfConfig):
            return
        digest = self._index_digest(index)
        saved, previous = self._resume_index, self._fingerprint.get("index")
        if saved is not None and saved != digest:
            self.close()
            raise ResumeError(
                "the resume state was saved by another dataset (or other data): "
                f"index: saved {saved!r}, now {digest!r} (a file's videos, frame counts or "
                "labels changed). Resume with the same files and plan options, or start afresh."
            )
        self._fingerprint["index"] = digest
        length = self.scheduler.epoch_length
        if length is not None:
            self._progress.set_length(length)
        if digest != previous:  # new to this dataset: remembered for the next one
            known_index.store(config, index)
        on_index = self._on_index()
        if on_index is not None and length is not None:
            on_index(digest, length)

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
            on_close = self._on_close()
            if on_close is not None:
                on_close(self.stats())  # the final figures outlive the stream

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
            slots_refused=self._workers.counter("slots_refused"),
            counters=self.counters,
            refused_keys=self._router.refused_keys - self._keys_refused_before,
            cursor=(self.cursor.epoch, self.cursor.batch),
        )


def _weakly(callback: Callable[..., None] | None) -> Callable[[], Callable[..., None] | None]:
    """A weak reference to ``callback`` (a bound method is held by its object only)."""
    if callback is None:
        return lambda: None
    if hasattr(callback, "__self__"):
        return weakref.WeakMethod(callback)  # type: ignore[arg-type]
    return lambda: callback


def _shutdown(loop: FeedLoop, workers: LocalWorkers, tmpdir: str, closed: threading.Event) -> None:
    """End the iteration: its loop, then its workers, then its shared-memory slots (closed
    only once no worker can be making a unit that names them: batches already handed out
    keep their memory)."""
    closed.set()
    loop.stop()
    workers.stop()
    loop.scheduler.close()
    shutil.rmtree(tmpdir, ignore_errors=True)


def _give_back(loop: FeedLoop, pool: WorkerPool, slot: PoolSlot, closed: threading.Event) -> None:
    """End this iteration's job on the pool's workers (the loop says BYE) and give the pool
    back: reusable when the loop ended without an error and every worker still runs. Its
    scheduler is retired to the pool, which closes its slots once no worker can still make a
    unit of this job (see ``WorkerPool.retire``)."""
    closed.set()
    loop.stop()
    stopped = loop.stopped
    reusable = stopped and loop.error is None and not pool.workers.exited()
    pool.retire(loop.scheduler)
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
