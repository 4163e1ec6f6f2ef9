"""What every kind of user source is in the trainer: a class that knows the kind's facts
(:class:`KindClass`) and makes its scheduler (:class:`KindScheduler`), which runs the kind's
plan once the handshake (:mod:`h5feed.consumer.sources.scheduler`) agreed on kind, length and
spec.

Adding a kind: a :class:`~h5feed.common.user_code.source_kinds.SourceKind` member; its producer
class
(:mod:`h5feed.producer.sources`); a class following :class:`KindClass` whose ``make``
returns a scheduler following :class:`KindScheduler`, in
:data:`h5feed.consumer.sources.kinds.SCHEDULERS`. ``tests/unit/common/test_source_kinds.py`` checks
that
every member has both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from h5feed.common.elements.values import ElementSpec
from h5feed.common.protocol import messages
from h5feed.common.user_code.source_kinds import SourceKind
from h5feed.consumer.core.assembly import Batch
from h5feed.consumer.core.counters import Counters
from h5feed.consumer.core.credits import CreditGate
from h5feed.consumer.core.ledger import Peer
from h5feed.consumer.core.scheduler import Reassignment, Send
from h5feed.consumer.plan.epoch_plan import Cursor
from h5feed.consumer.sources.options import SourceConfig

if TYPE_CHECKING:
    from h5feed.consumer.config.groups import FeedOptions


@dataclasses.dataclass(frozen=True, slots=True)
class KindSetup:
    """What a kind's scheduler starts from once the handshake agreed: the source, its spec
    and length (None where the kind has none), the iteration's epochs from ``start``, and
    the loop's counters and credit gate."""

    config: SourceConfig
    spec: ElementSpec
    length: int | None
    job_id: str
    epochs: Iterator[int]
    start: Cursor
    counters: Counters
    gate: CreditGate


class KindScheduler(Protocol):
    """The plan of one kind of source; :class:`~.scheduler.SourceScheduler` hands it every
    call of the :class:`~h5feed.consumer.core.scheduler.Scheduler` protocol after the
    handshake, with the same meaning, plus these two."""

    def add(self, peer: Peer) -> list[Send]:
        """``peer`` loaded the source and its copy agreed: it takes part from now (for a
        kind whose :attr:`KindClass.shards_in_workers`, it took a lost worker's place)."""
        ...

    def on_check(self, peer: Peer, info: messages.SourceInfo) -> list[Send]:
        """A SOURCE_INFO after the handshake: the answer to a CHECK the kind asked for; one
        it did not ask for is counted as malformed."""
        ...

    def next_units(self, gate: CreditGate, peers: Sequence[Peer]) -> list[Send]: ...

    def take_released(self) -> list[Batch]: ...

    def on_data(self, peer: Peer, data: messages.Data) -> list[Batch]: ...

    def owns(self, peer: Peer) -> bool: ...

    def reassign(self, lost: Peer, heirs: Sequence[Peer], confirmed_dead: bool) -> Reassignment: ...

    @property
    def waiting_for_workers(self) -> bool: ...

    @property
    def finished(self) -> bool: ...

    def describe(self, unit_id: int) -> str: ...

    def samples_of(self, unit_id: int) -> list[tuple[Hashable, str]]: ...


class KindClass(Protocol):
    """A kind's facts, read by the handshake, the feed and the tf.data signature, and its
    scheduler."""

    #: The kind's name on the wire.
    kind: SourceKind
    #: Its workers tell a length (``len()``), which must be the same in every one.
    sized: bool
    #: Each item is a whole batch, taken as it is (not batched again by h5feed): no
    #: padding, no ragged fields, the batch's first dimension in the spec.
    whole_batches: bool
    #: Each worker's shard lives in it: a lost worker's work cannot move, its place waits
    #: for a joiner, and no other joiner is taken; an iteration cannot resume inside an
    #: epoch.
    shards_in_workers: bool
    #: What one of its indices names in messages ("item", "batch").
    noun: str
    #: Why it cannot pad its shards (``shard_remainder="pad"``: h5feed.consumer.plan.epoch_plan
    #: guarantee 3), in words; None where it can. The handshake refuses pad for it before
    #: any unit is sent.
    pad_refusal: str | None

    def epoch_batches(self, length: int | None, options: FeedOptions) -> int | None:
        """Batches per epoch, from the length the workers told; None where the epoch ends
        when the data does."""
        ...

    def make(self, setup: KindSetup) -> KindScheduler:
        """The kind's scheduler for one iteration."""
        ...

    def check_copies(
        self, config: SourceConfig, epoch: int, answers: Mapping[str, Sequence[messages.ItemCheck]]
    ) -> None:
        """SourceError where the workers' copies (worker name -> the checks it sent when it
        loaded the source, at ``epoch``) are not what the kind needs: one object for a
        dataset (:func:`~h5feed.consumer.sources.agreement.check_agreement`), different
        shards for a generator
        (:func:`~h5feed.consumer.sources.agreement.check_distinct_shards`)."""
        ...
