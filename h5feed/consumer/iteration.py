"""What crosses an iteration's edge: the one value it starts from, and what it found.

A :class:`~h5feed.consumer.feed.Feed` builds an :class:`IterationStart` for each iteration
(where it starts, what it leaves out, the fingerprint to keep, the index to check, what earlier
iterations learnt) and hands it to the :class:`~h5feed.consumer.stream.BatchStream`, which
makes its scheduler from it (:func:`make_scheduler`) and keeps where the trainer stands in a
:class:`Position`. The stream writes what it found into its :class:`Outcome` (what its
scheduler learnt, the epoch's length, the index's digest, its final figures), which the feed
reads when it next needs them.

Guarantees:

1. Nothing is called back: a stream holds no reference to its feed, so a feed nobody else
   holds is garbage collected while its stream runs (and its kept workers stop when that
   stream ends).
2. A later iteration of a feed starts from what the earlier ones learnt: the files' index
   while the files are unchanged, a source's kind and spec forever (the feed reads the
   outcomes before it builds the next start).
3. A resumed iteration's index is checked against the saved one at its first batch
   (:meth:`IterationStart.check_index`: ResumeError naming both digests, from ``next()``).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Mapping
from typing import Any, TypeAlias

from h5feed.common.errors import ResumeError
from h5feed.consumer.core.counters import Counters
from h5feed.consumer.core.credits import CreditGate
from h5feed.consumer.core.scheduler import Scheduler
from h5feed.consumer.inputs import FeedInput, input_of
from h5feed.consumer.options import FeedConfig
from h5feed.consumer.plan.epoch_plan import Cursor, Index
from h5feed.consumer.plan.rest import Rest
from h5feed.consumer.position import resume
from h5feed.consumer.position.fingerprint import IndexDigests
from h5feed.consumer.position.lineage import LineageLog
from h5feed.consumer.sources.options import Learnt

#: What an iteration's handshake teaches (``Scheduler.learnt``): an HDF5 feed's files'
#: ``Index``, a source's kind, element spec and length (a ``Learnt``).
Lesson: TypeAlias = Index | Learnt


@dataclasses.dataclass(frozen=True, slots=True)
class IterationStart:
    """Everything one iteration starts from (built by ``Feed.stream``).

    ``cursor``: the first batch (epoch, batch); ``skip``: batches above it the trainer took
    already (a resumed ``deterministic=False`` run: made, not yielded); ``fingerprint``: the
    feed's (:mod:`h5feed.consumer.position.fingerprint`; its ``index`` part, when known, replaced
    by the
    index this iteration's workers build); ``resume_index``: the index part of the state this
    iteration resumes, checked by :meth:`check_index`; ``known``/``file_sizes``: the files'
    index as an earlier iteration learnt it, when the files are unchanged since, and their
    sizes as just stat'ed (see ``HdfScheduler.start``); ``learnt``: a source's kind and spec
    as an earlier iteration learnt them (its workers are not asked to probe again);
    ``digests``: the feed's index hashes (one hash per index, reused across iterations);
    ``rest``: the rest of an epoch after a change of topology the resumed state lies in
    (:mod:`h5feed.consumer.plan.rest`), planned for that epoch and kept in the states saved in it;
    ``samples``: the epoch's samples (all shards), when the state this iteration resumes
    told them; ``lineage``: the feed's record, which the stream appends each batch it
    takes to."""

    cursor: Cursor
    skip: frozenset[tuple[int, int]] = frozenset()
    fingerprint: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    resume_index: str | None = None
    known: Index | None = None
    file_sizes: tuple[int, ...] | None = None
    learnt: Learnt | None = None
    digests: IndexDigests = dataclasses.field(default_factory=IndexDigests, compare=False)
    rest: Rest | None = None
    samples: int | None = None
    lineage: LineageLog | None = dataclasses.field(default=None, compare=False)

    def check_index(self, index: Index) -> str:
        """The digest of ``index`` (the fingerprint's ``index`` part); ResumeError when the
        state this iteration resumes was saved over another index (files that change between
        two iterations of one feed are no error: only a resumed state is checked)."""
        digest = self.digests(index)
        saved = self.resume_index
        if saved is not None and saved != digest:
            raise ResumeError(
                "the resume state was saved by another dataset (or other data): "
                f"index: saved {saved!r}, now {digest!r} (a file's videos, frame counts or "
                "labels changed). Resume with the same files and plan options, or start afresh."
            )
        return digest


def make_scheduler(
    kind: FeedInput, start: IterationStart, job: str, counters: Counters, gate: CreditGate
) -> Scheduler[Lesson]:
    """The scheduler of input ``kind`` for one iteration (job id ``job``): the epochs from
    ``start.cursor`` on (``epochs`` of them; None: forever), and what earlier iterations
    learnt (an HDF5 feed's known index, a source's kind and spec)."""
    first, epochs = start.cursor.epoch, kind.config.options.plan.epochs
    numbers: Iterator[int] = (
        itertools.count(first) if epochs is None else iter(range(first, first + epochs))
    )
    return kind.scheduler(start, job, numbers, counters, gate)


class Outcome:
    """What one iteration found, written by its stream (from the thread that calls ``next()``)
    and read by its feed (any thread): each field is set once, from None, by one writer.

    ``learnt``: what the scheduler's handshake taught (``Scheduler.learnt``), with the
    ``epoch_length``, the index's ``digest`` and the epoch's ``samples`` (HDF5: all shards'),
    from the first batch on (or the end, when it came before one); ``stats``: the final
    ``stats()``, once the stream is closed."""

    __slots__ = ("digest", "epoch_length", "learnt", "samples", "stats")

    def __init__(self) -> None:
        self.learnt: Lesson | None = None
        self.epoch_length: int | None = None
        self.digest: str | None = None
        self.samples: int | None = None
        self.stats: dict[str, Any] | None = None


class Position:
    """Where one iteration stands: what the trainer has taken (as a resume state), the
    batches it leaves out, and what the handshake taught (its :attr:`outcome`). Used from the
    thread that calls ``next()``."""

    def __init__(self, config: FeedConfig, start: IterationStart) -> None:
        self.config = config
        self.input = input_of(config)
        self.start = start
        self.cursor = start.cursor  # the next batch the trainer takes (deterministic order)
        self.outcome = Outcome()
        self._skip = set(start.skip)
        #: The step (see :mod:`h5feed.consumer.position.lineage`) of the batch taken last, and
        #: of the next one: known once the epoch's length is (None: a generator source's).
        self.last_step: int | None = None
        self._next_step: int | None = None
        self._fingerprint = dict(start.fingerprint)  # its index part: this iteration's
        self._samples = start.samples  # the epoch's, all shards: states carry it
        point = resume.ResumePoint(start.cursor, start.skip)
        self._progress = resume.Progress(point, config.options.plan.deterministic)

    def learn(self, learnt: Lesson | None, length: int | None) -> None:
        """The handshake is over (the first batch is here): an HDF5 index is checked against
        the resumed state's (ResumeError), joins the fingerprint, tells the epoch's length,
        and is remembered for the next dataset over these files; the outcome says it all."""
        cursor = self.start.cursor
        if length is not None and self._next_step is None:  # the batches taken before it
            self._next_step = cursor.epoch * length + cursor.batch + len(self.start.skip)
        lesson = self.input.index_lesson(learnt)
        if lesson is not None:  # an HDF5 feed's files' index
            digest = self.start.check_index(lesson.index)
            if digest != self._fingerprint.get("index"):  # new to this feed: remembered
                lesson.remember()
            self._samples = lesson.samples
            self.outcome.samples = self._samples  # before the digest: the feed reads that
            self._fingerprint["index"] = self.outcome.digest = digest
            if length is not None:
                self._progress.set_length(length)
        self.ended(learnt, length)

    def ended(self, learnt: Lesson | None, length: int | None) -> None:
        """What the handshake taught, if the iteration ends before a first batch (a source's
        kind and spec are kept all the same); once set, the outcome's lesson stays."""
        outcome = self.outcome
        if outcome.learnt is None and learnt is not None:
            outcome.epoch_length = length  # before learnt: a reader that sees learnt sees it
            outcome.learnt = learnt

    def take(self, epoch: int, batch: int) -> bool:
        """Batch ``(epoch, batch)`` is here: False when the trainer took it before the
        resume (made, not yielded), else it is taken now."""
        if (epoch, batch) in self._skip:
            self._skip.discard((epoch, batch))
            return False
        self.cursor = Cursor(epoch, batch + 1)
        self._progress.take(epoch, batch)
        self.last_step = self._next_step
        if self._next_step is not None:
            self._next_step += 1
        return True

    def state(self) -> dict[str, Any]:
        """The resume state of what was taken (see :mod:`h5feed.consumer.position.resume`)."""
        point = self._progress.point(self._fingerprint, self.start.rest, self._samples)
        return point.to_state()
