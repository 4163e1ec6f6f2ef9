"""The shared-memory slots of one HDF5 iteration: whether there is a pool, which batch gets a
slot, which worker is offered to write into it.

The slots themselves (memory files, leases, held slots) are :mod:`h5feed.consumer.core.slots`;
this module decides how the HDF5 scheduler uses them.

Guarantees:

1. There is a pool (:meth:`BatchSlots.for_iteration`) only when every clip's size is known
   before decoding (``crop`` or ``resize`` set, and no transform, whose output shape only its
   first result tells), ``shared_memory`` is on and the platform has anonymous memory files;
   otherwise every part comes over the socket.
2. A batch gets a slot (:meth:`BatchSlots.for_batch`) only when a worker that may map it
   (:func:`shares_memory`) makes part of it.
3. A slot given to :meth:`BatchSlots.hold_until_gone` (its rows were taken back from a worker
   that may still run) returns to the pool only once that process is gone: a late writer never
   touches another batch.
4. Not thread-safe beyond what :class:`~h5feed.consumer.core.slots.SlotPool` is: the loop's
   thread owns it.
"""

from __future__ import annotations

import socket

import numpy as np

from h5feed.consumer.core.ledger import Peer
from h5feed.consumer.core.slots import Slot, SlotPool, supported
from h5feed.consumer.options import HdfConfig

_HOST = socket.gethostname()


def shares_memory(peer: Peer) -> bool:
    """Whether ``peer`` may map this process's slots: a local worker, or a producer that says
    it runs on this host (one that cannot map them, in a container say, sends its rows over
    the socket after all, so offering costs nothing)."""
    return peer.local or peer.host == _HOST


class BatchSlots:
    """A pool of batch-sized slots for one iteration's clips (see the module docstring)."""

    def __init__(self, pool: SlotPool, clip_shape: tuple[int, ...], batch_size: int) -> None:
        self.pool = pool
        #: One clip's shape, [clip_len, H, W, 3] (uint8).
        self.clip_shape = clip_shape
        self._batch_size = batch_size

    @classmethod
    def for_iteration(cls, config: HdfConfig, job_id: str) -> BatchSlots | None:
        """The slots of an iteration of ``config``, or None where batches come over the
        socket (see guarantee 1)."""
        clip, options = config.clip, config.options
        height, width = clip.frame_shape
        if not (options.processes.shared_memory and supported()):
            return None
        if height is None or width is None or clip.transform is not None:
            return None
        clip_shape = (clip.clip_len, height, width, 3)
        pool = SlotPool(options.plan.batch_size * int(np.prod(clip_shape)), job_id)
        return cls(pool, clip_shape, options.plan.batch_size)

    @property
    def size(self) -> int:
        """Slots made so far."""
        return self.pool.size

    def for_batch(self, owners: list[Peer]) -> Slot | None:
        """A slot for a new batch made by ``owners``, if one of them may write into it."""
        if not any(shares_memory(peer) for peer in owners):
            return None
        return self.pool.acquire()

    def part_nbytes(self, rows: int) -> int:
        """The bytes ``rows`` rows take in a slot (a part written there: nothing on the wire)."""
        return self.pool.nbytes // self._batch_size * rows

    def hold_until_gone(self, slot: Slot, pid: int) -> None:
        """Keep ``slot`` out of the pool, once released, until process ``pid`` has ended."""
        self.pool.hold_until_gone(slot, pid)

    def close(self) -> None:
        """Close every slot (batches already handed out keep their memory)."""
        self.pool.close()
