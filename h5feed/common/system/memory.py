"""Memory helpers: aligned batch buffers and allocator tuning (the trainer side uses them).

Why: a batch is ~5 MB that arrives every few milliseconds. Left alone, glibc returns freed
large blocks to the kernel and maps fresh pages for the next batch, so every batch costs ~1200
page faults (zeroing included) in the ZeroMQ receive thread and in each copy; and TensorFlow
copies a NumPy array again unless its data is 64-byte aligned.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import math
import mmap
import sys
import threading
import weakref

import numpy as np

from h5feed.common.system.logs import with_ids

_ALIGN_BYTES = 64  # EIGEN_MAX_ALIGN_BYTES on AVX-512 builds; what TF needs to share a buffer
# glibc's mallopt parameter numbers (malloc.h)
M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3
_TOP_PAD_BYTES = 16 << 20

_log = with_ids(logging.getLogger("h5feed.consumer"), "consumer")  # ids in every line
_tuned = False
_tune_lock = threading.Lock()


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


def mallopt(settings: dict[int, int]) -> bool:
    """``mallopt(parameter, value)`` of glibc for each of ``settings``; whether every one is
    in force. False, with nothing set, where the C library is not glibc (musl has no
    ``mallopt``, macOS no glibc). The one place h5feed calls ``mallopt``."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        call = libc.mallopt
    except (OSError, AttributeError):
        return False
    # mallopt returns 1 on success, 0 for a value it refuses: each is tried.
    return all([bool(call(parameter, value)) for parameter, value in settings.items()])


def keep_freed_memory_mapped() -> bool:
    """Ask glibc to keep 16 MiB of slack at the top of each heap (``M_TOP_PAD``), once per
    process, so that batch-sized blocks are reused instead of unmapped and faulted in again.

    Process-wide, costs at most 16 MiB per malloc arena, and is skipped where the C library is
    not glibc. Returns whether the setting is in force.
    """
    global _tuned
    with _tune_lock:
        if not _tuned:
            _tuned = mallopt({M_TOP_PAD: _TOP_PAD_BYTES})
            _log.debug("mallopt(M_TOP_PAD, %d): %s", _TOP_PAD_BYTES, _tuned)
        return _tuned
