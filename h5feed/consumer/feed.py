"""The feed: a re-iterable source of batches, and the local workers it keeps across its
iterations (``h5feed.batches()`` returns one; ``h5feed.dataset()`` wraps one)."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from h5feed.common.errors import H5FeedError
from h5feed.common.trust.exposure import warn_insecure_listen
from h5feed.common.user_code import trainer_main
from h5feed.consumer.hdf5.config import hdf_config
from h5feed.consumer.inputs import input_of
from h5feed.consumer.iteration import IterationStart, Outcome
from h5feed.consumer.options import FeedConfig
from h5feed.consumer.plan.epoch_plan import Cursor, Index, epoch_length
from h5feed.consumer.plan.rest import Rest
from h5feed.consumer.position import fingerprint as fingerprints
from h5feed.consumer.position import lineage, resume
from h5feed.consumer.position.lineage import LineageLog
from h5feed.consumer.processes.worker_pool import PoolSlot
from h5feed.consumer.sources.api import make_source_config
from h5feed.consumer.sources.options import Learnt, SourceConfig
from h5feed.consumer.stream import BatchStream
from h5feed.consumer.telemetry.metrics import start_feed_metrics


class Feed:
    """What ``h5feed.batches()`` returns (and ``h5feed.dataset()`` wraps): a re-iterable
    source of batches; each ``iter()`` is a new :class:`~h5feed.consumer.stream.BatchStream`.
    Every ``iter()`` runs ``epochs`` epochs, continuing
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

    ``resume`` (see docs/trainer/resume.md): the first iteration starts there (and
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
        #: What differs between an HDF5 feed and a source, asked here (never the config's
        #: type): :mod:`h5feed.consumer.inputs`.
        self.input = input_of(config)
        self._fingerprint = fingerprints.fingerprint(config) | self.input.object_parts()
        self._length: int | None = None
        self._samples: int | None = None  # per epoch, all shards (HDF5), once known
        self._learnt: Learnt | None = None
        self._index_digests = fingerprints.IndexDigests()
        # What identified the files when the last index was learnt (known_index.key): an
        # iteration whose files still match it starts from that index (HdfScheduler.start).
        self._index_key: str | None = None
        # The iterations started and not yet read to their end: each one's stream (weakly),
        # what it found, and the files' key when it began (see _read).
        self._iterations: list[tuple[weakref.ref[BatchStream], Outcome, str | None]] = []
        self._lock = threading.RLock()
        remembered = self.input.remembered()  # an HDF5 feed's files' index, if a consumer kept it
        if remembered is not None:
            known, key = remembered
            self._learn_index(self._index_digests(known.index), known.epoch_length, key)
            self._samples = known.samples
        point = resume.resume_point(resume_from) if resume_from is not None else None
        if point is not None and point.fingerprint:
            resume.check_point(point, self._fingerprint)
            if point.rest is not None and self._length is None:
                # The rest of an epoch on this many shards: its length follows from the
                # epoch's samples (checked against the index at the first batch).
                self._length = epoch_length(point.rest.samples, config.options.plan)
            if self._length is None and point.length is not None:
                # The saver's epoch length (the index it came from is checked at the first
                # batch, as the fingerprint's "index"): Keras needs it up front, see
                # resume.ResumePoint.length.
                self._length = point.length
        if point is not None and self._samples is None:
            self._samples = point.samples
        start = Cursor()
        if point is not None:
            start = resume.first_cursor(point, config.options.plan, self._length)
        #: The lineage record (``lineage=``), cut to the batches the resumed state took (see
        #: :mod:`h5feed.consumer.position.lineage`); made here, so that a bad path fails
        #: before any worker starts.
        self.lineage: LineageLog | None = None
        if config.options.record.lineage is not None:
            taken = lineage.taken_by(start, point.taken) if point is not None else None
            self.lineage = LineageLog(
                config.options.record.lineage,
                config,
                self._fingerprint,
                taken,
                self.input.lineage_columns(),
            )
        #: Where the first iteration starts (a resumed feed's position, else (0, 0)).
        self.start = start
        self._resume = point
        self._rest = point.rest if point is not None else None
        self._next_epoch = start.epoch
        self._current: weakref.ref[BatchStream] | None = None
        self._last_stats: dict[str, Any] | None = None
        options = config.options
        if options.network.listen is not None:  # seen by default, unlike h5feed's log lines
            warn_insecure_listen(
                options.network.listen,
                keyed=options.network.curve_key is not None,
                insecure=options.network.insecure,
            )
        # /metrics and /stats (metrics_port= or $H5FEED_METRICS_PORT, read here, once); the
        # server stops when the feed is garbage collected.
        self._metrics = start_feed_metrics(self, config.options.network.metrics_port)
        if self._metrics is not None:
            weakref.finalize(self, self._metrics.server.close)
        self._slot: PoolSlot | None = None
        if self._keeps_workers():
            self._slot = PoolSlot(options, self.input.data_root)
            weakref.finalize(self, self._slot.close)  # the kept workers stop with the feed

    def _keeps_workers(self) -> bool:
        """Whether local workers persist across iterations: a feed with local workers and no
        ``listen`` (remote producers join per iteration). An HDF5 feed's workers keep their
        indexes; a source's keep the user's modules imported (torch, TensorFlow: seconds
        each) and build a new copy of the user's object for each iteration (a new job)."""
        options = self.config.options
        return options.processes.start_workers > 0 and not options.network.listen

    def close(self) -> None:
        """Stop the workers kept across iterations (a running iteration keeps its workers
        until it ends). Iterating again afterwards starts workers per iteration."""
        if self._slot is not None:
            self._slot.close()

    @property
    def metrics_port(self) -> int | None:
        """The port serving ``/metrics`` and ``/stats`` (the one bound when asked for 0)."""
        return self._metrics.port if self._metrics is not None else None

    @property
    def fingerprint(self) -> dict[str, Any]:
        """This feed's fingerprint (what decides its batches, which a resume state must match:
        docs/trainer/resume.md), its ``index`` part once an iteration (or the known index)
        told it."""
        self._read()
        return self._fingerprint

    @property
    def length(self) -> int | None:
        """Batches per epoch, once known (None before; a generator source: always None)."""
        self._read()
        return self._length

    @property
    def samples(self) -> int | None:
        """Samples per epoch, all shards' (HDF5), once known (a resume state's tell it)."""
        self._read()
        return self._samples

    @property
    def rest(self) -> Rest | None:
        """The rest of an epoch after a change of topology this feed resumed in (see
        docs/semantics.md), else None."""
        return self._rest

    @property
    def learnt(self) -> Learnt | None:
        """A source's kind and element spec, once an iteration's workers told them; then
        never changed (every later iteration gives its workers that spec: no probe, the same
        structure as the batches before and as the tf.data signature). None before, and for
        an HDF5 feed."""
        self._read()
        return self._learnt

    def stream(self) -> BatchStream:
        """Start the next iteration: takes ``epochs`` epoch numbers at once, so an iteration
        abandoned midway does not make the next one repeat its epochs."""
        epochs = self.config.options.plan.epochs
        self._read()  # what the iterations before learnt: the index, a source's spec
        with self._lock:
            first = self._next_epoch
            self._next_epoch = first + epochs if epochs is not None else first
            point, self._resume = self._resume, None
            start, files_key = self._start(first, point)
        lease = self._slot.take() if self._slot is not None else None  # None: it is lent
        stream = BatchStream(self.config, start, lease)
        with self._lock:
            self._iterations.append((weakref.ref(stream), stream.outcome, files_key))
            self._current = weakref.ref(stream)
        return stream

    def _start(
        self, epoch: int, point: resume.ResumePoint | None
    ) -> tuple[IterationStart, str | None]:
        """The next iteration's start, and the files' key as they are now (HDF5)."""
        known, sizes, files_key = self._known_index()
        cursor, skip, saved_index = Cursor(epoch, 0), frozenset[tuple[int, int]](), None
        rest = None
        if point is not None:  # the first iteration of a resumed feed
            cursor, skip, rest = self.start, point.taken, point.rest
            saved_index = (point.fingerprint or {}).get("index")  # checked once it is built
        start = IterationStart(
            cursor=cursor,
            skip=skip,
            fingerprint=dict(self._fingerprint),
            resume_index=saved_index,
            known=known,
            file_sizes=sizes,
            learnt=self._learnt,
            digests=self._index_digests,
            rest=rest,
            samples=self._samples,
            lineage=self.lineage,
        )
        return start, files_key

    def _known_index(self) -> tuple[Index | None, tuple[int, ...] | None, str | None]:
        """The last index learnt, if the files are still what they were then (same devices
        and inodes, sizes, modification times), the files' sizes (one stat per file) and
        their key."""
        files = self.input.files_now()  # None: a source, or files not stat'ed from here
        if files is None:
            return None, None, None
        sizes, files_key = files
        last = self._index_digests.last
        if last is None or files_key != self._index_key:
            return None, sizes, files_key
        return last, sizes, files_key

    def _read(self) -> None:
        """Take in what the iterations found (see :class:`~h5feed.consumer.iteration.Outcome`),
        in the order they started; an iteration is forgotten once it ended (its final figures
        kept) or its stream is gone."""
        with self._lock:
            for entry in list(self._iterations):
                ref, outcome, files_key = entry
                learnt = self.input.source_lesson(outcome.learnt)  # None: HDF5's index
                if outcome.digest is not None and outcome.epoch_length is not None:
                    self._learn_index(outcome.digest, outcome.epoch_length, files_key)
                    self._samples = outcome.samples
                elif learnt is not None and self._learnt is None:
                    self._learnt = learnt  # a source's: never changes after
                    if self._length is None:
                        self._length = outcome.epoch_length
                if outcome.stats is not None:
                    self._last_stats = outcome.stats
                    if self._metrics is not None:
                        self._metrics.totals.add(outcome.stats)
                if outcome.stats is not None or ref() is None:
                    self._iterations.remove(entry)

    def _learn_index(self, digest: str, length: int, files_key: str | None) -> None:
        """The index of the files is known: its hash joins the fingerprint, and the epoch's
        length is known from now on; ``files_key``: the files as they were when it was read."""
        if files_key is not None:
            self._index_key = files_key
        self._fingerprint["index"] = digest
        self._length = length

    def stats(self) -> dict[str, Any]:
        """The statistics of the running iteration, else the last one's final figures, as a
        plain dict (see :meth:`BatchStream.stats`); ``{"running": False}`` before the first.
        Cheap: call it as often as you like, from any thread."""
        self._read()
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


class SourceFeed(Feed):
    """A :class:`Feed` of a user source.

    Guarantees: the configuration never changes. What the workers tell (kind and element
    spec) is :attr:`~Feed.learnt`, kept by the feed once an iteration's handshake has
    finished; every iteration started after that gives its workers that spec (no probe), so
    its batches have the same structure as the ones before (and as the tf.data signature).
    """

    config: SourceConfig


def open_feed(files: Any = None, *, resume: Any = None, **kwargs: Any) -> Feed:
    """``h5feed.batches()`` (:func:`h5feed.consumer.api.batches` says what it takes), for the
    front ends below the entry points: :func:`feed_config`, then :func:`feed_of` it."""
    return feed_of(feed_config(files, kwargs), resume)


def feed_config(files: Any, kwargs: Mapping[str, Any]) -> FeedConfig:
    """The configuration of ``batches()``' arguments, validated before any process starts:
    an HDF5 feed's, or with ``source=`` a source feed's. A front end that must know the
    feed's options before it opens the feed builds this first and asks it."""
    if kwargs.get("source") is not None:
        return make_source_config(files, kwargs)
    return hdf_config(files, kwargs)


def feed_of(config: FeedConfig, resume: Any = None) -> Feed:
    """The feed over ``config`` (a source's is a :class:`SourceFeed`)."""
    return SourceFeed(config, resume) if input_of(config).kind == "source" else Feed(config, resume)
