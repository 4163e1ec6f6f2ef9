"""One iteration over a dataset: local workers, the loop, and the batches as NumPy dicts.

Guarantees of a :class:`BatchStream`:

1. It yields the batches of its epochs exactly as the plan says (see ``h5feed.consumer.plan``):
   every sample of each epoch once, in plan order when ``deterministic`` (else as completed).
2. It raises, from ``next()``, the first failure of the iteration (worker error with the
   worker's traceback, worker death with its exit code, timeout); it never blocks forever.
3. Its workers stop when it is exhausted, closed, garbage collected, or at interpreter exit —
   also while another thread is blocked in ``next()``, which then ends (StopIteration) at once.
4. It is safe to call ``next()`` from different threads one after another (as tf.data does),
   not from several at the same time.
"""

from __future__ import annotations

import collections
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
from collections.abc import Callable, Iterator
from typing import Any, cast

import numpy as np

from h5feed.common.errors import H5FeedError
from h5feed.common.exposure import is_local_address
from h5feed.common.logs import with_ids
from h5feed.consumer.assembly import Batch
from h5feed.consumer.credits import CreditGate
from h5feed.consumer.hdf5_scheduler import HdfScheduler
from h5feed.consumer.local_workers import LocalWorkers
from h5feed.consumer.loop import END, FAILED, FeedLoop
from h5feed.consumer.memory import keep_freed_memory_mapped
from h5feed.consumer.options import FeedConfig
from h5feed.consumer.plan import Cursor
from h5feed.consumer.router import Router
from h5feed.consumer.scheduler import Scheduler
from h5feed.consumer.session import PeerSession
from h5feed.consumer.source_options import Learnt, SourceConfig
from h5feed.consumer.source_scheduler import SourceScheduler
from h5feed.consumer.stats import RateMeter, WaitMeter, verdict
from h5feed.consumer.waker import Waker

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
    workers are given ``learnt`` (kind and spec an earlier iteration was told), if any."""

    def __init__(
        self,
        config: FeedConfig,
        start: Cursor,
        epochs: int | None,
        on_close: Callable[[dict[str, Any]], None] | None = None,
        learnt: Learnt | None = None,
    ) -> None:
        self.config = config
        self._on_close = on_close
        self.job_id = uuid.uuid4().hex
        self.cursor = start  # the next batch the trainer takes (deterministic order)
        self._closed = threading.Event()
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
        self._tmpdir = tempfile.mkdtemp(prefix="h5feed-")
        self.address = address = f"ipc://{self._tmpdir}/feed.sock"
        with contextlib.ExitStack() as undo:  # what is made so far goes if a step fails
            undo.callback(shutil.rmtree, self._tmpdir, ignore_errors=True)
            waker = Waker()
            undo.callback(waker.close)
            listen = [options.listen] if options.listen else []
            router = Router(options, [address, *listen], waker.fileno)
            undo.callback(router.close)
            self._workers = LocalWorkers(
                options.workers,
                address,
                prefix=f"w{self.job_id[:6]}",
                keys=router.local_keys,
                server_public=router.server_public,
                data_root=options.data_root,
                max_message_bytes=options.max_message_bytes,
                max_open_files=options.max_open_files,
            )
            undo.callback(self._workers.stop, grace_s=0)
            self.counters: collections.Counter[str] = collections.Counter()
            self._gate = CreditGate(options.inflight_batches, waker.wake)
            session = PeerSession(
                self.job_id, router, self._workers, options.unit_timeout_s, self.counters
            )
            self.scheduler: Scheduler = (  # the HDF5 one makes its shared-memory pool here
                SourceScheduler(
                    config, self.job_id, epoch_range, start, self.counters, self._gate, learnt
                )
                if isinstance(config, SourceConfig)
                else HdfScheduler(config, self.job_id, epoch_range, start, self.counters)
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
        )
        self._loop.start()
        self._finalizer = weakref.finalize(
            self, _shutdown, self._loop, self._workers, self._tmpdir, self._closed
        )
        _live_streams.add(self)

    @property
    def worker_pids(self) -> list[int]:
        return self._workers.pids

    @property
    def learnt(self) -> Learnt | None:
        """A source's kind and element spec, once its workers told them (else None)."""
        return self.scheduler.learnt if isinstance(self.scheduler, SourceScheduler) else None

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
                self.cursor = Cursor(batch.epoch, batch.index + 1)
                if batch.element is not None:  # a user source's batch (source=)
                    self._taken.record(batch.rows, batch.nbytes)
                    return cast(dict[str, np.ndarray], batch.element)
                frames = batch.arrays["frames"]
                self._taken.record(len(frames), frames.nbytes)
                return batch.arrays
        finally:
            self._waited.record(time.monotonic() - began)

    def close(self) -> None:
        """Stop the workers and release everything; idempotent, safe from any thread."""
        if self._finalizer.alive:
            self._finalizer()
            if self._on_close is not None:
                self._on_close(self.stats())  # the final figures outlive the stream

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
        ``credit_budget``; ``queue_depth``: complete batches not yet taken; ``workers`` and
        ``hosts``: what each delivered; ``malformed_messages``, ``dropped_parts``,
        ``reassigned_units`` (handed over from a producer that left); ``cursor``: the next
        batch (epoch, batch); and the verdict: ``input_bound``, ``suggested_extra_workers``,
        ``verdict`` (one line).

        Bad data: ``skipped``, ``skipped_per_epoch`` and ``skipped_samples`` (samples skipped
        for bad frames under ``on_error="skip"``, the first 100 listed with file, video,
        frame: see ``h5feed/consumer/bad_data.py``).
        """
        taken = self._taken.snapshot()
        waited = self._waited.snapshot()
        workers = [
            {
                "name": p.name,
                "pid": p.pid,
                "host": p.host,
                "files": len(p.files),
                "outstanding_units": len(p.outstanding),
                "unit_latency_s": p.unit_latency_s,
                **p.received.snapshot(),
            }
            for p in list(self._loop.session.peers.values())
        ]
        hosts: dict[str, dict[str, float]] = {}
        for worker in workers:
            host = hosts.setdefault(worker["host"], {"workers": 0, "clips": 0, "clips_per_s": 0})
            host["workers"] += 1
            host["clips"] += worker["clips"]
            host["clips_per_s"] += worker["per_s_recent"]["clips"]
        counters, gate = self.counters, self._gate
        bound, extra, line = verdict(
            waited["wait_share_recent"], len(workers) or self.config.options.workers
        )
        slots = (
            self.scheduler.shared_memory_slots if isinstance(self.scheduler, HdfScheduler) else 0
        )
        skipped = (  # bad data (on_error): the same keys for every feed
            self.scheduler.skips.snapshot()
            if isinstance(self.scheduler, HdfScheduler)
            else {"skipped": 0, "skipped_per_epoch": {}, "skipped_samples": []}
        )
        return {
            "job": self.job_id,
            "running": not self._closed.is_set(),
            "batches": taken["count"],
            "clips": taken["clips"],
            "bytes": taken["bytes"],
            "per_s_recent": taken["per_s_recent"],
            "per_s_total": taken["per_s_total"],
            **waited,
            "inflight_batches": gate.inflight,
            "credit_budget": gate.budget,
            "queue_depth": self._loop.out.qsize(),
            "shared_memory_slots": slots,
            "parts_copied_into_slots": counters["parts_copied_into_slots"],
            "workers": workers,
            "hosts": hosts,
            "malformed_messages": counters["malformed_messages"],
            "dropped_parts": counters["dropped_parts"],
            "reassigned_units": counters["reassigned_units"],
            "batches_dispatched": gate.dispatched,
            "max_inflight_batches": gate.most_inflight,
            "cursor": [self.cursor.epoch, self.cursor.batch],
            **skipped,
            "input_bound": bound,
            "suggested_extra_workers": extra,
            "verdict": line,
        }


def _shutdown(loop: FeedLoop, workers: LocalWorkers, tmpdir: str, closed: threading.Event) -> None:
    closed.set()
    loop.stop()
    workers.stop()
    shutil.rmtree(tmpdir, ignore_errors=True)


def _close_all_streams() -> None:
    """At interpreter exit, end every stream first: a tf.data thread blocked in ``next()``
    returns, and TensorFlow's own shutdown does not wait on it forever."""
    for stream in list(_live_streams):
        with contextlib.suppress(Exception):  # exit must go on whatever one stream does
            stream.close()


# threading's exit hooks run before non-daemon threads are joined and before atexit handlers,
# so streams end before anything at exit can wait on them. (atexit as a fallback.)
_register = getattr(threading, "_register_atexit", None)
if _register is not None:
    _register(_close_all_streams)
else:  # pragma: no cover - CPython always has it
    import atexit

    atexit.register(_close_all_streams)
