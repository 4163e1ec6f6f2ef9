"""Memory helpers of the trainer side: aligned batch buffers (glibc's allocator is tuned in
:mod:`h5feed.common.system.allocator`).

Why: a batch is ~5 MB that arrives every few milliseconds. Left alone, glibc returns freed
large blocks to the kernel and maps fresh pages for the next batch, so every batch costs ~1200
page faults (zeroing included) in the ZeroMQ receive thread and in each copy; and TensorFlow
copies a NumPy array again unless its data is 64-byte aligned.
"""

from __future__ import annotations

import math
import mmap
import threading
import weakref

import numpy as np

_ALIGN_BYTES = 64  # EIGEN_MAX_ALIGN_BYTES on AVX-512 builds; what TF needs to share a buffer


def aligned_empty(
    shape: tuple[int, ...], dtype: np.dtype[np.generic] | type = np.uint8
) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on a 64-byte boundary."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    raw = np.empty(nbytes + _ALIGN_BYTES, np.uint8)
    offset = (-raw.ctypes.data) % _ALIGN_BYTES
    return raw[offset : offset + nbytes].view(dtype).reshape(shape)


#: Arrays at least this large are copied to an aligned buffer before TensorFlow takes them
#: (:class:`TensorFlowBuffers`); smaller ones are left to TensorFlow, whose copy costs little.
_ALIGN_FOR_TF_MIN_BYTES = 64 << 10


def is_aligned(array: np.ndarray) -> bool:
    """Whether ``array``'s data starts on a 64-byte boundary (TensorFlow shares it then)."""
    return array.ctypes.data % _ALIGN_BYTES == 0


#: Free buffers kept per size by :class:`TensorFlowBuffers` (more are unmapped when dropped).
_MAX_FREE_BUFFERS = 16


class TensorFlowBuffers:
    """Aligned copies of the arrays ``h5feed.dataset`` hands to TensorFlow, in buffers that
    are reused once TensorFlow lets go of them.

    Why: a batch that crossed the socket in one part is a view over the ZeroMQ frame, never
    64-byte aligned, so TensorFlow would copy it itself. One ``np.copyto`` into an aligned
    buffer is cheaper, and cheaper still into one whose pages are already mapped: a fresh
    buffer per batch costs a page fault per 4 KiB touched (thousands per batch).

    Guarantees: a buffer is reused only when the array given out over it, and every view of
    it, is gone (TensorFlow's tensors keep the array they share alive, as with shared-memory
    slots: see :mod:`h5feed.consumer.core.slots`); buffers are anonymous page-aligned mappings;
    at most ``_MAX_FREE_BUFFERS`` free ones are kept per size. Thread-safe (buffers return
    from whatever thread drops the last view)."""

    def __init__(self) -> None:
        self._free: dict[int, list[mmap.mmap]] = {}
        self._lock = threading.Lock()

    def copy(self, array: np.ndarray) -> np.ndarray:
        """``array`` itself when TensorFlow can share it (aligned, small, or of objects),
        else its copy in a reused aligned buffer."""
        if array.nbytes < _ALIGN_FOR_TF_MIN_BYTES or is_aligned(array) or array.dtype.hasobject:
            return array
        nbytes = array.nbytes
        with self._lock:
            free = self._free.get(nbytes)
            block = free.pop() if free else None
        if block is None:
            block = mmap.mmap(-1, nbytes)  # page-aligned, private, zero-filled
        # The owner is a new array over the mapping each time (its base is the mapping, not
        # an array, so every view of it keeps it alive): its end means the buffer is free.
        owner = np.frombuffer(block, np.uint8, nbytes)
        weakref.finalize(owner, self._give_back, nbytes, block)
        out = owner.view(array.dtype).reshape(array.shape)
        np.copyto(out, array)
        return out

    def _give_back(self, nbytes: int, block: mmap.mmap) -> None:
        with self._lock:
            free = self._free.setdefault(nbytes, [])
            if len(free) < _MAX_FREE_BUFFERS:
                free.append(block)
