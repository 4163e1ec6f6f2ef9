"""``workers="auto"``: how many local workers an iteration wants, decided from the
input-bound verdict. Pure: the caller passes the time and the figures, so every decision can
be replayed in a test (``tests/unit/consumer/test_autoscale.py``).

The rules (:meth:`Autoscaler.decide`), checked at most once per :data:`CHECK_EVERY_S`:

1. **Grow** by one when the trainer's recent wait share was above the input-bound threshold
   (``h5feed.consumer.telemetry.stats.INPUT_BOUND_WAIT_SHARE``, the verdict's) with every worker
   holding a unit at :data:`GROW_AFTER` checks in a row, below the cap (a worker with
   nothing to do says another would not help: an HDF5 feed's work moves by file, so a
   dataset of fewer files than workers leaves the extra ones idle), and the iteration takes
   joiners (a generator source's shards live in its workers: a worker started mid-iteration
   would get nothing, so such an iteration never grows; its next iteration starts with what
   the pool has).
2. **Shrink** by one when the wait share stayed under :data:`SHRINK_BELOW_WAIT_SHARE` and at
   least one worker held no unit at :data:`SHRINK_AFTER` checks in a row, above one worker.
   A share between the two thresholds breaks both streaks (hysteresis: no flapping on a
   share that hovers at one threshold).
3. At most one change per :data:`MIN_SPACING_S` (10 s, the verdict's own window: the figures
   after a change must describe the new count before the next change), and none while a
   started worker has not joined yet; a change resets both streaks.
4. Never above ``cap`` (the cores this process may use: affinity and cgroup quota,
   :func:`h5feed.common.system.cpus.available_cpus`) nor under 1.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Protocol

from h5feed.consumer.core.ledger import Peer
from h5feed.consumer.telemetry.stats import INPUT_BOUND_WAIT_SHARE

#: How often the figures are looked at (a streak counts checks, not loop passes).
CHECK_EVERY_S = 1.0
#: Input-bound checks in a row before one more worker is started.
GROW_AFTER = 3
#: Idle checks in a row before one worker is retired (slower than growing: a worker too few
#: costs the trainer time, one too many costs only a core).
SHRINK_AFTER = 10
#: Under this recent wait share (and a worker idle) the pool has a worker to spare.
SHRINK_BELOW_WAIT_SHARE = 0.02
#: At most one change per this many seconds.
MIN_SPACING_S = 10.0


@dataclasses.dataclass(frozen=True, slots=True)
class Reading:
    """What the controller looks at: the trainer's recent wait share (share of the last 10 s
    that ``next()`` waited for a batch), the local workers holding no unit now, and those
    connected."""

    wait_share: float
    idle_workers: int
    #: Local workers that said hello (None: as many as run). Fewer than run: a started
    #: worker has not joined yet, and nothing changes until it has.
    connected: int | None = None


class Autoscaler:
    """Decides the local worker count between units (see the module docstring)."""

    def __init__(
        self,
        cap: int,
        *,
        check_every_s: float = CHECK_EVERY_S,
        grow_after: int = GROW_AFTER,
        shrink_after: int = SHRINK_AFTER,
        min_spacing_s: float = MIN_SPACING_S,
    ) -> None:
        if cap < 1:
            raise ValueError(f"cap must be >= 1, got {cap}")
        self.cap = cap
        self._check_every_s = check_every_s
        self._grow_after = grow_after
        self._shrink_after = shrink_after
        self._min_spacing_s = min_spacing_s
        self._next_check: float | None = None
        self._last_change: float | None = None
        self._bound_streak = 0
        self._idle_streak = 0
        #: Changes made: (time, old count, new count).
        self.changes: list[tuple[float, int, int]] = []

    def due(self, now: float) -> bool:
        """Whether :meth:`decide` would look at the figures now (else it keeps the count)."""
        return self._next_check is None or now >= self._next_check

    def decide(self, now: float, reading: Reading, current: int, can_grow: bool = True) -> int:
        """The worker count wanted now (``current``, or one more, or one fewer).
        ``can_grow``: the iteration takes a worker that joins now (not a generator source)."""
        if not self.due(now):
            return current
        self._next_check = now + self._check_every_s
        if reading.wait_share > INPUT_BOUND_WAIT_SHARE and reading.idle_workers == 0:
            self._bound_streak += 1
            self._idle_streak = 0
        elif reading.wait_share < SHRINK_BELOW_WAIT_SHARE and reading.idle_workers > 0:
            self._idle_streak += 1
            self._bound_streak = 0
        else:  # between the thresholds, or nobody idle: neither streak goes on
            self._bound_streak = self._idle_streak = 0
        spaced = self._last_change is None or now - self._last_change >= self._min_spacing_s
        joining = reading.connected is not None and reading.connected < current
        if not spaced or joining:
            return current
        if self._bound_streak >= self._grow_after and current < self.cap and can_grow:
            return self._change(now, current, current + 1)
        if self._idle_streak >= self._shrink_after and current > 1:
            return self._change(now, current, current - 1)
        return current

    def _change(self, now: float, old: int, new: int) -> int:
        self._last_change = now
        self._bound_streak = self._idle_streak = 0
        self.changes.append((now, old, new))
        return new


class Scalable(Protocol):
    """The local workers, as :class:`AutoWorkers` changes them (see
    :class:`~h5feed.consumer.processes.local_workers.LocalWorkers`)."""

    @property
    def running(self) -> list[str]: ...

    def grow(self) -> str | None: ...

    def retire(self) -> str | None: ...

    def reap(self) -> None: ...


class AutoWorkers:
    """Applies an :class:`Autoscaler`'s decisions to the local workers, between units (the
    loop calls :meth:`step` once per pass, never while it handles a message). Growing starts
    one worker, which joins the iteration as any peer that says hello; shrinking retires the
    last one, which hands its units back (its BYE): the iteration's exactly-once rules are
    those of a producer that joins or leaves (docs/guarantees.md)."""

    def __init__(
        self,
        controller: Autoscaler,
        workers: Scalable,
        wait_share: Callable[[], float | None],
        can_grow: Callable[[], bool],
        log: Callable[[str], None],
    ) -> None:
        """``wait_share``: the trainer's recent wait share, None before its first batch (the
        start-up says nothing of the steady state); ``can_grow``: the iteration takes joiners
        now (not during the handshake, not a generator source)."""
        self.controller = controller
        self._workers = workers
        self._wait_share = wait_share
        self._can_grow = can_grow
        self._log = log
        self.grown = 0
        self.retired = 0

    def step(self, now: float, peers: Iterable[Peer]) -> None:
        """Look at the figures if a check is due; start or retire one worker if decided."""
        if not self.controller.due(now):
            return
        self._workers.reap()
        share = self._wait_share()
        if share is None:
            return
        running = set(self._workers.running)
        local = [p for p in peers if p.local and p.name in running]
        idle = sum(1 for p in local if not p.outstanding)
        current = len(running)
        reading = Reading(share, idle, connected=len(local))
        target = self.controller.decide(now, reading, current, self._can_grow())
        if target > current and (name := self._workers.grow()) is not None:
            self.grown += 1
            self._log(
                f'workers="auto": started worker {name} ({target} now; input-bound, '
                f"waited {share:.0%} of the last 10 s)"
            )
        elif target < current and (name := self._workers.retire()) is not None:
            self.retired += 1
            self._log(
                f'workers="auto": retiring worker {name} ({target} now; waited '
                f"{share:.0%} of the last 10 s, {idle} idle)"
            )
