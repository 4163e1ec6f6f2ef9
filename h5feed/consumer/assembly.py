"""Assembling batches from the parts the workers send, and releasing them in order.

Guarantees of a :class:`BatchAssembler`:

1. A batch is released once, complete (every part in), or never.
2. ``ordered=True``: batches are released in plan order (``seq`` 0, 1, 2, ...), each as soon as
   it and all before it are complete; ``ordered=False``: each as soon as it is complete.
3. A batch made by one part, rows in order, is released without a copy; otherwise each part is
   copied once into the batch array.
4. All parts of all batches have one frame size; a part that differs raises
   :class:`DataError` naming one of its videos (videos of different sizes need ``resize``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from h5feed.common.errors import DataError
from h5feed.consumer.memory import aligned_empty
from h5feed.consumer.plan import Index, PlannedBatch


@dataclasses.dataclass
class Batch:
    """An assembled batch: its place in the plan and its arrays (see ``stream.BATCH_KEYS``)."""

    epoch: int
    index: int
    arrays: dict[str, np.ndarray]
    # A user source's batch (``source=``): its element tree, batched; ``arrays`` is then empty.
    element: Any = None
    rows: int = 0
    nbytes: int = 0


@dataclasses.dataclass
class _Pending:
    planned: PlannedBatch
    parts_left: int
    parts: list[tuple[np.ndarray, np.ndarray]] = dataclasses.field(default_factory=list)


class BatchAssembler:
    """Collects the parts of dispatched batches; calls ``release`` with each complete batch."""

    def __init__(self, index: Index, ordered: bool, release: Callable[[Batch], None]) -> None:
        self._index = index
        self._ordered = ordered
        self._release = release
        self._pending: dict[int, _Pending] = {}
        self._complete: dict[int, Batch] = {}
        self._frame_hw: tuple[int, int] | None = None
        self.released = 0

    def expect(self, seq: int, planned: PlannedBatch, parts: int) -> None:
        """Batch ``seq`` will arrive in ``parts`` parts."""
        self._pending[seq] = _Pending(planned, parts)

    def add_expected_parts(self, seq: int, parts: int) -> None:
        """Batch ``seq`` will arrive in ``parts`` more parts (a part was split on re-sending)."""
        self._pending[seq].parts_left += parts

    def planned(self, seq: int) -> PlannedBatch:
        return self._pending[seq].planned

    def _check_frame_size(self, seq: int, positions: np.ndarray, frames: np.ndarray) -> None:
        """Raise DataError if ``frames`` differ in size from every part seen before."""
        frame_hw = (int(frames.shape[2]), int(frames.shape[3]))
        if self._frame_hw is None:
            self._frame_hw = frame_hw
        elif frame_hw != self._frame_hw:
            video = int(self._pending[seq].planned.videos[positions[0]])
            raise DataError(
                f"frames are {frame_hw[1]}x{frame_hw[0]} but earlier batches' are "
                f"{self._frame_hw[1]}x{self._frame_hw[0]}: the videos differ in size; "
                "set resize=(height, width)",
                file=self._index.file_names[video].decode(),
                video=self._index.names[video].decode(),
            )

    def add(self, seq: int, positions: np.ndarray, frames: np.ndarray) -> None:
        """One part of batch ``seq``: ``frames`` are the batch rows at ``positions``."""
        self._check_frame_size(seq, positions, frames)
        pending = self._pending[seq]
        pending.parts.append((positions, frames))
        pending.parts_left -= 1
        if pending.parts_left:
            return
        del self._pending[seq]
        batch = self._assemble(pending)
        if not self._ordered:
            self._release(batch)
            self.released += 1
            return
        self._complete[seq] = batch
        while self.released in self._complete:
            self._release(self._complete.pop(self.released))
            self.released += 1

    def _assemble(self, pending: _Pending) -> Batch:
        planned, index = pending.planned, self._index
        rows = len(planned.samples)
        first_frames = pending.parts[0][1]
        if len(pending.parts) == 1:
            frames = first_frames  # one worker made every row, in order: no copy
        else:
            frames = aligned_empty((rows, *first_frames.shape[1:]))  # TF shares it, no copy
            for positions, part in pending.parts:
                frames[positions] = part
        return Batch(
            planned.epoch,
            planned.index,
            {
                "frames": frames,
                "label": index.labels[planned.videos],
                "file": index.file_names[planned.videos],
                "video": index.names[planned.videos],
                "start": planned.starts,
                "sample": planned.samples,
                "epoch": np.full(rows, planned.epoch, np.int64),
            },
        )
