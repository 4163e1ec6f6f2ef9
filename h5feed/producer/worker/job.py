"""A worker's job: the one protocol its event loop drives, whatever the job reads.

A consumer opens a job with a start message (JOB for HDF5 files, SOURCE for the user's
source), sends its units (UNIT; ITEMS or PULL) and, for some kinds, CHECKs. The worker's event
loop (:mod:`h5feed.producer.worker.loop`) answers every one of them through :class:`Job` and
never asks which kind of job it holds:

1. **open**: ``Kind.open(start, context)`` makes the job from its first start message
   (:attr:`Job.STARTS` names that message's type); raising there means no job is held (the
   loop sends the error as ERROR of the job, unit None);
2. **take**: ``job.take(start)`` yields the answers to a start message of this job, the first
   one included (INDEX_BATCHes of the files it names; SOURCE_INFO); a later start message of
   the same job adds to it (files taken over from a worker that left; the element spec);
   raising there sends ERROR and keeps the job;
3. **produce**: ``job.produce(unit)`` makes the DATA answering a unit of one of its
   :attr:`Job.UNITS` types and says how many bytes of elements it made (counted by the loop,
   with the unit's samples and busy time); raising sends ERROR naming the unit. A unit of
   another kind's type is answered with a ProtocolError by the loop, without asking the job
   (a message no kind answers is logged and dropped);
   Before each unit, a job that says :attr:`Job.reads_ahead` (an HDF5 job with files on
   object storage) is handed the units of it already waiting in the socket
   (``job.expect(units)``), so that it can fetch what they will read while it makes this
   one; the loop then answers them in order as before;
4. **check**: ``job.check(check)`` answers a CHECK, or None when this kind has no checks
   (the loop logs and drops it, as it does a CHECK of a job it does not hold);
5. **close**: ``job.close()`` releases what the job opened, once, when the next job starts,
   when a persistent worker's consumer says BYE, or when the worker leaves.

Every method runs on the worker's single event-loop thread. A job never touches the socket:
it makes messages, the loop sends and counts them (and may use :class:`JobContext`'s counters
for what only the job knows, e.g. files reopened, slots refused).

To add a way to read (object storage next): one class following :class:`Job`, and its entry
in :data:`h5feed.producer.worker.kinds.KINDS` (the start message it answers must be one the
loop has not seen: a new kind of job is a new start message).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, ClassVar, Protocol, Self, TypeVar

from h5feed.common.protocol import messages
from h5feed.common.worker_settings import WorkerSettings
from h5feed.producer.worker.code_policy import CodePolicy, policy_of

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from h5feed.producer.files.index_cache import MemoryIndex
    from h5feed.producer.files.open_files import OpenFiles
    from h5feed.producer.worker.stats import WorkerCounters

__all__ = ["Job", "JobContext", "Produced"]

#: The DATA answering a unit, and the bytes of elements made for it (in a shared-memory slot
#: when the DATA carries no array).
Produced = tuple[messages.Data, int]

_Start = TypeVar("_Start", contravariant=True)
_Unit = TypeVar("_Unit", contravariant=True)


@dataclasses.dataclass(frozen=True, slots=True)
class JobContext:
    """What a job may use of the worker that holds it: the worker's settings whole, its
    counters, and what a persistent worker keeps across jobs (None in a worker that is not)."""

    settings: WorkerSettings
    counters: WorkerCounters
    #: A persistent worker's indexes, kept across jobs (``index_cache.MemoryIndex``).
    memory: MemoryIndex | None = None
    #: A persistent worker's open HDF5 files, kept across jobs.
    files: OpenFiles | None = None

    @property
    def code_policy(self) -> CodePolicy:
        """Which user code a job may import (``settings.code``)."""
        code = self.settings.code
        return policy_of(code.allow_code, code.trust_code)

    @property
    def local(self) -> bool:
        """A trainer's own worker (not persistent): one iteration's, on the trainer's host."""
        return not self.settings.process.persistent


class Job(Protocol[_Start, _Unit]):
    """One job a worker holds (the module docstring says how the loop drives it)."""

    #: The start message that opens (and adds to) a job of this kind.
    STARTS: ClassVar[type[messages.Message]]
    #: The unit messages it answers with DATA.
    UNITS: ClassVar[tuple[type[messages.Message], ...]]
    #: The kind with its article, as an error names it ("an HDF5", "a source").
    DESCRIBED: ClassVar[str]

    @property
    def id(self) -> str:
        """The job's id: messages of another job are not this one's."""
        ...

    @classmethod
    def open(cls, start: _Start, context: JobContext) -> Self:
        """The job of ``start``, its first start message (step 1)."""
        ...

    def take(self, start: _Start) -> Iterator[messages.Message]:
        """The answers to a start message of this job (step 2)."""
        ...

    def produce(self, unit: _Unit) -> Produced:
        """The DATA answering ``unit`` and the bytes it made (step 3)."""
        ...

    @property
    def reads_ahead(self) -> bool:
        """Whether it wants the units waiting behind the one in hand (step 3)."""
        ...

    def expect(self, units: Sequence[_Unit]) -> None:
        """The units of this job waiting behind the next one, in order (step 3)."""
        ...

    def check(self, check: messages.Check) -> messages.Message | None:
        """The answer to a CHECK, or None: this kind has no checks (step 4)."""
        ...

    def close(self) -> None:
        """Release what the job opened (step 5)."""
        ...
