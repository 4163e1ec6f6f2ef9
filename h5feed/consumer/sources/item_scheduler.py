"""The plan of the kinds whose workers hold the same dataset (map, keras), by index.

Each epoch's order of the ``length`` indices is :func:`plan.epoch_order` (seeded
permutation, shard); each unit is one batch's indices (``ItemKind.items_per_batch`` of them:
a map source's ``batch_size`` items, the last batch partial unless ``drop_remainder``; a keras
source's one batch index), one ITEMS unit sent to the live worker holding the fewest units
(any worker serves any item). Exactly once, the same batches whatever the number of workers;
released in plan order when ``deterministic``.

A kind whose ``checks_every_epoch`` (keras: ``on_epoch_end`` may change the object): before
the first unit of each later epoch, every serving worker answers a CHECK (its copy's digest
of the common items after its ``on_epoch_end`` calls); that epoch's units are dispatched only
once the copies agree (:mod:`h5feed.consumer.sources.agreement`). A worker that joins once a
later epoch began serves only after its CHECK of the current epoch agrees with the others'
answers.

A padded shard (``shard_remainder="pad"``; map sources only, the handshake refuses the rest):
a unit holds a batch's real items only, a padded item goes to no worker; the batch is the
workers' rows then zero rows, with ``sample`` and ``valid`` (:mod:`.padding`). A batch of
padded items only is made at dispatch and handed over by :meth:`ItemScheduler.take_released`.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

from h5feed.common.elements.values import Field
from h5feed.common.errors import H5FeedError, WorkerTimeoutError
from h5feed.common.protocol import messages
from h5feed.common.system.logs import consumer_log
from h5feed.consumer.core.assembly import Batch
from h5feed.consumer.core.credits import CreditGate
from h5feed.consumer.core.ledger import Ledger, Peer, Unit
from h5feed.consumer.core.ordering import PlannedRelease
from h5feed.consumer.core.scheduler import Reassignment, Send
from h5feed.consumer.plan.epoch_plan import PAD_SAMPLE, Cursor, epoch_order
from h5feed.consumer.sources.agreement import check_agreement
from h5feed.consumer.sources.kind import KindClass, KindSetup
from h5feed.consumer.sources.padding import padded_fields, with_positions
from h5feed.consumer.sources.parts import Parts

if TYPE_CHECKING:
    from h5feed.consumer.config.groups import FeedOptions


class ItemKind(KindClass, Protocol):
    """A dataset kind's facts that its :class:`ItemScheduler` reads."""

    #: ``on_epoch_end`` may change the object: every later epoch's copies are checked.
    checks_every_epoch: bool

    def items_per_batch(self, options: FeedOptions) -> int:
        """Indices per unit."""
        ...

    def batches_of(self, items: int, options: FeedOptions) -> int:
        """Batches of an epoch of ``items`` indices."""
        ...

    def batch(self, parts: Parts, epoch: int, index: int, fields: list[Field], items: int) -> Batch:
        """The batch a unit of ``items`` indices answered with ``fields``."""
        ...

    def describe_items(self, items: Sequence[int]) -> str:
        """A unit's indices in words."""
        ...


def epoch_batches(of: ItemKind, length: int | None, options: FeedOptions) -> int | None:
    """Batches per epoch of a dataset kind of ``length`` indices (every epoch has as many:
    the shard's share of the indices, batched as the options say)."""
    if length is None:
        return None
    return of.batches_of(len(epoch_order(length, options.plan, 0)), options)


