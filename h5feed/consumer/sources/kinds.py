"""The plans of the three kinds of user source, behind the scheduler protocol.

* **map**: each epoch's order of the ``length`` items is :func:`plan.epoch_order` (seeded
  permutation, shard); batches of ``batch_size`` consecutive items (the last partial unless
  ``drop_remainder``); each batch is one ITEMS unit, sent to the live worker holding the
  fewest units (any worker serves any item). Exactly once, the same batches whatever the number
  of workers; released in plan order when ``deterministic``.
* **keras**: the same over the ``length`` batch indices, one batch index per unit, not
  re-batched. Before the first unit of each later epoch, every serving worker answers a CHECK
  (its copy's digest of the common batches after its ``on_epoch_end`` calls); that epoch's
  units are dispatched only once the copies agree (:mod:`h5feed.consumer.sources.agreement`).
  A worker that joins once a later epoch began serves only after its CHECK of the current
  epoch agrees with the others' answers.
* **generator**: each worker iterates its own shard; a PULL asks one worker for its next
  ``batch_size`` elements, and that answer is one batch (released as it arrives). A worker that
  answers fewer has finished its pass. Without ``steps_per_epoch`` an epoch ends when every
  worker's pass has ended, and the next epoch starts new passes; with it, an epoch is
  ``steps_per_epoch`` batches and passes carry on across epochs (an epoch ends short, with a
  warning, if every pass ends first). Not resumable inside an epoch; a lost worker's shard
  cannot move.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

from h5feed.common import elements, messages
from h5feed.common.elements import ElementSpec, Field, RaggedArray
from h5feed.common.errors import H5FeedError, WorkerTimeoutError
from h5feed.common.logs import IdsLogger, consumer_log
from h5feed.common.source_kinds import SourceKind
from h5feed.consumer.core.assembly import Batch
from h5feed.consumer.core.credits import CreditGate
from h5feed.consumer.core.ledger import Ledger, Peer, Unit, W
from h5feed.consumer.core.malformed import drop_malformed
from h5feed.consumer.core.ordering import PlannedRelease
from h5feed.consumer.core.scheduler import Reassignment, Send
from h5feed.consumer.plan import Cursor, epoch_order
from h5feed.consumer.sources.agreement import check_agreement
from h5feed.consumer.sources.options import SourceConfig
from h5feed.consumer.stats import Counters

if TYPE_CHECKING:
    from h5feed.consumer.options import FeedOptions

MAP: Final = SourceKind.MAP
KERAS: Final = SourceKind.KERAS
GENERATOR: Final = SourceKind.GENERATOR


class _Elements:
    """Checks a DATA part against its unit and the spec, and builds the batch's tree."""

    def __init__(
        self,
        source: SourceConfig,
        spec: ElementSpec,
        kind: SourceKind,
        counters: Counters,
        log: IdsLogger,
    ) -> None:
        self.source, self.spec, self.kind = source, spec, kind
        self._counters = counters
        self.log = log

    def accept(
        self, ledger: Ledger[W], peer: Peer, data: messages.Data, fits: Callable[[W], bool]
    ) -> tuple[Unit[W], list[Field]] | None:
        """The unit ``data`` answers (now complete) and its fields; None, counted, for a
        part that is not expected from ``peer``; a part that does not ``fits`` its unit or
        whose arrays do not fit the spec is malformed (:mod:`h5feed.consumer.core.malformed`:
        ProtocolError from a local worker, dropped and warned from a remote one)."""
        unit = ledger.get(data.unit)
        if unit is None or unit.peer is not peer:
            self._drop(f"an unexpected part (unit {data.unit}) from {peer}")
            return None
        if not fits(unit.work):
            drop_malformed(peer, unit.id, "other samples", self._counters, self.log)
            return None
        try:
            fields = elements.unpack(self.spec, data.arrays, len(data.samples))
        except ValueError as exc:
            drop_malformed(peer, unit.id, str(exc), self._counters, self.log)
            return None
        ledger.complete(peer, unit.id)
        return unit, fields

    def malformed(self, peer: Peer, why: str) -> None:
        """A control message that fits no question: counted, logged."""
        self._counters.malformed_messages += 1
        self.log.warning("dropped %s from %s", why, peer)

    def _drop(self, why: str) -> None:
        self._counters.dropped_parts += 1
        self.log.warning("dropped %s", why)

    def batch(self, epoch: int, index: int, fields: list[Field], elements_in_part: int) -> Batch:
        size = elements.nbytes(fields)
        if self.kind == KERAS:  # one item: the batch itself, not re-batched
            items = [f.values[0] for f in fields]
            element = elements.build_batch(self.spec, items, lambda i: None)
            first = fields[0].values if fields else None
            rows = int(first.shape[1]) if first is not None and first.ndim > 1 else 1
            return Batch(epoch, index, {}, element, rows, size)
        values: list[Any] = [
            RaggedArray(f.values, f.lengths, leaf.variable_axes[0])
            if f.lengths is not None and self.source.is_ragged(leaf.path)
            else f.values
            for leaf, f in zip(self.spec.leaves, fields, strict=True)
        ]

        def lengths(i: int) -> Any:
            return None if isinstance(values[i], RaggedArray) else fields[i].lengths

        element = elements.build_batch(self.spec, values, lengths)
        return Batch(epoch, index, {}, element, elements_in_part, size)


