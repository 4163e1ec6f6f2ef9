"""The credit gate: how many batches may be in flight between the workers and the trainer.

A batch holds one credit from the moment it is dispatched (its first unit sent) until the
trainer takes it from the stream. The gate is the only writer of the two counters, and keeps

    0 <= dispatched - taken <= budget        (taken <= dispatched at every moment)

so at most ``budget`` batches are ever decoded ahead of the trainer, whatever the workers do.
``dispatched`` is written by the loop thread only (:meth:`dispatch`, :meth:`refund`);
``taken`` by the trainer's thread only (:meth:`take`, one call at a time, as ``next()`` is):
each counter has one writer, so no lock is needed, and a reader sees a value at most one step
old — which can only make the loop see fewer credits than there are, never more.

Wake-ups: a returned credit wakes the loop thread only when it asked for it
(:meth:`want_wakeup`, set when some worker is about to run dry); otherwise the next DATA part
wakes it anyway, which saves a wake-up of that thread per batch. No credit is missed: the loop
sets the flag *before* its last look at ``taken`` (see :meth:`changed_since`), and
:meth:`take` counts *before* it reads the flag, so a credit returned in between is seen by that
look or wakes the loop. Which workers hold at most one unit is kept by :class:`RunningDry`
from the peers each pass touched (a DATA or another message from them, units sent to them,
a join, a loss), not by a scan of every peer on every pass (a thousand busy workers made that
scan a share of the loop's CPU per batch: docs/performance/many-workers.md).

Growth with the workers (:func:`grown_budget`): the budget a feed starts with is made for
its local workers (``max(4, 2 * workers)``: every worker a unit in hand and one queued). A
trainer fed by remote producers (``workers=0, listen=``) would keep it however many joined,
and a thousand workers would share 4 batches. So while ``max_inflight_batches`` is not set,
the loop raises the budget to the same rule for every connected worker, local or remote: two
units each, in batches of as many units as the loop has been sending per batch
(``ceil(2 * connected / units_per_batch)``: a batch of 32 one-row units serves 32 workers),
within :data:`GROWN_BUDGET_BYTES` of batches in flight (the trainer's memory for them: slots,
parts, assembled batches), the batch's size learnt from the first batch assembled. Two
batches per worker would do too, but queue ``units_per_batch`` times more units on each
worker than it needs: the simulation of a thousand workers (``h5feed bench many-workers``)
measured deeper queues as slower hand-overs and a busier loop. The budget only grows within
an iteration (:meth:`CreditGate.grow_to`), so the invariant holds at every moment: a worker
that leaves does not take back credits already dispatched; the next iteration starts again
from the base.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from h5feed.consumer.core.ledger import Peer

#: The most bytes of batches the budget may grow to hold in flight (see the module
#: docstring): 1 GiB, a few hundred batches of the bench's clips (4.8 MB each) and thousands
#: of small ones. A budget set by the user (``max_inflight_batches``) is never grown.
GROWN_BUDGET_BYTES = 1 << 30


#: Units a feed keeps queued per worker (the one in hand included): two, so a worker always
#: has the next unit; four when the files are on object storage, whose read-ahead fetches
#: the queued units' clips while one is cut (one queued unit is too few clips to hide a
#: round trip of tens of ms: docs/performance/object-storage.md).
UNITS_EACH, UNITS_EACH_OBJECT_STORAGE = 2, 4


def grown_budget(
    base: int,
    workers: int,
    units_per_batch: float,
    batch_bytes: int,
    cap_bytes: int = GROWN_BUDGET_BYTES,
    units_each: int = UNITS_EACH,
) -> int:
    """The budget for ``workers`` connected workers: ``units_each`` units each in batches of
    ``units_per_batch`` units, at most ``cap_bytes`` of batches of ``batch_bytes`` each, and
    never below ``base`` (the feed's own). Either figure not known yet (<= 0): ``base``."""
    if batch_bytes <= 0 or units_per_batch <= 0:
        return base
    wanted = math.ceil(units_each * workers / units_per_batch)
    return max(base, min(wanted, cap_bytes // batch_bytes))


class CreditGate:
    """The in-flight budget of one iteration (see the module docstring for the invariant)."""

    def __init__(self, budget: int, wake: Callable[[], None], units_each: int = UNITS_EACH) -> None:
        if budget < 1:
            raise ValueError(f"the credit budget must be >= 1, got {budget}")
        self.budget = budget
        self.units_each = units_each  # what the budget grows by per worker (grown_budget)
        self._wake = wake
        self._dispatched = 0
        self._taken = 0
        self._most_inflight = 0
        self._wake_wanted = True

    # -- the loop thread -------------------------------------------------------------------

    @property
    def available(self) -> int:
        """Credits free now: batches that may be dispatched before the trainer takes one."""
        return self.budget - (self._dispatched - self._taken)

    def dispatch(self) -> None:
        """One more batch dispatched; it holds a credit until the trainer takes it."""
        if self.available <= 0:
            raise RuntimeError("dispatch without a credit")  # a scheduler bug, not input
        self._dispatched += 1
        self._most_inflight = max(self._most_inflight, self._dispatched - self._taken)

    def refund(self) -> None:
        """A dispatched batch that yields nothing (a generator pass that ended): its credit
        returns at once, as if the trainer had taken it."""
        if self._dispatched <= self._taken:
            raise RuntimeError("refund of a batch that was not dispatched")
        self._dispatched -= 1

    def grow_to(self, budget: int) -> None:
        """Raise the budget to ``budget``; a lower one is ignored (the budget never shrinks
        within an iteration, so ``dispatched - taken <= budget`` keeps holding)."""
        self.budget = max(self.budget, budget)

    def want_wakeup(self, wanted: bool) -> None:
        """Whether :meth:`take` must wake the loop (a worker is about to run dry)."""
        self._wake_wanted = wanted

    def changed_since(self, taken: int) -> bool:
        """Whether the trainer took a batch since ``taken`` (see :attr:`taken`)."""
        return self._taken != taken

    # -- the trainer's thread --------------------------------------------------------------

    def take(self) -> None:
        """The trainer took a batch: its credit returns to the budget."""
        self._taken += 1  # count first, then read the flag: see the module docstring
        if self._wake_wanted:
            self._wake()

    # -- any thread ------------------------------------------------------------------------

    @property
    def dispatched(self) -> int:
        return self._dispatched

    @property
    def taken(self) -> int:
        return self._taken

    @property
    def inflight(self) -> int:
        """Batches dispatched and not yet taken (never above the budget)."""
        return self._dispatched - self._taken

    @property
    def most_inflight(self) -> int:
        """The most batches ever in flight at once in this iteration."""
        return self._most_inflight


class RunningDry:
    """The peers that hold at most one unit, kept from what each pass touched.

    Guarantee: :meth:`any` is True whenever a live peer (in ``live``) that was touched since it
    last held more than one unit holds at most one now. A peer's units change only through the
    loop: units sent to it, a message from it, its loss (or the scheduler's hand-over, whose
    units are sent); so every change is a :meth:`touch` or a :meth:`forget`, and a pass costs
    the peers it touched, not every peer. Erring towards True costs a wake-up, never a batch.
    """

    def __init__(self) -> None:
        self._touched: dict[bytes, Peer] = {}
        self._low: dict[bytes, Peer] = {}

    def touch(self, peer: Peer) -> None:
        """``peer``'s units may have changed (or it joined)."""
        self._touched[peer.identity] = peer

    def forget(self, peer: Peer) -> None:
        """``peer`` is lost (a new peer under its identity is another object: kept)."""
        for held in (self._touched, self._low):
            if held.get(peer.identity) is peer:
                del held[peer.identity]

    def any(self, live: Mapping[bytes, object]) -> bool:
        """Whether some live peer holds at most one unit (see the class docstring)."""
        for identity, peer in self._touched.items():
            if live.get(identity) is peer and len(peer.outstanding) <= 1:
                self._low[identity] = peer
            else:
                self._low.pop(identity, None)
        self._touched.clear()
        return bool(self._low)
