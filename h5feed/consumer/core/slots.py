"""Batch slots in shared memory: local workers write clips where the trainer reads them.

Why: a batch is ~5 MB. Sent over a socket it is copied into the kernel by the worker, out of it
by ZeroMQ's receive thread in the trainer's process, and once more when parts of several
workers are assembled; the two copies on the trainer's side cost about as much CPU as the rest
of its work together. With a slot, each local worker decodes its rows straight into the
batch's memory and sends only a small DATA header; the trainer hands that memory to tf.data as
it is (TensorFlow shares 64-byte aligned NumPy buffers instead of copying them).

Guarantees of a :class:`SlotPool`:

1. A slot is handed out (:meth:`SlotPool.acquire`) to one batch at a time, and comes back only
   when every array made by :meth:`SlotPool.lease` over it is gone (garbage collected: also
   tensors TensorFlow made from them, which keep the array alive). A batch the trainer keeps
   never changes under it; the pool grows instead (memory as with fresh arrays per batch).
2. Slots are anonymous memory files (``memfd_create``): nothing is left in ``/dev/shm`` or on
   disk when the trainer is killed. Workers of the same user on the same host open them
   through ``/proc/<trainer pid>/fd/<fd>`` and check the file's name (``h5feed-<job>``); a
   worker that cannot sends its rows over the socket instead, and they are copied into the
   slot (same result, one copy).
3. Thread-safe: slots return from whatever thread drops the last array.
4. A slot given to :meth:`SlotPool.hold_until_gone` returns to the pool only once that
   process has ended (checked on each :meth:`acquire`): a worker whose rows were taken back
   while it may still run can never write into a batch made later in its slot.
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import threading
import weakref

import numpy as np


@dataclasses.dataclass(eq=False)
class Slot:
    """One batch-sized shared memory file, mapped in this process."""

    fd: int
    memory: mmap.mmap


def supported() -> bool:
    """Whether this platform has anonymous memory files (Linux)."""
    return hasattr(os, "memfd_create")


class SlotPool:
    """Slots of ``nbytes`` each, made on demand and reused once released."""

    def __init__(self, nbytes: int, tag: str = "batch") -> None:
        """``tag`` names every slot's file (``memfd:h5feed-<tag>``): workers check it, so a
        descriptor number that means another file to them (another process with this pid,
        in another PID namespace) is never taken for a slot."""
        if nbytes < 1:
            raise ValueError(f"a slot needs at least one byte, got {nbytes}")
        self.nbytes = nbytes
        self.tag = tag
        self._free: list[Slot] = []
        self._all: list[Slot] = []
        self._lock = threading.Lock()
        self._closed = False
        self._made = 0
        self._held: dict[int, int] = {}  # id(slot) -> pid that may still write into it
        self._held_back: list[Slot] = []  # released while their writer may still run

    @property
    def size(self) -> int:
        """Slots made so far (held and free; still counted after :meth:`close`)."""
        return self._made

    def acquire(self) -> Slot:
        """A free slot, or a new one when every slot is held."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the slot pool is closed")
            self._return_held_back()
            if self._free:
                return self._free.pop()
            fd = os.memfd_create(f"h5feed-{self.tag}", os.MFD_CLOEXEC)
            try:
                os.ftruncate(fd, self.nbytes)
                slot = Slot(fd, mmap.mmap(fd, self.nbytes))
            except BaseException:
                os.close(fd)
                raise
            self._all.append(slot)
            self._made += 1
            return slot

    def release(self, slot: Slot) -> None:
        """Give ``slot`` back unused (e.g. its batch was abandoned before any array existed)."""
        with self._lock:
            if self._closed:
                return
            if id(slot) in self._held:
                self._held_back.append(slot)
            else:
                self._free.append(slot)

    def hold_until_gone(self, slot: Slot, pid: int) -> None:
        """Keep ``slot`` out of the pool, once released, until process ``pid`` has ended."""
        with self._lock:
            self._held[id(slot)] = pid

    @property
    def held_back(self) -> int:
        """Slots released but kept out of the pool while a writer may still run."""
        with self._lock:
            self._return_held_back()
            return len(self._held_back)

    def _return_held_back(self) -> None:
        """Move held slots whose process has ended back to the free list (lock held)."""
        for slot in list(self._held_back):
            if not _running(self._held[id(slot)]):
                self._held_back.remove(slot)
                del self._held[id(slot)]
                self._free.append(slot)

    def lease(self, slot: Slot, shape: tuple[int, ...]) -> np.ndarray:
        """A uint8 array of ``shape`` over the start of ``slot``; the slot returns to the pool
        when this array and every view of it are gone."""
        count = int(np.prod(shape))
        owner = np.frombuffer(slot.memory, np.uint8, count)
        weakref.finalize(owner, self.release, slot)
        return owner.reshape(shape)

    def close(self) -> None:
        """Close every slot's file descriptor. Arrays still leased stay valid (their mapping
        lives until they are gone); nothing returns to the pool afterwards."""
        with self._lock:
            self._closed = True
            slots, self._all, self._free = self._all, [], []
        for slot in slots:
            os.close(slot.fd)


def _running(pid: int) -> bool:
    """Whether a process ``pid`` exists (a zombie counts as ended: it cannot write)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False