class ItemScheduler:
    """The plan of a dataset kind ``of`` (map, keras: see the module docstring)."""

    def __init__(self, of: ItemKind, setup: KindSetup) -> None:
        self._of = of
        self.config, self.job_id = setup.config, setup.job_id
        self._built = Parts(setup.config, setup.spec, setup.counters, consumer_log(setup.job_id))
        self._length = setup.length or 0
        epochs, start, config = setup.epochs, setup.start, setup.config
        self._ledger: Ledger[tuple[int, int, tuple[int, ...]]] = Ledger()  # epoch, pos, items
        self._planned: PlannedRelease[tuple[int, int, list[int]], Batch] = PlannedRelease(
            self._batches(epochs, start), config.options.plan.deterministic
        )
        self._serving: set[Peer] = set()  # peers that loaded the source and agreed on it
        self._orphans: list[Unit[tuple[int, int, tuple[int, ...]]]] = []  # nobody to take them
        self._agreed_epochs = {start.epoch}  # the handshake checked the first one
        self._checking: int | None = None  # the epoch whose CHECK answers are awaited
        self._check_waiting: dict[Peer, float] = {}  # who has not answered it yet: asked at
        self._check_answers: dict[Peer, tuple[messages.ItemCheck, ...]] = {}
        # checks_every_epoch: the answers that agreed at the latest checked epoch (not the
        # handshake's), which a joiner's copy must agree with; the joiners waiting for
        # theirs: asked at
        self._agreed_answers: tuple[int, dict[str, tuple[messages.ItemCheck, ...]]] | None = None
        self._probation: dict[Peer, float] = {}
        self._pads = config.options.plan.pads
        self._padding: dict[int, int] = {}  # seq: padded items of a dispatched batch
        self._released: list[Batch] = []  # batches of padded items only, made at dispatch

    def _batches(
        self, epochs: Iterator[int], start: Cursor
    ) -> Iterator[tuple[int, int, list[int]]]:
        """(epoch, position, items) of each batch of each epoch."""
        options = self.config.options
        per_batch = self._of.items_per_batch(options)
        for epoch in epochs:
            order = epoch_order(self._length, options.plan, epoch)
            batches = self._of.batches_of(len(order), options)
            if batches == 0:
                raise H5FeedError(
                    f"an epoch has no batch: {len(order)} items in shard {options.plan.shard} of "
                    f"{self._length}, batch_size={options.plan.batch_size}, "
                    f"drop_remainder={options.plan.drop_remainder}"
                )
            first = start.batch if epoch == start.epoch else 0
            for position in range(first, batches):
                items = order[position * per_batch : (position + 1) * per_batch]
                yield epoch, position, items.tolist()

    def add(self, peer: Peer) -> list[Send]:
        """``peer`` loaded the source (and its copy agreed at the first epoch). A keras joiner
        after a later epoch was checked is first asked for a CHECK of that epoch (it serves
        once its answer agrees: :meth:`on_check`); otherwise it serves now (:meth:`_serve`)."""
        if self._agreed_answers is not None:
            self._probation[peer] = time.monotonic()
            return [Send(peer, messages.Check(self.job_id, self._agreed_answers[0]))]
        return self._serve(peer)

    def _serve(self, peer: Peer) -> list[Send]:
        """``peer`` serves items from now: it takes any orphaned units (of agreed epochs),
        then a CHECK of the epoch being checked, if any (in this order: the worker answers
        in order, and the CHECK moves its copy to that epoch)."""
        self._serving.add(peer)
        orphans, self._orphans = self._orphans, []
        sends = [self._unit(unit.seq, unit.work, [peer]) for unit in orphans]
        if self._checking is not None:
            self._check_waiting[peer] = time.monotonic()
            sends.append(Send(peer, messages.Check(self.job_id, self._checking)))
        return sends

    def next_units(self, gate: CreditGate, peers: Sequence[Peer]) -> list[Send]:
        serving = [peer for peer in peers if peer in self._serving]
        self._check_overdue()
        if not serving:  # nobody to serve the next batch yet: dispatch nothing
            return []
        unchecked: list[int] = []

        def hold(item: tuple[int, int, list[int]]) -> bool:
            if not self._of.checks_every_epoch or item[0] in self._agreed_epochs:
                return False
            unchecked.append(item[0])
            return True

        sends = []
        for seq, (epoch, position, items) in self._planned.dispatch(gate, hold):
            real = [i for i in items if i != PAD_SAMPLE]  # padded items go to no worker
            if len(real) < len(items):
                self._padding[seq] = len(items) - len(real)
            if real:
                sends.append(self._unit(seq, (epoch, position, real), serving))
            else:  # padded items only: made here
                batch = self._batch(seq, epoch, position, None, real)
                self._released += self._planned.release(seq, batch)
        if unchecked and self._checking is None:
            self._checking = unchecked[0]
            now = time.monotonic()
            self._check_waiting = {peer: now for peer in serving}
            self._check_answers = {}
            check = messages.Check(self.job_id, self._checking)
            sends += [Send(peer, check) for peer in sorted(serving, key=lambda p: p.identity)]
        return sends

    def on_check(self, peer: Peer, info: messages.SourceInfo) -> list[Send]:
        """A CHECK's answer: a joiner's is compared with the answers that agreed at that
        epoch (it serves if they agree); otherwise, once every serving worker answered, the
        epoch's verdict. SourceError where the copies disagree. One not asked for is counted,
        dropped."""
        agreed = self._agreed_answers
        if peer in self._probation and agreed is not None and info.epoch == agreed[0]:
            del self._probation[peer]
            answers = {**agreed[1], str(peer): info.checks}
            check_agreement(self.config.source, self._of.noun, info.epoch, answers)
            return self._serve(peer)
        if info.epoch != self._checking or peer not in self._check_waiting:
            self._built.malformed(peer, "a SOURCE_INFO that answers no CHECK")
            return []
        del self._check_waiting[peer]
        self._check_answers[peer] = info.checks
        self._check_done()
        return []

    def _check_overdue(self) -> None:
        """WorkerTimeoutError when a worker has not answered its CHECK within the unit
        timeout (its ``on_epoch_end`` or ``__getitem__`` hangs): nothing waits forever."""
        limit = self.config.options.processes.unit_timeout_s
        now = time.monotonic()
        asked = {**self._check_waiting, **self._probation}
        late = sorted(str(p) for p, at in asked.items() if now - at > limit)
        if late:
            raise WorkerTimeoutError(
                f"workers {late} did not answer their check of source "
                f"{self.config.source!r} within {limit:g} s (unit_timeout_s): its on_epoch_end "
                "or __getitem__ hangs there"
            )

    def _check_done(self) -> None:
        epoch = self._checking
        if epoch is None or self._check_waiting or not self._check_answers:
            return  # answers outstanding, or every asked worker was lost: joiners are asked
        answers = {str(peer): checks for peer, checks in self._check_answers.items()}
        check_agreement(self.config.source, self._of.noun, epoch, answers)
        self._agreed_epochs.add(epoch)
        self._agreed_answers = (epoch, answers)
        self._checking = None

    def _unit(self, seq: int, item: tuple[int, int, Sequence[int]], peers: Sequence[Peer]) -> Send:
        epoch, position, items = item
        peer = min(peers, key=lambda p: (len(p.outstanding), p.identity))
        unit = self._ledger.issue(peer, seq, (epoch, position, tuple(items)))
        return Send(peer, messages.Items(self.job_id, unit.id, seq, epoch, tuple(items)))

    def take_released(self) -> list[Batch]:
        released, self._released = self._released, []
        return released

    def on_data(self, peer: Peer, data: messages.Data) -> list[Batch]:
        accepted = self._built.accept(self._ledger, peer, data, lambda w: w[2] == data.samples)
        if accepted is None:
            return []
        unit, fields = accepted
        epoch, position, items = unit.work
        padding = self._padding.get(unit.seq, 0)
        batch = self._batch(unit.seq, epoch, position, fields, list(items))
        peer.received.record(batch.rows - padding, batch.nbytes, data.busy_s)
        return self._planned.release(unit.seq, batch)

    def _batch(
        self, seq: int, epoch: int, position: int, fields: list[Field] | None, items: list[int]
    ) -> Batch:
        """Batch ``seq`` of the workers' ``fields`` for its real ``items`` (None: it has
        none), then its padded rows, with ``sample`` and ``valid`` when the shard pads; its
        ``items`` are the plan's indices (a padded row's -1), for the lineage record."""
        if not self._pads:
            if fields is None:  # unreachable: only padded items are made without a unit
                raise RuntimeError(f"batch {position} of epoch {epoch} has no rows")
            batch = self._of.batch(self._built, epoch, position, fields, len(items))
            batch.items = tuple(items)
            return batch
        padding = self._padding.pop(seq, 0)
        spec = self._built.spec
        planned = [*items, *[PAD_SAMPLE] * padding]
        batch = self._built.batch(
            epoch, position, padded_fields(spec, fields, padding), len(planned)
        )
        batch.element = with_positions(batch.element, planned)
        batch.items = tuple(planned)
        self._built.counters.padded_samples += padding
        return batch

    def owns(self, peer: Peer) -> bool:
        return False  # any worker serves any item

    def reassign(self, lost: Peer, heirs: Sequence[Peer], confirmed_dead: bool) -> Reassignment:
        self._serving.discard(lost)
        self._probation.pop(lost, None)
        if lost in self._check_waiting:  # the others' answers decide
            del self._check_waiting[lost]
            self._check_done()
        units = self._ledger.take_back(lost)
        serving = [peer for peer in heirs if peer in self._serving]
        if not serving:  # they wait for a worker to join (the loop bounds the wait)
            self._orphans += units
            return Reassignment([], len(units))
        sends = [self._unit(unit.seq, unit.work, serving) for unit in units]
        return Reassignment(sends, len(units))

    @property
    def waiting_for_workers(self) -> bool:
        return bool(self._orphans) or not self._serving

    @property
    def finished(self) -> bool:
        return self._planned.finished

    def describe(self, unit_id: int) -> str:
        unit = self._ledger.get(unit_id)
        if unit is None:
            return f"unit {unit_id}"
        epoch, _position, items = unit.work
        return f"unit {unit_id} ({self._of.describe_items(items)}, epoch {epoch})"

    def samples_of(self, unit_id: int) -> list[tuple[Hashable, str]]:
        unit = self._ledger.get(unit_id)
        if unit is None:
            return []
        epoch, _position, items = unit.work
        what = self._of.noun
        return [((epoch, i), f"{what} {i} of epoch {epoch}") for i in items]
