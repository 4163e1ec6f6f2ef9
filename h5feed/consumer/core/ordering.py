"""Dispatching a plan's batches in order, and releasing them to the trainer: in plan order,
or as soon as complete (one mechanism for the HDF5, map and keras schedulers).

Guarantees of :class:`Release`: each ``seq`` is released at most once; with ``ordered``,
batches leave in ``seq`` order 0, 1, 2, ..., each as soon as it and every one before it are
complete; without, each as soon as it is added.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from h5feed.consumer.core.credits import CreditGate

B = TypeVar("B")
T = TypeVar("T")


class Release(Generic[B]):
    def __init__(self, ordered: bool) -> None:
        self._ordered = ordered
        self._waiting: dict[int, B] = {}
        self._next = 0  # ordered: the next seq to release
        self.released = 0

    def add(self, seq: int, batch: B) -> list[B]:
        """Batch ``seq`` is complete: the batches that may go now, in order."""
        if not self._ordered:
            ready = [batch]
        else:
            if seq < self._next or seq in self._waiting:
                raise RuntimeError(f"batch {seq} released twice")  # a scheduler bug
            self._waiting[seq] = batch
            ready = []
            while self._next in self._waiting:
                ready.append(self._waiting.pop(self._next))
                self._next += 1
        self.released += len(ready)
        return ready


class PlannedRelease(Generic[T, B]):
    """A plan's batches, dispatched one credit each and numbered ``seq`` 0, 1, ... in plan
    order, then released as :class:`Release` says. :attr:`finished` once the plan is used up
    and every dispatched batch has been released."""

    def __init__(self, plan: Iterator[T], ordered: bool) -> None:
        self._plan = plan
        self._next: T | None = None  # taken from the plan, held back by ``hold``
        self._release: Release[B] = Release(ordered)
        self._done = False
        self._dispatched = 0

    def dispatch(
        self, gate: CreditGate, hold: Callable[[T], bool] | None = None
    ) -> Iterator[tuple[int, T]]:
        """(seq, planned batch) while the gate has a credit and the plan a batch; each
        takes a credit (the caller stops iterating to dispatch no more). A batch that
        ``hold`` says must wait stops the dispatch; it is the first one of the next call."""
        while not self._done and gate.available > 0:
            if self._next is None:
                self._next = next(self._plan, None)
                if self._next is None:
                    self._done = True
                    return
            if hold is not None and hold(self._next):
                return
            item, self._next = self._next, None
            gate.dispatch()
            seq, self._dispatched = self._dispatched, self._dispatched + 1
            yield seq, item

    def release(self, seq: int, batch: B) -> list[B]:
        """Batch ``seq`` is complete: the batches that may go now (see :class:`Release`)."""
        return self._release.add(seq, batch)

    @property
    def finished(self) -> bool:
        return self._done and self._release.released == self._dispatched
