"""The feed: a re-iterable source of batches, and the local workers it keeps across its
iterations (``h5feed.batches()`` returns one; ``h5feed.dataset()`` wraps one)."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np

from h5feed.common import trainer_main
from h5feed.common.errors import H5FeedError
from h5feed.common.exposure import warn_insecure_listen
from h5feed.consumer import resume
from h5feed.consumer.hdf5 import known_index
from h5feed.consumer.metrics import start_feed_metrics
from h5feed.consumer.options import FeedConfig, HdfConfig
from h5feed.consumer.plan import Cursor, Index, epoch_length
from h5feed.consumer.processes.worker_pool import PoolSlot
from h5feed.consumer.sources.options import Learnt
from h5feed.consumer.stream import BatchStream


class Feed:
    """A re-iterable source of batches: every ``iter()`` runs ``epochs`` epochs, continuing
    the epoch count of the previous iteration (so three iterations of a one-epoch feed see
    epochs 0, 1 and 2: three different plans). Thread-safe to iterate from several threads.

    Local workers persist across iterations (a feed without ``listen``): the first iteration
    starts them, each later one runs a new job on them (an HDF5 feed's indexes in memory; a
    source's modules imported, its factory called again: a new copy of the user's object per
    iteration), and they stop when the feed is closed (:meth:`close`) or garbage collected,
    or at exit.
    An iteration that starts while another runs gets its own workers, stopped at its end;
    after a failed iteration, or when a kept worker exited between iterations (that
    iteration raises WorkerDiedError naming it), the next iteration starts new workers.

    ``resume`` (see :mod:`h5feed.consumer.resume`): the first iteration starts there (and
    leaves out the batches the state lists as taken); its fingerprint is checked against this
    feed's at once (ResumeError naming the fields that differ), its ``index`` part when the
    index is known. :attr:`length` is the batches per epoch once known (from the index the
    consumer remembers for these files, else once an iteration's workers indexed them)."""

    def __init__(self, config: FeedConfig, resume_from: Any = None) -> None:
        if trainer_main.in_worker():  # the user's code, imported by a worker, builds a feed
            raise H5FeedError(
                "h5feed: a dataset was created inside an h5feed worker process, while it "
                "loaded your code (source=/transform=): module-level code that builds an "
                "h5feed dataset runs again in every worker. Put it under "
                '`if __name__ == "__main__":`, or keep the factory in a module of its own; '
                "a worker never starts workers"
            )
        self.config = config
        self.fingerprint = resume.fingerprint(config)
        self.length: int | None = None
        self._index_digests = resume.IndexDigests()
        # What identified the files when the last index was learnt (known_index.key): an
        # iteration whose files still match it starts from that index (HdfScheduler.start).
        self._index_key: str | None = None
        self._stream_key: str | None = None  # the files' key when the current stream began
        if isinstance(config, HdfConfig):
            key = known_index.key(config)
            known = known_index.load(config, key) if key is not None else None
            if known is not None:
                samples = known.num_videos * config.options.clips_per_video
                length = epoch_length(samples, config.options.plan_options())
                self._learn_index(self._index_digests(known), length)
                self._index_key = key
        point = resume.resume_point(resume_from) if resume_from is not None else None
        if point is not None and point.fingerprint:
            resume.check(point.fingerprint, self.fingerprint)
            if self.length is None and point.length is not None:
                # The saver's epoch length (the index it came from is checked at the first
                # batch, as the fingerprint's "index"): Keras needs it up front, see
                # resume.ResumePoint.length.
                self.length = point.length
        start = point.cursor if point is not None else Cursor()
        if self.length is not None and start.batch >= self.length:  # (e, len) is (e + 1, 0)
            start = Cursor(start.epoch + start.batch // self.length, start.batch % self.length)
        #: Where the first iteration starts (a resumed feed's position, else (0, 0)).
        self.start = start
        self._resume = point
        self._next_epoch = start.epoch
        self._lock = threading.Lock()
        self._current: weakref.ref[BatchStream] | None = None
        self._last_stats: dict[str, Any] | None = None
        options = config.options
        if options.listen is not None:  # seen by default, unlike h5feed's log lines
            warn_insecure_listen(
                options.listen, keyed=options.curve_key is not None, insecure=options.insecure
            )
        # /metrics and /stats (metrics_port= or $H5FEED_METRICS_PORT, read here, once); the
        # server stops when the feed is garbage collected.
        self._metrics = start_feed_metrics(self, config.options.metrics_port)
        if self._metrics is not None:
            weakref.finalize(self, self._metrics.server.close)
        self._slot: PoolSlot | None = None
        if self._keeps_workers():
            self._slot = PoolSlot(options)
            weakref.finalize(self, self._slot.close)  # the kept workers stop with the feed

    def _keeps_workers(self) -> bool:
        """Whether local workers persist across iterations: a feed with local workers and no
        ``listen`` (remote producers join per iteration). An HDF5 feed's workers keep their
        indexes; a source's keep the user's modules imported (torch, TensorFlow: seconds
        each) and build a new copy of the user's object for each iteration (a new job)."""
        options = self.config.options
        return options.workers > 0 and not options.listen

    def close(self) -> None:
        """Stop the workers kept across iterations (a running iteration keeps its workers
        until it ends). Iterating again afterwards starts workers per iteration."""
        if self._slot is not None:
            self._slot.close()

    @property
    def metrics_port(self) -> int | None:
        """The port serving ``/metrics`` and ``/stats`` (the one bound when asked for 0)."""
        return self._metrics.port if self._metrics is not None else None

    def stream(self) -> BatchStream:
        """Start the next iteration: takes ``epochs`` epoch numbers at once, so an iteration
        abandoned midway does not make the next one repeat its epochs."""
        epochs = self.config.options.epochs
        with self._lock:
            first = self._next_epoch
            self._next_epoch = first + epochs if epochs is not None else first
            point, self._resume = self._resume, None
        pool = self._slot.take() if self._slot is not None else None  # None: it is lent
        start, skip = Cursor(first, 0), frozenset[tuple[int, int]]()
        fingerprint = dict(self.fingerprint)
        known, sizes = self._known_index()
        saved_index = None
        if point is not None:  # the first iteration of a resumed feed
            start, skip = self.start, point.taken
            saved_index = (point.fingerprint or {}).get("index")  # checked once it is built
        stream = BatchStream(
            self.config,
            start,
            epochs,
            on_close=self._keep_stats,
            learnt=self._known(),
            skip=skip,
            fingerprint=fingerprint,
            resume_index=saved_index,
            on_index=self._learn_index,
            index_digest=self._index_digests,
            known=known,
            file_sizes=sizes,
            pool=(pool, self._slot) if pool is not None and self._slot is not None else None,
        )
        self._started(stream)
        self._current = weakref.ref(stream)
        return stream

    def _known_index(self) -> tuple[Index | None, list[int] | None]:
        """The last index learnt, if the files are still what they were then (same devices
        and inodes, sizes, modification times), and the files' sizes: one stat per file."""
        if not isinstance(self.config, HdfConfig):
            return None, None
        stats = known_index.file_stats(self.config)
        if stats is None:
            self._stream_key = None
            return None, None
        self._stream_key = known_index.key_of(self.config, stats)
        sizes = [st.st_size for st in stats]
        last = self._index_digests.last
        if last is None or self._stream_key != self._index_key:
            return None, sizes
        return last, sizes

    def _learn_index(self, digest: str, length: int) -> None:
        """The index of the files is known: its hash joins the fingerprint, and the epoch's
        length is known from now on."""
        if self._stream_key is not None:
            self._index_key = self._stream_key  # the files as they were when it was read
        self.fingerprint["index"] = digest
        self.length = length

    def _known(self) -> Learnt | None:
        """What the next iteration starts from, learnt by earlier ones (a source's kind and
        spec); an HDF5 feed learns nothing."""
        return None

    def _started(self, stream: BatchStream) -> None:
        """Called with each new iteration (a source feed learns from it)."""

    def _keep_stats(self, stats: dict[str, Any]) -> None:
        self._last_stats = stats
        if self._metrics is not None:
            self._metrics.totals.add(stats)

    def stats(self) -> dict[str, Any]:
        """The statistics of the running iteration, else the last one's final figures, as a
        plain dict (see :meth:`BatchStream.stats`); ``{"running": False}`` before the first.
        Cheap: call it as often as you like, from any thread."""
        stream = self._current() if self._current is not None else None
        if stream is not None:
            stats = stream.stats()
        else:
            stats = dict(self._last_stats) if self._last_stats else {"running": False}
        if self._metrics is not None:
            stats["metrics_port"] = self._metrics.port
        return stats

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return self.stream()
