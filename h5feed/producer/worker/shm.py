"""The worker's side of shared-memory batch slots (see ``h5feed.consumer.core.slots``).

A UNIT for a worker on the trainer's host may name a slot (:class:`messages.SlotRef`, checked
when the UNIT was decoded): the trainer's process id, the file descriptor of the slot in that
process, the rows of the whole batch, and the batch rows this unit fills. The worker maps the
slot once (through ``/proc/<pid>/fd/<fd>``; the descriptor is the trainer's for the whole
iteration, so one number is one slot) and writes its clips straight into those rows.

Guarantees of the check (in another PID namespace the same pid is another process, and any
process of the user could name any of its descriptors):

1. Nothing is opened unless the link ``/proc/<pid>/fd/<fd>`` names exactly this job's slot,
   ``/memfd:h5feed-<job id> (deleted)`` (an anonymous memory file is always "deleted"): a
   regular file, a device, a socket, a pipe or another job's slot is refused before
   ``open``, so opening it can have no side effect (a FIFO that blocks, a device that acts).
2. The descriptor opened is checked again (``/proc/self/fd``), so a descriptor replaced
   between the first check and ``open`` is refused too, before it is mapped.
3. A refusal is a :class:`SlotError` naming the path and what it is; the worker then sends
   that job's rows over the socket (counted, ``slots_refused``).
"""

from __future__ import annotations

import contextlib
import mmap
import os

import numpy as np

from h5feed.common.protocol.messages import SlotRef


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
            memory = _map_slot(pid, fd, job)
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


def slot_link(job: str) -> str:
    """What ``/proc/<pid>/fd/<fd>`` of a slot of ``job`` reads (``SlotPool(tag=job)``)."""
    return f"/memfd:h5feed-{job} (deleted)"


def _map_slot(pid: int, fd: int, job: str) -> mmap.mmap:
    """Map the trainer's descriptor ``fd`` after checking, before and after opening it, that
    it is a slot of ``job``. SlotError otherwise."""
    path = f"/proc/{pid}/fd/{fd}"
    expected = slot_link(job)
    try:
        target = os.readlink(path)
    except OSError as exc:
        raise SlotError(f"cannot open slot {fd} of process {pid}: {exc}") from exc
    if target != expected:  # refused before open: opening a FIFO or a device acts
        raise SlotError(f"{path} is {target!r}, not a slot of job {job}")
    try:
        handle = os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise SlotError(f"cannot open slot {fd} of process {pid}: {exc}") from exc
    try:
        opened = os.readlink(f"/proc/self/fd/{handle}")
        if opened != expected:  # the descriptor was replaced between readlink and open
            raise SlotError(f"{path} became {opened!r} when opened, not a slot of job {job}")
        size = os.fstat(handle).st_size
        return mmap.mmap(handle, size)
    except (OSError, ValueError) as exc:
        raise SlotError(f"cannot map slot {fd} of process {pid}: {exc}") from exc
    finally:
        os.close(handle)  # the mapping stays valid without the descriptor
