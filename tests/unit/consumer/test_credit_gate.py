"""The credit gate alone: its invariant under any interleaving, its errors, its wake rule."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from h5feed.consumer.config.groups import ProcessOptions
from h5feed.consumer.core.credits import (
    GROWN_BUDGET_BYTES,
    UNITS_EACH,
    UNITS_EACH_OBJECT_STORAGE,
    CreditGate,
    grown_budget,
)


class GateMachine(RuleBasedStateMachine):
    """Random interleavings of dispatch, take, refund and want_wakeup against a model.

    The trainer takes only batches that were dispatched and not refunded (it cannot take one
    that was never released), so ``take`` runs only while the model has one in flight; the
    loop may try to dispatch or refund at any time, and must be refused when it may not.
    """

    def __init__(self) -> None:
        super().__init__()
        self.wakes = 0
        self.gate = CreditGate(1, self._wake)
        self.inflight = 0
        self.most = 0
        self.wanted = True

    def _wake(self) -> None:
        self.wakes += 1

    @initialize(budget=st.integers(min_value=1, max_value=6))
    def make(self, budget: int) -> None:
        self.gate = CreditGate(budget, self._wake)

    @rule()
    def dispatch(self) -> None:
        if self.inflight < self.gate.budget:
            self.gate.dispatch()
            self.inflight += 1
            self.most = max(self.most, self.inflight)
        else:
            with pytest.raises(RuntimeError, match="without a credit"):
                self.gate.dispatch()

    @precondition(lambda self: self.inflight > 0)
    @rule()
    def take(self) -> None:
        before = self.wakes
        self.gate.take()
        self.inflight -= 1
        assert self.wakes == before + (1 if self.wanted else 0)

    @rule()
    def refund(self) -> None:
        if self.inflight > 0:
            self.gate.refund()
            self.inflight -= 1
        else:
            with pytest.raises(RuntimeError, match="not dispatched"):
                self.gate.refund()

    @rule(budget=st.integers(min_value=0, max_value=10))
    def grow_to(self, budget: int) -> None:
        """The loop grows the budget with the workers; a lower one (a worker left) is
        ignored, so what is in flight never exceeds it."""
        before = self.gate.budget
        self.gate.grow_to(budget)
        assert self.gate.budget == max(before, budget)

    @rule(wanted=st.booleans())
    def want_wakeup(self, wanted: bool) -> None:
        self.gate.want_wakeup(wanted)
        self.wanted = wanted

    @invariant()
    def credits_are_bounded(self) -> None:
        gate = self.gate
        assert 0 <= gate.dispatched - gate.taken <= gate.budget
        assert gate.inflight == self.inflight
        assert gate.available == gate.budget - self.inflight
        assert gate.most_inflight == self.most <= gate.budget


GateMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestGateMachine = GateMachine.TestCase


def test_a_budget_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="budget"):
        CreditGate(0, lambda: None)


def test_dispatch_without_a_credit_raises_and_changes_nothing() -> None:
    gate = CreditGate(2, lambda: None)
    gate.dispatch()
    gate.dispatch()
    with pytest.raises(RuntimeError, match="without a credit"):
        gate.dispatch()
    assert (gate.dispatched, gate.taken, gate.available) == (2, 0, 0)
    gate.take()
    gate.dispatch()  # the credit the trainer returned
    assert (gate.dispatched, gate.taken, gate.inflight) == (3, 1, 2)


def test_refund_of_nothing_raises() -> None:
    gate = CreditGate(3, lambda: None)
    with pytest.raises(RuntimeError, match="not dispatched"):
        gate.refund()
    gate.dispatch()
    gate.take()  # taken: nothing in flight to refund
    with pytest.raises(RuntimeError, match="not dispatched"):
        gate.refund()
    assert (gate.dispatched, gate.taken) == (1, 1)


def test_refund_returns_the_credit_at_once() -> None:
    gate = CreditGate(1, lambda: None)
    gate.dispatch()
    assert gate.available == 0
    gate.refund()
    assert (gate.available, gate.inflight, gate.dispatched) == (1, 0, 0)
    gate.dispatch()


def test_take_wakes_the_loop_only_when_it_asked() -> None:
    wakes: list[int] = []
    gate = CreditGate(4, lambda: wakes.append(gate.taken))
    for _ in range(4):
        gate.dispatch()
    gate.take()  # wanted from the start: the loop has not looked yet
    assert wakes == [1]
    gate.want_wakeup(False)
    gate.take()
    gate.take()
    assert wakes == [1]
    gate.want_wakeup(True)
    gate.take()
    assert wakes == [1, 4]  # counted before it woke the loop (the loop then sees the credit)


def test_changed_since_sees_every_take() -> None:
    gate = CreditGate(2, lambda: None)
    gate.dispatch()
    seen = gate.taken
    assert not gate.changed_since(seen)
    gate.take()
    assert gate.changed_since(seen)
    assert not gate.changed_since(gate.taken)


def test_most_inflight_is_the_high_water_mark() -> None:
    gate = CreditGate(5, lambda: None)
    assert gate.most_inflight == 0
    for _ in range(3):
        gate.dispatch()
    gate.take()
    gate.take()
    gate.dispatch()
    assert (gate.inflight, gate.most_inflight) == (2, 3)
    gate.refund()
    for _ in range(4):
        gate.dispatch()
    assert (gate.inflight, gate.most_inflight) == (5, 5)


def test_the_budget_grows_to_two_units_a_worker_within_its_memory_bound() -> None:
    # A thousand workers do not share the 4 batches a workers=0 feed starts with: batches
    # of 32 one-row units, two units each, are 63 batches.
    assert grown_budget(4, 1000, 32, 12_288) == 63
    assert grown_budget(4, 1000, 1, 12_288) == 2000  # one unit a batch: two batches each
    assert grown_budget(4, 3, 2, 12_288) == 4  # never below the feed's own
    assert grown_budget(30, 10, 1, 12_288) == 30
    # 1 GiB of 4.8 MB batches (the bench's) holds 222: a thousand workers get no more.
    assert grown_budget(4, 1000, 1, 4_816_896) == GROWN_BUDGET_BYTES // 4_816_896 == 222
    assert grown_budget(4, 1000, 1, GROWN_BUDGET_BYTES * 2) == 4  # a batch above the bound
    assert grown_budget(4, 1000, 32, 0) == 4  # the size not known yet: the base
    assert grown_budget(4, 1000, 0, 12_288) == 4  # nothing dispatched yet: the base


def test_a_feed_of_object_storage_keeps_four_units_a_worker() -> None:
    # Its workers fetch the queued units' clips ahead: one queued unit is too few clips to
    # hide a request's round trip (docs/performance/object-storage.md).
    assert grown_budget(4, 10, 1, 12_288, units_each=UNITS_EACH_OBJECT_STORAGE) == 40
    assert grown_budget(4, 10, 1, 12_288) == 20  # two each otherwise
    options = ProcessOptions(workers=3)
    assert options.inflight_budget(UNITS_EACH_OBJECT_STORAGE) == 12
    assert options.inflight_budget(UNITS_EACH) == options.inflight_batches == 6
    assert ProcessOptions(workers=1).inflight_budget(UNITS_EACH_OBJECT_STORAGE) == 8
    assert ProcessOptions(workers=3, max_inflight_batches=5).inflight_budget(4) == 5  # fixed


def test_grow_to_never_lowers_the_budget_under_batches_in_flight() -> None:
    gate = CreditGate(4, lambda: None)
    gate.grow_to(10)
    for _ in range(10):
        gate.dispatch()
    gate.grow_to(4)  # workers left: the ten in flight keep their credits
    assert (gate.budget, gate.inflight, gate.available) == (10, 10, 0)


def test_running_dry_follows_the_touched_peers_without_scanning_the_others() -> None:
    from h5feed.consumer.core.credits import RunningDry
    from h5feed.consumer.core.ledger import Peer

    a, b = Peer(b"a", "a", 1, "h"), Peer(b"b", "b", 2, "h")
    live = {b"a": a, b"b": b}
    dry = RunningDry()
    dry.touch(a)
    dry.touch(b)
    assert dry.any(live)  # both hold nothing
    a.outstanding.update({1: 0.0, 2: 0.0})
    b.outstanding.update({3: 0.0, 4: 0.0})
    dry.touch(a)
    assert dry.any(live)  # b was not touched since it held nothing: still counted low
    dry.touch(b)
    assert not dry.any(live)  # both busy
    del b.outstanding[3]
    dry.touch(b)  # its DATA came back
    assert dry.any(live)
    dry.forget(b)  # lost
    del live[b"b"]
    assert not dry.any(live)
    again = Peer(b"b", "b", 3, "h")  # a new process under the same identity
    dry.forget(b)  # the old one's loss forgets nothing of the new one
    live[b"b"] = again
    dry.touch(again)
    assert dry.any(live)