def epoch_batches(kind: SourceKind, length: int, options: FeedOptions) -> int:
    """Batches per epoch of a map or keras source of ``length`` items (every epoch has as
    many: the shard's share of the items, batched as the options say)."""
    return _batches_of(kind, len(epoch_order(length, options.plan_options(), 0)), options)


def _batches_of(kind: SourceKind, items: int, options: FeedOptions) -> int:
    if kind == KERAS:  # each item is a batch
        return items
    if options.drop_remainder:
        return items // options.batch_size
    return -(-items // options.batch_size)


class ItemScheduler:
    """map and keras sources (see the module docstring)."""

    def __init__(
        self,
        kind: SourceKind,
        config: SourceConfig,
        built: _Elements,
        length: int,
        job_id: str,
        epochs: Iterator[int],
        start: Cursor,
    ) -> None:
        self.kind, self.config, self._built, self.job_id = kind, config, built, job_id
        self._length = length
        self._ledger: Ledger[tuple[int, int, tuple[int, ...]]] = Ledger()  # epoch, pos, items
        self._planned: PlannedRelease[tuple[int, int, list[int]], Batch] = PlannedRelease(
            self._batches(epochs, start), config.options.deterministic
        )
        self._serving: set[Peer] = set()  # peers that loaded the source and agreed on it
        self._orphans: list[Unit[tuple[int, int, tuple[int, ...]]]] = []  # nobody to take them
        self._agreed_epochs = {start.epoch}  # the handshake checked the first one
        self._checking: int | None = None  # keras: the epoch whose CHECK answers are awaited
        self._check_waiting: dict[Peer, float] = {}  # who has not answered it yet: asked at
        self._check_answers: dict[Peer, tuple[messages.ItemCheck, ...]] = {}
        # keras: the answers that agreed at the latest checked epoch (not the handshake's),
        # which a joiner's copy must agree with; the joiners waiting for theirs: asked at
        self._agreed_answers: tuple[int, dict[str, tuple[messages.ItemCheck, ...]]] | None = None
        self._probation: dict[Peer, float] = {}

    def _batches(
        self, epochs: Iterator[int], start: Cursor
    ) -> Iterator[tuple[int, int, list[int]]]:
        """(epoch, position, items) of each batch of each epoch."""
        options = self.config.options
        per_batch = 1 if self.kind == KERAS else options.batch_size
        for epoch in epochs:
            order = epoch_order(self._length, options.plan_options(), epoch)
            batches = _batches_of(self.kind, len(order), options)
            if batches == 0:
                raise H5FeedError(
                    f"an epoch has no batch: {len(order)} items in shard {options.shard} of "
                    f"{self._length}, batch_size={options.batch_size}, "
                    f"drop_remainder={options.drop_remainder}"
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
            if self.kind != KERAS or item[0] in self._agreed_epochs:
                return False
            unchecked.append(item[0])
            return True

        sends = [self._unit(seq, item, serving) for seq, item in self._planned.dispatch(gate, hold)]
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
            check_agreement(self.config.source, self.kind, info.epoch, answers)
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
        limit = self.config.options.unit_timeout_s
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
        check_agreement(self.config.source, self.kind, epoch, answers)
        self._agreed_epochs.add(epoch)
        self._agreed_answers = (epoch, answers)
        self._checking = None

    def _unit(self, seq: int, item: tuple[int, int, Sequence[int]], peers: Sequence[Peer]) -> Send:
        epoch, position, items = item
        peer = min(peers, key=lambda p: (len(p.outstanding), p.identity))
        unit = self._ledger.issue(peer, seq, (epoch, position, tuple(items)))
        return Send(peer, messages.Items(self.job_id, unit.id, seq, epoch, tuple(items)))

    def on_data(self, peer: Peer, data: messages.Data) -> list[Batch]:
        accepted = self._built.accept(self._ledger, peer, data, lambda w: w[2] == data.samples)
        if accepted is None:
            return []
        unit, fields = accepted
        epoch, position, items = unit.work
        batch = self._built.batch(epoch, position, fields, len(items))
        peer.received.record(batch.rows, batch.nbytes)
        return self._planned.release(unit.seq, batch)

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
        shown = list(items[:8])
        what = f"batch {items[0]}" if self.kind == KERAS else f"items {shown}"
        if self.kind != KERAS and len(items) > 8:
            what += "..."
        return f"unit {unit_id} ({what}, epoch {epoch})"

    def samples_of(self, unit_id: int) -> list[tuple[Hashable, str]]:
        unit = self._ledger.get(unit_id)
        if unit is None:
            return []
        epoch, _position, items = unit.work
        what = "batch" if self.kind == KERAS else "item"
        return [((epoch, i), f"{what} {i} of epoch {epoch}") for i in items]


class GeneratorScheduler:
    """generator sources (see the module docstring)."""

    def __init__(
        self,
        config: SourceConfig,
        built: _Elements,
        job_id: str,
        epochs: Iterator[int],
        gate: CreditGate,
    ) -> None:
        self.config = self.source = config
        self._built, self.job_id = built, job_id
        self._epochs = epochs
        self._gate = gate  # a pull that yields no batch gives its credit back
        self._ledger: Ledger[tuple[int, int, int]] = Ledger()  # (epoch, count asked, pass)
        self._epoch: int | None = None
        self._active: set[Peer] = set()  # in the epoch, pass not ended
        self._ended: set[Peer] = set()  # their pass ended this epoch
        self._passes: dict[Peer, int] = {}  # each worker's pass number (the epoch it began in)
        self._batches = 0  # released this epoch
        self._asked = 0  # pulls of this epoch that may still yield a batch
        self._plan_done = False
        self._next_seq = 0
        self._answered = 0  # pulls answered: with a batch, or with nothing (refunded)
        self._vacant = 0  # shards whose worker was lost and not yet replaced
        self._members: set[Peer] = set()  # the workers whose shards make the epochs

    def next_units(self, gate: CreditGate, peers: Sequence[Peer]) -> list[Send]:
        sends = []
        steps = self.source.steps_per_epoch
        while not self._plan_done:
            if self._epoch is None:
                if len(self._ledger):
                    break  # the previous epoch's last answers are on their way
                epoch = next(self._epochs, None)
                if epoch is None:
                    self._plan_done = True
                    break
                self._start_epoch(epoch, peers)
                continue
            live = [p for p in self._active if p in peers]
            if not live or (steps is not None and self._asked >= steps):
                if len(self._ledger) or (self._vacant and not live):
                    break  # answers on their way, or a lost shard waits for its new worker
                self._end_epoch(self._epoch)
                continue
            if gate.available <= 0:
                break
            gate.dispatch()
            self._asked += 1
            peer = min(live, key=lambda p: (len(p.outstanding), p.identity))
            seq, self._next_seq = self._next_seq, self._next_seq + 1
            count = self.config.options.batch_size
            pass_ = self._passes[peer]
            unit = self._ledger.issue(peer, seq, (self._epoch, count, pass_))
            pull = messages.Pull(self.job_id, unit.id, seq, self._epoch, count, pass_)
            sends.append(Send(peer, pull))
        return sends

    def _start_epoch(self, epoch: int, peers: Sequence[Peer]) -> None:
        peers = [peer for peer in peers if peer in self._members]
        for peer in peers:
            if peer not in self._passes or peer in self._ended:
                self._passes[peer] = epoch  # a new pass, numbered by the epoch it starts in
        self._ended.clear()
        self._active = set(peers)
        self._epoch, self._batches, self._asked = epoch, 0, 0

    def _end_epoch(self, epoch: int) -> None:
        steps = self.source.steps_per_epoch
        if self._batches == 0:
            dropped = " (drop_remainder=True dropped partial batches)"
            raise H5FeedError(
                f"epoch {epoch} of source {self.source.source!r} has no batch: every "
                "worker's generator ended at once"
                + (dropped if self.config.options.drop_remainder else "")
            )
        if steps is not None and self._batches < steps:
            self._built.log.warning(
                "epoch %d ended after %d of steps_per_epoch=%d batches: every worker's "
                "generator ended first",
                epoch, self._batches, steps,
            )  # fmt: skip
        self._epoch = None

    def on_data(self, peer: Peer, data: messages.Data) -> list[Batch]:
        def fits(work: tuple[int, int, int]) -> bool:
            return len(data.samples) <= work[1] and all(type(s) is int for s in data.samples)

        accepted = self._built.accept(self._ledger, peer, data, fits)
        if accepted is None:
            return []
        unit, fields = accepted
        epoch, count, pass_ = unit.work
        rows = len(data.samples)
        self._answered += 1
        if pass_ != self._passes[peer]:
            pass  # a pull of a pass that was replaced meanwhile: its end says nothing now
        elif rows == 0 and pass_ < epoch and self.source.steps_per_epoch is not None:
            # A pass carried over from an earlier epoch that ended exactly on its boundary
            # (its last answer was full): start a new one now, as an epoch start would have.
            self._passes[peer] = epoch
        elif rows < count:  # this worker's pass has ended
            self._active.discard(peer)
            self._ended.add(peer)
        if rows == 0 or (rows < count and self.config.options.drop_remainder):
            self._gate.refund()  # a credit that yields no batch returns at once
            self._asked -= 1
            return []
        batch = self._built.batch(epoch, self._batches, fields, rows)
        peer.received.record(rows, batch.nbytes)
        self._batches += 1
        return [batch]

    def owns(self, peer: Peer) -> bool:
        return True  # its shard lives in it

    def add(self, peer: Peer) -> list[Send]:
        """``peer`` took over a lost worker's shard (a new process of its generator): its
        pass starts over in the current epoch, so that shard's elements of this epoch may
        arrive twice (at least once)."""
        self._vacant = max(self._vacant - 1, 0)
        self._members.add(peer)
        if self._epoch is not None:
            self._passes[peer] = self._epoch
            self._active.add(peer)
        return []

    def reassign(self, lost: Peer, heirs: Sequence[Peer], confirmed_dead: bool) -> Reassignment:
        """A generator's shard lives in its worker: the lost worker's pulls are dropped (their
        credits return) and its shard waits for a new process under its place
        (:meth:`SourceScheduler.join`), which starts the shard's pass over."""
        units = self._ledger.take_back(lost)
        for _unit in units:
            self._gate.refund()
            self._asked -= 1
            self._answered += 1
        self._active.discard(lost)
        self._members.discard(lost)
        self._passes.pop(lost, None)
        self._vacant += 1
        return Reassignment([], 0)

    @property
    def waiting_for_workers(self) -> bool:
        return self._vacant > 0

    @property
    def finished(self) -> bool:
        return self._plan_done and self._answered == self._next_seq

    def describe(self, unit_id: int) -> str:
        unit = self._ledger.get(unit_id)
        if unit is None:
            return f"unit {unit_id}"
        epoch, count, pass_ = unit.work
        return f"unit {unit_id} (the next {count} elements of pass {pass_}, epoch {epoch})"

    def samples_of(self, unit_id: int) -> list[tuple[Hashable, str]]:
        """A pull is not sent again (the lost worker's shard starts its pass over): the key
        is the shard's worker and the epoch, so a generator that kills its worker at the
        same element every pass is bounded too."""
        unit = self._ledger.get(unit_id)
        if unit is None:
            return []
        epoch, count, pass_ = unit.work
        name = unit.peer.name
        what = f"the next {count} elements of worker {name}'s generator (pass {pass_})"
        return [(("pull", name, epoch), f"{what} in epoch {epoch}")]


KindScheduler = ItemScheduler | GeneratorScheduler


def make_kind(
    kind: SourceKind,
    config: SourceConfig,
    spec: ElementSpec,
    length: int | None,
    job_id: str,
    epochs: Iterator[int],
    start: Cursor,
    counters: Counters,
    gate: CreditGate,
) -> KindScheduler:
    """The scheduler of ``kind``, once the handshake agreed on it."""
    built = _Elements(config, spec, kind, counters, consumer_log(job_id))
    if kind == GENERATOR:
        return GeneratorScheduler(config, built, job_id, epochs, gate)
    return ItemScheduler(kind, config, built, length or 0, job_id, epochs, start)
