"""**generator**: each worker iterates its own shard.

A PULL asks one worker for its next ``batch_size`` elements, and that answer is one batch
(released as it arrives). A worker that answers fewer has finished its pass. Without
``steps_per_epoch`` an epoch ends when every worker's pass has ended, and the next epoch
starts new passes; with it, an epoch is ``steps_per_epoch`` batches and passes carry on
across epochs (an epoch ends short, with a warning, if every pass ends first). Copies whose
first elements agree forgot to shard: refused at the handshake, before any PULL
(:func:`~h5feed.consumer.sources.agreement.check_distinct_shards`). Not resumable inside an
epoch; a lost worker's shard cannot move: its place waits for a new process
(:attr:`GeneratorKind.shards_in_workers`), whose pass starts over.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar

from h5feed.common.errors import H5FeedError
from h5feed.common.protocol import messages
from h5feed.common.system.logs import consumer_log
from h5feed.common.user_code.source_kinds import SourceKind
from h5feed.consumer.core.assembly import Batch
from h5feed.consumer.core.credits import CreditGate
from h5feed.consumer.core.ledger import Ledger, Peer
from h5feed.consumer.core.scheduler import Reassignment, Send
from h5feed.consumer.sources.agreement import check_distinct_shards
from h5feed.consumer.sources.kind import KindSetup
from h5feed.consumer.sources.options import SourceConfig
from h5feed.consumer.sources.parts import Parts

if TYPE_CHECKING:
    from h5feed.consumer.config.groups import FeedOptions


class GeneratorKind:
    """The facts of a generator source (see
    :class:`~h5feed.consumer.sources.kind.KindClass`)."""

    kind: ClassVar[SourceKind] = SourceKind.GENERATOR
    sized: ClassVar[bool] = False
    whole_batches: ClassVar[bool] = False  # source_batched=True: split, batched again
    shards_in_workers: ClassVar[bool] = True
    noun: ClassVar[str] = "element"
    pad_refusal: ClassVar[str | None] = (
        "its length is unknown (each worker iterates its own shard until it ends), so no "
        "shard can be padded to the others' length"
    )

    @staticmethod
    def check_copies(
        config: SourceConfig, epoch: int, answers: Mapping[str, Sequence[messages.ItemCheck]]
    ) -> None:
        check_distinct_shards(config.source, answers, alike_ok=config.shards_start_alike)

    @staticmethod
    def make(setup: KindSetup) -> GeneratorScheduler:
        return GeneratorScheduler(setup)

    @staticmethod
    def epoch_batches(length: int | None, options: FeedOptions) -> int | None:
        return None  # it ends when the passes do (even with steps_per_epoch, if first)


class GeneratorScheduler:
    """The plan of a generator source (see the module docstring)."""

    def __init__(self, setup: KindSetup) -> None:
        self.config = self.source = setup.config
        self.job_id = setup.job_id
        self._built = Parts(setup.config, setup.spec, setup.counters, consumer_log(setup.job_id))
        self._epochs = setup.epochs
        self._gate = setup.gate  # a pull that yields no batch gives its credit back
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
            count = self.config.options.plan.batch_size
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
                + (dropped if self.config.options.plan.drop_remainder else "")
            )
        if steps is not None and self._batches < steps:
            self._built.log.warning(
                "epoch %d ended after %d of steps_per_epoch=%d batches: every worker's "
                "generator ended first",
                epoch, self._batches, steps,
            )  # fmt: skip
        self._epoch = None

    def take_released(self) -> list[Batch]:
        return []  # every batch is a worker's answer

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
        if rows == 0 or (rows < count and self.config.options.plan.drop_remainder):
            self._gate.refund()  # a credit that yields no batch returns at once
            self._asked -= 1
            return []
        batch = self._built.batch(epoch, self._batches, fields, rows)
        peer.received.record(rows, batch.nbytes, data.busy_s)
        self._batches += 1
        return [batch]

    def owns(self, peer: Peer) -> bool:
        return True  # its shard lives in it

    def on_check(self, peer: Peer, info: messages.SourceInfo) -> list[Send]:
        self._built.counters.malformed_messages += 1  # a generator asks no CHECK
        return []

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
