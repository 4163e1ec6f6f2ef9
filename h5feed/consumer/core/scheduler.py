"""The protocol every input kind's scheduler follows, and what it hands back to the loop.

A scheduler knows one kind of input (HDF5 clips: :mod:`h5feed.consumer.hdf5.scheduler`; the
user's map-style, keras and generator sources: :mod:`h5feed.consumer.sources.scheduler`) and
nothing of sockets, threads or processes: it gets peers and typed messages, and returns the
messages to send (:class:`Send`) and the batches that are complete. The loop
(:mod:`h5feed.consumer.core.loop`) sends, releases and handles peer events; the credit gate decides
how much may be dispatched. So a scheduler is tested with tiny fake peers, in-process.

One hand-over rule for every kind: :meth:`Scheduler.reassign` gives a lost peer's work to the
live ones and sends again every unit it had not answered (with no live peer, the work waits
for one to :meth:`Scheduler.join`); what it cannot move comes back as
:attr:`Reassignment.unmovable`, and the loop fails the iteration as that kind's contract says.
:meth:`Scheduler.join` gives a peer that joined during the iteration (a replacement, a
restarted or an added producer) a share of the work from the next unit on.

What a scheduler hands back beyond batches is read, never pushed: :attr:`Scheduler.learnt`
(what its handshake taught, which a later iteration starts from), :attr:`Scheduler.epoch_length`
(the one place an epoch's batch count is computed for an iteration) and
:meth:`Scheduler.figures` (what ``stats()`` reports of it: :mod:`h5feed.consumer.telemetry.stats`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from h5feed.common.protocol import messages
from h5feed.consumer.core.assembly import Batch
from h5feed.consumer.core.credits import CreditGate
from h5feed.consumer.core.ledger import Peer


@dataclasses.dataclass(frozen=True, slots=True)
class Send:
    """A message for one peer."""

    peer: Peer
    message: messages.Message


@dataclasses.dataclass(frozen=True, slots=True)
class Reassignment:
    """What :meth:`Scheduler.reassign` did: the messages to send to the heirs, how many units
    moved, and why the rest cannot move (None: everything moved)."""

    sends: list[Send]
    moved_units: int
    unmovable: str | None = None


def no_skips() -> dict[str, Any]:
    """The bad-data keys of ``stats()`` for a kind that skips nothing (see
    ``h5feed.consumer.hdf5.bad_data.SkipLog.snapshot``): every feed has the same keys."""
    return {"skipped": 0, "skipped_per_epoch": {}, "skipped_samples": []}


@dataclasses.dataclass(frozen=True, slots=True)
class Figures:
    """What a scheduler counts that ``stats()`` reports: shared-memory slots made (0: batches
    come over the socket), the files a peer reads (HDF5: owned or shared; None: this kind
    has no files), and the samples skipped for bad data."""

    shared_memory_slots: int = 0
    files_owned: Callable[[Peer], int] | None = None
    skipped: Mapping[str, Any] = dataclasses.field(default_factory=no_skips)


#: What a scheduler's handshake teaches (:attr:`Scheduler.learnt`): each input kind's own type.
LearntT_co = TypeVar("LearntT_co", covariant=True)


class Scheduler(Protocol[LearntT_co]):
    """One input kind's handshake, plan, dispatch, assembly and hand-over; ``LearntT_co``:
    the type of what its handshake teaches (the core reads none: ``Scheduler[object]``)."""

    def start(self, peers: Sequence[Peer]) -> list[Send]:
        """The handshake's first messages, to the peers that joined (the work is shared out
        among exactly these)."""
        ...

    def on_control(self, peer: Peer, message: messages.Message) -> list[Send]:
        """A handshake answer (INDEX, SOURCE_INFO) or another message that is not DATA or
        ERROR; returns what to send next. Raises an ``H5FeedError`` for a fatal answer."""
        ...

    @property
    def ready(self) -> bool:
        """Whether the handshake is over and units can be dispatched."""
        ...

    @property
    def handshake_answers(self) -> int:
        """Answers received so far in the handshake (the loop's timeout watches it grow)."""
        ...

    def handshake_waiting(self) -> str:
        """What the handshake still waits for, in words (for the timeout's error)."""
        ...

    def next_units(self, gate: CreditGate, peers: Sequence[Peer]) -> list[Send]:
        """Dispatch batches while the gate has credits (``gate.dispatch()`` per batch) and the
        plan has batches; the units to send to ``peers`` (the live ones)."""
        ...

    def take_released(self) -> list[Batch]:
        """The batches :meth:`next_units` completed without any part (a padded shard's batch
        of padded rows only: ``h5feed.consumer.plan.epoch_plan`` guarantee 3), in release order,
        each
        once; the loop takes them after every dispatch."""
        ...

    def on_data(self, peer: Peer, data: messages.Data) -> list[Batch]:
        """A part from ``peer``: the batches complete now, in release order. An unexpected
        part (a duplicate, a re-sent unit's original) is dropped and counted."""
        ...

    def owns(self, peer: Peer) -> bool:
        """Whether ``peer`` holds work only it can do now (HDF5 files it owns, a generator's
        shard), beyond the units it was sent."""
        ...

    def reassign(self, lost: Peer, heirs: Sequence[Peer], confirmed_dead: bool) -> Reassignment:
        """Move ``lost``'s work (see the module docstring). ``confirmed_dead``: its process is
        known to be gone (else it might still write into shared memory it was given)."""
        ...

    def join(self, peer: Peer) -> list[Send]:
        """A peer that joined after :meth:`start`: what to send it so that it takes a share
        of the work (nothing, where this kind takes no joiners)."""
        ...

    def unreadable(self, peer: Peer, file_index: int, unit_id: int | None) -> list[Send] | None:
        """``peer`` cannot read file ``file_index`` (its ERROR of a ``FileReadError``): what
        to send so that another worker takes the file and the failed unit is made again, or
        None where that cannot be (no other live worker may take it, or this kind has no
        files): the caller then ends the run with the worker's error."""
        ...

    @property
    def waiting_for_workers(self) -> bool:
        """Whether work is parked because no live peer could take it (the loop bounds the
        wait with ``start_timeout_s``)."""
        ...

    @property
    def finished(self) -> bool:
        """Whether every planned batch has been released (or skipped)."""
        ...

    def describe(self, unit_id: int) -> str:
        """Unit ``unit_id`` as error messages name it."""
        ...

    def samples_of(self, unit_id: int) -> list[tuple[Hashable, str]]:
        """The samples of unit ``unit_id`` (in flight), each as a key that stays the same
        when the work is sent again in another unit (its epoch included), and as an error
        names it (HDF5: file, video and frames; a map item; a keras batch; a generator's
        pull). Empty for a unit not in flight."""
        ...

    @property
    def learnt(self) -> LearntT_co | None:
        """What the handshake taught that a later iteration of the same feed starts from
        (HDF5: the files' ``Index``; a source: its kind, element spec and length, a
        ``Learnt``); None until known. Read by the stream (never pushed to the feed)."""
        ...

    @property
    def epoch_length(self) -> int | None:
        """Batches per epoch of this shard, once the handshake told it (None before, and for
        a kind whose epochs have no length: a generator)."""
        ...

    def figures(self) -> Figures:
        """Its figures now, for ``stats()`` (cheap; read from any thread)."""
        ...

    def close(self) -> None:
        """Release what the scheduler holds (shared-memory slots)."""
        ...
