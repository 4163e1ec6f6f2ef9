"""Assembling HDF5 batches from the parts the workers send.

Guarantees of a :class:`BatchAssembler` (the order of release is
:mod:`h5feed.consumer.core.ordering`'s):

1. A batch is returned once, complete (every part in), or never.
2. A batch in a shared-memory slot (see ``h5feed.consumer.core.slots``) is released as an array
   over the slot: parts written there by local workers are not copied at all, parts that came
   over the socket are copied in once. Without a slot, a batch made by one part, rows in
   order, is released without a copy; otherwise each part is copied once into the batch.
3. Every batch has ``valid``, bool [B]: False exactly at the rows a worker skipped (a bad
   frame under ``on_error="skip"``; their frames are zeros) and at the padded rows of a
   padded shard (``shard_remainder="pad"``: no worker makes them; frames zeros, ``sample``
   -1, ``label`` and ``start`` 0, ``file`` and ``video`` empty), True elsewhere. A batch of
   padded rows only has no part: :meth:`BatchAssembler.complete_padding` makes it once the
   clips' shape is known (from the slots, or from the first part of the iteration).
4. All parts of all batches have one frame size (and, with a transform, one sample shape and
   dtype); a part that differs raises :class:`DataError` naming one of its videos (videos of
   different sizes need ``resize``; a transform must return one shape and dtype).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from h5feed.common.elements.batch_keys import VALID_KEY
from h5feed.common.errors import DataError
from h5feed.common.system.memory import aligned_empty
from h5feed.consumer.core.slots import Slot, SlotPool
from h5feed.consumer.plan.epoch_plan import Index, PlannedBatch


@dataclasses.dataclass
class Batch:
    """An assembled batch: its place in the plan and its arrays (their keys:
    :mod:`h5feed.common.elements.batch_keys`)."""

    epoch: int
    index: int  # the batch's position in its epoch
    arrays: dict[str, np.ndarray]
    # A user source's batch (``source=``): its element tree, batched; ``arrays`` is then empty.
    element: Any = None
    rows: int = 0
    nbytes: int = 0
    # What the plan said of it, for the lineage record (h5feed/consumer/position/lineage.py): an
    # HDF5
    # batch's planned rows (clip starts, crop draws, flips, seeds); a map or keras source's
    # item indices.
    planned: PlannedBatch | None = None
    items: tuple[int, ...] | None = None


@dataclasses.dataclass
class _Pending:
    planned: PlannedBatch
    parts_left: int
    slot: Slot | None = None
    parts: list[tuple[np.ndarray, np.ndarray | None]] = dataclasses.field(default_factory=list)
    invalid: list[np.ndarray] = dataclasses.field(default_factory=list)  # skipped rows


class BatchAssembler:
    """Collects the parts of dispatched batches; returns each batch once it is complete."""

    def __init__(
        self,
        index: Index,
        transform: str | None = None,
        slots: tuple[SlotPool, tuple[int, ...]] | None = None,
    ) -> None:
        """``transform``: the user's transform path (for error messages); ``slots``: the pool
        and the shape of one clip [clip_len, H, W, 3] when batches may live in shared memory."""
        self._index = index
        self._pending: dict[int, _Pending] = {}
        self._transform = transform
        self._sample: tuple[np.dtype[np.generic], tuple[int, ...]] | None = None
        self._slots = slots
        if slots is not None:
            self._sample = (np.dtype(np.uint8), slots[1])

    def expect(self, seq: int, planned: PlannedBatch, parts: int, slot: Slot | None = None) -> None:
        """Batch ``seq`` will arrive in ``parts`` parts (written into ``slot``, if given)."""
        self._pending[seq] = _Pending(planned, parts, slot)

    def add_expected_parts(self, seq: int, parts: int) -> None:
        """Batch ``seq`` will arrive in ``parts`` more parts (a part was split on re-sending)."""
        self._pending[seq].parts_left += parts

    def planned(self, seq: int) -> PlannedBatch:
        return self._pending[seq].planned

    def _check_frame_size(self, seq: int, positions: np.ndarray, frames: np.ndarray) -> None:
        """Raise DataError if ``frames`` differ in sample shape or dtype from every part seen
        before."""
        sample = (frames.dtype, tuple(frames.shape[1:]))
        if self._sample is None:
            self._sample = sample
            return
        if sample == self._sample:
            return
        video = int(self._pending[seq].planned.videos[positions[0]])
        if self._transform is not None:
            message = (
                f"transform {self._transform!r} gave samples of {sample[0]} {list(sample[1])} "
                f"but earlier ones were {self._sample[0]} {list(self._sample[1])}; a transform "
                "must return one shape and dtype for every sample"
            )
        else:
            (h, w), (h0, w0) = sample[1][1:3], self._sample[1][1:3]
            message = (
                f"frames are {w}x{h} but earlier batches' are {w0}x{h0}: the videos differ in "
                "size; set resize=(height, width)"
            )
        raise DataError(
            message,
            file=self._index.file_names[video].decode(),
            video=self._index.names[video].decode(),
        )

    def complete_padding(self, seq: int) -> Batch | None:
        """Batch ``seq``, of padded rows only (expected with no part), once the clips' shape
        is known; None before (the caller tries again after the next part)."""
        if self._sample is None:
            return None
        return self._assemble(self._pending.pop(seq))

    def slot(self, seq: int) -> Slot | None:
        return self._pending[seq].slot

    def add(
        self,
        seq: int,
        positions: np.ndarray,
        frames: np.ndarray | None,
        invalid: np.ndarray | None = None,
    ) -> Batch | None:
        """One part of batch ``seq``: ``frames`` are the batch rows at ``positions``, or None
        when the worker wrote them into the batch's slot; ``invalid``: the batch rows of this
        part the worker skipped (zeros). Returns the batch once complete."""
        if frames is not None:
            self._check_frame_size(seq, positions, frames)
        pending = self._pending[seq]
        pending.parts.append((positions, frames))
        if invalid is not None and len(invalid):
            pending.invalid.append(invalid)
        pending.parts_left -= 1
        if pending.parts_left:
            return None
        del self._pending[seq]
        return self._assemble(pending)

    def _assemble(self, pending: _Pending) -> Batch:
        planned, index = pending.planned, self._index
        rows = len(planned.samples)
        padded = planned.padded
        first_frames = pending.parts[0][1] if pending.parts else None
        if pending.slot is not None and self._slots is not None:
            pool, clip_shape = self._slots
            frames = pool.lease(pending.slot, (rows, *clip_shape))  # TF shares it, no copy
            for positions, part in pending.parts:
                if part is not None:  # came over the socket
                    frames[positions] = part
        elif not pending.parts and self._sample is not None:  # padded rows only
            frames = aligned_empty((rows, *self._sample[1]), self._sample[0])
        elif first_frames is None:  # unreachable: the scheduler checks every part
            raise ValueError("a part without frames in a batch without a slot")
        elif len(pending.parts) == 1 and len(first_frames) == rows:
            frames = first_frames  # one worker made every row, in order: no copy
        else:
            # TF shares an aligned buffer, no copy
            frames = aligned_empty((rows, *first_frames.shape[1:]), first_frames.dtype)
            for positions, part in pending.parts:
                frames[positions] = part
        valid = ~padded
        for skipped in pending.invalid:
            valid[skipped] = False
        videos = planned.videos
        labels, files, names = index.labels[videos], index.file_names[videos], index.names[videos]
        if padded.any():  # zeros (a slot is reused: its old rows must not show through)
            frames[padded] = 0
            labels[padded], files[padded], names[padded] = 0, b"", b""
        return Batch(
            planned.epoch,
            planned.index,
            {
                "frames": frames,
                "label": labels,
                "file": files,
                "video": names,
                "start": planned.starts,
                "sample": planned.samples,
                "epoch": np.full(rows, planned.epoch, np.int64),
                "batch": np.full(rows, planned.index, np.int64),
                VALID_KEY: valid,
            },
            planned=planned,
        )
