"""What crosses an iteration's edge: the one value it starts from, and what it found.

A :class:`~h5feed.consumer.feed.Feed` builds an :class:`IterationStart` for each iteration
(where it starts, what it leaves out, the fingerprint to keep, the index to check, what earlier
iterations learnt) and hands it to the :class:`~h5feed.consumer.stream.BatchStream`; the
stream writes what it found into its :class:`Outcome` (what its scheduler learnt, the epoch's
length, the index's digest, its final figures), which the feed reads when it next needs them.
Nothing is called back: a stream holds no reference to its feed, so a feed nobody else holds
is garbage collected while its stream runs (and its kept workers stop when that stream ends).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from h5feed.common.errors import ResumeError
from h5feed.consumer.plan import Cursor, Index
from h5feed.consumer.resume import IndexDigests
from h5feed.consumer.sources.options import Learnt


@dataclasses.dataclass(frozen=True, slots=True)
class IterationStart:
    """Everything one iteration starts from (built by ``Feed.stream``).

    ``cursor``: the first batch (epoch, batch); ``skip``: batches above it the trainer took
    already (a resumed ``deterministic=False`` run: made, not yielded); ``fingerprint``: the
    feed's (:mod:`h5feed.consumer.resume`; its ``index`` part, when known, replaced by the
    index this iteration's workers build); ``resume_index``: the index part of the state this
    iteration resumes, checked by :meth:`check_index`; ``known``/``file_sizes``: the files'
    index as an earlier iteration learnt it, when the files are unchanged since, and their
    sizes as just stat'ed (see ``HdfScheduler.start``); ``learnt``: a source's kind and spec
    as an earlier iteration learnt them (its workers are not asked to probe again);
    ``digests``: the feed's index hashes (one hash per index, reused across iterations)."""

    cursor: Cursor
    skip: frozenset[tuple[int, int]] = frozenset()
    fingerprint: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    resume_index: str | None = None
    known: Index | None = None
    file_sizes: tuple[int, ...] | None = None
    learnt: Learnt | None = None
    digests: IndexDigests = dataclasses.field(default_factory=IndexDigests, compare=False)

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


class Outcome:
    """What one iteration found, written by its stream (from the thread that calls ``next()``)
    and read by its feed (any thread): each field is set once, from None, by one writer.

    ``learnt``: what the scheduler's handshake taught (``Scheduler.learnt``), with the
    ``epoch_length``, and the index's ``digest`` (HDF5), from the first batch on (or the end,
    when it came before one); ``stats``: the final ``stats()``, once the stream is closed."""

    __slots__ = ("digest", "epoch_length", "learnt", "stats")

    def __init__(self) -> None:
        self.learnt: object | None = None
        self.epoch_length: int | None = None
        self.digest: str | None = None
        self.stats: dict[str, Any] | None = None
