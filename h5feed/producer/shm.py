"""The worker's side of shared-memory batch slots (see ``h5feed.consumer.slots``).

A UNIT for a worker on the trainer's host may name a slot (:class:`messages.SlotRef`, checked
when the UNIT was decoded): the trainer's process id, the file descriptor of the slot in that
process, the rows of the whole batch, and the batch rows this unit fills. The worker maps the
slot once (through ``/proc/<pid>/fd/<fd>``; the descriptor is the trainer's for the whole
iteration, so one number is one slot), after checking that the file is this job's slot (its
name is ``memfd:h5feed-<job id>``: in another PID namespace the same pid is another process),
and writes its clips straight into those rows.
"""

from __future__ import annotations

import contextlib
import mmap
import os

import numpy as np

from h5feed.common.messages import SlotRef


class SlotError(Exception):
    """A slot named in a UNIT cannot be used here: the rows go over the socket instead."""


class SlotMaps:
    """The slots this worker has mapped, by (pid, fd), for one job."""

    def __init__(self) -> None:
        self._maps: dict[tuple[int, int], mmap.mmap] = {}

    def batch_array(self, slot: SlotRef, row_shape: tuple[int, ...], job: str) -> np.ndarray:
        """The slot as a writable uint8 array of the whole batch, ``[slot.batch_rows,
        *row_shape]``. SlotError when the slot cannot be opened or mapped, is not a slot of
        ``job``, or is too small for the batch."""
        pid, fd = slot.pid, slot.fd
        memory = self._maps.get((pid, fd))
        if memory is None:
            path = f"/proc/{pid}/fd/{fd}"
            try:
                target = os.readlink(path)
                handle = os.open(path, os.O_RDWR)
            except OSError as exc:
                raise SlotError(f"cannot open slot {fd} of process {pid}: {exc}") from exc
            if not target.startswith(f"/memfd:h5feed-{job}"):
                os.close(handle)
                raise SlotError(f"{path} is {target!r}, not a slot of job {job}")
            try:
                size = os.fstat(handle).st_size
                memory = mmap.mmap(handle, size)
            except (OSError, ValueError) as exc:
                raise SlotError(f"cannot map slot {fd} of process {pid}: {exc}") from exc
            finally:
                os.close(handle)  # the mapping stays valid without the descriptor
            self._maps[(pid, fd)] = memory
        shape = (slot.batch_rows, *row_shape)
        count = int(np.prod(shape))
        if count > len(memory):
            raise SlotError(f"slot {fd} holds {len(memory)} bytes, the batch needs {count}")
        return np.frombuffer(memory, np.uint8, count).reshape(shape)

    def close(self) -> None:
        """Unmap every slot (arrays over them must be gone: they are, between units)."""
        for memory in self._maps.values():
            # An array still pointing into it (none should, between units) keeps the mapping
            # alive until it is gone; closing must not fail the worker for that.
            with contextlib.suppress(BufferError):
                memory.close()
        self._maps.clear()
