"""Releasing complete batches to the trainer: in plan order, or as soon as complete.

Guarantees of :class:`Release`: each ``seq`` is released at most once; with ``ordered``,
batches leave in ``seq`` order 0, 1, 2, ..., each as soon as it and every one before it are
complete (a ``seq`` :meth:`skip`\\ ped counts as complete and releases nothing); without, each
as soon as it is added.
"""

from __future__ import annotations

from typing import Generic, TypeVar

B = TypeVar("B")


class Release(Generic[B]):
    def __init__(self, ordered: bool) -> None:
        self._ordered = ordered
        self._waiting: dict[int, B | None] = {}
        self._next = 0  # ordered: the next seq to release
        self.released = 0

    def add(self, seq: int, batch: B) -> list[B]:
        """Batch ``seq`` is complete: the batches that may go now, in order."""
        return self._put(seq, batch)

    def skip(self, seq: int) -> list[B]:
        """Batch ``seq`` yields nothing (a generator pass ended): it no longer holds others."""
        return self._put(seq, None)

    def _put(self, seq: int, batch: B | None) -> list[B]:
        if not self._ordered:
            ready = [] if batch is None else [batch]
        else:
            if seq < self._next or seq in self._waiting:
                raise RuntimeError(f"batch {seq} released twice")  # a scheduler bug
            self._waiting[seq] = batch
            ready = []
            while self._next in self._waiting:
                item = self._waiting.pop(self._next)
                self._next += 1
                if item is not None:
                    ready.append(item)
        self.released += len(ready)
        return ready
